"""sloth_step as a job's Python imports it: this folder, which holds nothing else, ends
every job's PYTHONPATH (daemon/jobenv.py). It checks that the job's Python can run
the module, then runs ../sloth_step.py, the app's own, as this very module, whose parts
beside it are its submodules.

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

_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SOURCE = os.path.join(_FOLDER, "sloth_step.py")
# Its parts (the step_*.py beside it, which it imports as `.step_waits` and the like)
# are this module's submodules, found in that folder: sloth_step.step_waits, never a
# name of a job's own.
__path__ = [_FOLDER]
__package__ = __name__
if __spec__ is not None:  # its parent is then itself, as a package's is
    __spec__.submodule_search_locations = __path__
with open(_SOURCE, "rb") as _file:
    _CODE = compile(_file.read(), _SOURCE, "exec")
del _file
exec(_CODE, globals())  # its names, its docstring: this module is sloth_step
del _CODE, _SOURCE, _FOLDER
