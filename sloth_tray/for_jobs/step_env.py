"""What a job's run and the app say to each other outside the queue file: the
environment that names the run (the runner sets it, a step reads it), and what the
runner reads back from a run's end (the exit status and line of a Python too old for
sloth_step, a step's notes on stderr). Part of sloth_step (for_jobs/sloth_step.py):
the standard library only, Python 3.6 and later.

Apart from the step's record so that the app loads these words alone: the daemon
hands them to every run and reads them back, and never runs a step itself.
"""

import re

# A job's environment names its run (the runner sets these).
JOB_ENV = "SLOTH_JOB_ID"
TOKEN_ENV = "SLOTH_RUN_TOKEN"
OWNER_ENV = "SLOTH_LEASE_OWNER"
QUEUE_ENV = "SLOTH_QUEUE"
KEY_ENV = "SLOTH_STEP_KEY"
DOORBELL_ENV = "SLOTH_DOORBELL"  # touched when a step starts or ends: the tray shows it

# The oldest Python that runs sloth_step. pythonpath/sloth_step.py, which any Python
# reads, ends an older one's import with TOO_OLD_STATUS (126: as a shell says "cannot
# execute") and a line is_too_old knows: the runner fails the job for good
# (unrunnable), as no retry would find another Python.
PYTHON_FLOOR = (3, 6)
TOO_OLD_STATUS = 126

_TOO_OLD = re.compile(r"sloth-tray: sloth_step needs Python \d+\.\d+ or later, and this "
                      r"job runs Python ")

# The notes a step writes to the job's stderr when it is skipped (sloth_step's
# skipped_line), or its output kept short: what happened, never why a job failed (the
# runner passes over them).
_NOTE = re.compile(r"sloth-tray: step .+? (skipped \((done|marked done by hand) "
                   r"\d{4}-\d\d-\d\d |had written \d|wrote \d)")


def is_too_old(line: str) -> bool:
    """Whether this last line of a job's stderr is pythonpath/sloth_step.py's: the
    job's Python is older than PYTHON_FLOOR."""
    return _TOO_OLD.match(line) is not None


def is_note(line: str) -> bool:
    """Whether this line of a job's stderr is a step's note (skipped_line and the notes
    of output kept short), not something the job said."""
    return _NOTE.match(line) is not None
