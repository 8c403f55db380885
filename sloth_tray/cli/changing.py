"""The commands that change the queue: add, retry, run-now, cancel, pause, resume,
prune, and autostart (which changes the login session)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sloth_tray.cli.common import command, emit_json, in_lane
from sloth_tray.errors import SlothError
from sloth_tray.paths import Home
from sloth_tray.store.access import (
    find_job,
    open_queue,
    retry_instead,
    run_now_instead,
    sound_home,
)
from sloth_tray.store.reasons import Reason, in_retry_all
from sloth_tray.store.states import State
from sloth_tray.text import printable

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from sloth_tray.store.queue import Job, Queue


Hint = Callable[["Job"], "str | None"]


def _each_job(queue: Queue, ids: Sequence[str], act: Callable[[Queue, str], bool],
              verb: str, done: str, hint: Hint | None = None,
              mistakes: tuple[type[SlothError], ...] = ()) -> int:
    """Apply `act` to each id; one line per job; non-zero if any could not be done.

    `hint` may say what to do instead with a job `act` cannot change (the
    command that would), in place of "nothing to <verb>". An error of `mistakes` is a
    usage mistake: the exit status is 2."""
    status = 0
    for given in ids:
        try:
            job = queue.get(find_job(queue, given))
            if act(queue, job.id):
                print(f"{done:<9} {printable(job.name)} ({job.id})")
            else:
                why = (hint and hint(job)) or f"is {job.state.value}; nothing to {verb}"
                print(f"sloth-tray: {printable(job.name)} ({job.id}) {why}",
                      file=sys.stderr)
                status = max(status, 1)
        except SlothError as exc:
            print(f"sloth-tray: {printable(exc)}", file=sys.stderr)
            status = 2 if isinstance(exc, mistakes) else max(status, 1)
    return status


def _bulk_usage_mistake(args: argparse.Namespace, verb: str) -> bool:
    """Say, in one line, what is wrong with `retry` or `cancel` given none of ids,
    --all-failed and --name, more than one, or --lane with ids (a usage mistake: the
    caller exits 2)."""
    if sum((args.all_failed, bool(args.ids), args.by_name is not None)) != 1:
        print(f"sloth-tray: give job ids to {verb}, or --all-failed, or --name NAME "
              "(one of them)", file=sys.stderr)
    elif args.lane is not None and not args.all_failed:
        print(f"sloth-tray: --lane goes with --all-failed (`sloth-tray {verb} --all-failed "
              "--lane NAME`); ids name their jobs already", file=sys.stderr)
    else:
        return False
    return True


def _failed_jobs(queue: Queue, lane: str | None) -> list[Job]:
    """Every failed job, newest first; with `lane`, that lane's only."""
    return queue.jobs(State.FAILED, lane=lane)


@command
def cmd_retry(args: argparse.Namespace, home: Home) -> int:
    if _bulk_usage_mistake(args, "retry"):
        return 2  # argparse's exit code for a usage mistake
    from sloth_tray.store import spool
    from sloth_tray.store.queue import NotCutShort

    ids = args.ids
    with open_queue(home) as queue:
        if args.by_name is not None:
            return _by_name(queue, home, args.by_name, "retry", "retried", "failed",
                            lambda queue, job: in_retry_all(job.reason)
                            and spool.retry(queue, job.id))
        if args.all_failed:
            failed = _failed_jobs(queue, args.lane)
            ids = [job.id for job in failed if in_retry_all(job.reason)]
            refused = sum(job.reason == Reason.REFUSED for job in failed)
            unsure = [job.id for job in failed if job.reason == Reason.STEP_UNSURE]
            if refused:
                print(f"skipped {refused} refused job{'' if refused == 1 else 's'}: a refused "
                      "drop never runs (`sloth-tray list --reason refused` shows them, "
                      "`sloth-tray cancel ID` removes one)")
            if unsure:
                which = unsure[0] if len(unsure) == 1 else "ID"
                jobs_ask = "job that asks" if len(unsure) == 1 else "jobs that ask"
                print(f"skipped {len(unsure)} {jobs_ask} about a step cut short: "
                      f"`sloth-tray retry {which}` runs the step again, "
                      f"`sloth-tray retry {which} --step-done NAME` says it happened"
                      + ("" if len(unsure) == 1 else
                         " (`sloth-tray list --reason step_unsure` shows them)"))
            if not ids:
                print(f"no failed jobs{in_lane(args.lane)}" if not (refused or unsure)
                      else "nothing else to retry")
                return 0
        steps = {"step_done": args.step_done, "forget_from": args.forget_from,
                 "fresh": args.fresh}
        status = _each_job(queue, ids, lambda queue, job_id: spool.retry(queue, job_id, **steps),
                           "retry", "retried", run_now_instead, mistakes=(NotCutShort,))
    home.ring_doorbell()
    return status


