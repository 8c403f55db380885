"""Which desktop notifications the Snapshots call for (pure).

A failure is news once, and old failures at start-up are none. A burst of failures
(each less than BURST_GAP after the one before, while their notification is still
up) is ONE notification, updated in place with a count, not one each: sixty bad
drops, or one "Retry all failed" that fails again, must not bury the desktop.
A notification is withdrawn once nothing it tells of is failed any longer (retried,
cancelled, removed), and shrinks while some of it still is. Its buttons fit the
failure: a script the queue cannot run (a bad header, a refused drop, ...) fails
again on every retry until it is fixed, so it offers the script, never Retry; a step
cut short that asks whether it happened offers its two answers. A burst's Retry all
retries what every Retry all does (reasons.in_retry_all): never a refused drop, and
never a step's question answered unasked.
A failure at this start (a run cut short by a crash, its lease taken back as the app
starts) is news, though it is in the first snapshot. A failure in a lane other than
main names its lane ("fetch_mail failed (lane net)").

A job that asks the user a question (`sloth-tray ask`) is a notification of its own
with the choices as buttons, shown once while the question is open and withdrawn
once it is answered (anywhere), cancelled or timed out (Questions).

With `notify_lane_emptied` on, a lane that ran a burst of jobs (two or more since it
was last quiet) says once that it is done (LaneBursts).

The tray keeps one Announcer, touched on one thread, and hands what it returns to
the notifier: a Notice is shown, or updated in place when its key is still up; a
Withdraw closes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sloth_tray.daemon.snapshot import AskingJob, FailedJob, Lane, Snapshot
from sloth_tray.jobs.overdue import OverdueJob
from sloth_tray.store.lanes import MAIN
from sloth_tray.store.reasons import PERMANENT, Reason, in_retry_all
from sloth_tray.text import printable
from sloth_tray.tray.presenter import (
    CHOICE_CHARS,
    has_lanes,
    lanes_of,
    question_label,
    short,
    step_name,
)

# A failure this soon after the last one a notification told of joins it. Long
# enough for a queue of failing jobs to fail one after another (a Retry all), short
# enough that a failure an hour later pops up anew rather than change a stale text.
BURST_GAP = 60.0
# Notifications followed at most, the newest: as many as the notifier remembers (notify.py's
# REMEMBERED). An older one, never closed (GNOME keeps them in its tray unclosed), stays on
# screen as it last read; followed for good, each would be walked at every snapshot.
FOLLOWED = 64
NAMES_SHOWN = 3  # a burst's body names this many, then says how many more
BODY_CHARS = 200  # a single failure's "name: error"; Show log has the rest
BURST_RAN_AT_LEAST = 2  # jobs run in a lane since it was quiet: a burst worth a word

Actions = tuple[tuple[str, str], ...]  # (key, label); the key comes back when clicked

# One job. Its script is at fault: show it (to fix the header, or see what was
# dropped) or remove the job. Otherwise: run it again, or read what it said.
RETRY, SHOW_LOG = ("retry", "Retry"), ("log", "Show log")
SHOW_SCRIPT, REMOVE = ("show-script", "Show script"), ("remove", "Remove")
# A burst: retry those that a retry can help; the folder that says more.
RETRY_ALL, SHOW_LOGS, SHOW_SCRIPTS = (("retry-all", "Retry all"), ("show-logs", "Show logs"),
                                      ("show-scripts", "Show scripts"))
# A step cut short that asks (reason STEP_UNSURE): did it happen? Its name goes in.
MARK_DONE, RUN_AGAIN = ("mark-done", 'Mark "{}" done'), ("run-again", 'Run "{}" again')


@dataclass(frozen=True)
class Notice:
    """A notification as it should read now; `key` names it for its whole life."""

    key: str
    title: str
    body: str
    actions: Actions
    jobs: tuple[FailedJob, ...]  # what it tells of, in the order they failed
    first: bool = True  # shown anew; False: an update of what is up under `key`


@dataclass(frozen=True)
class Withdraw:
    """Close the notification `key`: nothing it told of is failed any longer."""

    key: str


def script_at_fault(job: FailedJob) -> bool:
    """Whether only a change to the script (or removing it) can help: a retry alone
    fails the same way again."""
    return job.refused or job.reason in PERMANENT


def asks(job: FailedJob) -> bool:
    """Whether it waits for a person's word on a step cut short (its answers, not Retry)."""
    return job.reason == Reason.STEP_UNSURE and job.unsure_step is not None


def retryable(jobs: Iterable[FailedJob]) -> list[FailedJob]:
    """Those a Retry all retries: the rule of every Retry all (reasons.in_retry_all)."""
    return [job for job in jobs if in_retry_all(job.reason)]


