"""Which notifications the Snapshots call for: one per burst of failures, updated in
place, withdrawn once nothing it tells of is failed, with buttons that fit the failure."""

from __future__ import annotations

from dataclasses import replace

from sloth_tray.daemon.snapshot import FailedJob, Snapshot
from sloth_tray.store.reasons import Reason
from sloth_tray.tray.announce import (
    BURST_GAP,
    FOLLOWED,
    Announcer,
    Notice,
    Withdraw,
    failures_to_announce,
    names,
    retryable,
)

NOW = 1_000_000.0


def failed(*jobs: FailedJob, count: int | None = None) -> Snapshot:
    """Newest first, as the engine lists them; `count`: more failed than it carries."""
    ordered = tuple(sorted(jobs, key=lambda job: job.at, reverse=True))
    return Snapshot(failed_count=len(jobs) if count is None else count, failed_jobs=ordered)


def job(number: int, reason: Reason = Reason.EXIT_CODE, at: float | None = None,
        **more) -> FailedJob:
    return FailedJob(f"j{number}", f"job{number}", "exit status 1",
                     NOW + number if at is None else at, reason=reason, **more)


def fail_one_by_one(announcer: Announcer, jobs: list[FailedJob], *, every: float = 0.1,
                    start: Snapshot | None = None) -> list[Notice | Withdraw]:
    """Each job fails in a snapshot of its own, `every` seconds apart."""
    before = start or Snapshot()
    told: list[Notice | Withdraw] = []
    for number in range(len(jobs)):
        after = failed(*before.failed_jobs, jobs[number])
        told += announcer.failures(before, after, NOW + number * every)
        before = after
    return told


def test_old_failures_at_start_up_are_not_news():
    assert Announcer().failures(None, failed(job(1), job(2)), NOW) == []


def test_a_single_failure_keeps_its_own_text_and_its_retry_and_show_log():
    [notice] = Announcer().failures(Snapshot(), failed(job(1)), NOW)
    assert (notice.title, notice.body) == ("sloth-tray: a job failed", "job1: exit status 1")
    assert notice.actions == (("retry", "Retry"), ("log", "Show log"))
    assert notice.first


def test_a_burst_of_60_failures_is_one_notification_updated_in_place():
    told = fail_one_by_one(Announcer(), [job(n) for n in range(60)])
    assert {notice.key for notice in told} == {told[0].key}
    assert [notice.first for notice in told] == [True] + [False] * 59
    last = told[-1]
    assert last.title == "sloth-tray: 60 jobs failed"
    assert last.body == "job0, job1, job2 and 57 more"
    assert last.actions == (("retry-all", "Retry all"), ("show-logs", "Show logs"))
    assert len(last.jobs) == 60


def test_more_failures_between_two_snapshots_than_one_carries_are_all_counted():
    """60 jobs fail between two snapshots, and the second carries the newest 50: the
    10 it leaves out failed all the same, and the notification counts them."""
    newest = tuple(job(number) for number in range(10, 60))
    [notice] = Announcer().failures(Snapshot(), failed(*newest, count=60), NOW)
    assert notice.title == "sloth-tray: 60 jobs failed"
    assert notice.body.endswith(" and 57 more")
    assert len(notice.jobs) == 50  # what its buttons act on by id; Retry all takes all


def test_bad_headers_past_what_a_snapshot_carries_still_show_their_scripts_first():
    """60 drops with a bad header fail between two snapshots (pushed in one commit), and
    the second carries the newest 50: the 10 it leaves out are scripts at fault too
    (its count of those says so), so the scripts come first, as for 50 of them."""
    newest = tuple(job(number, Reason.BAD_HEADER) for number in range(10, 60))
    after = replace(failed(*newest, count=60), failed_at_fault=60)
    [notice] = Announcer().failures(Snapshot(), after, NOW)
    assert notice.title == "sloth-tray: 60 jobs failed"
    assert notice.actions == (("show-scripts", "Show scripts"), ("retry-all", "Retry all"))
    # One of the ten unseen failed otherwise: it may have a log to read.
    mixed = replace(failed(*newest, count=60), failed_at_fault=59)
    [notice] = Announcer().failures(Snapshot(), mixed, NOW)
    assert notice.actions == (("retry-all", "Retry all"), ("show-logs", "Show logs"))


def test_unlisted_failures_leave_the_count_once_the_snapshot_is_whole_again():
    announcer = Announcer()
    newest = tuple(job(number) for number in range(10, 60))
    announcer.failures(Snapshot(), failed(*newest, count=60), NOW)
    # Every failure retried but two the snapshot carries: nothing unseen is left.
    [notice] = announcer.failures(failed(*newest, count=60), failed(*newest[:2]), NOW + 1)
    assert notice.title == "sloth-tray: 2 jobs failed"


def test_a_burst_past_what_a_snapshot_carries_keeps_the_jobs_it_no_longer_sees():
    """A snapshot carries the newest 50 failed jobs: the 10 older ones pushed out of
    it are still failed, and still in the count."""
    announcer = Announcer()
    before = Snapshot()
    for number in range(60):
        after = failed(*(before.failed_jobs + (job(number),))[-50:], count=number + 1)
        *_, notice = announcer.failures(before, after, NOW)
        before = after
    assert notice.title == "sloth-tray: 60 jobs failed"


