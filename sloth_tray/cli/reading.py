"""The commands that only read: paths, list, show, config, wait, log and schedules
(`status`, the one typed most, has a module of its own: cli/status.py). On a home
that does not exist they make nothing and say there is no queue there yet."""

import json
import os
import sys
import time

from sloth_tray import config
from sloth_tray.cli.common import command, emit_json, in_lane, no_queue_here, table, when
from sloth_tray.errors import SlothError
from sloth_tray.paths import Home
from sloth_tray.store.access import find_job, queue_to_read, reading, run_log
from sloth_tray.store.reads import NEVER, short_time
from sloth_tray.store.states import State
from sloth_tray.text import printable
from sloth_tray.timefmt import clock_time, format_duration, relative

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    import argparse
    import sqlite3
    from typing import Any, BinaryIO

    from sloth_tray.store.queue import Queue
    from sloth_tray.store.rows import Job


@command
def cmd_paths(args: "argparse.Namespace", home: Home) -> int:
    places = {"home": home.root, "db": home.db, "jobs": home.jobs, "logs": home.logs}
    if args.json:
        emit_json({key: str(path) for key, path in places.items()})
    else:
        print(table([(key, str(path)) for key, path in places.items()]))
    if not os.path.exists(home.db):  # where they will be: nothing is made by looking
        no_queue_here(home)
    return 0


@command
def cmd_list(args: "argparse.Namespace", home: Home) -> int:
    from sloth_tray.store import lanes, queries, reads

    with reading(home) as db:  # the queue's functions on a connection that only reads
        if db is None:
            no_queue_here(home)
            if args.json:
                emit_json([])
            return 0
        limit = args.limit or None
        want = limit + 1 if limit else None  # one more: is there more than shown?
        jobs, earlier = _listed(db, args, want)
        more = limit is not None and len(jobs) > limit
        jobs = jobs[:limit]
        waiting = reads.waiting_for(db, [job.id for job in jobs if job.state == State.PENDING])
        if args.json:
            emit_json([job.as_dict() | {"waiting_for": _wait_json(waiting.get(job.id))}
                       | ({} if args.all_runs else {"earlier_runs": earlier.get(job.id, 0)})
                       for job in jobs])
            return 0
        if not jobs:
            which = " ".join(filter(None, [args.state, args.reason and f"{args.reason}"]))
            nothing = f"no {which} jobs" if which else "no jobs yet"
            print(nothing if args.lane is None else
                  f"no {which + ' ' if which else ''}jobs in lane {printable(args.lane)}")
            return 0
        now = time.time()
        unmet = reads.unmet(db)
        paused_lanes = lanes.paused_lanes(db, reads.paused(db))
        running = _running_by_lane(db)
        cut = _cut_short_note(home) if running else None
        # The lane column, once there is more than one lane to tell apart.
        with_lane = args.lane is None and len({job.lane for job in jobs} | set(lanes.known(db))) > 1
        rows = [("ID", *(("LANE",) if with_lane else ()), "NAME", "STATE", "TRIES", "WHEN",
                 "NOTE")]
        for job in jobs:
            note = job.last_error if job.state in (State.FAILED, State.PENDING) else job.result
            wait = waiting.get(job.id)
            if job.state == State.PENDING and job.not_before <= now:
                note = _waiting_note(job, unmet) or _behind_note(job, running) or note
            if job.state == State.RUNNING and cut:
                note = f"{cut}; {note}" if note else cut
            if earlier.get(job.id):
                note = _folded_note(earlier[job.id], note)
            rows.append((queries.shortest_unique_prefix(db, job.id),
                         *((job.lane,) if with_lane else ()), job.name, job.state.value,
                         f"{job.attempts}/{job.max_attempts}",
                         wait["words"] if wait else when(job, now, job.lane in paused_lanes),
                         _wait_note(wait) if wait else (note or "").replace("\n", " ")[:80]))
    print(table(rows))
    if more:
        print(f"(the newest {limit}; --limit 0 shows all)")
    return 0


