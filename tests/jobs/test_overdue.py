"""Overdue warnings: a recurring job whose last success is older than its period plus a
grace shows in the snapshot, the icon, the menu, one notification and `status --json`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from helpers.clock import FakeClock
from helpers.controls import Recorder

from sloth_tray.daemon.alarm import Alarm
from sloth_tray.daemon.engine import Engine
from sloth_tray.daemon.snapshot import FailedJob, RunningJob, Snapshot
from sloth_tray.jobs import overdue
from sloth_tray.jobs.header import BadJobFile, parse_options
from sloth_tray.jobs.overdue import OverdueJob, Series
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State
from sloth_tray.tray import announce, presenter
from sloth_tray.tray.icons import Look

UTC = ZoneInfo("UTC")
HOUR = 3600.0
DAY = 86400.0
OWNER = "test:1"


@pytest.fixture
def q(tmp_path, clock):
    queue = Queue(tmp_path / "queue.db", clock=clock, tz=UTC, max_attempts=1)
    yield queue
    queue.close()


def run_once(queue: Queue, *, error: str | None = None) -> str:
    """Claim the due run and end it: done, or failed for good with `error`."""
    job = queue.claim(OWNER)
    assert job is not None, "a run should be due"
    if error is None:
        assert queue.complete(job.id, OWNER)
    else:
        assert queue.fail(job.id, OWNER, error) == State.FAILED
    return job.id


def verdict(queue: Queue) -> overdue.Verdict:
    return overdue.find(queue.recurring_series(), queue.clock(), UTC, paused=queue.paused())


def utc(*fields: int) -> float:
    return datetime(*fields, tzinfo=UTC).timestamp()


# -- when a series is overdue ----------------------------------------------------------


def test_an_every_series_that_stops_succeeding_is_overdue_after_period_and_grace_not_before(
        q, clock):
    q.push("backup", script="/spool/backup.sh", options={"every": HOUR})
    last_success = clock.now
    run_once(q)
    clock.advance(HOUR)
    run_once(q, error="rsync: connection refused")
    deadline = last_success + HOUR + HOUR / 2  # the default grace: half the period

    clock.now = deadline - 1
    early = verdict(q)
    assert early.overdue == ()
    assert early.next_change == deadline

    clock.now = deadline
    assert verdict(q).overdue == (
        OverdueJob("backup", last_success, "failing: rsync: connection refused"),)


@pytest.mark.parametrize("options, late_after", [
    ({"every": 120}, 120 + 300),  # half of 2 min is 1 min: the grace is at least 5 min
    ({"every": HOUR}, HOUR + HOUR / 2),  # half the period
    ({"every": DAY}, DAY + DAY / 2),
    ({"every": DAY, "grace": 60}, DAY + 60),  # grace= wins
])
def test_the_default_grace_is_half_the_period_and_at_least_five_minutes(options, late_after):
    series = Series("job", None, options, last_success=5000.0, first_created=10.0)
    assert overdue.deadline_of(series, UTC) == 5000.0 + late_after
    assert overdue.find([series], 5000.0 + late_after - 1, UTC).overdue == ()
    assert [job.name for job in overdue.find([series], 5000.0 + late_after, UTC).overdue] \
        == ["job"]


def test_a_calendar_period_is_the_gap_between_its_times_around_the_last_success(q, clock):
    """mon-fri@09:00: after a Friday run the next is Monday's (3 days), after a Tuesday
    run Wednesday's (1 day); the grace is half of each."""
    clock.now = utc(2026, 11, 27, 8, 0)  # a Friday
    q.push("report", script="/spool/report.sh", options={"at": "mon-fri@09:00"})
    clock.now = utc(2026, 11, 27, 9, 0, 30)
    run_once(q)
    friday_success = clock.now
    deadline = friday_success + 3 * DAY + 1.5 * DAY
    clock.now = utc(2026, 11, 28, 12, 0)  # Saturday: nothing is late
    weekend = verdict(q)
    assert weekend.overdue == () and weekend.next_change == deadline
    clock.now = deadline
    assert [(job.name, job.since) for job in verdict(q).overdue] == [("report",
                                                                     friday_success)]

    tuesday = utc(2026, 12, 1, 9, 1)
    series = Series("report", None, {"at": "mon-fri 09:00"}, tuesday, 0.0)
    assert overdue.deadline_of(series, UTC) == tuesday + DAY + DAY / 2
    cron = Series("weekly", None, {"cron": "0 7 * * 1"}, tuesday, 0.0)
    assert overdue.deadline_of(cron, UTC) == tuesday + 7 * DAY + 3.5 * DAY


def test_a_series_that_never_succeeded_counts_from_its_first_run(q, clock):
    created = clock.now
    q.push("sync", script="/spool/sync.sh", options={"every": HOUR})
    clock.advance(10)
    run_once(q, error="no network")
    clock.now = created + HOUR + HOUR / 2 - 1
    assert verdict(q).overdue == ()
    clock.now = created + HOUR + HOUR / 2
    assert verdict(q).overdue == (
        OverdueJob("sync", created, "failing: no network", ever_succeeded=False),)


