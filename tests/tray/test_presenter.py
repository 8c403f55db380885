"""What the tray shows, for each kind of Snapshot, without a display."""

from __future__ import annotations

import math

import pytest
from helpers.controls import Recorder

from sloth_tray.daemon.snapshot import FailedJob, RunningJob, Snapshot, StepProgress, WaitingJob
from sloth_tray.store.reasons import Reason
from sloth_tray.tray import presenter
from sloth_tray.tray.icons import Look, render

NOW = 1_000_000.0


IDLE = Snapshot()
RUNNING = Snapshot(pending=2, running=RunningJob("a1", "tidy_downloads", 2, 5, NOW - 42))
FAILED = Snapshot(failed_count=1, failed_jobs=(FailedJob("f1", "disk_check", "disk check: 82% full",
                                                    NOW - 5),))
PAUSED = Snapshot(paused=True, pending=1, waiting=(WaitingJob("w1", "later", NOW + 240),))
MANY = Snapshot(failed_count=30, failed_jobs=tuple(
    FailedJob(f"f{i}", f"job{i}", "x" * 300, NOW) for i in range(30)))


@pytest.mark.parametrize("snapshot, look", [
    (IDLE, Look.IDLE), (RUNNING, Look.RUNNING), (FAILED, Look.FAILED), (PAUSED, Look.PAUSED),
    (Snapshot(running=RUNNING.running, failed_count=1, failed_jobs=FAILED.failed_jobs),
     Look.FAILED | Look.RUNNING),
    (Snapshot(problem="the queue is locked"), Look.FAILED),
])
def test_the_look_shows_failed_beside_running_and_paused(snapshot, look):
    assert presenter.look(snapshot) == look


def test_every_look_is_a_different_picture_at_every_size():
    for size in (16, 22, 32, 64):
        looks = (Look.IDLE, *Look)  # each state alone
        pictures = {look: render(look, size).tobytes() for look in looks}
        templates = {look: render(look, size, template=True).tobytes() for look in looks}
        assert len(set(pictures.values())) == len(looks) == 6
        assert len(set(templates.values())) == len(looks), "shape alone must tell the states apart"
        assert render(Look.IDLE, size).size == (size, size)


@pytest.mark.parametrize("snapshot, title", [
    (IDLE, "sloth: idle"),
    (RUNNING, "sloth: running tidy_downloads · 2 waiting"),
    (FAILED, "sloth: idle · 1 failed"),
    (PAUSED, "sloth: paused · 1 waiting"),
    (Snapshot(problem="the queue x is locked"), "sloth: the queue x is locked"),
])
def test_title_is_one_line(snapshot, title):
    assert presenter.title(snapshot, NOW) == title


@pytest.mark.parametrize("snapshot, line", [
    (IDLE, "Idle — nothing waiting"),
    (RUNNING, "Running tidy_downloads (attempt 2, 0:42)"),
    (PAUSED, "Paused"),
    (Snapshot(pending=1, next_wakeup=NOW + 240), "Idle — next job in 4 min"),
    (Snapshot(pending=1, next_wakeup=NOW + 7200), "Idle — next job in 2h"),
])
def test_status_line(snapshot, line):
    assert presenter.status_line(snapshot, NOW) == line


def test_before_the_first_job_the_status_line_says_where_to_drop_scripts():
    assert presenter.status_line(IDLE, NOW, "~/jobs") == "Idle — drop scripts into ~/jobs"
    assert presenter.status_line(FAILED, NOW, "~/jobs") == "Idle — nothing waiting"
    assert presenter.tilde("/home/ann/.local/x", "/home/ann") == "~/.local/x"
    assert presenter.tilde("/srv/x", "/home/ann") == "/srv/x"


def labels(items):
    return [item.label for item in items]


def test_idle_menu_opens_the_jobs_folder_on_click_and_cannot_retry():
    items = presenter.menu(IDLE, Recorder(), NOW)
    assert labels(items) == [
        "Idle — nothing waiting", "-", "Failed jobs (0)", "Retry all failed", "Waiting (0)",
        "-", "Pause", "Open jobs folder", "Open logs", "Start at login", "-", "Quit"]
    by_label = {item.label: item for item in items}
    assert not by_label["Idle — nothing waiting"].enabled
    assert not by_label["Retry all failed"].enabled
    assert presenter.default_action(items).label == "Open jobs folder"
    assert by_label["Pause"].checked is False
    assert by_label["Start at login"].checked is False


