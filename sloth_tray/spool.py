"""The spool: the app's own copy of each job's script, in spool/<job-id>/<name>.

A queued job must not change under the daemon when the user edits or deletes
the original, so every script is copied (or, from the jobs folder, moved) here
first, and only then pushed. A crash between the two leaves a spool entry
without a job, which start-up reconciles: never a job without its script.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sloth_tray.errors import SlothError
from sloth_tray.jobfile import BadJobFile, job_name, parse_options, read_head
from sloth_tray.paths import Home
from sloth_tray.queue import Queue, new_job_id


def add(home: Home, source: Path, *, name: str | None = None, delay: float = 0.0,
        max_attempts: int | None = None) -> str:
    """Copy `source` into the spool and queue it; returns the job id."""
    if not source.is_file():
        raise SlothError(f"{source} is not a file")
    try:
        options = parse_options(read_head(source), source.name)
    except BadJobFile as exc:
        raise SlothError(f"{exc}; nothing was queued") from None
    job_id = new_job_id()
    target = home.spool / job_id / source.name
    target.parent.mkdir(mode=0o700, parents=True)
    partial = target.with_name(target.name + ".partial")
    try:
        shutil.copyfile(source, partial)
        shutil.copymode(source, partial)
        os.replace(partial, target)
    except OSError as exc:
        shutil.rmtree(target.parent, ignore_errors=True)
        raise SlothError(f"cannot copy {source} into the spool: {exc.strerror}") from None
    with Queue(home.db) as queue:
        queue.push(name or job_name(source), script=str(target), job_id=job_id,
                   delay=delay or options.get("delay", 0.0),
                   max_attempts=max_attempts or options.get("max_attempts"),
                   options=options)
    return job_id
