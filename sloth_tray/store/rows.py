"""A job's row: what it reads as (`Job`, its `Event`s), read by column name; how an
event is appended to its history; and the one INSERT of a new job row.
"""

import json
import os
import re
import sqlite3

from sloth_tray.errors import SlothError
from sloth_tray.store.reasons import Reason
from sloth_tray.store.states import State

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from typing import Any


class Record:
    """A row as read, frozen: equal to a record of its class with the same fields, its
    hash of the fields but UNHASHED, and shown as `Job(id='...', ...)`. Written out,
    not a dataclass: dataclasses (and the inspect, ast and typing it loads, and the code
    it compiles at import) cost `list` and `show` more than the rest of their work."""

    FIELDS: tuple[str, ...] = ()
    UNHASHED: tuple[str, ...] = ()

    def _values(self) -> "tuple[Any, ...]":
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in self.FIELDS
                          if name not in self.UNHASHED))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{self.__class__.__qualname__}({fields})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")


class Job(Record):
    FIELDS = ("id", "name", "state", "attempts", "max_attempts", "not_before",
              "lease_owner", "lease_until", "last_error", "result", "script", "options",
              "created_at", "updated_at", "child", "reason", "runs", "lane", "key", "source")
    UNHASHED = ("options", "child")
    __match_args__ = FIELDS

    id: str
    name: str
    state: State
    attempts: int
    max_attempts: int
    not_before: float
    lease_owner: str | None
    lease_until: float | None
    last_error: str | None
    result: str | None
    script: str | None
    options: "dict[str, Any]"
    created_at: float
    updated_at: float
    # The running attempt's process (pid, pgid, start time, run token), so a
    # later start-up can stop an orphan without ever killing a reused pid.
    child: "dict[str, Any] | None"
    reason: Reason | None  # why the last attempt failed (see Reason)
    runs: int  # runs ever started, across retries; names the log of each
    lane: str  # the lane it runs in, one job at a time (store/lanes.py)
    key: str | None  # its adder's own name for it: adding the key again adds nothing
    source: str | None  # who added it: DROPPED, SHELL, or an agent's name

    def __init__(self, id: str, name: str, state: State, attempts: int, max_attempts: int,
                 not_before: float, lease_owner: str | None, lease_until: float | None,
                 last_error: str | None, result: str | None, script: str | None,
                 options: "dict[str, Any]", created_at: float, updated_at: float,
                 child: "dict[str, Any] | None" = None, reason: Reason | None = None,
                 runs: int = 0, lane: str = "main", key: str | None = None,
                 source: str | None = None) -> None:
        vars(self).update(
            id=id, name=name, state=state, attempts=attempts, max_attempts=max_attempts,
            not_before=not_before, lease_owner=lease_owner, lease_until=lease_until,
            last_error=last_error, result=result, script=script, options=options,
            created_at=created_at, updated_at=updated_at, child=child, reason=reason,
            runs=runs, lane=lane, key=key, source=source)

    @property
    def lease_seconds(self) -> float | None:
        """The job's own lease (its `lease=` option), if it has one."""
        lease = self.options.get("lease")
        return float(lease) if lease else None

    def as_dict(self) -> "dict[str, Any]":
        data = {name: getattr(self, name) for name in self.FIELDS}
        data["state"] = self.state.value
        data["reason"] = self.reason.value if self.reason else None
        return data


class Event(Record):
    FIELDS = ("at", "kind", "detail")
    __match_args__ = FIELDS

    at: float
    kind: str
    detail: str

    def __init__(self, at: float, kind: str, detail: str) -> None:
        vars(self).update(at=at, kind=kind, detail=detail)

    def as_dict(self) -> "dict[str, Any]":
        return {"at": self.at, "kind": self.kind, "detail": self.detail}


# The columns a Job is read from (a statement selecting them may select more).
JOB_COLUMNS = ", ".join(Job.FIELDS)


