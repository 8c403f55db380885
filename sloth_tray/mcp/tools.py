"""What each MCP tool does: plain functions over a home's Queue and spool, the ones the
command line calls (spool.add_text, spool.retry, Queue.cancel, reads.read, find_job),
each returning what the tool answers, a JSON object. A mistake raises SlothError with
the one sentence the command line says for it; the server makes it the tool's error.

Nothing here speaks the protocol, and nothing waits: `wait_job`'s wait is the
server's (it blocks on the queue's change signal), and `job_states` is its look.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from sloth_tray import instance
from sloth_tray.errors import SlothError, UnknownJob
from sloth_tray.jobs.header import BadJobFile, has_header, settings_of
from sloth_tray.paths import Home
from sloth_tray.store import lanes, reads, rows, spool
from sloth_tray.store.access import (
    find_job,
    open_queue,
    queue_to_read,
    run_log,
    run_now_instead,
    sound_home,
)
from sloth_tray.store.reasons import Reason
from sloth_tray.store.rows import JOB_COLUMNS
from sloth_tray.store.states import State
from sloth_tray.text import printable

ENDED = (State.DONE, State.FAILED, State.CANCELLED)
SCRIPT_MAX = 1024 * 1024  # bytes of a script an agent hands over, at most
LOG_TAIL_DEFAULT = 16 * 1024  # job_log's, when not told
GET_TAIL_DEFAULT = 4096  # get_job's
LOG_RESOURCE_MAX = 1024 * 1024  # bytes of a log resource: its end
ERROR_SHOWN = 300  # characters of a last_error in a list
# add_job's options that go into the script's `# sloth:` header, where a retry reads
# them again, in the order written there.
HEADER_OPTIONS = ("delay", "max_attempts", "timeout", "every", "at", "cron")
SCRIPT_FILE = "script"  # an agent's script in the spool, as `add -- COMMAND` names its own


def _job(home: Home, given: str):
    """The queue (to read, nothing made) and the job `given` names."""
    queue = queue_to_read(home)
    try:
        return queue, queue.get(find_job(queue, given))
    except BaseException:
        queue.close()
        raise


def _when(job: rows.Job, now: float, app_running: bool) -> str:
    """When a job starts, or what holds it, in a few words."""
    if job.state == State.RUNNING:
        return "now (it has started)"
    if job.state != State.PENDING:
        return f"no more: it is {job.state.value}"
    if not app_running:
        return f"{instance.ONCE_STARTED} ({instance.NO_APP})"
    from sloth_tray.timefmt import relative

    return "now" if job.not_before <= now else relative(job.not_before, now)


# -- add_job ------------------------------------------------------------------------


def header_text(args: dict[str, Any]) -> str:
    """add_job's options as a `# sloth:` header's text, checked as a header's are."""
    words = []
    for key in HEADER_OPTIONS:
        if key not in args:
            continue
        value = args[key]
        if isinstance(value, str) and ('"' in value or not value.isprintable()):
            raise SlothError(f"add_job: `{key}` cannot hold a quote or a control character")
        words.append(f'{key}="{value}"' if isinstance(value, str) else f"{key}={value}")
    text = " ".join(words)
    if text:
        try:
            settings_of(text, "add_job")
        except BadJobFile as exc:
            raise SlothError(str(exc)) from None
    return text


def _script_text(script: str, header: str) -> bytes:
    """An agent's script, with add_job's options as its header (after its #! line)."""
    if not script.startswith("#!"):
        raise SlothError("add_job: a script starts with its #! line (#!/bin/sh, "
                         "#!/usr/bin/env python3); to run a program, give `command`")
    text = script.encode("utf-8", "surrogateescape")
    if len(text) > SCRIPT_MAX:
        raise SlothError(f"add_job: a script is at most {SCRIPT_MAX // 1024 // 1024} MiB "
                         f"(this one has {len(text):,} bytes); put it in a file and give "
                         "`command`")
    if not header:
        return text
    if has_header(text[:64 * 1024]):
        raise SlothError("add_job: the script has a `sloth:` line of its own: give its "
                         "options there or as arguments, not both")
    first, _, rest = text.partition(b"\n")
    return first + b"\n# sloth: " + header.encode() + b"\n" + rest


