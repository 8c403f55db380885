"""The tests' own look at a process (helpers/processes.py) holds while the process
ends: a test that waits for a job's process to be stopped must see it gone, never fail
on the moment it goes."""

import subprocess

from helpers import processes


def test_a_process_that_ends_between_the_open_and_the_read_is_gone(monkeypatch):
    """/proc/<pid>/stat opened while the process runs, read once it has ended and been
    reaped: the kernel answers the read with ESRCH (ProcessLookupError), not a missing
    file. The look says gone, as it does for a pid with no entry at all."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        real_open = open

        def open_then_end(path, *args, **kwargs):
            file = real_open(path, *args, **kwargs)
            child.kill()
            child.wait()  # reaped: its /proc entry goes, under the open file
            return file

        monkeypatch.setattr(processes, "open", open_then_end, raising=False)
        assert processes.state(child.pid) is None
        assert not processes.alive(child.pid)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
