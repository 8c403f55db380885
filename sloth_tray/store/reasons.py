"""Why a job's last attempt failed (the `reason` column, beside last_error's sentence),
and the rules that follow from it: which failures no try can change, and which a
Retry all leaves.

Apart from states.py: a glance (`status`) reads states, never a reason, and an enum
costs it a fiftieth of its time.
"""

from enum import StrEnum


class Reason(StrEnum):
    """Why a job's last attempt failed: the `reason` column, beside last_error's sentence."""

    EXIT_CODE = "exit_code"  # the script exited non-zero
    KILLED = "killed"  # a signal it did not expect ended it
    TIMED_OUT = "timed_out"  # it ran past its timeout and was stopped
    COULD_NOT_START = "could_not_start"  # its interpreter or working folder is missing
    UNRUNNABLE = "unrunnable"  # nothing knows how to run the file (no #!, odd extension)
    BAD_HEADER = "bad_header"  # its `# sloth:` line is wrong; retry re-reads it
    REFUSED = "refused"  # an unsafe drop (a link, another's file): never runs, never retried
    LEASE_EXPIRED = "lease_expired"  # its holder vanished on the last attempt
    SCRIPT_GONE = "script_gone"  # its copy in the spool disappeared
    INTERNAL_ERROR = "internal_error"  # sloth-tray itself failed while running it
    LATER_TOO_LONG = "later_too_long"  # it asked to run later (exit 75) for a day straight
    STEP_UNSURE = "step_unsure"  # a step that asks (--ask) was cut short: did it happen?
    UNANSWERED = "unanswered"  # its question (`ask`) timed out with no answer and no default


# Reasons that no number of tries can change: the job fails for good at once.
PERMANENT = frozenset({Reason.COULD_NOT_START, Reason.UNRUNNABLE, Reason.BAD_HEADER,
                       Reason.REFUSED, Reason.SCRIPT_GONE, Reason.UNANSWERED})


def started_no_process(reason: Reason | None) -> bool:
    """Whether a run that failed for `reason` ended before a process ran, or ran none
    that could print (no interpreter, no working folder, a bad header, a refusal): its
    missing log means that, where another run's means it printed nothing."""
    return reason in PERMANENT


# Failed jobs that no Retry all retries: a refused drop never runs, and a step that
# asks was cut short, so it may have happened: only a person's word on that job
# answers it (`retry ID`, `--step-done`).
LEFT_BY_RETRY_ALL = frozenset({Reason.REFUSED, Reason.STEP_UNSURE})


def in_retry_all(reason: Reason | None) -> bool:
    """Whether a Retry all (`retry --all-failed`, the menu's, the left click, a lane's,
    a notification's) retries a job that failed for `reason`. The one rule for them
    all. A script at fault otherwise (a bad header, no interpreter) is retried: a
    retry reads it again, so one fixed since runs, and one still wrong fails again
    at once with its sentence."""
    return reason not in LEFT_BY_RETRY_ALL