def add_job(home: Home, args: dict[str, Any], source: str) -> dict[str, Any]:
    command, script = args.get("command"), args.get("script")
    if (command is None) == (script is None):
        raise SlothError("add_job: give `command` (a list of words) or `script` (text "
                         "starting with its #! line)" + (", not both" if command else ""))
    lane = args.get("lane", lanes.MAIN)
    for why in (lanes.problem(lane), args.get("key") is not None
                and rows.key_problem(args["key"])):
        if why:
            raise SlothError(f"add_job: {why}")
    header = header_text(args)
    cwd = spool.working_folder(args["cwd"], default_here=False) if "cwd" in args else None
    if command is not None:
        text = spool.command_script(command, header)
        name = args.get("name") or spool.command_name(command)
    else:
        text = _script_text(script, header)
        name = args.get("name") or SCRIPT_FILE
    job_id = spool.add_text(sound_home(home), text, SCRIPT_FILE if script is not None
                            else spool.COMMAND_FILE, cwd=cwd, name=name, lane=lane,
                            key=args.get("key"), by=source)
    already = isinstance(job_id, spool.AlreadyAdded)
    if not already:
        home.ring_doorbell()
    app_running = instance.held(home.lock)
    with open_queue(home) as queue:
        job = queue.get(job_id)
        now = queue.clock()
        paused = queue.paused(job.lane)
    starts = _when(job, now, app_running)
    if paused and job.state == State.PENDING:
        starts += f" (lane {job.lane} is paused: after `sloth-tray resume`)"
    if already:
        said = (f"key {job.key!r} is {job.name} ({job.id})'s already, {job.state.value}: "
                "nothing was added")
    else:
        said = f"queued {job.name} ({job.id}): it starts {starts}"
    return {"id": job.id, "name": job.name, "state": job.state.value, "lane": job.lane,
            "key": job.key, "already_added": already, "not_before": job.not_before,
            "starts": starts, "app_running": app_running, "said": printable(said)}


# -- reading ---------------------------------------------------------------------------


def _tail(path: Path, limit: int) -> tuple[str, int]:
    """The last `limit` bytes of a file as text (undecodable bytes replaced), and its
    size; ("", 0) when it is not there."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            file.seek(max(size - limit, 0))
            data = file.read(limit)
    except FileNotFoundError:
        return "", 0
    return data.decode("utf-8", "replace"), size


def _run_times(history: list[rows.Event], job: rows.Job) -> dict[str, Any]:
    """The last run's timings: when it was claimed, when it ended (if it has)."""
    started = next((event.at for event in reversed(history) if event.kind == "claimed"), None)
    ended = job.updated_at if job.state in ENDED and started is not None else None
    return {"number": job.runs, "started_at": started, "ended_at": ended,
            "seconds": None if started is None or ended is None else round(ended - started, 3)}


def _brief(job: rows.Job) -> dict[str, Any]:
    error = job.last_error
    return {"id": job.id, "name": job.name, "state": job.state.value, "lane": job.lane,
            "attempts": job.attempts, "max_attempts": job.max_attempts,
            "reason": job.reason.value if job.reason else None,
            "last_error": error if error is None or len(error) <= ERROR_SHOWN
            else error[:ERROR_SHOWN - 1] + "…",
            "result": job.result, "not_before": job.not_before, "updated_at": job.updated_at,
            "key": job.key, "source": job.source}


def get_job(home: Home, args: dict[str, Any]) -> dict[str, Any]:
    queue, job = _job(home, args["id"])
    with queue:
        history = queue.history(job.id)
        steps = queue.steps(job.id)
        wait = queue.waiting_for([job.id]).get(job.id)
    log = home.job_logs(job.id, job.name) / f"{job.runs}.log"
    text, size = _tail(log, args.get("log_tail_bytes", GET_TAIL_DEFAULT)) if job.runs else ("", 0)
    return _brief(job) | {
        "created_at": job.created_at, "runs": job.runs,
        "steps": [{"name": step["name"], "occurrence": step["occurrence"],
                   "state": step["state"], "asks": bool(step["ask"]), "run": step["run"],
                   "started_at": step["started_at"], "ended_at": step["ended_at"]}
                  for step in steps],
        "waiting_for": None if wait is None else {
            key: wait[key] for key in ("kind", "until", "question", "choices", "default")},
        "run": _run_times(history, job), "log_tail": text, "log_size": size,
        "log_truncated": size > len(text.encode("utf-8", "replace"))}