def job(row: "sqlite3.Row | dict[str, Any]") -> Job:
    """The Job a row holds, read by column name."""
    return Job(
        id=row["id"], name=row["name"], state=State(row["state"]),
        attempts=row["attempts"], max_attempts=row["max_attempts"],
        not_before=row["not_before"], lease_owner=row["lease_owner"],
        lease_until=row["lease_until"], last_error=row["last_error"], result=row["result"],
        script=row["script"], options=json.loads(row["options"]),
        created_at=row["created_at"], updated_at=row["updated_at"],
        child=json.loads(row["child"]) if row["child"] else None,
        reason=Reason(row["reason"]) if row["reason"] else None, runs=row["runs"],
        lane=row["lane"], key=row["key"], source=row["source"],
    )


def named_rows(db: sqlite3.Connection, sql: str, params: "Any" = ()) -> list[sqlite3.Row]:
    """Every row the statement gives, each readable by column name (on a cursor of its
    own: the connection's other statements still read tuples). All of them: a write
    (UPDATE ... RETURNING) runs to its end."""
    cursor = db.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(sql, params).fetchall()


def jobs(db: sqlite3.Connection, sql: str, params: "Any" = ()) -> list[Job]:
    """The Jobs a statement that selects (or returns) JOB_COLUMNS gives. Each row is
    read by name from a dict: a claim returns one, and sqlite3.Row finds a name by
    comparing it with each column's in turn."""
    cursor = db.execute(sql, params)
    found = cursor.fetchall()  # all of them: a write (UPDATE ... RETURNING) runs to its end
    names = [column[0] for column in cursor.description]
    return [job(dict(zip(names, values, strict=True))) for values in found]


def history(*events: tuple[str, str]) -> tuple[str, dict[str, str]]:
    """An assignment that appends (kind, detail) events, stamped :now, to `history`,
    and the parameters it binds."""
    parts, params = [], {}
    for i, (kind, detail) in enumerate(events):
        parts.append(f"'$[#]', json_array(:now, :kind{i}, :detail{i})")
        params[f"kind{i}"], params[f"detail{i}"] = kind, detail
    return f"history = json_insert(history, {', '.join(parts)})", params


VALID_ID = re.compile(r"[0-9a-f]{12}")

DROPPED, SHELL = "dropped", "shell"  # a job's source: the jobs folder, `sloth-tray add`
KEY_MAX = 200  # characters of a key


def key_problem(key: str) -> str | None:
    """Why `key` cannot be a job's key, in one sentence; None when it can."""
    if not key:
        return "a key cannot be empty"
    if len(key) > KEY_MAX:
        return f"a key is at most {KEY_MAX} characters (this one has {len(key)})"
    if not key.isprintable():
        return "a key cannot hold control characters"
    return None


def new_job_id() -> str:
    return os.urandom(6).hex()


def insert_job(db: sqlite3.Connection, job_id: str | None = None, **columns: "Any") -> str:
    """Insert one job row (`columns` beside its id); returns its id. A drawn id that
    is taken already (1 in 2**48) is drawn again; a given one (`job_id`) raises.

    With a `key` that a job has already, nothing is inserted and that job's id is
    returned: the unique index decides, inside this one statement, so two adders
    racing with one key make one job."""
    names = ", ".join(["id", *columns])
    values = ", ".join(f":{name}" for name in ["id", *columns])
    keyed = columns.get("key") is not None
    upsert = " ON CONFLICT(key) WHERE key IS NOT NULL DO NOTHING" if keyed else ""
    while True:
        chosen = job_id or new_job_id()
        try:
            cursor = db.execute(f"INSERT INTO jobs({names}) VALUES ({values}){upsert}",
                                {"id": chosen, **columns})
            if keyed and cursor.rowcount == 0:  # the key is another job's: that job it is
                return db.execute("SELECT id FROM jobs WHERE key = ?",
                                  (columns["key"],)).fetchone()[0]
            return chosen
        except sqlite3.IntegrityError:
            if job_id:
                raise SlothError(f"there is already a job with id {job_id}") from None
            # else: an id drawn twice: draw again