@command
def cmd_run_now(args: argparse.Namespace, home: Home) -> int:
    if bool(args.ids) == (args.by_name is not None):
        print("sloth-tray: give job ids to run now, or --name NAME (one of them)",
              file=sys.stderr)
        return 2  # argparse's exit code for a usage mistake
    with open_queue(home) as queue:
        if args.by_name is not None:
            return _by_name(queue, home, args.by_name, "run now", "made due now", "waiting",
                            lambda queue, job: queue.run_now(job.id))
        status = _each_job(queue, args.ids, lambda queue, job_id: queue.run_now(job_id),
                           "run now", "due now", retry_instead)
        paused = queue.paused()
        held = sorted(_lanes_of(queue, args.ids) & queue.paused_lanes())
    home.ring_doorbell()
    if paused and held and status == 0:
        print("the queue is paused: it starts after `sloth-tray resume`")
    for lane in held if status == 0 and not paused else ():
        print(f"lane {printable(lane)} is paused: its jobs start after "
              f"`sloth-tray resume {_quoted(lane)}`")
    return status


def _lanes_of(queue: Queue, given: Sequence[str]) -> set[str]:
    """The lanes of the jobs named (one that names none was said already)."""
    found = set()
    for name in given:
        with contextlib.suppress(SlothError):
            found.add(queue.get(find_job(queue, name)).lane)
    return found


def _lane_given(args: argparse.Namespace, verb: str) -> tuple[bool, str | None]:
    """(sound, the lane): LANE or --lane NAME, the same thing; both, naming two lanes,
    is a usage mistake, said in one line (the caller exits 2)."""
    lane, option = args.lane, args.lane_option
    if lane is not None and option is not None and lane != option:
        print(f"sloth-tray {verb}: give the lane as LANE or as --lane NAME, not both",
              file=sys.stderr)
        return False, None
    return True, lane if lane is not None else option


def _no_such_lane(queue: Queue, home: Home, lane: str, verb: str) -> bool:
    """Whether `lane` is one no folder and no job has (said in one line, with the nearest
    lane: a typo must not make a lane). The queue's lanes are those with a job, a
    folder the app has seen, or a word on the pause; a folder made while the app was
    not running counts too."""
    folders = _lane_folders(home)
    known = {*queue.lanes(), *folders}
    if lane in known:
        return False
    from sloth_tray.nearest import did_you_mean  # here: only a mistake needs it

    ahead = (f"; to pause a lane before its first job, make its folder first (mkdir "
             f"{_quoted(str(home.lane_folder(lane)))})" if verb == "pause" else "")
    print(f"sloth-tray {verb}: no folder and no job has a lane {printable(repr(lane))}"
          f"{printable(did_you_mean(lane, sorted(known)))}{ahead}", file=sys.stderr)
    return True


def _lane_folders(home: Home) -> list[str]:
    """The folders in the jobs folder, each a lane's (none when it is not there)."""
    from sloth_tray.store.lanes import problem

    try:
        entries = list(os.scandir(home.jobs))
    except OSError:
        return []
    return [entry.name for entry in entries
            if entry.is_dir(follow_symlinks=False) and problem(entry.name) is None]


@command
def cmd_pause(args: argparse.Namespace, home: Home) -> int:
    sound, lane = _lane_given(args, "pause")
    if not sound:
        return 2  # argparse's exit code for a usage mistake
    if args.series is not None:
        return _series_pause(home, args, True)
    with open_queue(home) as queue:
        if lane is not None and _no_such_lane(queue, home, lane, "pause"):
            return 2
        was_paused = queue.paused(lane)
        queue.set_paused(True, lane=lane)
    home.ring_doorbell()
    if lane is None:
        print("paused: no new job starts until `sloth-tray resume` (a running job finishes)")
    elif was_paused:
        print(f"lane {printable(lane)} was paused already: nothing new starts in it until "
              f"`sloth-tray resume {_quoted(lane)}`")
    else:
        print(f"lane {printable(lane)} paused: its running job finishes, nothing new starts "
              f"in it until `sloth-tray resume {_quoted(lane)}`")
    return 0