def job_states(home: Home, ids: list[str]) -> list[dict[str, Any]]:
    """Each job as wait_job tells it, with the step a running one is in."""
    queue = queue_to_read(home)
    with queue:
        found = []
        for job_id in ids:
            try:
                job = queue.get(job_id)
            except UnknownJob:  # pruned meanwhile: it ended, but how is not known
                found.append({"id": job_id, "name": "?", "state": "pruned"})
                continue
            brief = _brief(job)
            if job.state == State.RUNNING:
                step = queue.running_step(job.id)
                brief["step"] = None if step is None else step[1]
            found.append(brief)
        return found


def resolve(home: Home, given: list[str]) -> list[str]:
    """The ids the words name (SlothError for one that names none), each once."""
    queue = queue_to_read(home)
    with queue:
        return list(dict.fromkeys(find_job(queue, word) for word in given))


def list_jobs(home: Home, args: dict[str, Any]) -> dict[str, Any]:
    queue = reads_only(home)
    if queue is None:
        return {"jobs": [], "said": printable(home.no_queue)}
    where, params = [], []
    for column in ("state", "lane", "name"):
        if column in args:
            where.append(f"{column} = ?")
            params.append(args[column])
    sql = (f"SELECT {JOB_COLUMNS} FROM jobs" + (" WHERE " + " AND ".join(where) if where
                                                else "") + " ORDER BY rowid DESC LIMIT ?")
    try:
        found = rows.jobs(queue, sql, [*params, args.get("limit", 20)])
    finally:
        queue.close()
    return {"jobs": [_brief(job) for job in found]}


def reads_only(home: Home):
    """A read-only connection to the queue, or None where there is none (nothing made)."""
    if not home.readable() or not home.db.exists():
        return None
    return reads.reader(home.db)


def job_log(home: Home, args: dict[str, Any]) -> dict[str, Any]:
    queue, job = _job(home, args["id"])
    queue.close()
    who = f"{job.name} ({job.id})"
    run = args.get("run", job.runs)
    if not job.runs:
        raise SlothError(f"{who} has not run yet: it has no log (wait_job waits for it)")
    if run > job.runs:
        raise SlothError(f"{who} has run {job.runs} time{'' if job.runs == 1 else 's'}: "
                         f"`run` takes 1 to {job.runs}")
    text, size = _tail(run_log(home, job, run), args.get("tail_bytes", LOG_TAIL_DEFAULT))
    return {"id": job.id, "name": job.name, "run": run, "state": job.state.value,
            "size": size, "text": text,
            "truncated": size > len(text.encode("utf-8", "replace"))}


def queue_status(home: Home, args: dict[str, Any]) -> dict[str, Any]:
    counts = reads.read(home, per_lane=True)
    if counts is None:
        counts = reads.empty()
    counts.pop("running_by_lane", None)
    return counts | {"app_running": instance.held(home.lock)}


# -- changing ------------------------------------------------------------------------


def _each(home: Home, given: list[str], act, verb: str, done: str) -> dict[str, Any]:
    """`act(queue, job)` for each job: a result each, the sentence the CLI says."""
    results, failed = [], 0
    with open_queue(home) as queue:
        for word in given:
            try:
                job = queue.get(find_job(queue, word))
                changed, why = act(queue, job)
            except SlothError as exc:
                results.append({"id": word, "ok": False, "said": printable(exc)})
                failed += 1
                continue
            said = f"{done} {job.name} ({job.id})" if changed else \
                f"{job.name} ({job.id}) {why or f'is {job.state.value}; nothing to {verb}'}"
            results.append({"id": job.id, "name": job.name, "ok": changed,
                            "said": printable(said)})
            failed += not changed
    home.ring_doorbell()
    if failed:
        raise Partly(results)
    return {"results": results}


class Partly(SlothError):
    """Some of the jobs could not be changed: each one's sentence, as the error."""

    def __init__(self, results: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(result["said"] for result in results if not result["ok"]))
        self.results = results


def retry_job(home: Home, args: dict[str, Any]) -> dict[str, Any]:
    steps = {"step_done": args.get("step_done"), "forget_from": args.get("from_step"),
             "fresh": bool(args.get("fresh"))}
    if sum(1 for value in steps.values() if value) > 1:
        raise SlothError("retry_job: give one of from_step, fresh and step_done")

    def act(queue, job):
        return spool.retry(queue, job.id, **steps), run_now_instead(job)

    return _each(home, args["ids"], act, "retry", "retried")


