"""`sloth-tray sleep DURATION | --until TIME` and `sloth-tray ask QUESTION`: steps of a
job's shell script that wait with no process (for_jobs/sloth_step.py keeps the record).

Inside a job, the first call records the wait and the run ends there: the app stops
the job's processes and the job waits in the queue, for its wake time or an answer.
Then it runs again from the top, its done steps skipped: the sleep returns at once,
the ask prints the answer and exits 0. Outside a job, `sleep` sleeps and `ask` asks on
the terminal.

Loaded with the command line's fast path (as `step`): only the standard library,
sloth_step and the time words.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta

from sloth_tray.cli.step import REFUSED, USAGE, say
from sloth_tray.for_jobs import sloth_step
from sloth_tray.timefmt import parse_duration

_CLOCK = re.compile(r"(\d{1,2}):(\d\d)(?::(\d\d))?")
UNTIL_FORM = "a local time: 14:00 (the next one), or a date and time: 2026-03-02 14:00"


def wake_time(text: str, now: float) -> float:
    """--until's TIME as a moment: HH:MM[:SS] is the next such time from `now`, a date
    and time is that one. ValueError says the forms."""
    text = text.strip()
    match = _CLOCK.fullmatch(text)
    if match:
        hour, minute, second = (int(part or 0) for part in match.groups())
        if hour > 23 or minute > 59 or second > 59:
            raise ValueError(f"{text!r} is not a time of day: use {UNTIL_FORM}")
        today = datetime.fromtimestamp(now)
        then = today.replace(hour=hour, minute=minute, second=second, microsecond=0)
        if then.timestamp() <= now:
            then += timedelta(days=1)
        return then.timestamp()
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use {UNTIL_FORM}") from None


def main_sleep(duration: str | None, until: str | None, name: str) -> int:
    if (duration is None) == (until is None):
        say("give how long or until when: sloth-tray sleep DURATION, or sloth-tray sleep "
            "--until TIME")
        return USAGE
    try:
        now = time.time()
        when = now + parse_duration(duration) if duration is not None else wake_time(until, now)
    except ValueError as exc:
        say(exc)
        return USAGE
    try:
        sloth_step.sleep_until(when, name=name)
    except ValueError as exc:
        say(exc)
        return USAGE
    except sloth_step.StepError as exc:
        say(exc)
        return REFUSED
    return 0


def main_ask(question: str, choices: str, default: str | None, timeout: float | None,
             name: str | None) -> int:
    words = [word.strip() for word in choices.split(",")]
    try:
        answer = sloth_step.ask(question, words, default=default, timeout=timeout, name=name)
    except ValueError as exc:
        say(exc)
        return USAGE
    except sloth_step.StepError as exc:
        say(exc)
        return REFUSED
    print(answer, flush=True)
    return 0
