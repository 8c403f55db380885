"""`sloth-tray step NAME [--ask] -- COMMAND [ARG...]`: one step of a job's shell script,
run once (for_jobs/sloth_step.py keeps the record).

The first time, COMMAND runs with stdin and stderr passed through and its stdout
copied through (and kept, up to sloth_step.OUTPUT_CAP), and the call exits with its
status: 0 records the step done, anything else failed (it runs again next time). On
a later run of the job a done step does not run: its output is written again and the
call exits 0. Outside a job, COMMAND just runs.

Loaded with the command line's fast path (as `status`): only the standard library
and sloth_step.
"""

from __future__ import annotations

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
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        say(f"{command[0]}: command not found")
        return NOT_FOUND
    except OSError as exc:
        say(f"cannot run {command[0]}: {exc.strerror}")
        return CANNOT_RUN
    return CANNOT_RUN  # not reached: exec replaced this process


def _replay(name: str, decision: sloth_step.Decision) -> int:
    output = decision.output
    _write_out(output)
    size = decision.row.get("output_size") or 0
    if size > len(output):
        say(f"step {name} had written {sloth_step.size_text(size)}; only the first "
            f"{sloth_step.size_text(len(output))} was kept, and is written again here")
    say(sloth_step.skipped_line(name, decision.row))
    return 0


def _write_out(data: bytes) -> bool:
    """To our stdout, whole; False once nobody reads it (the output is still kept)."""
    view = memoryview(data)
    try:
        while view:
            written = os.write(1, view)
            view = view[written:]
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
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, env=env)
    except OSError as exc:
        status = NOT_FOUND if isinstance(exc, FileNotFoundError) else CANNOT_RUN
        say(f"{command[0]}: command not found" if status == NOT_FOUND
            else f"cannot run {command[0]}: {exc.strerror}")
        _record(db, run, name, occurrence, ok=False, exit_code=status, kept=b"", size=0)
        return status
    kept, size, reading = bytearray(), 0, True
    while True:
        chunk = os.read(child.stdout.fileno(), CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if len(kept) < sloth_step.OUTPUT_CAP:
            kept += chunk[:sloth_step.OUTPUT_CAP - len(kept)]
        if reading:
            reading = _write_out(chunk)
    status = child.wait()
    if ended_by:  # the run is ending: the step stays running, and is marked cut short
        signal.signal(ended_by[0], signal.SIG_DFL)
        os.kill(os.getpid(), ended_by[0])
        return 128 + ended_by[0]
    status = status if status >= 0 else 128 - status
    recorded = _record(db, run, name, occurrence, ok=status == 0, exit_code=status,
                       kept=bytes(kept), size=size)
    if status == 0 and recorded and size > len(kept):
        say(f"step {name} wrote {sloth_step.size_text(size)}; the first "
            f"{sloth_step.size_text(len(kept))} was kept to write again when it is skipped")
    if not recorded:
        return REFUSED
    return status


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
