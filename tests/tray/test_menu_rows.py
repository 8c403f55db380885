"""The menu's rows as a host keeps them: each has a key, unique among its siblings and
kept while its label moves; a failing series is one row; the running job, waiting
jobs and Quit say and offer what can be done to them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from helpers.controls import Recorder

from sloth_tray.daemon.snapshot import FailedJob, FailedSeries, RunningJob, Snapshot, WaitingJob
from sloth_tray.jobs.overdue import OverdueJob
from sloth_tray.store.reasons import Reason
from sloth_tray.tray import presenter


def at(day: int, hour: int, minute: int = 0, month: int = 3, year: int = 2026) -> float:
    """A moment of March 2026 unless told, UTC: the 4th is a Wednesday."""
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


NOW = at(4, 12)  # Wednesday noon
TIDY = "/home/ann/.local/share/sloth-tray/spool/0123456789ab/tidy.sh"


def runs(series: str, name: str, times: list[float], error: str = "exit status 1"):
    """Failed runs of one series, newest first, as a snapshot carries them."""
    return tuple(FailedJob(f"{name[:4]}{i:08x}", name, error, moment, series=series)
                 for i, moment in enumerate(sorted(times, reverse=True)))


def failing(*groups: tuple, one_offs: tuple = ()) -> Snapshot:
    """A snapshot of failing series (key, name, times carried, failures in all, and
    when the first failed if not the oldest carried), and failed jobs that do not
    repeat."""
    jobs = tuple(job for key, name, times, *_ in groups for job in runs(key, name, times))
    jobs = tuple(sorted(jobs + one_offs, key=lambda job: -job.at))  # newest first
    series = tuple(FailedSeries(key, name, failures, since[0] if since else min(times))
                   for key, name, times, failures, *since in groups)
    return Snapshot(failed_count=sum(s.failures for s in series) + len(one_offs),
                    failed_jobs=jobs, failed_series=series)


def menu(snapshot: Snapshot, now: float = NOW, controls=None, **options):
    return presenter.menu(snapshot, controls or Recorder(), now, tz=UTC, **options)


def row(items, label_start: str):
    return next(item for item in items if item.label.startswith(label_start))


def keys(items) -> list[str]:
    return [item.key for item in items]


def key_tree(items) -> tuple:
    return tuple((item.key, key_tree(item.submenu)) for item in items)


def labels(items) -> list[str]:
    return [item.label for item in items]


RUNNING = RunningJob("a1b2c3d4e5f6", "tidy", 1, 5, NOW - 42)
WAITING = (WaitingJob("w10000000001", "later", NOW + 240),
           WaitingJob("w10000000002", "later", NOW + 600, waiting_for="AC power"))
OVERDUE = (OverdueJob("backup", NOW - 2 * 86400, "failing: rsync"),
           OverdueJob("sync", NOW - 3600, "", ever_succeeded=False))
ONE_OFF = FailedJob("0ff000000001", "disk_check", "disk full", at(4, 9))
REFUSED = FailedJob("0ff000000002", "link", "refused: a link", at(4, 8), refused=True,
                    reason=Reason.REFUSED)
MANY_SERIES = failing(
    (TIDY, "tidy", [at(2, 9), at(3, 9), at(4, 9)], 3),
    ("/spool/1/backup.sh", "backup", [at(1, 23), at(4, 1)], 7, at(20, 6, month=2)),
    ("/spool/2/tidy.sh", "tidy", [at(4, 2), at(4, 3)], 2),  # another drop of the same name
    one_offs=(ONE_OFF, REFUSED),
)

SNAPSHOTS = {
    "idle": Snapshot(),
    "running": Snapshot(pending=2, running=RUNNING, waiting=WAITING),
    "paused": Snapshot(paused=True, pending=2, waiting=WAITING),
    "paused while running": Snapshot(paused=True, running=RUNNING),
    "failures of many series": MANY_SERIES,
    "one failure": Snapshot(failed_count=1, failed_jobs=(ONE_OFF,)),
    "overdue": Snapshot(overdue=OVERDUE),
    "everything": Snapshot(
        pending=2, waiting=WAITING, running=RUNNING, overdue=OVERDUE, paused=True,
        failed_count=MANY_SERIES.failed_count, failed_jobs=MANY_SERIES.failed_jobs,
        failed_series=MANY_SERIES.failed_series),
    "a problem": Snapshot(problem="the queue is locked"),
}


# -- keys ---------------------------------------------------------------------------------


def assert_keys_unique(items, path=()):
    found = keys(items)
    assert all(found), (path, labels(items))
    assert len(set(found)) == len(found), (path, found)
    for item in items:
        assert item.key == item.key.strip() and item.key.isprintable(), item.key
        assert_keys_unique(item.submenu, (*path, item.key))


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_every_row_has_a_key_unique_among_its_siblings(name):
    for options in ({}, {"starts_at_login": True, "has_default_action": False}):
        assert_keys_unique(menu(SNAPSHOTS[name], **options))


def test_the_top_rows_are_keyed_by_their_role():
    assert keys(menu(SNAPSHOTS["everything"])) == [
        RUNNING.id, "sep-1", "failed", "retry-all", "overdue", "waiting", "sep-2",
        "pause", "open-jobs", "open-logs", "autostart", "sep-3", "quit"]
    assert keys(menu(Snapshot()))[0] == "status"


def test_rows_keep_their_keys_while_times_and_counts_move():
    snapshot = SNAPSHOTS["everything"]
    assert key_tree(menu(snapshot, NOW)) == key_tree(menu(snapshot, NOW + 3 * 3600))
    assert labels(menu(snapshot, NOW)) != labels(menu(snapshot, NOW + 3 * 3600))
    three = failing((TIDY, "tidy", [at(2, 9), at(3, 9), at(4, 9)], 3))
    four = failing((TIDY, "tidy", [at(2, 9), at(3, 9), at(4, 9), at(4, 10)], 4))
    before, after = (row(menu(s), "Failed jobs").submenu[0] for s in (three, four))
    assert before.label != after.label and before.key == after.key == f"series:{TIDY}"


def test_a_row_that_changes_kind_changes_its_key():
    """A host keeps a row's kind with its key: a plain row that opens a submenu
    later is a new row."""
    plain = menu(Snapshot())
    full = menu(SNAPSHOTS["everything"])
    for role in ("Failed jobs", "Waiting"):
        empty, filled = row(plain, role), row(full, role)
        assert not empty.submenu and filled.submenu
        assert empty.key != filled.key
    assert not plain[0].submenu and full[0].submenu and plain[0].key != full[0].key
    one = failing((TIDY, "tidy", [at(4, 9)], 1))
    two = failing((TIDY, "tidy", [at(4, 9), at(4, 10)], 2))
    assert row(menu(one), "Failed jobs").submenu[0].key == one.failed_jobs[0].id
    assert row(menu(two), "Failed jobs").submenu[0].key == f"series:{TIDY}"


def test_separators_are_separators_whatever_their_key():
    items = menu(Snapshot())
    separators = [item for item in items if item.label == "-"]
    assert keys(separators) == ["sep-1", "sep-2", "sep-3"]
    assert all(item == presenter.SEPARATOR for item in separators)


# -- a failing series is one row -----------------------------------------------------------


def test_a_failing_series_is_one_row_saying_how_often_and_since_when():
    failed = row(menu(MANY_SERIES), "Failed jobs")
    assert failed.label == "Failed jobs (14)"
    assert labels(failed.submenu) == [  # in the order of each one's newest failure
        "tidy — failed 3 times since Mon",
        "disk_check — disk full",
        "link — refused: a link",
        "tidy — failed 2 times since 02:00",  # another drop of a script named alike
        "backup — failed 7 times since 20 Feb",
    ]


def test_a_series_row_lists_its_runs_each_with_its_own_actions():
    controls = Recorder()
    failed = row(menu(MANY_SERIES, controls=controls), "Failed jobs")
    tidy = row(failed.submenu, "tidy — failed 3 times")
    assert labels(tidy.submenu) == [
        "Retry latest", "Cancel all 3", "-",
        "today 09:00 — exit status 1", "Tue 09:00 — exit status 1",
        "Mon 09:00 — exit status 1"]
    latest = tidy.submenu[3]
    assert labels(latest.submenu) == ["exit status 1", "-", "Retry", "Show log", "Cancel"]
    for item in (*tidy.submenu[:2], *latest.submenu[2:]):
        item.action()
    newest = MANY_SERIES.failed_jobs[0].id
    assert MANY_SERIES.failed_jobs[0].series == TIDY
    assert controls.calls == [("retry", newest), ("cancel_failed_runs", TIDY),
                              ("retry", newest), ("show_log", newest), ("cancel", newest)]


def test_a_series_with_runs_not_carried_says_how_many_older_ones_there_are():
    backup = row(row(menu(MANY_SERIES), "Failed jobs").submenu, "backup")
    assert labels(backup.submenu) == [
        "Retry latest", "Cancel all 7", "-",
        "today 01:00 — exit status 1", "Sun 23:00 — exit status 1",
        "5 older failed runs not shown"]
    assert not backup.submenu[-1].enabled


def test_a_run_of_another_year_shows_its_year():
    old = failing((TIDY, "tidy", [at(30, 9, month=12, year=2025), at(4, 9)], 2))
    tidy = row(row(menu(old), "Failed jobs").submenu, "tidy")
    assert tidy.label == "tidy — failed 2 times since 30 Dec 2025"
    assert labels(tidy.submenu)[-1] == "30 Dec 2025 09:00 — exit status 1"


def test_a_series_with_one_failed_run_is_a_plain_failed_row():
    one = failing((TIDY, "tidy", [at(4, 9)], 1))
    (entry,) = row(menu(one), "Failed jobs").submenu
    assert entry.label == "tidy — exit status 1"
    assert labels(entry.submenu) == ["exit status 1", "-", "Retry", "Show log", "Cancel"]


def test_without_its_series_summary_a_series_is_counted_from_the_runs_carried():
    jobs = runs(TIDY, "tidy", [at(3, 9), at(4, 9)])
    snapshot = Snapshot(failed_count=2, failed_jobs=jobs)
    (entry,) = row(menu(snapshot), "Failed jobs").submenu
    assert entry.label == "tidy — failed 2 times since Tue"


# -- controls ------------------------------------------------------------------------------


def test_the_running_job_can_be_stopped_and_its_log_shown():
    controls = Recorder()
    items = menu(SNAPSHOTS["running"], controls=controls)
    running = items[0]
    assert running.label == "Running tidy (attempt 1, 0:42)" and running.enabled
    assert labels(running.submenu) == ["Stop", "Show log"]
    assert keys(running.submenu) == ["stop", "show-log"]
    for item in running.submenu:
        item.action()
    assert controls.calls == [("stop", RUNNING.id), ("show_log", RUNNING.id)]


def test_a_waiting_job_can_be_run_now_or_cancelled():
    controls = Recorder()
    waiting = row(menu(SNAPSHOTS["paused"], controls=controls), "Waiting")
    first = waiting.submenu[0]
    assert labels(first.submenu) == ["Run now", "Cancel"]
    assert keys(first.submenu) == ["run-now", "cancel"]
    assert keys(waiting.submenu) == [job.id for job in WAITING]
    for item in first.submenu:
        item.action()
    assert controls.calls == [("run_now", WAITING[0].id), ("cancel", WAITING[0].id)]


def test_quit_says_what_becomes_of_a_running_job():
    assert menu(Snapshot())[-1].label == "Quit"
    assert menu(SNAPSHOTS["running"])[-1].label == \
        "Quit (stops tidy; it runs again at the next start)"
    assert menu(SNAPSHOTS["paused while running"])[-1].label == \
        "Quit (stops tidy; it runs again once resumed)"


def test_quit_in_a_step_that_asks_says_the_job_will_ask_instead_of_running_again():
    running = replace(SNAPSHOTS["running"].running, step=(2, "send"), step_asks=True)
    assert menu(replace(SNAPSHOTS["running"], running=running))[-1].label == \
        'Quit (cuts tidy short in step "send": it will ask whether that happened)'
    plain = replace(running, step_asks=False)
    assert menu(replace(SNAPSHOTS["running"], running=plain))[-1].label == \
        "Quit (stops tidy; it runs again at the next start)"


def by_key(items, key: str):
    return next(item for item in items if item.key == key)


def test_pause_is_a_check_item_that_follows_the_pause():
    assert by_key(menu(SNAPSHOTS["paused"]), "pause").checked is True
    assert by_key(menu(SNAPSHOTS["running"]), "pause").checked is False