def test_paused_is_given_as_the_reason_and_otherwise_nothing_is_claimed(q, clock):
    q.push("backup", script="/spool/backup.sh", options={"every": HOUR})
    run_once(q)
    clock.advance(2 * HOUR)  # the next run is due but nothing ran it
    assert [job.reason for job in verdict(q).overdue] == [""]
    q.set_paused(True)
    assert [job.reason for job in verdict(q).overdue] == ["paused"]


def test_a_success_clears_it_and_a_new_delay_is_a_new_overdue_spell(q, clock):
    q.push("backup", script="/spool/backup.sh", options={"every": HOUR})
    first = clock.now
    run_once(q)
    clock.advance(HOUR)
    run_once(q, error="disk full")
    clock.now = first + 1.5 * HOUR
    assert [job.since for job in verdict(q).overdue] == [first]
    clock.now = first + 2 * HOUR
    run_once(q)
    second = clock.now
    assert verdict(q).overdue == ()
    clock.now = second + 1.5 * HOUR
    assert verdict(q).overdue == (OverdueJob("backup", second, ""),)


def test_a_pruned_success_still_counts_as_one(q, clock):
    q.push("backup", script="/spool/backup.sh", options={"every": HOUR})
    run_once(q)
    clock.advance(HOUR)
    run_once(q)
    last = clock.now
    q.prune(before=clock.now + 1)  # every done run is gone; the waiting one stays
    clock.now = last + 1.5 * HOUR
    assert verdict(q).overdue == (OverdueJob("backup", last, ""),)


def test_a_cancelled_series_and_a_one_off_job_are_never_overdue(q, clock):
    q.push("once", script="/spool/once.sh")
    job_id = q.push("gone", script="/spool/gone.sh", options={"every": HOUR})
    q.cancel(job_id)
    clock.advance(30 * DAY)
    assert q.recurring_series() == []
    assert verdict(q) == overdue.Verdict((), None)


# -- the header's grace= ----------------------------------------------------------------


def test_grace_is_a_duration_beside_a_schedule_and_one_sentence_otherwise():
    assert parse_options(b"# sloth: every=1h grace=10m\n")["grace"] == 600
    assert parse_options(b'# sloth: at=09:00 grace=2d\n')["grace"] == 2 * DAY
    with pytest.raises(BadJobFile) as alone:
        parse_options(b"# sloth: grace=10m\n", "job.sh")
    assert str(alone.value) == ("job.sh, line 1: grace applies only to every=, at= and cron= "
                                "schedules: add one, or remove grace=")
    with pytest.raises(BadJobFile) as short:
        parse_options(b"# sloth: every=1h grace=10s\n", "job.sh")
    assert str(short.value).startswith("job.sh, line 1: bad value '10s' for grace: use ")
    assert "between 1m and 3650d" in str(short.value)


# -- the engine --------------------------------------------------------------------------


class ScriptedAlarm(Alarm):
    """Records each deadline the engine waits for; the first wait moves the clock to it."""

    def __init__(self, clock: FakeClock, engine_box: list) -> None:
        self.clock = clock
        self.engine_box = engine_box
        self.waits: list[float | None] = []

    def wait(self, deadline: float | None) -> None:
        self.waits.append(deadline)
        if len(self.waits) == 1 and deadline is not None:
            self.clock.now = deadline
        else:
            self.engine_box[0].stop()

    def ring(self) -> None:
        pass


def run_engine(tmp_path, clock, prepare) -> tuple[ScriptedAlarm, list[Snapshot]]:
    home = locate(tmp_path / "home").ensure()
    queue = Queue(home.db, clock=clock, tz=UTC, max_attempts=1)
    prepare(queue)
    box: list = []
    alarm = ScriptedAlarm(clock, box)
    engine = Engine(queue, home, alarm=alarm)
    box.append(engine)
    seen: list[Snapshot] = []
    engine.subscribe(seen.append)
    engine.run()
    queue.close()
    return alarm, seen


def test_the_engine_wakes_when_a_series_becomes_overdue_and_shows_it(tmp_path, clock):
    """Paused, nothing can be due; the engine still wakes once, at the moment the series
    becomes overdue, and its snapshot says so."""
    success = clock.now

    def prepare(queue: Queue) -> None:
        queue.push("backup", script="/spool/backup.sh", options={"every": HOUR})
        run_once(queue)
        queue.set_paused(True)

    alarm, seen = run_engine(tmp_path, clock, prepare)
    assert alarm.waits[0] == success + HOUR + HOUR / 2
    assert seen[0].overdue == ()
    assert seen[-1].overdue == (OverdueJob("backup", success, "paused"),)


