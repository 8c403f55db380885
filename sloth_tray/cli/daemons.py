"""The commands that run jobs: `run` (the app, in the tray or headless) and `work`
(the foreground, one line per job)."""

from __future__ import annotations

import sys

from sloth_tray import __version__
from sloth_tray.cli.common import INTERRUPTED, command
from sloth_tray.errors import SlothError
from sloth_tray.paths import Home
from sloth_tray.text import printable

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    import argparse  # for the annotations: the app reads its line without it (glance)

    from sloth_tray.daemon.app import Daemon
    from sloth_tray.daemon.outcome import Recorded
    from sloth_tray.store.queue import Job


@command
def cmd_run(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.daemon.app import Daemon, log

    with Daemon(home, args.settings, log_to_stderr=True) as daemon:
        tray = None if args.headless else open_tray(daemon, args)
        if tray is None:
            log.info("sloth-tray %s running headless; home %s", __version__, home.root)
            log.info("drop scripts into %s", home.jobs)
            daemon.run_until_stopped()
        else:
            log.info("sloth-tray %s in the tray (%s); home %s", __version__, tray.backend,
                     home.root)
            tray.run()
        log.info("stopped")
    if daemon.fatal:  # it stopped itself, cleanly: say why, and fail
        raise SlothError(daemon.fatal)
    return INTERRUPTED if daemon.interrupted else 0


def open_tray(daemon: Daemon, args: argparse.Namespace):
    """The tray icon, or None (said in one line) when there is no display for one."""
    from sloth_tray.daemon.app import log
    from sloth_tray.desktop import display_available

    if not display_available():
        log.info("no display: running headless (sloth-tray run --headless says so quietly)")
        return None
    try:
        from sloth_tray.tray.tray import Tray

        return Tray(daemon, notifications=args.settings["notifications"])
    except Exception as exc:  # pystray could not reach a display or a tray backend
        log.warning("cannot show a tray icon (%s): running headless", exc)
        return None


@command
def cmd_work(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.daemon.app import Daemon

    with Daemon(home, args.settings, watch=not args.once, log_to_stderr=False) as daemon:
        if daemon.engine.paused:
            print("sloth-tray: the queue is paused; no job starts until `sloth-tray resume`",
                  file=sys.stderr)
        daemon.engine.on_result(print_result)
        daemon.run_until_stopped(drain=args.once)
    if daemon.fatal:
        raise SlothError(daemon.fatal)
    return INTERRUPTED if daemon.interrupted else 0


def print_result(job: Job, result: Recorded) -> None:
    from sloth_tray.daemon.outcome import Effect

    label = {Effect.DONE: "ok", Effect.RELEASED: "stop", Effect.LOST: "lost",
             Effect.LATER: "later", Effect.WAITING: "wait"}.get(result.effect, "fail")
    where = f"-> {result.effect.value.replace('retrying', 'pending')}: " if label == "fail" else ""
    print(f"{label:<5} {printable(job.name)} ({job.id}) {where}{printable(result.detail)}"
          .rstrip(), flush=True)

