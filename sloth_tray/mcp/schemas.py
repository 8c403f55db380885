"""Each tool's JSON schema and its description, written for a model; and `checked`,
which says in one sentence what is wrong with a call's arguments (a missing one, a
wrong type, one the tool does not take), before the tool does anything.

Standard library only: the schemas are plain dicts, and the check reads the few
keywords they use (type, enum, minimum, maximum, minLength, maxLength, minItems,
maxItems, items, required, additionalProperties)."""

from __future__ import annotations

from typing import Any

from sloth_tray.errors import SlothError

WAIT_DEFAULT, WAIT_MAX = 25, 55  # seconds: under the 60 s clients give a request
LOG_TAIL_MAX = 64 * 1024  # bytes of a log a tool returns, at most
IDS_MAX = 50  # ids in one call
STATES = ["pending", "running", "done", "failed", "cancelled"]

_DURATION = {"type": ["number", "string"],
             "description": "seconds, or a duration such as \"90s\", \"10m\", \"2h\", \"1d\""}
_ID = {"type": "string", "minLength": 1, "maxLength": 200,
       "description": "a job id (12 hex characters, or enough of its start to be unique), "
                      "or a job's name (its newest job)"}
_IDS = {"type": "array", "items": _ID, "minItems": 1, "maxItems": IDS_MAX}


def _tool(description: str, properties: dict[str, Any], required: tuple[str, ...] = (),
          *, read_only: bool = False) -> dict[str, Any]:
    return {"description": description, "read_only": read_only,
            "input_schema": {"type": "object", "properties": properties,
                             "required": list(required), "additionalProperties": False}}


TOOLS: dict[str, dict[str, Any]] = {
    "add_job": _tool(
        "Hand a long job to the sloth-tray app on this computer and return at once. The "
        "app runs it in the background, one job at a time per lane, and it survives the "
        "lid closing, sleep, crashes and restarts: a step recorded done (`sloth-tray step "
        "NAME -- COMMAND` inside a script) is never run twice. Give either `command` (a "
        "list of words, run as given) or `script` (the whole text of a script, starting "
        "with its #! line). Always give a `key` (your own unique name for this hand-off, "
        "such as \"summarise-thread-1234\"): if your call timed out or you were "
        "restarted, calling add_job again with the same key returns the job already "
        "added (whatever its state) and adds nothing. Returns the job's id, its state "
        "and when it will start; then use wait_job or get_job with the id. When no app "
        "runs on this computer the job waits until one starts.",
        {"command": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                     "description": "the command and its arguments, as separate words: "
                                    "[\"python3\", \"summarise.py\", \"--thread\", \"1234\"]"},
         "script": {"type": "string", "description": "a script's whole text, starting with "
                                                     "its #! line (#!/bin/sh, "
                                                     "#!/usr/bin/env python3)"},
         "key": {"type": "string", "minLength": 1,
                 "description": "your unique name for this job (at most 200 characters): "
                                "the same key again returns the same job"},
         "name": {"type": "string", "minLength": 1, "maxLength": 200,
                  "description": "a short name people see in the tray and the list"},
         "lane": {"type": "string", "description": "the lane to run in, one job at a time "
                                                   "beside the other lanes (default main)"},
         "cwd": {"type": "string", "description": "the absolute folder it runs in "
                                                  "(default: the user's home folder)"},
         "delay": {**_DURATION, "description": "wait this long before the first run: "
                                               + _DURATION["description"]},
         "max_attempts": {"type": "integer", "minimum": 1, "maximum": 1000,
                          "description": "tries before it fails for good (default 5)"},
         "timeout": {**_DURATION, "description": "stop a run that takes longer: "
                                                 + _DURATION["description"]},
         "every": {**_DURATION, "description": "repeat, this long after each run started: "
                                               + _DURATION["description"]},
         "at": {"type": "string", "description": "repeat at these times, as \"09:00\", "
                                                 "\"mon-fri@09:00\" or \"09:00,17:30\""},
         "cron": {"type": "string", "description": "repeat on a cron schedule, five fields: "
                                                   "\"30 7 * * 1-5\""}}),
    "get_job": _tool(
        "One job as it is now: its state (pending, running, done, failed, cancelled), "
        "attempts, why it failed (`reason`, `last_error`), its steps and how far they got, "
        "what a waiting job waits for (`waiting_for`: a time, or an answer to its "
        "`question` from `choices`, for answer_step), its last run's timings, and the end "
        "of its log (at most 64 KiB).",
        {"id": _ID, "log_tail_bytes": {"type": "integer", "minimum": 0,
                                       "maximum": LOG_TAIL_MAX,
                                       "description": "bytes of the log's end (default "
                                                      "4096, at most 65536)"}},
        ("id",), read_only=True),
    "wait_job": _tool(
        "Wait until the jobs have ended (done, failed or cancelled), or until `timeout_s`, "
        "then return each one's state. It costs nothing while it waits, and returns as "
        "soon as all have ended. Not ended yet at the timeout is not an error: call it "
        "again. Cancelling this call ends the wait, never the jobs.",
        {"ids": _IDS, "timeout_s": {"type": "number", "minimum": 0, "maximum": WAIT_MAX,
                                    "description": f"seconds to wait at most (default "
                                                   f"{WAIT_DEFAULT}, at most {WAIT_MAX})"}},
        ("ids",), read_only=True),
    "list_jobs": _tool(
        "The jobs, newest first, with their state, lane and key.",
        {"state": {"type": "string", "enum": STATES},
         "lane": {"type": "string"},
         "name": {"type": "string", "description": "only jobs of this exact name"},
         "limit": {"type": "integer", "minimum": 1, "maximum": 200,
                   "description": "at most this many (default 20, at most 200)"}},
        read_only=True),
    "job_log": _tool(
        "The output of a job's run (its last run unless `run` says which), its end at "
        "most 64 KiB.",
        {"id": _ID, "run": {"type": "integer", "minimum": 1,
                            "description": "which run: 1 is the first (default the last)"},
         "tail_bytes": {"type": "integer", "minimum": 0, "maximum": LOG_TAIL_MAX,
                        "description": "bytes of the log's end (default 16384, at most "
                                       "65536)"}},
        ("id",), read_only=True),
    "retry_job": _tool(
        "Put done, failed or cancelled jobs back in line, due now. The steps they recorded "
        "done are skipped, unless `from_step` forgets that step and every later one or "
        "`fresh` forgets them all; `step_done` says a step that was cut short did happen "
        "(it is marked done, and the job goes on after it).",
        {"ids": _IDS, "from_step": {"type": "string", "minLength": 1},
         "fresh": {"type": "boolean"}, "step_done": {"type": "string", "minLength": 1}},
        ("ids",)),
    "cancel_job": _tool(
        "Cancel pending, running or failed jobs (a running one is stopped).",
        {"ids": _IDS}, ("ids",)),
    "queue_status": _tool(
        "The queue at a glance: how many jobs are in each state, each lane's counts, "
        "whether the queue is paused, the job running now and the next, and whether an "
        "app runs on this computer to run them (`app_running`).",
        {}, read_only=True),
    "answer_step": _tool(
        "Answer a job that waits for a person's word. A job asking a question (`sloth-tray "
        "ask`; get_job's `waiting_for` has its `question` and `choices`): give `choice`, "
        "one of its choices, and it runs on at once with that answer. A job that stopped "
        "in a step that asks (its reason is step_unsure: the run ended while the step "
        "ran, so nobody knows whether it happened): give `happened`; true marks the step "
        "done and the job goes on after it, false runs it again.",
        {"id": _ID, "choice": {"type": "string", "minLength": 1,
                               "description": "one of the question's choices"},
         "happened": {"type": "boolean"},
         "step": {"type": "string", "minLength": 1,
                  "description": "with `happened`: the step's name (default: the one the "
                                 "job stopped in)"}},
        ("id",)),
}