def _listed(db: "sqlite3.Connection", args: "argparse.Namespace", want: int | None
            ) -> "tuple[list[Job], dict[str, int]]":
    """The jobs `list` shows, and for each that stands for older done runs of its
    series, how many: a series' done runs fold into its newest unless --all-runs."""
    from sloth_tray.store import queries

    if args.all_runs:
        return queries.jobs(db, args.state, limit=want, reason=args.reason, lane=args.lane), {}
    folded = queries.jobs_folded(db, args.state, limit=want, reason=args.reason,
                                 lane=args.lane)
    return [job for job, _ in folded], {job.id: n for job, n in folded if n}


def _folded_note(earlier: int, note: str | None) -> str:
    """`+13 earlier runs` first: cut to fit, the note loses its end, never the count."""
    said = f"+{earlier} earlier run{'' if earlier == 1 else 's'}"
    return f"{said}; {note}" if note else said


def _running_by_lane(db: "sqlite3.Connection") -> "dict[str, Job]":
    from sloth_tray.store import queries

    return {job.lane: job for job in queries.jobs(db, State.RUNNING)}


def _cut_short_note(home: Home, job: "Job | None" = None) -> str | None:
    """For a job marked running when no app holds its home: `cut short: no app runs this
    home`, and with `job`, what the next start does with it; None while an app runs."""
    from sloth_tray import instance

    if instance.held(home.lock):
        return None
    said = f"cut short: {instance.NO_APP}"
    return said if job is None else \
        f"{said}; the next start {instance.after_a_crash(job.attempts, job.max_attempts)}"


def _behind_note(job: "Job", running: "dict[str, Job]") -> str | None:
    """`after fetch_mail (running in lane net)`, for a due job its lane's running job
    holds back: a lane runs one job at a time."""
    ahead = running.get(job.lane)
    if ahead is None or ahead.id == job.id:
        return None
    return f"after {printable(ahead.name)} (running in lane {printable(job.lane)})"


def _waiting_note(job: "Job", unmet: frozenset[str]) -> str | None:
    """`waiting for AC power`, for a due job whose require= does not hold now."""
    from sloth_tray.jobs.conditions import waiting_for

    waits = waiting_for(job.options, unmet)
    return f"waiting for {waits}" if waits else None


@command
def cmd_show(args: "argparse.Namespace", home: Home) -> int:
    if args.occurrence is not None and args.step is None:
        print("sloth-tray: --occurrence goes with --step (`sloth-tray show ID --step NAME "
              "--occurrence N`: that step's Nth call)", file=sys.stderr)
        return 2  # argparse's code for a usage mistake
    from sloth_tray.store import lanes, queries, reads
    from sloth_tray.store import steps as recorded

    with reading(home, required=True) as db:  # the queue's functions, a look only
        job = queries.get(db, reads.find_job(db, args.id))
        if args.step is not None:
            return _print_step_output(queries.step(db, job.id, args.step, args.occurrence))
        history = queries.history(db, job.id)
        steps = [step.as_dict(output=False) for step in recorded.listed(db, job.id)]
        now = time.time()
        unmet = reads.unmet(db)
        paused = lanes.paused(db, job.lane, reads.paused(db))
        running = _running_by_lane(db)
        wait = reads.waiting_for(db, [job.id]).get(job.id)
    logs = home.job_logs(job.id, job.name)
    if args.json:
        emit_json(job.as_dict() | {"history": [event.as_dict() for event in history],
                                   "steps": steps, "logs": str(logs),
                                   "waiting_for": _wait_json(wait)})
        return 0
    state = job.state.value
    if wait is not None:
        state += f" ({wait['words']}{'; ' + _wait_note(wait) if wait['choices'] else ''})"
    elif job.state in (State.PENDING, State.RUNNING):
        state += f" ({when(job, now, paused)})"
    waits = _waiting_note(job, unmet) or _behind_note(job, running) \
        if job.state == State.PENDING else None
    if waits and job.not_before <= now:
        state += f", {waits}"
    cut = _cut_short_note(home, job) if job.state == State.RUNNING else None
    if cut:
        state += f", {cut}"
    fields = [
        ("id", job.id), ("name", job.name), ("lane", job.lane), ("state", state),
        ("added", added_by(job.source)), ("key", job.key if job.key is not None else "-"),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("script", job.script or "-"),
        ("options", " ".join(option_text(k, v) for k, v in sorted(job.options.items())) or "-"),
        ("last error", job.last_error or "-"), ("result", job.result or "-"),
        ("created", f"{clock_time(job.created_at)} ({relative(job.created_at, now)})"),
        ("logs", str(logs) if os.path.exists(logs) else f"{logs} (none yet)"),
    ]
    print(table(fields))
    print("\nhistory")
    print(table([("  " + clock_time(e.at), e.kind, e.detail) for e in history]))
    if steps:
        print("\nsteps")
        print(table([_step_row(step, now) for step in steps]))
    return 0