@dataclass
class _Up:
    """A notification on screen (as far as anyone told us) and the jobs it tells of."""

    key: str
    jobs: dict[str, FailedJob] = field(default_factory=dict)  # by id, as they failed
    last_failure: float = 0.0
    said: Notice | None = None
    # Failures it counts that no snapshot carried: more failed between two snapshots
    # than one carries (its newest SHOWN_FAILED), so their ids were never seen.
    unlisted: int = 0
    # Whether those were scripts at fault, as every failed job was when they came.
    unlisted_at_fault: bool = True


class Announcer:
    """Failures -> Notices and Withdraws, Snapshot by Snapshot. `now` is any clock
    that only moves forward (the tray's is time.monotonic)."""

    def __init__(self, gap: float = BURST_GAP, since: float | None = None) -> None:
        """`since`: when this start began (the queue's clock); a failure since then is
        news even in the first snapshot."""
        self._gap = gap
        self._since = since
        self._up: list[_Up] = []  # oldest first
        self._made = 0

    def failures(self, before: Snapshot | None, after: Snapshot,
                 now: float) -> list[Notice | Withdraw]:
        self._follow(after)
        news = failures_to_announce(before, after, self._since)
        for job in reversed(news):  # oldest 1st
            if not any(job.id in up.jobs for up in self._up):  # else followed just now
                up = self._burst(now)
                up.jobs[job.id] = job
                up.last_failure = now
        unseen = unlisted_failures(before, after, len(news))
        if unseen:
            up = self._burst(now)
            up.unlisted += unseen
            up.unlisted_at_fault &= after.failed_at_fault >= after.failed_count
            up.last_failure = now
        changes: list[Notice | Withdraw] = []
        for up in list(self._up):
            if not up.jobs and not up.unlisted:
                self._up.remove(up)
                if up.said is not None:
                    changes.append(Withdraw(up.key))
                continue
            notice = _notice(up.key, tuple(up.jobs.values()), first=up.said is None,
                             unlisted=up.unlisted, unlisted_at_fault=up.unlisted_at_fault)
            if up.said is None or _reads(notice) != _reads(up.said):
                changes.append(notice)
            up.said = notice
        return changes

    def closed(self, key: str) -> None:
        """The user (or the server) closed notification `key`: what fails next is news
        of its own, and its jobs are no longer followed."""
        self._up = [up for up in self._up if up.key != key]

    def _follow(self, after: Snapshot) -> None:
        """Bring each notification's jobs up to date: gone from the failed list means
        retried, cancelled or removed; a new failure time means failed again. While the
        snapshot carries only some of the failed jobs, one it leaves out may still be
        failed, so it is kept."""
        failed = {job.id: job for job in after.failed_jobs}
        whole = len(after.failed_jobs) >= after.failed_count
        for up in self._up:
            if whole:  # every failed job is carried now: none is left unseen
                up.unlisted, up.unlisted_at_fault = 0, True
            for job_id in list(up.jobs):
                current = failed.get(job_id)
                if current is None and whole:
                    del up.jobs[job_id]
                elif current is not None and current.at != up.jobs[job_id].at:
                    up.jobs[job_id] = current

    def _burst(self, now: float) -> _Up:
        """The newest notification still taking failures, or a new one."""
        if self._up and now - self._up[-1].last_failure < self._gap:
            return self._up[-1]
        self._made += 1
        up = _Up(f"failed-{self._made}")
        self._up.append(up)
        del self._up[:-FOLLOWED]  # the oldest beyond them: left on screen as it reads
        return up


def _reads(notice: Notice) -> tuple:
    """What a user sees and what the buttons act on: another failure time of the same
    job changes neither, so it sends nothing."""
    return notice.title, notice.body, notice.actions, tuple(job.id for job in notice.jobs)


