"""A tray's state with something in every section, as the menu tests show it."""

from __future__ import annotations

from sloth_tray.daemon.snapshot import (
    FailedJob,
    FailedSeries,
    RunningJob,
    Schedule,
    Snapshot,
    WaitingJob,
)
from sloth_tray.store.reasons import Reason

NOW = 1_000_000.0
TIDY = "/spool/s1/tidy.sh"  # a repeating job that failed twice
BUSY = Snapshot(
    pending=1, failed_count=4,
    running=RunningJob("a1", "backup_home", 2, 5, NOW - 42),
    failed_jobs=(FailedJob("f1", "disk_check", "disk 82% full", NOW - 5),
                 FailedJob("r1", "evil_link", "refused: it is a symbolic link", NOW - 1,
                           refused=True, reason=Reason.REFUSED),
                 FailedJob("s2", "tidy", "exit 1", NOW - 60, series=TIDY),
                 FailedJob("s1", "tidy", "exit 1", NOW - 3660, series=TIDY)),
    failed_series=(FailedSeries(TIDY, "tidy", 2, NOW - 3660),),
    waiting=(WaitingJob("w1", "tidy_downloads", NOW + 240),),
    schedules=(Schedule(TIDY, "tidy", "every 1h", "s3", NOW + 600, "s2", NOW - 60, False),),
)