def test_failures_further_apart_than_the_gap_are_notifications_of_their_own():
    announcer = Announcer()
    first = announcer.failures(Snapshot(), failed(job(1)), NOW)
    second = announcer.failures(failed(job(1)), failed(job(1), job(2)),
                                NOW + BURST_GAP + 1)
    assert first[0].key != second[0].key
    assert second[0].body == "job2: exit status 1"


def test_a_burst_grows_while_each_failure_follows_the_last_within_the_gap():
    told = fail_one_by_one(Announcer(), [job(n) for n in range(5)], every=BURST_GAP - 1)
    assert len({notice.key for notice in told}) == 1


def test_once_its_notification_was_closed_the_next_failure_is_a_new_one():
    announcer = Announcer()
    [first] = announcer.failures(Snapshot(), failed(job(1)), NOW)
    announcer.closed(first.key)
    [second] = announcer.failures(failed(job(1)), failed(job(1), job(2)), NOW + 1)
    assert second.key != first.key and second.first
    assert second.body == "job2: exit status 1"  # not "2 jobs failed": job1 was seen


def test_a_bad_header_or_a_refused_drop_offers_its_script_never_retry():
    for bad in (job(1, Reason.BAD_HEADER), job(1, Reason.UNRUNNABLE),
                job(1, Reason.REFUSED, refused=True)):
        [notice] = Announcer().failures(Snapshot(), failed(bad), NOW)
        assert notice.actions == (("show-script", "Show script"), ("remove", "Remove")), bad
    # A burst of them: the scripts first; Retry all, as everywhere, retries bad headers
    # (read again: a fixed one runs), never refused drops.
    burst = fail_one_by_one(Announcer(), [job(n, Reason.BAD_HEADER) for n in range(3)])
    assert burst[-1].actions == (("show-scripts", "Show scripts"), ("retry-all", "Retry all"))
    refused = fail_one_by_one(Announcer(), [job(n, Reason.REFUSED, refused=True)
                                            for n in range(3)])
    assert refused[-1].actions == (("show-scripts", "Show scripts"),)
    mixed = fail_one_by_one(Announcer(), [job(1, Reason.BAD_HEADER), job(2)])
    assert mixed[-1].actions == (("retry-all", "Retry all"), ("show-logs", "Show logs"))


def test_a_notification_is_withdrawn_once_its_job_is_retried_or_cancelled():
    announcer = Announcer()
    [notice] = announcer.failures(Snapshot(), failed(job(1)), NOW)
    assert announcer.failures(failed(job(1)), Snapshot(pending=1), NOW + 1) == \
        [Withdraw(notice.key)]
    assert announcer.failures(Snapshot(pending=1), Snapshot(), NOW + 2) == []


def test_a_burst_shrinks_as_its_jobs_are_retried_and_goes_with_the_last():
    announcer = Announcer()
    told = fail_one_by_one(announcer, [job(1), job(2), job(3)])
    key = told[0].key
    [two] = announcer.failures(failed(job(1), job(2), job(3)), failed(job(2), job(3)), NOW + 5)
    assert (two.key, two.title, two.first) == (key, "sloth-tray: 2 jobs failed", False)
    [one] = announcer.failures(failed(job(2), job(3)), failed(job(3)), NOW + 6)
    assert (one.key, one.body, one.actions) == (key, "job3: exit status 1",
                                                (("retry", "Retry"), ("log", "Show log")))
    assert announcer.failures(failed(job(3)), Snapshot(), NOW + 7) == [Withdraw(key)]


def test_one_retry_all_that_fails_9_again_is_one_new_notification():
    announcer = Announcer()
    nine = [job(n) for n in range(9)]
    first = fail_one_by_one(announcer, nine)
    retried = announcer.failures(failed(*nine), Snapshot(pending=9), NOW + 10)
    assert retried == [Withdraw(first[0].key)]
    again = fail_one_by_one(announcer, [job(n, at=NOW + 100 + n) for n in range(9)],
                            start=Snapshot(pending=9))
    assert len({notice.key for notice in again}) == 1
    assert again[-1].title == "sloth-tray: 9 jobs failed"


def test_bad_headers_that_fail_again_on_retry_all_change_nothing_on_screen():
    """A retry re-reads a bad header and fails the job again at once: the same jobs,
    a new failure time, the same words."""
    announcer = Announcer()
    bad = [job(n, Reason.BAD_HEADER) for n in range(9)]
    fail_one_by_one(announcer, bad)
    again = failed(*(job(n, Reason.BAD_HEADER, at=NOW + 100 + n) for n in range(9)))
    assert announcer.failures(failed(*bad), again, NOW + 10) == []


def test_a_job_that_only_came_into_view_is_not_news():
    """60 failed, 50 carried: when one is retried, an older one comes into view."""
    carried = [job(n) for n in range(10, 60)]
    before = failed(*carried, count=60)
    after = failed(*carried[1:], job(9), count=59)
    assert failures_to_announce(before, after) == []
    newer = failed(*carried[1:], job(9), job(70), count=60)
    assert failures_to_announce(before, newer) == [job(70)]