def _notice(key: str, jobs: tuple[FailedJob, ...], *, first: bool,
            unlisted: int = 0, unlisted_at_fault: bool = False) -> Notice:
    if unlisted:  # more than the jobs it can name: a burst, of scripts at fault or not
        at_fault = unlisted_at_fault and all(script_at_fault(job) for job in jobs)
        return Notice(key, f"sloth-tray: {len(jobs) + unlisted} jobs failed",
                      names(jobs, unlisted=unlisted),
                      (SHOW_SCRIPTS, RETRY_ALL) if at_fault else (RETRY_ALL, SHOW_LOGS),
                      jobs, first)
    if len(jobs) == 1 and asks(jobs[0]):
        [job] = jobs
        name = step_name(job.unsure_step or "")
        body = short(f'{in_lane(job)}: step "{name}" was cut short, so it may or may not '
                     "have happened. Did it happen?", BODY_CHARS)
        actions = ((MARK_DONE[0], MARK_DONE[1].format(name)),
                   (RUN_AGAIN[0], RUN_AGAIN[1].format(name)), SHOW_LOG)
        return Notice(key, "sloth-tray: a step was cut short", body, actions, jobs, first)
    if len(jobs) == 1:
        [job] = jobs
        who = job.name if job.lane == MAIN else f"{job.name} failed (lane {job.lane})"
        body = short(f"{who}: {job.error}" if job.error.strip() else who, BODY_CHARS)
        actions = (SHOW_SCRIPT, REMOVE) if script_at_fault(job) else (RETRY, SHOW_LOG)
        return Notice(key, "sloth-tray: a job failed", body, actions, jobs, first)
    if retryable(jobs) and all(script_at_fault(job) for job in jobs):
        # Scripts the queue could not run (no logs: they never ran): to be seen first,
        # fixed, then retried; unfixed, a retry fails again at once, saying why.
        actions: Actions = (SHOW_SCRIPTS, RETRY_ALL)
    elif retryable(jobs):
        actions = (RETRY_ALL, SHOW_LOGS)
    elif any(asks(job) for job in jobs):  # their answers are in the menu; the logs say more
        actions = (SHOW_LOGS,)
    else:
        actions = (SHOW_SCRIPTS,)
    return Notice(key, f"sloth-tray: {len(jobs)} jobs failed", names(jobs), actions, jobs,
                  first)


def in_lane(job: FailedJob) -> str:
    """`fetch_mail (lane net)`; a job of main by its name alone, as before lanes."""
    return job.name if job.lane == MAIN else f"{job.name} (lane {job.lane})"


def names(jobs: Iterable[FailedJob], *, unlisted: int = 0) -> str:
    """`tidy, backup (3), sync and 57 more`: each name once, with its count when a
    job of that name (a recurring series, say) failed more than once; a lane other
    than main said with it (`fetch_mail (lane net)`, `fetch_mail (3, lane net)`)."""
    counts: dict[tuple[str, str], int] = {}
    for job in jobs:
        key = (printable(job.name), printable(job.lane))
        counts[key] = counts.get(key, 0) + 1
    shown = [counted(name, lane, count)
             for (name, lane), count in list(counts.items())[:NAMES_SHOWN]]
    more = len(counts) - len(shown) + unlisted  # `unlisted`: failed jobs none names
    return ", ".join(shown) + (f" and {more} more" if more else "")


def counted(name: str, lane: str, count: int) -> str:
    said = ([str(count)] if count > 1 else []) + ([f"lane {lane}"] if lane != MAIN else [])
    return f"{name} ({', '.join(said)})" if said else name


def failures_to_announce(before: Snapshot | None, after: Snapshot,
                         since: float | None = None) -> list[FailedJob]:
    """Jobs that failed since `before` (newest first): each failure is news once.
    Nothing is news in the first snapshot but what failed at or after `since` (this
    start's: old failures are not) and a step's question that still waits for a
    person's word (asks), nor is a job that only came into view: when
    `before` carried only some of the failed jobs, one that failed no later than the
    newest it carried was there already, unseen."""
    if before is None:  # a step's question still open (say, cut by the last quit) is news
        return [] if since is None else [job for job in after.failed_jobs
                                         if job.at >= since or asks(job)]
    seen = {(job.id, job.at) for job in before.failed_jobs}
    partial = len(before.failed_jobs) < before.failed_count
    newest = max((job.at for job in before.failed_jobs), default=float("-inf"))
    return [job for job in after.failed_jobs
            if (job.id, job.at) not in seen and not (partial and job.at <= newest)]


def unlisted_failures(before: Snapshot | None, after: Snapshot, listed: int) -> int:
    """How many jobs failed since `before` that `after` does not carry: the growth of
    the failed count past the `listed` news, when `after` carries only some of its
    failed jobs (a retried job failing again is news without growing the count, so
    this never counts more than are missing)."""
    if before is None or len(after.failed_jobs) >= after.failed_count:
        return 0
    return max(0, after.failed_count - before.failed_count - listed)


def overdue_to_announce(before: Snapshot | None, after: Snapshot) -> list[OverdueJob]:
    """Series that became overdue since `before`: one notification each. A series
    stays the same overdue one (same name, same last success) until it succeeds;
    nothing is announced for the first snapshot (old news, as for failures)."""
    if before is None:
        return []
    seen = {(job.name, job.since) for job in before.overdue}
    return [job for job in after.overdue if (job.name, job.since) not in seen]