@command
def cmd_resume(args: argparse.Namespace, home: Home) -> int:
    sound, lane = _lane_given(args, "resume")
    if not sound:
        return 2  # argparse's exit code for a usage mistake
    if args.series is not None:
        return _series_pause(home, args, False)
    with open_queue(home) as queue:
        if lane is not None and _no_such_lane(queue, home, lane, "resume"):
            return 2
        whole_queue_paused = queue.paused()
        lanes_paused = queue.paused_lanes(on_their_own=True)
        was_paused = queue.paused(lane)
        queue.set_paused(False, lane=lane)
        if lane is not None and lane not in _lane_folders(home):
            # Known for its pause alone (an older version took one for any name), or
            # for its jobs: no longer for the pause once it is lifted.
            queue.forget_lane(lane)
        due = queue.summary()["due_now"] if lane is None else \
            queue.lane_counts().get(lane, {}).get("due_now", 0)
    home.ring_doorbell()
    jobs_due = f"{due} job{'' if due == 1 else 's'} due now" if due else "nothing is due now"
    if lane is None:
        print(f"resumed{' every lane' if lanes_paused else ''}: {jobs_due}")
    elif not was_paused:
        print(f"lane {printable(lane)} was not paused: its due jobs start as they come")
    elif whole_queue_paused:
        print(f"lane {printable(lane)} resumed: {jobs_due}; every other lane stays paused "
              "(`sloth-tray resume` resumes them all)")
    else:
        print(f"lane {printable(lane)} resumed: {jobs_due}")
    return 0


def _quoted(lane: str) -> str:
    """A lane's name as a shell takes it back, to show in a command to type."""
    import shlex  # here: only a sentence about one lane needs it

    return printable(shlex.quote(lane))


@command
def cmd_cancel(args: argparse.Namespace, home: Home) -> int:
    if _bulk_usage_mistake(args, "cancel"):
        return 2  # argparse's exit code for a usage mistake
    with open_queue(home) as queue:
        ids = args.ids
        if args.by_name is not None:
            return _by_name(queue, home, args.by_name, "cancel", "cancelled",
                            "pending, running or failed", _cancel_telling_series)
        if args.all_failed:  # refused drops too: cancel is how they go
            ids = [job.id for job in _failed_jobs(queue, args.lane)]
            if not ids:
                print(f"no failed jobs{in_lane(args.lane)}")
                return 0
        status = _each_job(queue, ids, lambda queue, job_id: _cancel_telling_series(
            queue, queue.get(job_id)), "cancel", "cancelled")
    home.ring_doorbell()
    return status


# -- jobs by name, and what a change did to a series ----------------------------------

# The states each bulk action applies to (retry: those Retry all retries).
_BY_NAME_STATES = {"retry": (State.FAILED,), "run now": (State.PENDING,),
                   "cancel": (State.PENDING, State.RUNNING, State.FAILED)}


def _by_name(queue: Queue, home: Home, name: str, verb: str, done: str, which: str,
             act: Callable[[Queue, Job], bool]) -> int:
    """`--name NAME`: `act` on every job called `name` in the states `verb` applies to,
    then one line with how many. A name no job has gets the nearest name (exit 1)."""
    jobs = queue.jobs_named(name, _BY_NAME_STATES[verb])
    if not jobs:
        known = queue.names()
        if name in known:
            print(f"no job named {printable(name)} is {which}: nothing to {verb}")
            return 0
        from sloth_tray.nearest import did_you_mean  # here: only a mistake needs it

        print(f"sloth-tray: no job is named {printable(repr(name))}"
              f"{printable(did_you_mean(name, sorted(known)))}", file=sys.stderr)
        return 1
    acted = sum(1 for job in jobs if act(queue, job))
    home.ring_doorbell()
    print(f"{done} {acted} job{'' if acted == 1 else 's'} named {printable(name)}"
          + ("" if acted == len(jobs) else f" ({len(jobs) - acted} could not be)"))
    return 0 if acted == len(jobs) else 1


def _series_pause(home: Home, args: argparse.Namespace, paused: bool) -> int:
    """`pause --series NAME`, `resume --series NAME`: one series held (or let go) on
    its own, kept in the file like every pause."""
    verb = "pause" if paused else "resume"
    if args.lane is not None or args.lane_option is not None:
        print(f"sloth-tray {verb}: give a lane or --series NAME, not both", file=sys.stderr)
        return 2
    name = args.series
    with open_queue(home) as queue:
        count = queue.set_series_paused(name, paused)
        if not count:
            from sloth_tray.nearest import did_you_mean  # here: only a mistake needs it

            print(f"sloth-tray {verb}: no job that repeats goes on by the name "
                  f"{printable(repr(name))}"
                  f"{printable(did_you_mean(name, sorted(queue.series_names())))}",
                  file=sys.stderr)
            return 2
    home.ring_doorbell()
    import shlex  # here: only a sentence with a command to type needs it

    again = printable(shlex.quote(name))
    if paused:
        print(f"paused the series {printable(name)}: its runs wait until "
              f"`sloth-tray resume --series {again}` (a running one finishes)")
    else:
        print(f"resumed the series {printable(name)}: its runs start as they fall due")
    return 0