def test_a_failure_is_announced_once_and_again_when_it_fails_again():
    one = failed(job(1))
    assert failures_to_announce(None, one) == []
    assert failures_to_announce(Snapshot(), one) == [job(1)]
    assert failures_to_announce(one, one) == []
    again = failed(job(1, at=NOW + 60))
    assert failures_to_announce(one, again) == [job(1, at=NOW + 60)]


def test_names_say_each_name_once_with_its_count():
    series = [FailedJob(f"b{n}", "backup", "x", NOW + n) for n in range(3)]
    assert names([job(1), *series]) == "job1, backup (3)"
    assert names([job(n) for n in range(5)]) == "job0, job1, job2 and 2 more"
    assert names([FailedJob("e", "evil\x1b[2Jname", "x", NOW)]) == "evil\\x1b[2Jname"


def unsure(number: int, at: float | None = None) -> FailedJob:
    return FailedJob(f"u{number}", f"invoice{number}",
                     'step "send" was cut short at 2026-12-01 14:02:00 (run 1), so ...',
                     NOW + number if at is None else at, reason=Reason.STEP_UNSURE,
                     unsure_step="send")


def test_a_cut_step_that_asks_says_so_and_offers_its_two_answers():
    [notice] = Announcer().failures(Snapshot(), failed(unsure(1)), NOW)
    assert notice.title == "sloth-tray: a step was cut short"
    assert notice.body == ('invoice1: step "send" was cut short, so it may or may not '
                           "have happened. Did it happen?")
    assert notice.actions == (("mark-done", 'Mark "send" done'),
                              ("run-again", 'Run "send" again'), ("log", "Show log"))
    long_name = FailedJob("u9", "x", "cut", NOW, reason=Reason.STEP_UNSURE,
                          unsure_step="a\x1b" + "b" * 200)
    [notice] = Announcer().failures(Snapshot(), failed(long_name), NOW)
    assert all(label.isprintable() and len(label) < 60 for _, label in notice.actions)
    assert len(notice.body) <= 200


def test_without_its_step_known_a_step_unsure_failure_is_told_as_any_other():
    job = FailedJob("u1", "invoice", "cut short", NOW, reason=Reason.STEP_UNSURE)
    [notice] = Announcer().failures(Snapshot(), failed(job), NOW)
    assert notice.actions == (("retry", "Retry"), ("log", "Show log"))


def test_a_burst_never_answers_a_cut_step_for_a_person():
    """Retry all would run the cut step again unasked: it retries the others only."""
    mixed = fail_one_by_one(Announcer(), [unsure(1), job(2)])
    assert mixed[-1].actions == (("retry-all", "Retry all"), ("show-logs", "Show logs"))
    assert retryable(mixed[-1].jobs) == [job(2)]
    only_unsure = fail_one_by_one(Announcer(), [unsure(1), unsure(2)])
    assert only_unsure[-1].actions == (("show-logs", "Show logs"),)


def test_failures_at_this_start_are_news_and_older_ones_are_not():
    """A run cut short by a crash or a reboot fails as the app starts again (its lease
    taken back): that failure is news, though it is in the first snapshot."""
    announcer = Announcer(since=NOW)
    first = failed(unsure(1, at=NOW + 1), job(2, at=NOW - 60))
    [notice] = announcer.failures(None, first, NOW)
    assert [j.id for j in notice.jobs] == ["u1"]
    assert failures_to_announce(None, first) == []


def test_a_step_question_left_open_at_the_last_quit_is_asked_again_at_start_up():
    """A quit cuts a step that asks: the job failed then, before this start, and no
    notification could be shown. Its question still waits for a person's word, so the
    first snapshot of the next start asks it; an old plain failure stays no news."""
    unsure = job(1, Reason.STEP_UNSURE, at=NOW - 3600, unsure_step="send")
    plain = job(2, at=NOW - 3600)
    assert failures_to_announce(None, failed(unsure, plain), since=NOW) == [unsure]
    announcer = Announcer(since=NOW)
    (notice,) = announcer.failures(None, failed(unsure, plain), NOW)
    assert "send" in notice.title + notice.body and len(notice.actions) >= 2


def test_notifications_never_closed_are_followed_only_while_the_notifier_remembers_them():
    """A failure a day past the 50 a snapshot carries, none of them closed (GNOME keeps
    them in its tray; no notifier at all with notifications off): each burst was
    followed for good, and each snapshot walked them all (74 ms at 3,000)."""
    announcer = Announcer()
    jobs: list[FailedJob] = []
    before = failed()
    for number in range(300):
        jobs.insert(0, job(number))
        after = failed(*jobs[:50], count=len(jobs))
        announcer.failures(before, after, NOW + number * 2 * BURST_GAP)
        before = after
    assert len(announcer._up) == FOLLOWED
    [newest] = announcer.failures(
        before, failed(*[job(300), *jobs[:49]], count=301), NOW + 300 * 2 * BURST_GAP)
    assert newest.title == "sloth-tray: a job failed" and newest.first
