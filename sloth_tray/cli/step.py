"""`sloth-tray step NAME [--ask] -- COMMAND [ARG...]`: one step of a job's shell script,
run once (for_jobs/sloth_step.py keeps the record).

The first time, COMMAND runs with stdin and stderr passed through and its stdout
copied through (and kept, up to sloth_step.OUTPUT_CAP), and the call exits with its
status: 0 records the step done, anything else failed (it runs again next time). Once
the reader of our stdout leaves, COMMAND's pipe has no reader either: a COMMAND that
SIGPIPE then ends is done, and the call ends by SIGPIPE as COMMAND did. On a later run
of the job a done step does not run: its output is written again and the call exits 0.
Outside a job, COMMAND is exec'd (with SIGPIPE as any program starts with it).

Loaded with the command line's fast path (as `status`): only the standard library
and sloth_step; subprocess and threading once COMMAND is to run (a skipped step
writes its output again, and runs nothing).
"""

from __future__ import annotations

import errno
import os
import signal
import sys

from sloth_tray.for_jobs import sloth_step

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    import subprocess

# As env(1), nice(1) and timeout(1) say it: the step itself could not be run or recorded
# (COMMAND never ran); COMMAND cannot be run; COMMAND was not found.
REFUSED = 125
CANNOT_RUN = 126
NOT_FOUND = 127
USAGE = 2
# What ends the run ends the step unrecorded: left running, the queue marks it cut short.
ENDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT")
                       if hasattr(signal, name))
CHUNK = 65536
SIGPIPE = getattr(signal, "SIGPIPE", None)  # None on Windows, where no pipe signals


