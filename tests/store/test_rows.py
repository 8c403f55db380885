"""The seams queue.py stands on: a job row read by column name (rows.py), the one
INSERT of a job row, a push's options checked as a header's (jobs/header.py), and a
series' follow-ups as functions of a connection (calendar.py)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC

import pytest

from sloth_tray.errors import SlothError
from sloth_tray.jobs.header import checked_options
from sloth_tray.store import calendar, rows
from sloth_tray.store.queue import Queue, State


def test_a_job_is_read_by_column_name_whatever_order_the_columns_come_in(queue):
    job_id = queue.push("tidy", script="/tmp/tidy.sh", options={"timeout": 60})
    columns = ", ".join(reversed(rows.JOB_COLUMNS.split(", ")))
    with queue._autocommit() as db:
        (job,) = rows.jobs(db, f"SELECT {columns}, 'extra' AS more FROM jobs WHERE id = ?",
                           (job_id,))
    assert job == queue.get(job_id)
    assert (job.name, job.state, job.options, job.child) == (
        "tidy", State.PENDING, {"timeout": 60}, None)


def test_a_job_is_a_frozen_record_equal_by_its_fields(queue):
    """What a dataclass(frozen=True) gave: fields in order, defaults, equality and a
    hash of the fields (its options and child left out of the hash), no assignment."""
    job = queue.get(queue.push("tidy", options={"timeout": 60}))
    again = rows.Job(**{name: getattr(job, name) for name in rows.Job.FIELDS})
    assert again == job and hash(again) == hash(job) and again is not job
    assert rows.Job(*[getattr(job, name) for name in rows.Job.FIELDS]) == job
    changed = rows.Job(**{**job.as_dict(), "state": job.state, "reason": None,
                          "options": {"timeout": 61}})
    assert changed != job and hash(changed) == hash(job)  # options are not hashed
    assert job != job.as_dict() and job != rows.Event(1.0, "x", "y")
    assert list(job.as_dict()) == list(rows.Job.FIELDS) == rows.JOB_COLUMNS.split(", ")
    assert repr(job).startswith(f"Job(id={job.id!r}, name='tidy', state=<State.PENDING:")
    with pytest.raises(AttributeError, match="cannot assign to field 'name'"):
        job.name = "other"
    with pytest.raises(AttributeError):
        del job.name
    minimal = rows.Job("0123456789ab", "n", State.PENDING, 0, 5, 0.0, None, None, None,
                       None, None, {}, 0.0, 0.0)
    assert (minimal.child, minimal.reason, minimal.runs, minimal.lane, minimal.key,
            minimal.source) == (None, None, 0, "main", None, None)
    event = rows.Event(1.5, "added", "from the shell")
    assert event == rows.Event(1.5, "added", "from the shell")
    assert {event: 1}[rows.Event(1.5, "added", "from the shell")] == 1
    assert repr(event) == "Event(at=1.5, kind='added', detail='from the shell')"


def test_named_rows_leave_the_connections_own_rows_tuples(queue):
    queue.push("tidy")
    with queue._autocommit() as db:
        rows.named_rows(db, "SELECT id FROM jobs")
        assert type(db.execute("SELECT id FROM jobs").fetchone()) is tuple


def test_insert_job_draws_again_an_id_taken_and_refuses_a_given_one(queue, monkeypatch):
    taken = queue.push("first")
    drawn = iter([taken, "0123456789ab"])
    monkeypatch.setattr(rows, "new_job_id", lambda: next(drawn))
    columns = {"name": "second", "state": "pending", "max_attempts": 1, "not_before": 0.0,
               "created_at": 0.0, "updated_at": 0.0}
    with queue._autocommit() as db:
        assert rows.insert_job(db, **columns) == "0123456789ab"
        with pytest.raises(SlothError, match=f"already a job with id {taken}"):
            rows.insert_job(db, taken, **columns)
    assert queue.get(taken).name == "first"


def test_a_pushs_options_are_read_as_a_headers_and_bad_ones_refused():
    assert checked_options({"every": "1h", "at": "09:00", "other": 1}) == {
        "every": 3600.0, "at": "09:00", "other": 1}
    with pytest.raises(SlothError, match="the job's options: bad value .* for timeout"):
        checked_options({"timeout": -1})
    with pytest.raises(SlothError, match="the job's options: bad value .* for cron"):
        checked_options({"cron": "not a cron"})


def test_calendar_asks_for_the_machines_zone_only_when_a_calendar_needs_it(tmp_path, clock):
    def local():
        raise AssertionError("the zone was read")

    assert calendar.first_time({"every": 60.0}, clock.now, local) is None
    assert calendar.zone_of({"every": 60.0}, local) is UTC
    options = {"at": "09:00"}
    first = calendar.first_time(options, clock.now, lambda: UTC)
    assert options["scheduled"] == first > clock.now


def test_following_a_series_run_inserts_its_next_run_once(tmp_path, clock):
    with Queue(tmp_path / "queue.db", clock=clock) as queue:
        job_id = queue.push("tick", options={"every": 60.0})
        with queue._transaction() as db:
            def ended() -> sqlite3.Row:
                return rows.named_rows(db, f"SELECT {calendar.FOLLOWED_FROM} FROM jobs "
                                           "WHERE id = ?", (job_id,))[0]

            for _ in range(2):
                calendar.follow_series_run(db, job_id, clock.now, lambda: UTC, ended())
            row = ended()
        (follower,) = [job for job in queue.jobs() if job.id != job_id]
        assert follower.options["scheduled"] == follower.not_before
        assert json.loads(row["history"]) and row["followed"] == 1


def test_rows_history_appends_events_stamped_now():
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE jobs (id TEXT, history TEXT)")
    db.execute("INSERT INTO jobs VALUES ('a', '[]')")
    history, params = rows.history(("one", "first"), ("two", "second"))
    db.execute(f"UPDATE jobs SET {history} WHERE id = 'a'", {"now": 5.0, **params})
    assert json.loads(db.execute("SELECT history FROM jobs").fetchone()[0]) == [
        [5.0, "one", "first"], [5.0, "two", "second"]]
