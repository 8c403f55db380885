"""What a job that waits in a step waits for (a sleep's end, a question's answer), as
the looks say it: `status`, `list`, `show`, the tray's snapshot.

Apart from steps.py, which writes the steps: a glance reads these few lines, and
loading the steps' whole model cost `status` a fortieth of its time.
"""

import json
import sqlite3
import time

NEVER = 253402300799.0  # 9999-12-31: an ask with no timeout is due only once answered


def waiting_for(db: sqlite3.Connection, jobs: list[str] | None = None) -> dict[str, dict]:
    """For each pending job (of `jobs`; None: all) that waits in a step: what for, as
    `show --json` says it: {"kind": "time"|"answer", "until", "question", "choices",
    "default", "step", "name", "words"}, in the order they began to wait."""
    found = {}
    which = "" if jobs is None else "steps.job IN (SELECT value FROM json_each(:jobs)) AND "
    for job, job_name, name, kind, wake_at, question, choices, default in db.execute(
            "SELECT steps.job, jobs.name, steps.name, steps.kind, steps.wake_at, "
            "steps.question, steps.choices, steps.default_choice FROM steps JOIN jobs "
            f"ON jobs.id = steps.job WHERE {which}jobs.state = 'pending' "
            "AND steps.state = 'waiting' AND steps.answer IS NULL ORDER BY steps.rowid",
            {"jobs": json.dumps(jobs or [])}):
        found[job] = {"kind": "time" if kind == "sleep" else "answer", "until": wake_at,
                      "question": question, "choices": json.loads(choices) if choices else None,
                      "default": default, "step": name, "name": job_name,
                      "words": words_for(kind, wake_at, question)}
    return found


def words_for(kind: str, wake_at: float | None, question: str | None) -> str:
    """`sleeping until 14:00`, `asking "Send it?"`."""
    if kind == "sleep":
        return f"sleeping until {short_time(wake_at or 0)}"
    return f"asking {json.dumps(question, ensure_ascii=False)}"


def short_time(moment: float) -> str:
    """14:00 today (14:00:05 when not on the minute), else with its date."""
    local = time.localtime(moment)
    clock = "%H:%M" if local.tm_sec == 0 else "%H:%M:%S"
    if time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d"):
        return time.strftime(clock, local)
    return time.strftime(f"%Y-%m-%d {clock}", local)