def test_with_nothing_recurring_the_engine_still_waits_for_nothing(tmp_path, clock):
    alarm, seen = run_engine(tmp_path, clock, lambda queue: queue.set_paused(True))
    assert alarm.waits == [None]
    assert all(snapshot.overdue == () for snapshot in seen)


# -- the tray ----------------------------------------------------------------------------

NOW = 1_000_000.0
LATE = OverdueJob("backup", NOW - 2 * DAY, "failing: rsync: connection refused")
FAILED = FailedJob("f1", "disk_check", "disk full", NOW - 5)


def test_the_look_shows_overdue_beside_every_other_badge():
    """Badges compose: an overdue series is not hidden by a pause, a failure or a run."""
    assert presenter.look(Snapshot(overdue=(LATE,))) == Look.OVERDUE
    assert presenter.look(Snapshot(overdue=(LATE,), paused=True)) == Look.OVERDUE | Look.PAUSED
    assert presenter.look(Snapshot(overdue=(LATE,), failed_count=1,
                                   failed_jobs=(FAILED,))) == Look.FAILED | Look.OVERDUE
    assert presenter.look(Snapshot(overdue=(LATE,), running=RunningJob(
        "r1", "x", 1, 5, NOW))) == Look.RUNNING | Look.OVERDUE
    assert presenter.look(Snapshot()) == Look.IDLE


def test_the_title_and_the_menu_say_what_is_overdue():
    snapshot = Snapshot(overdue=(LATE, OverdueJob("sync", NOW - 3 * HOUR, "",
                                                  ever_succeeded=False)))
    assert presenter.title(snapshot, NOW) == "sloth: idle · 2 overdue"
    items = presenter.menu(snapshot, Recorder(), NOW)
    section = next(item for item in items if item.label.startswith("Overdue"))
    assert section.label == "Overdue (2)"
    assert [(row.label, row.enabled) for row in section.submenu] == [
        ("backup — last success 2d ago (failing: rsync: connection refused)", False),
        ("sync — never succeeded, queued 3h ago", False),
    ]
    plain = presenter.menu(Snapshot(), Recorder(), NOW)
    assert not any(item.label.startswith("Overdue") for item in plain)


def test_a_series_is_announced_once_per_overdue_spell():
    quiet = Snapshot()
    late = Snapshot(overdue=(LATE,))
    assert announce.overdue_to_announce(None, late) == []  # old news at start-up
    assert announce.overdue_to_announce(quiet, late) == [LATE]
    still = Snapshot(overdue=(OverdueJob(LATE.name, LATE.since, "paused"),))
    assert announce.overdue_to_announce(late, still) == []  # its cause changed, not news
    again = Snapshot(overdue=(OverdueJob(LATE.name, NOW, ""),))  # it succeeded, then stopped
    assert announce.overdue_to_announce(still, again) == list(again.overdue)


class Told:
    """A surface and a notifier that remember what they were given."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, str]] = []

    def show(self, appearance) -> None:
        pass

    def menu_changed(self) -> None:
        pass

    def notify(self, title: str, message: str, **buttons) -> None:
        self.notes.append((title, message))


def test_the_tray_tells_of_an_overdue_series_once_even_when_it_shows_again():
    """A database problem in between hides the overdue list for a moment; coming back,
    the same overdue spell is not news."""
    from sloth_tray.tray.tray import Tray

    told = Told()
    tray = Tray.__new__(Tray)  # no display, no daemon: only the announcing half
    tray.surface = tray.notifier = told
    tray._snapshot, tray._overdue_announced, tray._lane_bursts = None, set(), None
    tray._announcer, tray._clock = announce.Announcer(), lambda: NOW
    tray._questions = announce.Questions()
    late = Snapshot(overdue=(LATE,))
    for snapshot in (Snapshot(), late, Snapshot(problem="the queue is locked"), late, late):
        tray._show(snapshot)
    assert [title for title, _ in told.notes] == ["sloth-tray: a job is overdue"]
    message = told.notes[0][1]
    assert message.startswith("backup — last success ") and message.endswith(
        "ago (failing: rsync: connection refused)")
    tray._show(Snapshot(overdue=(OverdueJob("backup", NOW, ""),)))  # a new spell
    assert len(told.notes) == 2


# -- the command line ---------------------------------------------------------------------


def test_status_json_counts_the_overdue_series(tmp_path):
    home = locate(tmp_path / "home").ensure()
    clock = FakeClock(time.time() - 3 * DAY)
    with Queue(home.db, clock=clock, max_attempts=1) as queue:
        queue.push("backup", script="/spool/backup.sh", options={"every": HOUR})
        run_once(queue)
        queue.push("fresh", script="/spool/fresh.sh", options={"every": 7 * DAY})
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "status", "--json",
                           "--home", str(home.root)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["overdue"] == 1
    human = subprocess.run([sys.executable, "-m", "sloth_tray", "status",
                            "--home", str(home.root)], capture_output=True, text=True,
                           timeout=60)
    assert any(line.split() == ["overdue", "1"] for line in human.stdout.splitlines())