def _cancel_telling_series(queue: Queue, job: Job) -> bool:
    """Cancel the job; when it was a series' waiting or running run, that ended the
    series: say so, and how to start it again."""
    from sloth_tray.jobs.series import repeats

    if not queue.cancel(job.id):
        return False
    if repeats(job.options) and job.state in (State.PENDING, State.RUNNING):
        from sloth_tray.store.schedules import schedule_text

        print(f"that ended the series {printable(job.name)} ({schedule_text(job.options)}): "
              f"`sloth-tray retry {job.id}` starts it again")
    return True


@command
def cmd_autostart(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray import autostart

    change = {"enable": autostart.enable, "disable": autostart.disable,
              "status": autostart.status}[args.action]
    # The entry starts the app on this home (and jobs folder, and config file):
    # enabled from a SLOTH_TRAY_HOME, login must not bring it back on another queue.
    state = change(**autostart.app_location(home, args.settings))
    places = {"home": state.home, "jobs_dir": state.jobs_dir, "config": state.config}
    if args.json:
        emit_json({"enabled": state.enabled, "where": state.where, "detail": state.detail}
                  | places | {"command": list(state.command) if state.command else None})
        return 0
    print(f"start at login: {'on' if state.enabled else 'off'} — "
          f"{printable(state.detail)}\n  ({printable(state.where)})")
    labels = {"home": "home:       ", "jobs_dir": "jobs folder:", "config": "config:     "}
    for key, place in places.items():
        if place is not None:
            print(f"  {labels[key]} {printable(place)}")
    return 0


@command
def cmd_prune(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.store import spool

    with open_queue(home) as queue:
        removed = spool.prune(home, queue, before=queue.clock() - args.older_than)
    print(f"removed {removed} finished job{'' if removed == 1 else 's'}")
    return 0


@command
def cmd_add(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.store import spool

    inline = getattr(args, "inline", None)  # after `--` (_main takes it off the line)
    if (args.path is None) == (inline is None):
        print("sloth-tray add: give a script or a command after --, not both" if args.path
              else "sloth-tray add: give a script (add PATH) or a command after -- (add -- "
              "COMMAND [ARG...])", file=sys.stderr)
        return 2
    if inline == []:
        print("sloth-tray add: give the command after --, as in `sloth-tray add -- make "
              "test`", file=sys.stderr)
        return 2
    # A command runs where `add` was called from; a script in the home folder, as a
    # dropped one does, unless --cwd says otherwise.
    cwd = spool.working_folder(args.cwd, default_here=inline is not None)
    options = {"name": args.name, "delay": args.delay, "max_attempts": args.max_attempts,
               "cwd": cwd, "key": args.key}
    if args.lane is not None:  # without it, main (spool's default)
        options["lane"] = args.lane
    if inline is not None:
        job_id = spool.add_command(sound_home(home), inline, **options)
    else:
        job_id = spool.add(sound_home(home), Path(args.path), **options)
    if isinstance(job_id, spool.AlreadyAdded):
        print(job_id)
        print(f"sloth-tray: {already_added(home, job_id, args.key)}", file=sys.stderr)
        return 0
    home.ring_doorbell()
    print(job_id)
    _say_if_held(home, args.lane or "main")
    return 0


def already_added(home: Home, job_id: str, key: str) -> str:
    """The sentence for an add whose key a job has already: that job, nothing added."""
    with open_queue(home) as queue:
        job = queue.get(job_id)
    return (f"key {printable(repr(key))} is {printable(job.name)} ({job.id})'s, "
            f"{job.state.value}: nothing was added")


def _say_if_held(home: Home, lane: str) -> None:
    """A job added where a pause holds it: the resume that starts it, on stderr (stdout
    is the id alone, for `id=$(sloth-tray add ...)`), as `work` says its pause."""
    with open_queue(home) as queue:
        if not queue.paused(lane):
            return
        whole = queue.paused()
    if whole:  # `resume` lifts the lane's own pause too
        print("sloth-tray: the queue is paused: the job starts after `sloth-tray resume`",
              file=sys.stderr)
    else:
        print(f"sloth-tray: lane {printable(lane)} is paused: the job starts after "
              f"`sloth-tray resume {_quoted(lane)}`", file=sys.stderr)



# -- a person's answer to a job that asks ---------------------------------------------

@command
def cmd_answer(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.store.steps import NotAsking

    with open_queue(home) as queue:
        job_id = find_job(queue, args.id)
        try:
            step = queue.answer(job_id, args.choice)
        except NotAsking as exc:
            print(f"sloth-tray: {printable(exc)}", file=sys.stderr)
            return 2
    home.ring_doorbell()
    print(f"answered {printable(args.choice)} to {printable(step.question or '')!r}; "
          f"{job_id} runs again now")
    return 0