def added_by(source: str | None) -> str:
    """Who added a job, in words: `show`'s row."""
    from sloth_tray.store.rows import DROPPED, SHELL

    return {DROPPED: "dropped into the jobs folder", SHELL: "from the shell (sloth-tray add)",
            None: "-"}.get(source) or f"by {source} (MCP)"


def _wait_json(wait: "dict[str, Any] | None") -> "dict[str, Any] | None":
    """What a waiting job waits for, as --json says it (None: it waits for nothing)."""
    if wait is None:
        return None
    return {key: wait[key] for key in ("kind", "until", "question", "choices", "default")}


def _wait_note(wait: "dict[str, Any]") -> str:
    """`answer: yes, no (sloth-tray answer ID CHOICE)`, `until 14:00`."""
    if wait["kind"] == "time":
        return f"until {clock_time(wait['until'])}"
    note = f"answer: {', '.join(wait['choices'] or [])}"
    if wait["until"] is not None:
        note += f"; until {clock_time(wait['until'])}" + (
            f", then {wait['default']}" if wait["default"] else "")
    return printable(note)


def _step_row(step: "dict[str, Any]", now: float) -> tuple[str, ...]:
    """name, state, run, when, how long, output: one row of `show`'s steps. A sleep or
    an ask says what it waits for (or waited for) in its state, and has no output."""
    name = step["name"] + (f" #{step['occurrence']}" if step["occurrence"] > 1 else "")
    ended = step["ended_at"] if step["ended_at"] is not None else now
    took = format_duration(max(ended - step["started_at"], 0.0))
    if step["state"] == "running":
        took += " so far"
    output = "-" if step["output_size"] is None else \
        f"{step['output_size']} byte{'' if step['output_size'] == 1 else 's'}"
    if step["kind"] in ("sleep", "ask"):
        output = "-"
        if step["state"] == "waiting" and step["kind"] == "sleep":
            took = f"{format_duration(max((step['wake_at'] or 0) - now, 0.0))} to go"
        elif step["state"] == "waiting":
            took += " so far"
    return ("  " + name, _step_state(step), f"run {step['run']}",
            clock_time(step["started_at"]), took, output)


def _step_state(step: "dict[str, Any]") -> str:
    """`done`, `failed (exit 1) (try 3)`, `sleeping until 14:00`, `asks "Post it?"
    (yes/no)`: a step's state, with what it waits for."""
    state, kind = step["state"], step["kind"]
    if kind == "sleep" and state in ("waiting", "done"):
        until = f"until {short_time(step['wake_at'] or 0)}"
        return f"sleeping {until}" if state == "waiting" else f"done (slept {until})"
    if kind == "ask" and state in ("waiting", "done", "unanswered"):
        if state == "done":
            return f"done (answered {step['answer']})"
        if state == "unanswered":
            return f"unanswered (nobody answered by {short_time(step['wake_at'] or 0)})"
        if step["answer"] is not None:
            return f"answered {step['answer']} (runs again now)"
        choices = "/".join(json.loads(step["choices"] or "[]"))
        until = f", until {short_time(step['wake_at'])}" if step["wake_at"] is not None \
            and step["wake_at"] < NEVER else ""
        return f"asks {json.dumps(step['question'], ensure_ascii=False)} ({choices}{until})"
    if step["marked_at"]:
        state += " (marked by hand)"
    elif state == "cut" and step["ask"]:
        state += " (asks: did it happen?)"
    elif state == "failed" and step["exit_code"] is not None:
        state += f" (exit {step['exit_code']})"
    if step.get("tries") and step["tries"] > 1:
        state += f" (try {step['tries']})"
    return state


