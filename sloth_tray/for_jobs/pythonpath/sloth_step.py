"""sloth_step as a job's Python imports it: this folder, which holds nothing else, ends
every job's PYTHONPATH (daemon/jobenv.py). It checks that the job's Python can run
the module, then runs ../sloth_step.py, the app's own, as this very module: one file
says everything about steps.

Written so that any Python reads it, 2 included: an older one than the module needs
gets one sentence and the exit status the app reads as "this job can never run"
(sloth_step.TOO_OLD_STATUS, with sloth_step.is_too_old's line), not a SyntaxError's
traceback and a retry.
"""

import sys

PYTHON_FLOOR = (3, 6)  # sloth_step.PYTHON_FLOOR (tests/test_step_module.py)
TOO_OLD_STATUS = 126  # sloth_step.TOO_OLD_STATUS

if tuple(sys.version_info[:2]) < PYTHON_FLOOR:
    # % and not an f-string: this must read on any Python.
    sys.stderr.write("sloth-tray: sloth_step needs Python %d.%d or later, and this job "  # noqa: UP031
                     "runs Python %s (%s): name a newer one in its #! line\n" % (
                         PYTHON_FLOOR[0], PYTHON_FLOOR[1], sys.version.split()[0],
                         sys.executable or "python"))
    sys.stderr.flush()
    raise SystemExit(TOO_OLD_STATUS)

import os  # noqa: E402 - after the check, which must run on any Python

_SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "sloth_step.py")
with open(_SOURCE, "rb") as _file:
    _CODE = compile(_file.read(), _SOURCE, "exec")
del _file
exec(_CODE, globals())  # its names, its docstring: this module is sloth_step
del _CODE, _SOURCE