def say(text: object) -> None:
    if sys.stderr is None:  # stderr closed (2>&-): never onto stdout, the step's output
        return
    try:
        print(f"sloth-tray: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _flush_stdout() -> None:
    """What this process wrote goes out before COMMAND writes (stdout may be closed)."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError):
        pass


class Tries:
    """A step's tries: 1 + `retries`, waits capped at `backoff` between them, each
    within `timeout` seconds (None: no limit)."""

    def __init__(self, retries: int | None = None, backoff: float | None = None,
                 timeout: float | None = None) -> None:
        self.retries, self.timeout = retries or 0, timeout
        self.backoff = sloth_step.BACKOFF_DEFAULT if backoff is None else backoff
        self.total = 1 + self.retries


def main(name: str, command: list[str], *, ask: bool, retries: int | None = None,
         backoff: float | None = None, timeout: float | None = None) -> int:
    tries = Tries(retries, backoff, timeout)
    problem = sloth_step.name_problem(name)
    if problem:
        say(problem)
        return USAGE
    if not command:
        say("give the command to run after --: sloth-tray step NAME -- COMMAND [ARG...]")
        return USAGE
    try:
        run = sloth_step.Run.from_environment()
        if run is None:  # run by hand: nothing to record
            if tries.total == 1 and tries.timeout is None:
                return _exec(command)
            return _run_tries(None, name, command, dict(os.environ), tries)
        db = sloth_step.connection(run.queue)
        decision = sloth_step.start(db, run, name, ask=ask, kind="shell")
    except sloth_step.StepError as exc:
        say(exc)
        return REFUSED
    if decision.action == "done":
        return _replay(name, decision)
    if decision.action == "unsure":
        say(sloth_step.unsure_sentence(run.job, name, decision.row))
        return REFUSED
    env = dict(os.environ)
    env[sloth_step.KEY_ENV] = sloth_step.step_key(run.job, name, decision.occurrence)
    return _run_tries(_Record(db, run, name, decision.occurrence), name, command, env, tries)


def _exec(command: list[str]) -> int:
    _flush_stdout()
    # Python ignores SIGPIPE (and SIGXFSZ), and an ignored signal stays ignored across
    # exec: COMMAND gets them back as any program starts with them, as subprocess's
    # restore_signals gives them back to what Popen starts. Else `yes | head -n 1`
    # would end `yes` with EPIPE's "write error" (exit 1) instead of SIGPIPE.
    kept = {signum: signal.signal(signum, signal.SIG_DFL) for signum in (
        getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name))}
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        for signum, handler in kept.items():  # not run: our sentence meets no SIGPIPE
            signal.signal(signum, handler)
        if isinstance(exc, FileNotFoundError):
            say(f"{command[0]}: command not found")
            return NOT_FOUND
        say(f"cannot run {command[0]}: {exc.strerror}")
        return CANNOT_RUN
    return CANNOT_RUN  # not reached: exec replaced this process


def _replay(name: str, decision: sloth_step.Decision) -> int:
    output = decision.output
    stopped = _write_out(output)
    size = decision.row.get("output_size") or 0
    if size > len(output) and stopped is None:
        say(f"step {name} had written {sloth_step.size_text(size)}; only the first "
            f"{sloth_step.size_text(len(output))} was kept, and is written again here")
    say(sloth_step.skipped_line(name, decision.row))
    if stopped == errno.EPIPE and SIGPIPE is not None:
        _end_as(SIGPIPE)  # its reader left: as a command writing this would end
        return 128 + SIGPIPE
    return 0


def _write_out(data: bytes, fd: int = 1) -> int | None:
    """To our stdout (or `fd`), whole: None, or the errno that stopped it (EPIPE: its
    reader left)."""
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError as exc:
        return exc.errno or errno.EIO
    return None


def _stdout_open() -> bool:
    try:
        os.fstat(1)
    except OSError:
        return False
    return True


class _Record:
    """Where a step's tries and its end are recorded: its run, name and occurrence."""

    def __init__(self, db, run: sloth_step.Run, name: str, occurrence: int) -> None:
        self.db, self.run, self.name, self.occurrence = db, run, name, occurrence

    def next_try(self, tries: int) -> bool:
        try:
            if sloth_step.next_try(self.db, self.run, self.name, self.occurrence, tries):
                return True
            say(f'step "{self.name}" was not tried again: this run of job {self.run.job} '
                "is over, so it records nothing")
        except sloth_step.StepError as exc:
            say(exc)
        return False

    def end(self, *, ok: bool, exit_code: int, kept: bytes, size: int) -> bool:
        return _record(self.db, self.run, self.name, self.occurrence, ok=ok,
                       exit_code=exit_code, kept=kept, size=size)


class _Try:
    """How one try of COMMAND ended: its status (TIMED_OUT past the timeout), its
    output kept and its size, whether our stdout's reader was still there."""

    def __init__(self, status: int, kept: bytes = b"", size: int = 0,
                 read_by_ours: bool = True, timed_out: bool = False,
                 not_run: bool = False) -> None:
        self.status, self.kept, self.size = status, kept, size
        self.read_by_ours, self.timed_out, self.not_run = read_by_ours, timed_out, not_run


def _run_tries(record: _Record | None, name: str, command: list[str], env: dict[str, str],
               tries: Tries) -> int:
    """COMMAND tried up to tries.total times in this run, until a try ends well; the
    step recorded (`record`; None outside a job) as the last try ended."""
    import threading  # here, as subprocess in _one_try: a step skipped runs neither

    ended_by: list[int] = []
    woken = threading.Event()
    group: list[int] = []  # COMMAND's own group while it runs, if it has one (timeout)

    def on_end(signum: int, _frame: object) -> None:
        ended_by.append(signum)
        if group:  # not in our group: the run's signal would not reach it
            _signal_group(group[0], signum)
        woken.set()

    for signum in ENDING_SIGNALS:  # the whole group gets it: COMMAND ends on its own
        signal.signal(signum, on_end)
    result = _Try(0)
    for number in range(1, tries.total + 1):
        if number > 1:
            delay = sloth_step.backoff_delay(number - 1, tries.backoff)
            say(sloth_step.try_failed_line(name, number - 1, tries.total,
                                           _failed_words(result, tries), delay))
            woken.wait(delay)
            if ended_by:  # between tries nothing runs: the step failed, as it stands
                if record is not None:
                    record.end(ok=False, exit_code=result.status, kept=b"", size=0)
                _end_as(ended_by[0])
                return 128 + ended_by[0]
            if record is not None and not record.next_try(number):
                return REFUSED
        result = _one_try(command, env, tries, held=tries.total > 1, group=group)
        if ended_by:  # the run is ending: the step stays running, and is marked cut short
            _end_as(ended_by[0])
            return 128 + ended_by[0]
        if result.timed_out:
            say(f'step "{name}" ran past its timeout of {tries.timeout:g} s: its processes '
                "were stopped")
        if result.not_run or result.status == 0 or _cut_by_reader(result):
            break  # a COMMAND not found is not found on another try either
    return _ended(record, name, result)


def _failed_words(result: _Try, tries: Tries) -> str:
    if result.timed_out:
        return f"ran past its timeout of {tries.timeout:g} s"
    return f"failed (exit {result.status})"


def _cut_by_reader(result: _Try) -> bool:
    # COMMAND ended by SIGPIPE after its reader left: the normal end of a pipeline's
    # left side. sh gives that side 141 and goes on with what the reader took (a
    # pipeline's status is its last command's), so the step is done: a later run
    # replays what was kept, and the reader takes the same again.
    return (SIGPIPE is not None and not result.read_by_ours
            and result.status == 128 + SIGPIPE)


def _ended(record: _Record | None, name: str, result: _Try) -> int:
    """The last try's end recorded, and the call's status. A step cut by its reader
    ends as sh's left side would (by SIGPIPE: 141 to `set -o pipefail`), not with a 0
    the pipeline would never have had."""
    cut_by_reader = _cut_by_reader(result)
    ok = result.status == 0 or cut_by_reader
    if record is not None:
        if not record.end(ok=ok, exit_code=result.status, kept=result.kept,
                          size=result.size):
            return REFUSED
        if ok and result.size > len(result.kept) and result.read_by_ours:
            say(f"step {name} wrote {sloth_step.size_text(result.size)}; the first "
                f"{sloth_step.size_text(len(result.kept))} was kept to write again when it "
                "is skipped")
    if cut_by_reader:
        _end_as(SIGPIPE)
    return result.status


def _one_try(command: list[str], env: dict[str, str], tries: Tries, *, held: bool,
             group: list[int]) -> _Try:
    """Run COMMAND once. `held` (a step with retries): its stdout goes to a file, and
    only a try that ends well writes it to ours (a failed one's goes to stderr, the
    run's log), so the output a script reads is the one kept and replayed. Else it
    is copied through as it comes. With a timeout COMMAND has a group of its own, which
    is stopped once the timeout passes."""
    import subprocess

    _flush_stdout()
    # A closed stdout (`>&-`) stays closed for COMMAND, as without the step: nothing kept.
    piped = _stdout_open()
    spool = None
    if piped and held:
        import tempfile  # here: a step without retries never pays for it

        spool = tempfile.TemporaryFile()
    try:
        try:
            child = subprocess.Popen(
                command, env=env, stdout=spool if spool is not None else
                subprocess.PIPE if piped else None,
                **({"process_group": 0} if tries.timeout is not None and HAS_GROUPS else {}))
        except OSError as exc:
            status = NOT_FOUND if isinstance(exc, FileNotFoundError) else CANNOT_RUN
            say(f"{command[0]}: command not found" if status == NOT_FOUND
                else f"cannot run {command[0]}: {exc.strerror}")
            return _Try(status, not_run=True)
        deadline = None
        if tries.timeout is not None:
            group[:] = [child.pid]
            deadline = _Deadline(child, tries.timeout)
        kept, size, read_by_ours = b"", 0, True
        if piped and spool is None:
            kept, size, read_by_ours = _copy_through(child)
        status = _wait(child, deadline)
        group.clear()
        status = status if status >= 0 else 128 - status
        timed_out = deadline is not None and deadline.passed
        if timed_out:
            status = sloth_step.TIMED_OUT
        if spool is not None:
            spool.seek(0)
            if status == 0:
                kept, size, read_by_ours = _copy_out(spool, 1)
            else:
                _copy_out(spool, 2)
        return _Try(status, kept, size, read_by_ours, timed_out)
    finally:
        if spool is not None:
            spool.close()


def _copy_through(child: subprocess.Popen) -> tuple[bytes, int, bool]:
    """COMMAND's stdout to ours as it comes: (what was kept, its size, whether our
    reader stayed)."""
    kept, size, read_by_ours = bytearray(), 0, True
    while read_by_ours:
        chunk = os.read(child.stdout.fileno(), CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if len(kept) < sloth_step.OUTPUT_CAP:
            kept += chunk[:sloth_step.OUTPUT_CAP - len(kept)]
        read_by_ours = _write_out(chunk) is None
    # Our stdout's reader left (`| head -n 1` has its line): COMMAND's end of the pipe
    # has no reader now either, so its next write meets SIGPIPE (or EPIPE), as it would
    # without the step. Read on, and `yes` would write forever.
    child.stdout.close()
    return bytes(kept), size, read_by_ours


def _copy_out(spool, fd: int) -> tuple[bytes, int, bool]:
    """A held try's output from its file to `fd`: (what was kept, its size, whether
    the reader stayed)."""
    kept, size = bytearray(), 0
    while True:
        chunk = spool.read(CHUNK)
        if not chunk:
            return bytes(kept), size, True
        size += len(chunk)
        if len(kept) < sloth_step.OUTPUT_CAP:
            kept += chunk[:sloth_step.OUTPUT_CAP - len(kept)]
        if _write_out(chunk, fd) is not None:
            return bytes(kept), size, False


HAS_GROUPS = hasattr(os, "killpg")


def _signal_group(pgid: int, signum: int) -> None:
    # daemon/procs.py's, which `step` cannot load: it brings typing, which a step's
    # start does not pay for (tests/test_imports.py).
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


class _Deadline:
    """COMMAND's group stopped once `timeout` seconds pass: SIGTERM, then SIGKILL after
    sloth_step.GRACE, as the runner stops a job past its timeout. A thread that waits
    on an Event with a timeout: no polling."""

    def __init__(self, child: subprocess.Popen, timeout: float) -> None:
        import threading

        self.child, self.passed = child, False
        self._over = threading.Event()
        self._lock = threading.Lock()  # no signal once over: COMMAND's pid may be reused
        threading.Thread(target=self._watch, args=(timeout,), daemon=True).start()

    def _watch(self, timeout: float) -> None:
        if self._over.wait(timeout):
            return
        self.passed = True
        for signum, then in ((signal.SIGTERM, sloth_step.GRACE), (_KILL, None)):
            with self._lock:
                if self._over.is_set():
                    return
                self._stop(signum)
            if then is not None and self._over.wait(then):
                return

    def _stop(self, signum: int) -> None:
        if HAS_GROUPS:
            _signal_group(self.child.pid, signum)
        elif signum == signal.SIGTERM:
            self.child.terminate()
        else:
            self.child.kill()

    def over(self) -> None:
        """COMMAND has ended (not reaped yet: its pid is still its own). Past the
        timeout, what is left of its group goes too."""
        with self._lock:
            self._over.set()
            if self.passed:
                self._stop(_KILL)


_KILL = getattr(signal, "SIGKILL", signal.SIGTERM)


def _wait(child: subprocess.Popen, deadline: _Deadline | None) -> int:
    """COMMAND's status; with a deadline, its end seen before it is reaped (waitid's
    WNOWAIT), so that the deadline never signals a pid another process took since."""
    if deadline is not None:
        if hasattr(os, "waitid"):
            try:
                os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                pass
        else:
            child.wait()
        deadline.over()
    return child.wait()


def _end_as(signum: int) -> None:
    """End this process by `signum`, as COMMAND was: its caller sees the same status.
    (Returns only where the signal cannot end a process: then the caller exits.)"""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _record(db, run: sloth_step.Run, name: str, occurrence: int, *, ok: bool,
            exit_code: int, kept: bytes, size: int) -> bool:
    try:
        if sloth_step.end(db, run, name, occurrence, ok=ok, output=kept, exit_code=exit_code,
                          output_size=size):
            return True
        say(f'step "{name}" ran, but this run of job {run.job} is over, so it was not '
            "recorded; it runs again with the job")
    except sloth_step.StepError as exc:
        say(exc)
    return False