def _print_step_output(step: "dict[str, Any]") -> int:
    """A step's recorded output, exactly as kept (`show ID --step NAME`)."""
    if step["state"] != "done":
        print(f"sloth-tray: step \"{printable(step['name'])}\" is {step['state']}: only a "
              "done step's output is kept", file=sys.stderr)
        return 1
    output = bytes(step["output"] or b"")
    sys.stdout.flush()
    sys.stdout.buffer.write(output)
    if step["output_size"] and step["output_size"] > len(output):
        print(f"sloth-tray: the step wrote {step['output_size']} bytes; the first "
              f"{len(output)} were kept", file=sys.stderr)
    return 0


# A job's options that hold seconds, by their limit's name in limits.py: shown as a
# header says them (every=1h, not 3600.0).
DURATION_OPTIONS = ("TIMEOUT", "DELAY", "LEASE", "EVERY", "GRACE", "WINDOW")


def option_text(key: str, value: object) -> str:
    """key=value as a header would say it; `scheduled`, the series' clock, as a time."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if key == "scheduled":
            return f"{key}={clock_time(value)}"
        from sloth_tray import limits  # here: `list` and `log` show no option's number

        if key in {getattr(limits, name).key for name in DURATION_OPTIONS}:
            return f"{key}={limits.compact_duration(value)}"
    return f"{key}={value}"


@command
def cmd_config(args: "argparse.Namespace", home: Home) -> int:
    settings = args.settings
    shown = {key: settings[key] for key in config.KEYS} | {"jobs_dir": str(home.jobs)}
    # As config.toml says them: 60s, 10MiB (the values: seconds and bytes, for scripts).
    texts = {key: settings.text(key) for key in config.KEYS} | {"jobs_dir": str(home.jobs)}
    sources = {key: "default (home)" if key == "jobs_dir" and source == "default" else source
               for key, source in settings.sources.items()}
    if args.json:
        emit_json({"file": str(settings.path), "home": str(home.root),
                   "settings": {key: {"value": value, "text": texts[key], "from": sources[key]}
                                for key, value in shown.items()}})
    else:
        print(f"config file: {printable(settings.path)}"
              + ("" if os.path.exists(settings.path) else " (none yet)"))
        print(f"home:        {printable(home.root)}\n")
        print(table([("SETTING", "VALUE", "FROM")] + [
            (key, "-" if texts[key] is None else texts[key], sources[key]) for key in shown]))
    if not os.path.exists(home.db):
        no_queue_here(home)
    return 0


ENDED = (State.DONE, State.FAILED, State.CANCELLED)  # what `wait` and `log -f` wait for


@command
def cmd_wait(args: "argparse.Namespace", home: Home) -> int:
    if not args.ids and args.lane is None:  # a usage mistake: argparse's exit code, 2
        print("sloth-tray: give job ids to wait for, or --lane NAME", file=sys.stderr)
        return 2
    from sloth_tray.daemon.follow import Changes
    from sloth_tray.errors import UnknownJob

    queue = queue_to_read(home)
    with queue, Changes(home) as changes:  # watched before the first look: nothing missed
        ids = list(dict.fromkeys(find_job(queue, given) for given in args.ids))
        waited = set(ids)  # a job the lane still shows once it ended is not waited for again
        names: dict[str, str] = {}
        endings: dict[str, str] = {}  # id -> how it ended, for each not done
        while True:
            if args.lane is not None:  # the lane's jobs, those that joined it meanwhile too
                joined = [job_id for job_id in _live_in_lane(queue, args.lane)
                          if job_id not in waited]
                ids += joined
                waited.update(joined)
            if not ids:
                break
            for job_id in list(ids):
                try:
                    job = queue.get(job_id)
                except UnknownJob:  # pruned meanwhile: it ended, but how is not known
                    endings[job_id] = "was pruned"
                    print(f"{'pruned':<9} {printable(names.get(job_id, '?'))} ({job_id})")
                    ids.remove(job_id)
                    continue
                names[job_id] = job.name
                if job.state not in ENDED:
                    continue
                ids.remove(job_id)
                said = f": {job.last_error}" if job.state == State.FAILED and job.last_error \
                    else ""
                print(f"{job.state.value:<9} {printable(job.name)} ({job.id})"
                      f"{printable(said)}", flush=True)
                if job.state != State.DONE:
                    endings[job_id] = "failed" if job.state == State.FAILED else "was cancelled"
            if ids:
                changes.wait()
    if not waited:
        print(f"nothing pending or running{in_lane(args.lane)}")
    if not endings:
        return 0
    total = len(names) + sum(1 for job_id in endings if job_id not in names)
    told = ", ".join(f"{printable(names.get(job_id, '?'))} ({job_id}) {how}"
                     for job_id, how in endings.items())
    print(f"sloth-tray: {len(endings)} of {total} job{'' if total == 1 else 's'} did not end "
          f"done: {told}", file=sys.stderr)
    return 1


def _live_in_lane(queue: "Queue", lane: str) -> list[str]:
    """The ids of the jobs pending or running in `lane`, but the runs of a repeating job:
    a series always has a run waiting, and would keep its lane from ever being empty.
    (Pending is read first: a job claimed between the two reads is in the second.)"""
    from sloth_tray.jobs.series import repeats

    return [job.id for state in (State.PENDING, State.RUNNING)
            for job in queue.jobs(state, lane=lane) if not repeats(job.options)]


@command
def cmd_log(args: "argparse.Namespace", home: Home) -> int:
    if args.follow:
        queue = queue_to_read(home)
        with queue:
            job = queue.get(find_job(queue, args.id))
            _refuse_a_run_not_there(job, args.run, follow=True)
            return _follow_log(queue, home, job, args.run or max(job.runs, 1))
    from sloth_tray.store import queries, reads

    with reading(home, required=True) as db:  # a look: no Queue, no watch
        job = queries.get(db, reads.find_job(db, args.id))
    who = f"{printable(job.name)} ({job.id})"
    _refuse_a_run_not_there(job, args.run, follow=False)
    if not job.runs:
        raise SlothError(f"{who} has not run yet: it has no log (`sloth-tray log -f "
                         f"{job.id}` waits for it)")
    run = args.run or job.runs
    path = run_log(home, job, run)  # its sentence is made printable as every error is
    sys.stdout.flush()
    read_new(path, 0, sys.stdout.buffer)
    return 0


def _refuse_a_run_not_there(job: "Job", run: int | None, *, follow: bool) -> None:
    """`--run N` past the job's runs (`-f` may wait for the first) is one sentence."""
    if run is not None and run > max(job.runs, 1 if follow else 0):
        raise SlothError(f"{printable(job.name)} ({job.id}) has run {job.runs} "
                         f"time{'' if job.runs == 1 else 's'}: "
                         + (f"--run takes 1 to {job.runs}" if job.runs else
                            "it has no log yet"))