def cancel_job(home: Home, args: dict[str, Any]) -> dict[str, Any]:
    return _each(home, args["ids"], lambda queue, job: (queue.cancel(job.id), None),
                 "cancel", "cancelled")


def answer_step(home: Home, args: dict[str, Any]) -> dict[str, Any]:
    """A job's question (`sloth-tray ask`) answered with `choice`, as `sloth-tray
    answer` does; or, with `happened`, a step cut short that asks (step_unsure)."""
    if ("choice" in args) == ("happened" in args):
        raise SlothError("answer_step takes `choice` (for a job that asks a question) or "
                         "`happened` (for a step cut short that asks), one of the two")
    if "choice" in args:
        return _answer(home, args["id"], args["choice"])
    queue, job = _job(home, args["id"])
    with queue:
        steps = queue.steps(job.id)
    if job.state != State.FAILED or job.reason != Reason.STEP_UNSURE:
        raise SlothError(f"{job.name} ({job.id}) is {job.state.value}, not stopped in a step "
                         "that asks: there is nothing to answer")
    unsure = [step["name"] for step in steps if step["state"] == "cut" and step["ask"]]
    name = args.get("step") or (unsure[-1] if unsure else None)
    if name is None:
        raise SlothError(f"{job.name} ({job.id}) has no step cut short that asks")
    with open_queue(home) as queue:
        spool.retry(queue, job.id, **({"step_done": name} if args["happened"] else {}))
    home.ring_doorbell()
    said = (f"step {name!r} of {job.name} ({job.id}) marked done: the job goes on after it"
            if args["happened"] else
            f"{job.name} ({job.id}) retried: step {name!r} runs again")
    return {"id": job.id, "step": name, "happened": args["happened"], "said": printable(said)}


def _answer(home: Home, given: str, choice: str) -> dict[str, Any]:
    """Queue.answer, as the command line's `answer`: the job runs again at once, and
    its ask returns `choice`. Not asking, or not a choice: steps.NotAsking's sentence."""
    with open_queue(home) as queue:
        job_id = find_job(queue, given)
        step = queue.answer(job_id, choice)
    home.ring_doorbell()
    said = f"answered {choice!r} to {step.question!r}: {job_id} runs again now"
    return {"id": job_id, "step": step.name, "question": step.question, "choice": choice,
            "said": printable(said)}


# -- resources ---------------------------------------------------------------------------

JOB_URI = re.compile(r"sloth://jobs/([^/]+)(/log)?")


def job_resource(home: Home, job_id: str) -> str:
    """The job as `show --json` gives it."""
    queue, job = _job(home, job_id)
    with queue:
        history = queue.history(job.id)
        steps = queue.steps(job.id)
    logs = home.job_logs(job.id, job.name)
    return json.dumps(job.as_dict() | {"history": [event.as_dict() for event in history],
                                       "steps": steps, "logs": str(logs)},
                      ensure_ascii=False, indent=2)


def log_resource(home: Home, job_id: str) -> str:
    """The last run's log (its end, at most LOG_RESOURCE_MAX bytes)."""
    queue, job = _job(home, job_id)
    queue.close()
    if not job.runs:
        return ""
    return _tail(home.job_logs(job.id, job.name) / f"{job.runs}.log", LOG_RESOURCE_MAX)[0]


def fingerprints(home: Home, ids: set[str]) -> dict[str, tuple]:
    """What says a job changed, for each of `ids` still there."""
    db = reads_only(home)
    if db is None or not ids:
        return {}
    try:
        marks = ", ".join("?" for _ in ids)
        return {row[0]: tuple(row[1:]) for row in db.execute(
            f"SELECT id, state, updated_at, runs, attempts FROM jobs WHERE id IN ({marks})",
            sorted(ids))}
    finally:
        db.close()


def recent(home: Home, limit: int = 50) -> list[rows.Job]:
    """The newest jobs, for resources/list."""
    db = reads_only(home)
    if db is None:
        return []
    try:
        return rows.jobs(db, f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY rowid DESC LIMIT ?",
                         (limit,))
    finally:
        db.close()


TOOLS = {"add_job": add_job, "get_job": get_job, "list_jobs": list_jobs, "job_log": job_log,
         "retry_job": retry_job, "cancel_job": cancel_job, "queue_status": queue_status,
         "answer_step": answer_step}