def test_failed_menu_retries_on_click_and_offers_retry_log_cancel_per_job():
    controls = Recorder()
    items = presenter.menu(FAILED, controls, NOW)
    by_label = {item.label: item for item in items}
    assert by_label["Retry all failed"].enabled
    assert presenter.default_action(items).label == "Retry all failed"
    (entry,) = by_label["Failed jobs (1)"].submenu
    assert entry.label == "disk_check — disk check: 82% full"
    assert labels(entry.submenu) == ["disk check: 82% full", "-", "Retry", "Show log", "Cancel"]
    assert not entry.submenu[0].enabled
    for item in entry.submenu[2:]:
        item.action()
    presenter.default_action(items).action()
    assert controls.calls == [("retry", "f1"), ("show_log", "f1"), ("cancel", "f1"),
                              ("retry_all_failed",)]


def test_retry_all_never_answers_a_steps_question():
    """A job cut short in a step that asks waits for that job's own answer."""
    unsure = FailedJob("u1", "invoice", 'step "send" was cut short', NOW,
                       reason=Reason.STEP_UNSURE, unsure_step="send")
    items = presenter.menu(Snapshot(failed_count=1, failed_jobs=(unsure,)), Recorder(), NOW)
    by_label = {item.label: item for item in items}
    assert not by_label["Retry all failed"].enabled
    assert presenter.default_action(items).label == "Open jobs folder"


def test_a_refused_drop_can_only_be_removed_and_never_claims_the_click():
    controls = Recorder()
    refused = FailedJob("r1", "link", "refused: it is a symbolic link; drop the script itself",
                        NOW, refused=True, reason=Reason.REFUSED)
    items = presenter.menu(Snapshot(failed_count=1, failed_jobs=(refused,)), controls, NOW)
    by_label = {item.label: item for item in items}
    (entry,) = by_label["Failed jobs (1)"].submenu
    assert entry.label.startswith("link — refused: it is a symbolic link")
    assert labels(entry.submenu) == [refused.error, "-", "Remove"]
    entry.submenu[-1].action()
    assert controls.calls == [("cancel", "r1")]
    assert not by_label["Retry all failed"].enabled
    assert presenter.default_action(items).label == "Open jobs folder"
    with_one_to_retry = Snapshot(failed_count=2, failed_jobs=(refused, *FAILED.failed_jobs))
    assert presenter.default_action(
        presenter.menu(with_one_to_retry, controls, NOW)).label == "Retry all failed"


def test_without_a_default_action_backend_no_item_claims_the_click():
    items = presenter.menu(FAILED, Recorder(), NOW, has_default_action=False)
    assert presenter.default_action(items) is None


def test_paused_menu_is_checked_and_waiting_jobs_can_run_now():
    controls = Recorder()
    items = presenter.menu(PAUSED, controls, NOW)
    by_label = {item.label: item for item in items}
    assert by_label["Paused"].enabled is False
    assert by_label["Pause"].checked is True
    (waiting,) = by_label["Waiting (1)"].submenu
    assert waiting.label == "later — in 4 min"
    run_now, _cancel = waiting.submenu
    run_now.action()
    by_label["Pause"].action()
    by_label["Start at login"].action()
    by_label["Quit"].action()
    assert controls.calls == [("run_now", "w1"), ("toggle_pause",), ("toggle_autostart",),
                              ("quit",)]
    login = presenter.menu(PAUSED, controls, NOW, starts_at_login=True)
    assert next(i for i in login if i.label == "Start at login").checked is True


def test_many_failed_jobs_keep_their_entries_short():
    items = presenter.menu(MANY, Recorder(), NOW)
    failed = next(item for item in items if item.label == "Failed jobs (30)")
    assert len(failed.submenu) == 30
    assert all(len(item.label) < 80 and item.label.endswith("…") for item in failed.submenu)


# -- times are read when the menu is built, never when the snapshot was taken ------------


def test_every_time_in_the_menu_is_counted_from_the_moment_it_is_built():
    snapshot = Snapshot(pending=1, running=RunningJob("a1", "slow20", 1, 5, NOW),
                        waiting=(WaitingJob("w1", "later", NOW + 15),))
    at_start = {item.label: item for item in presenter.menu(snapshot, Recorder(), NOW)}
    assert "Running slow20 (attempt 1, 0:00)" in at_start
    ten_later = {item.label: item for item in presenter.menu(snapshot, Recorder(), NOW + 10)}
    assert "Running slow20 (attempt 1, 0:10)" in ten_later
    assert [w.label for w in ten_later["Waiting (1)"].submenu] == ["later — in 5 s"]
    overdue = {item.label: item for item in presenter.menu(snapshot, Recorder(), NOW + 16)}
    assert [w.label for w in overdue["Waiting (1)"].submenu] == ["later — due now"]


@pytest.mark.parametrize("wait, shown", [
    (59.4, "in 59 s"), (59.6, "in 1 min"), (270, "in 5 min"), (3599.4, "in 1h"),
    (2 * 3600 - 20, "in 2h"), (0.2, "in 1 s"),  # never `in 0 s` for a job not yet due
])
def test_a_wait_in_the_menu_is_rounded_to_the_nearest_of_its_unit(wait, shown):
    assert presenter.status_line(Snapshot(pending=1, next_wakeup=NOW + wait), NOW) == \
        f"Idle — next job {shown}"


