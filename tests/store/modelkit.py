"""What the store's two model checks share (test_spool_model.py, test_step_model.py):
the clock they start on, the lease, what retry takes back, and where Hypothesis keeps
its caches. Imported as `from modelkit import ...`: pytest puts this package-less
folder on sys.path before it imports the tests beside it."""

from __future__ import annotations

import os
import tempfile

from hypothesis.configuration import set_hypothesis_home_dir

from sloth_tray.store.queue import State

RETRIABLE = (State.DONE, State.FAILED, State.CANCELLED)  # what retry takes back, as pueue

# Hypothesis keeps its caches out of the source tree.
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "sloth-tray-hypothesis"))

LEASE = 10.0
START = 1_700_000_000.0