def read_new(path: str | os.PathLike[str], offset: int, out: "BinaryIO") -> int:
    """Copy what `path` holds past `offset` to the binary stream `out`: the new offset.
    A file not there (yet) holds nothing."""
    try:
        file = open(path, "rb")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return offset
    with file:
        file.seek(offset)
        while chunk := file.read(64 * 1024):
            out.write(chunk)
            offset += len(chunk)
    out.flush()
    return offset


def _follow_log(queue: "Queue", home: Home, job: "Job", run: int) -> int:
    """`log -f`: the run's log as it grows, then each later run's, until the job ends:
    0 when it ended done, else 1."""
    from sloth_tray.daemon.follow import Changes

    folder = home.job_logs(job.id, job.name)
    offset = 0
    sys.stdout.flush()
    out = sys.stdout.buffer
    with Changes(home) as changes:
        while True:
            changes.also(folder)  # made when the first run starts
            log_file = folder / f"{run}.log"
            was = offset
            offset = read_new(log_file, offset, out)
            job = queue.get(job.id)
            if job.runs > run:  # a later run began: this one's log is whole
                read_new(log_file, offset, out)
                run, offset = run + 1, 0
                print(f"sloth-tray: run {run} of {printable(job.name)} ({job.id}) began",
                      file=sys.stderr, flush=True)
                changes.saw_change()
                continue
            if job.state in ENDED:  # its run's log was closed before it ended
                read_new(log_file, offset, out)
                return 0 if job.state == State.DONE else 1
            if offset != was:
                changes.saw_change()
            changes.wait()