def test_a_wait_no_clock_can_give_still_reads_as_words():
    assert presenter.in_words(math.inf) == "forever"
    assert presenter.in_words(math.nan) == "an unknown time"
    assert presenter.in_words(-30) == "1 s"  # a clock set back: `1 s ago`, as before


def test_an_overdue_next_job_is_due_now_never_in_one_second():
    waiting = Snapshot(pending=1, next_wakeup=NOW + 15)
    assert presenter.status_line(waiting, NOW) == "Idle — next job in 15 s"
    assert presenter.status_line(waiting, NOW + 14.5) == "Idle — next job in 1 s"
    assert presenter.status_line(waiting, NOW + 15) == "Idle — next job due now"
    assert presenter.status_line(waiting, NOW + 600) == "Idle — next job due now"




# -- failed jobs: the name whole, the error shortened, the whole error one click away ------


def test_a_failed_job_keeps_its_whole_name_and_only_the_error_is_shortened():
    job = FailedJob("f9", "nightly-backup-of-photos",
                    "rsync: connection refused by photos.local (port 873); giving up after "
                    "3 tries " + "and then some more words " * 10, NOW)
    items = presenter.menu(Snapshot(failed_count=1, failed_jobs=(job,)), Recorder(), NOW)
    (entry,) = next(i for i in items if i.label == "Failed jobs (1)").submenu
    assert entry.label == "nightly-backup-of-photos — rsync: connection re…"
    error_row, separator, *actions = entry.submenu
    assert not error_row.enabled and error_row.action is None
    assert error_row.label.startswith("rsync: connection refused by photos.local (port 873)")
    assert len(error_row.label) <= 120 and error_row.label.endswith("…")
    assert separator == presenter.SEPARATOR
    assert labels(actions) == ["Retry", "Show log", "Cancel"]


def test_a_long_name_is_never_cut_and_still_shows_some_of_the_error():
    name = "a-very-long-job-name-that-someone-gave-their-weekly-report-script"
    job = FailedJob("f9", name, "exit status 2: the report server said no", NOW)
    items = presenter.menu(Snapshot(failed_count=1, failed_jobs=(job,)), Recorder(), NOW)
    (entry,) = next(i for i in items if i.label == "Failed jobs (1)").submenu
    assert entry.label.startswith(name + " — exit status 2")
    assert entry.label.endswith("…")


def test_a_failure_without_a_message_has_no_empty_row():
    job = FailedJob("f9", "quiet", "", NOW)
    items = presenter.menu(Snapshot(failed_count=1, failed_jobs=(job,)), Recorder(), NOW)
    (entry,) = next(i for i in items if i.label == "Failed jobs (1)").submenu
    assert entry.label == "quiet — failed"
    assert labels(entry.submenu) == ["Retry", "Show log", "Cancel"]


def test_names_and_errors_in_the_menu_show_control_characters_never_obey_them():
    job = FailedJob("f9", "two\nlines\u202e", "bad\x1b[2J news", NOW)
    waiting = WaitingJob("w1", "tab\there", NOW + 60)
    snapshot = Snapshot(failed_count=1, failed_jobs=(job,), pending=1, waiting=(waiting,),
                        running=RunningJob("r1", "bell\x07", 1, 5, NOW))
    items = presenter.menu(snapshot, Recorder(), NOW)
    everything = [items[0].label] + [sub.label for item in items for sub in item.submenu] + [
        row.label for item in items for sub in item.submenu for row in sub.submenu]
    everything.append(presenter.title(snapshot, NOW))
    assert all(label.isprintable() for label in everything), everything
    assert "two\\nlines\\u202e — bad\\x1b[2J news" in everything


# -- steps: the running one named, how far a failed job got, a cut step's question ------


def test_a_running_job_in_a_step_names_the_step_and_its_place():
    snapshot = Snapshot(running=RunningJob("a1", "backup", 1, 3, NOW - 184, step=(2, "upload")))
    assert presenter.status_line(snapshot, NOW) == \
        "Running backup — step 2 upload (attempt 1, 3:04)"
    between_steps = Snapshot(running=RunningJob("a1", "backup", 1, 3, NOW - 184))
    assert presenter.status_line(between_steps, NOW) == "Running backup (attempt 1, 3:04)"
    odd = Snapshot(running=RunningJob("a1", "backup", 1, 3, NOW, step=(1, "up\x1bload" * 20)))
    line = presenter.status_line(odd, NOW)
    assert line.isprintable() and len(line) < 90 and "…" in line