_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
          "array": list, "object": dict}
_WORDS = {"string": "text", "integer": "a whole number", "number": "a number",
          "boolean": "true or false", "array": "a list", "object": "an object"}


def checked(tool: str, arguments: Any) -> dict[str, Any]:
    """The arguments, when they are what the tool takes; else SlothError, one sentence."""
    if tool not in TOOLS:
        raise SlothError(f"there is no tool {tool!r} (tools: {', '.join(TOOLS)})")
    schema = TOOLS[tool]["input_schema"]
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise SlothError(f"{tool} takes its arguments as an object")
    for name in arguments:
        if name not in schema["properties"]:
            known = ", ".join(schema["properties"]) or "none"
            raise SlothError(f"{tool} takes no argument {name!r} (it takes: {known})")
    for name in schema["required"]:
        if arguments.get(name) is None:
            raise SlothError(f"{tool} needs `{name}`")
    for name, value in arguments.items():
        if value is not None:
            _check(f"{tool}: `{name}`", schema["properties"][name], value)
    return {name: int(value) if schema["properties"][name]["type"] == "integer" else value
            for name, value in arguments.items() if value is not None}


def _check(what: str, schema: dict[str, Any], value: Any) -> None:
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if not any(_is(value, kind) for kind in kinds):
        wanted = " or ".join(_WORDS[kind] for kind in kinds)
        raise SlothError(f"{what} is {wanted}, not {_shown(value)}")
    if "enum" in schema and value not in schema["enum"]:
        raise SlothError(f"{what} is one of {', '.join(schema['enum'])}, not {_shown(value)}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise SlothError(f"{what} is {bounds}, not {_shown(value)}")
    if isinstance(value, str | list):
        unit = "character" if isinstance(value, str) else "item"
        low = schema.get("minLength", schema.get("minItems"))
        high = schema.get("maxLength", schema.get("maxItems"))
        if low is not None and len(value) < low:
            raise SlothError(f"{what} cannot be empty" if low == 1 else
                             f"{what} has at least {low} {unit}s")
        if high is not None and len(value) > high:
            raise SlothError(f"{what} has at most {high} {unit}s (this one has {len(value)})")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _check(f"{what}[{index}]", schema["items"], item)


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES[kind])


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"
