"""The queue for scripts and tools outside the app: `from sloth_tray.queue import Queue`.

The queue lives in store/queue.py (its states in store/states.py, why a job failed in
store/reasons.py); this name is the one promised to the outside, and stays.
"""

from sloth_tray.store.queue import Job, Queue, new_job_id
from sloth_tray.store.reasons import Reason
from sloth_tray.store.states import State

__all__ = ["Job", "Queue", "Reason", "State", "new_job_id"]