def progress_row(job: FailedJob) -> list[str]:
    items = presenter.menu(Snapshot(failed_count=1, failed_jobs=(job,)), Recorder(), NOW)
    (entry,) = next(i for i in items if i.label == "Failed jobs (1)").submenu
    return [row.label for row in entry.submenu if row.key == "steps" and not row.enabled]


def test_a_failed_job_with_steps_says_how_far_it_got_and_one_without_says_nothing():
    def failed(progress):
        return FailedJob("f1", "backup", "exit status 1", NOW, progress=progress)

    assert progress_row(failed(None)) == []
    assert progress_row(failed(StepProgress(3, 2, "upload", "failed"))) == \
        ['Got through 2 steps; stopped in "upload" (failed)']
    assert progress_row(failed(StepProgress(2, 1, "send", "cut"))) == \
        ['Got through 1 step; stopped in "send" (cut short)']
    assert progress_row(failed(StepProgress(1, 0, "fetch", "failed"))) == \
        ['No step done; stopped in "fetch" (failed)']
    assert progress_row(failed(StepProgress(3, 3))) == ["All 3 steps done"]


def test_a_cut_step_that_asks_offers_mark_done_and_run_again_instead_of_retry():
    controls = Recorder()
    job = FailedJob("u1", "invoice", 'step "send" was cut short at 2026-12-01 14:02:00 (run 1)',
                    NOW, reason=Reason.STEP_UNSURE, unsure_step="send",
                    progress=StepProgress(2, 1, "send", "cut"))
    items = presenter.menu(Snapshot(failed_count=1, failed_jobs=(job,)), controls, NOW)
    (entry,) = next(i for i in items if i.label == "Failed jobs (1)").submenu
    assert labels(entry.submenu) == [
        job.error, 'Got through 1 step; stopped in "send" (cut short)', "-",
        'Mark "send" done', 'Run "send" again', "Show log", "Cancel"]
    assert [row.key for row in entry.submenu] == [
        "error", "steps", "sep-1", "mark-done", "run-again", "show-log", "cancel"]
    for row in entry.submenu[3:5]:
        row.action()
    assert controls.calls == [("retry", "u1", "send"), ("retry", "u1")]


def test_without_its_step_known_a_step_unsure_failure_offers_retry():
    job = FailedJob("u1", "invoice", "cut short", NOW, reason=Reason.STEP_UNSURE)
    items = presenter.menu(Snapshot(failed_count=1, failed_jobs=(job,)), Recorder(), NOW)
    (entry,) = next(i for i in items if i.label == "Failed jobs (1)").submenu
    assert labels(entry.submenu)[2:] == ["Retry", "Show log", "Cancel"]


def test_a_series_whose_latest_run_asks_leaves_the_answer_to_that_runs_own_row():
    """Retry latest would run the cut step again unasked: greyed out; the run's row
    below carries Mark done and Run again."""
    from sloth_tray.daemon.snapshot import FailedSeries

    asking = FailedJob("s2", "tidy", "cut short", NOW, series="/s/tidy.sh",
                       reason=Reason.STEP_UNSURE, unsure_step="send")
    older = FailedJob("s1", "tidy", "exit 1", NOW - 60, series="/s/tidy.sh")
    snapshot = Snapshot(failed_count=2, failed_jobs=(asking, older),
                        failed_series=(FailedSeries("/s/tidy.sh", "tidy", 2, NOW - 60),))
    items = presenter.menu(snapshot, Recorder(), NOW)
    (series,) = next(i for i in items if i.label == "Failed jobs (2)").submenu
    retry_latest, _cancel_all, _sep, latest_run, _older = series.submenu
    assert retry_latest.label == "Retry latest" and not retry_latest.enabled
    assert 'Mark "send" done' in labels(latest_run.submenu)


def test_a_job_an_agent_added_says_by_whom_in_its_rows():
    """`summarise — by Claude Desktop`: a job handed over by an agent (its MCP client's
    name); a dropped or added one shows its name alone."""
    agent = Snapshot(
        pending=2, failed_count=1,
        running=RunningJob("r1", "summarise", 1, 5, NOW - 3, by="Claude Desktop"),
        waiting=(WaitingJob("w1", "digest", NOW + 60, by="Cursor"),
                 WaitingJob("w2", "backup", NOW + 60)),
        failed_jobs=(FailedJob("f1", "fetch", "exit status 1", NOW - 5, by="VS Code"),))
    def every(items):
        for item in items:
            yield item.label
            yield from every(item.submenu or ())

    labels = list(every(presenter.menu(agent, Recorder(), NOW)))
    assert presenter.status_line(agent, NOW).startswith("Running summarise — by Claude Desktop")
    assert "digest — by Cursor — in 1 min" in labels
    assert "backup — in 1 min" in labels
    assert any(label.startswith("fetch — by VS Code — exit status 1") for label in labels)
