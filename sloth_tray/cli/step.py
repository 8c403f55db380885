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
and sloth_step.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

from sloth_tray.for_jobs import sloth_step

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


def main(name: str, command: list[str], *, ask: bool) -> int:
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
            return _exec(command)
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
    return _run_once(db, run, name, decision.occurrence, command)


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


def _write_out(data: bytes) -> int | None:
    """To our stdout, whole: None, or the errno that stopped it (EPIPE: its reader
    left)."""
    view = memoryview(data)
    try:
        while view:
            written = os.write(1, view)
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


def _run_once(db, run: sloth_step.Run, name: str, occurrence: int, command: list[str]) -> int:
    ended_by: list[int] = []
    for signum in ENDING_SIGNALS:  # the whole group gets it: COMMAND ends on its own
        signal.signal(signum, lambda signum, _frame: ended_by.append(signum))
    env = dict(os.environ)
    env[sloth_step.KEY_ENV] = sloth_step.step_key(run.job, name, occurrence)
    _flush_stdout()
    # A closed stdout (`>&-`) stays closed for COMMAND, as without the step: nothing kept.
    piped = _stdout_open()
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE if piped else None, env=env)
    except OSError as exc:
        status = NOT_FOUND if isinstance(exc, FileNotFoundError) else CANNOT_RUN
        say(f"{command[0]}: command not found" if status == NOT_FOUND
            else f"cannot run {command[0]}: {exc.strerror}")
        _record(db, run, name, occurrence, ok=False, exit_code=status, kept=b"", size=0)
        return status
    kept, size, read_by_ours = bytearray(), 0, True
    while piped and read_by_ours:
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
    if piped:
        child.stdout.close()
    status = child.wait()
    if ended_by:  # the run is ending: the step stays running, and is marked cut short
        _end_as(ended_by[0])
        return 128 + ended_by[0]
    # COMMAND ended by SIGPIPE after its reader left: the normal end of a pipeline's
    # left side. sh gives that side 141 and goes on with what the reader took (a
    # pipeline's status is its last command's), so the step is done: a later run
    # replays what was kept, and the reader takes the same again. It ends as sh's left
    # side would (by SIGPIPE: 141 to `set -o pipefail`), not with a 0 the pipeline
    # would never have had.
    cut_by_reader = (SIGPIPE is not None and not read_by_ours
                     and status in (-SIGPIPE, 128 + SIGPIPE))
    status = status if status >= 0 else 128 - status
    ok = status == 0 or cut_by_reader
    recorded = _record(db, run, name, occurrence, ok=ok, exit_code=status,
                       kept=bytes(kept), size=size)
    if ok and recorded and size > len(kept) and read_by_ours:
        say(f"step {name} wrote {sloth_step.size_text(size)}; the first "
            f"{sloth_step.size_text(len(kept))} was kept to write again when it is skipped")
    if not recorded:
        return REFUSED
    if cut_by_reader:
        _end_as(SIGPIPE)
    return status


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
