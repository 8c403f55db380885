"""The words of a job's life: the states it passes through. Why an attempt failed is
reasons.py.

Apart from queue.py so that what only reads them (the command line's parser,
`status`) need not load the queue's writing code.
"""

from enum import StrEnum


class State(StrEnum):
    PENDING = "pending"  # waiting for not_before; claimable once it has passed
    RUNNING = "running"  # leased to lease_owner until lease_until
    DONE = "done"  # finished; result kept
    FAILED = "failed"  # gave up after max_attempts; last_error says why; retry() revives
    CANCELLED = "cancelled"  # the user said no; retry() revives