# -- a question for the user -------------------------------------------------------------

CHOICE = "choice-"  # a button's key: CHOICE + the choice's index (a choice is any text,
# "default" too, which the notification spec keeps for a click on the body)


@dataclass(frozen=True)
class Question:
    """A job's question as a notification, its choices as buttons."""

    key: str
    title: str
    body: str
    actions: Actions
    job: AskingJob

    def choice(self, action: str) -> str | None:
        """The choice a button's key stands for; None for any other key."""
        index = action[len(CHOICE):] if action.startswith(CHOICE) else ""
        return self.job.choices[int(index)] if index.isdigit() and \
            int(index) < len(self.job.choices) else None


class Questions:
    """Snapshots -> Questions and Withdraws: each question shown once while it is
    asked, open ones at start-up too (they wait for the user whenever they began);
    withdrawn once the job no longer asks it. One object, touched on one thread."""

    def __init__(self) -> None:
        self._up: set[str] = set()  # notification keys of the questions shown

    def update(self, snapshot: Snapshot) -> list[Question | Withdraw]:
        if snapshot.problem:  # the queue unread: nothing is known to be answered
            return []
        asked = {f"ask:{job.key}": job for job in snapshot.asking}
        # A snapshot carrying only some of the questions may leave out an open one.
        whole = len(snapshot.asking) >= snapshot.asking_count
        changes: list[Question | Withdraw] = []
        for key in sorted(self._up - asked.keys() if whole else ()):
            self._up.discard(key)
            changes.append(Withdraw(key))
        for key, job in asked.items():
            if key not in self._up:
                self._up.add(key)
                changes.append(question(key, job))
        return changes


def question(key: str, job: AskingJob) -> Question:
    actions = tuple((f"{CHOICE}{index}", short(choice, CHOICE_CHARS))
                    for index, choice in enumerate(job.choices))
    who = question_label(job) if job.lane == MAIN else \
        f"{question_label(job)} (lane {printable(job.lane)})"
    return Question(key, "sloth-tray: a job asks you", short(who, BODY_CHARS), actions, job)


# -- a lane done with its burst ----------------------------------------------------------


@dataclass(frozen=True)
class LaneDone:
    """A lane ran a burst of jobs and has nothing left to do now: said once."""

    lane: str
    ran: int  # jobs that ran in it since it was last quiet (a retried one once)
    failed: int  # of those, failed now (their own notifications told why)
    named: bool = True  # False: main is the only lane, and says no lane's name

    @property
    def title(self) -> str:
        return "sloth-tray: jobs done"

    @property
    def body(self) -> str:
        said = (f"all {self.ran} jobs done" if not self.failed
                else f"{self.ran} jobs ran, {self.failed} failed")
        return f"lane {printable(self.lane)}: {said}" if self.named else said.capitalize()


class LaneBursts:
    """Snapshots -> LaneDone, once per burst: per lane, the jobs seen running since it
    was last quiet. One object, touched on one thread (the tray's)."""

    def __init__(self) -> None:
        self._ran: dict[str, set[str]] = {}  # lane -> ids of the jobs run in its burst

    def update(self, snapshot: Snapshot) -> list[LaneDone]:
        if snapshot.problem or snapshot.stopped:  # a stopping app gives its runs back
            return []
        lanes = lanes_of(snapshot)
        failed = {job.id for job in snapshot.failed_jobs}
        done = []
        for lane in lanes:
            ran = self._ran.setdefault(lane.name, set())
            if lane.running is not None:
                ran.add(lane.running.id)
            elif quiet(lane, ran, snapshot):
                if len(ran) >= BURST_RAN_AT_LEAST:
                    done.append(LaneDone(lane.name, len(ran), len(ran & failed),
                                         named=has_lanes(snapshot)))
                ran.clear()
        for gone in set(self._ran) - {lane.name for lane in lanes}:
            del self._ran[gone]  # its folder went, and its jobs with it
        return done


def quiet(lane: Lane, ran: set[str], snapshot: Snapshot) -> bool:
    """Nothing left to do now: nothing runs, nothing is due, no pause holds work, and
    every job still waiting is in view and none of the burst's (a retry after a
    failure is its burst going on). A job due later that did not run in the burst, a
    recurring series' next run say, keeps no lane busy."""
    if lane.running is not None or lane.due_now or (lane.paused and lane.pending):
        return False
    mine = [job for job in snapshot.waiting if job.lane == lane.name]
    return len(mine) >= lane.pending and not any(job.id in ran for job in mine)