# -- schedules: one row per series ----------------------------------------------------


@command
def cmd_schedules(args: "argparse.Namespace", home: Home) -> int:
    from sloth_tray.store import reads, schedules
    from sloth_tray.store.schema import translated_errors

    if not home.readable():
        no_queue_here(home)
        if args.json:
            emit_json([])
        return 0
    db = reads.reader(home.db)  # cannot write (query_only): a look changes nothing
    try:
        with translated_errors(home.db, reads.BUSY_TIMEOUT):
            db.execute("BEGIN")  # one read: every series as of the same moment
            now = time.time()
            found = schedules.read(db, now, lane=args.lane, ended=args.all)
            db.execute("COMMIT")
    finally:
        db.close()
    if args.json:
        emit_json(found)
        return 0
    if not found:
        print(f"no jobs that repeat{in_lane(args.lane)}")
        return 0
    print(table(schedule_rows(found, now)))
    return 0


def schedule_rows(found: "list[dict[str, Any]]", now: float) -> list[tuple[str, ...]]:
    """`schedules`' table: NEXT and LEFT (or what the series waits for), LAST and
    PASSED with how the last run went, the runs so far and the failures in a row."""
    rows = [("NAME", "LANE", "SCHEDULE", "NEXT", "LEFT", "LAST", "PASSED", "OUTCOME",
             "RUNS", "NOTE")]
    for series in found:
        if series["running_since"] is not None:
            next_at, left = "running", f"for {format_duration(now - series['running_since'])}"
        elif series["next"] is not None:
            next_at = _moment(series["next"], now)
            left = "due now" if series["next"] <= now else \
                format_duration(series["next"] - now)
        else:
            next_at, left = "-", "-"
        if series["waiting_for"]:
            left = f"waits for {series['waiting_for']}"
        last = series["last"]
        if last is None:
            last_at, passed, outcome = "-", "-", "never ran"
        else:
            last_at, passed = _moment(last["at"], now), relative(last["at"], now)
            outcome = "ok" if last["outcome"] == "ok" else f"failed: {last['error'] or '?'}"
            if last["retried"]:
                outcome += ", tried again"
            if last["duration"] is not None:
                outcome += f" ({format_duration(last['duration'])})"
        notes = []
        if series["failures_in_a_row"] > 1:
            notes.append(f"{series['failures_in_a_row']} failures in a row")
        if series["overdue"]:
            notes.append("overdue")
        if series["state"] == "paused":
            notes.append("paused")
        if series["state"] == "ended":
            notes.append("ended (cancelled)")
        rows.append((series["name"], series["lane"], series["schedule"], next_at, left,
                     last_at, passed, outcome[:60], str(series["runs"]), ", ".join(notes)))
    return rows


def _moment(moment: float, now: float) -> str:
    """`14:02` today, `Tue 09:00` within a week, else the date and time."""
    here, today = time.localtime(moment), time.localtime(now)
    if here[:3] == today[:3]:
        return time.strftime("%H:%M", here)
    if abs(moment - now) < 6 * 86400:
        return time.strftime("%a %H:%M", here)
    return time.strftime("%Y-%m-%d %H:%M", here)
