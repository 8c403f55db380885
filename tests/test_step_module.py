"""The sloth_step a job's Python imports: pythonpath/sloth_step.py, which any Python
reads (2 included), checks the Python and runs for_jobs/sloth_step.py, which runs on
PYTHON_FLOOR and later. These checks need no old interpreter: they read the source.
Jobs under real old Pythons are in tests/daemon/test_steps.py (skipped where absent)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from sloth_tray.daemon import jobenv
from sloth_tray.for_jobs import sloth_step

MODULE = Path(sloth_step.__file__)
SHIM = Path(jobenv.step_module_folder()) / "sloth_step.py"


def annotations(tree: ast.AST) -> list[ast.expr]:
    """The annotations a Python without PEP 563 evaluates: a def's (its arguments' and
    its return's), and a variable's outside any function."""
    found: list[ast.expr] = []
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            found += [arg.annotation for arg in (*args.posonlyargs, *args.args,
                                                 *args.kwonlyargs, args.vararg, args.kwarg)
                      if arg is not None and arg.annotation is not None]
            if not isinstance(node, ast.Lambda) and node.returns is not None:
                found.append(node.returns)
            local |= {id(sub) for sub in ast.walk(node) if isinstance(sub, ast.AnnAssign)}
    found += [node.annotation for node in ast.walk(tree)
              if isinstance(node, ast.AnnAssign) and id(node) not in local]
    return found


# The module and its parts beside it (its submodules in a job: pythonpath/sloth_step.py).
PARTS = sorted(MODULE.parent.glob("*.py"))


def test_the_module_has_its_parts_beside_it():
    assert MODULE in PARTS and len(PARTS) > 1


@pytest.mark.parametrize("part", PARTS, ids=lambda path: path.name)
def test_the_module_reads_on_its_floor_python(part):
    source = part.read_text()
    tree = ast.parse(source, feature_version=sloth_step.PYTHON_FLOOR)
    futures = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module == "__future__" for alias in node.names]
    assert futures == [], "a __future__ import its floor Python may not know"
    for annotation in annotations(tree):
        # Evaluated when the def runs: on 3.6, `str | None` and `list[str]` raise.
        unsafe = [node for node in ast.walk(annotation)
                  if isinstance(node, ast.BinOp | ast.Subscript)]
        assert not unsafe, (f"line {annotation.lineno}: {ast.unparse(annotation)} cannot be "
                            "evaluated on Python 3.6; write it as a string")


def test_the_shim_reads_on_any_python():
    source = SHIM.read_text()
    tree = ast.parse(source, feature_version=(3, 4))
    newer = [(type(node).__name__, node.lineno) for node in ast.walk(tree)
             if isinstance(node, ast.JoinedStr | ast.AnnAssign | ast.NamedExpr | ast.Nonlocal
                           | ast.AsyncFunctionDef | ast.YieldFrom | ast.Starred)]
    assert newer == [], f"syntax an old Python cannot read: {newer}"
    assert annotations(tree) == []
    assert source.isascii()  # Python 2 reads a file without a coding line as ASCII


def test_the_shim_says_the_floor_and_status_the_module_and_the_runner_use():
    told = {node.targets[0].id: ast.literal_eval(node.value)
            for node in ast.parse(SHIM.read_text()).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("PYTHON_FLOOR", "TOO_OLD_STATUS")}
    assert told == {"PYTHON_FLOOR": sloth_step.PYTHON_FLOOR,
                    "TOO_OLD_STATUS": sloth_step.TOO_OLD_STATUS}


def test_an_older_python_gets_one_sentence_and_the_status_for_a_job_that_cannot_run():
    """This Python, told it is 3.5: the shim's check is all that runs."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n"
         "sys.version_info, sys.version = (3, 5, 10, 'final', 0), '3.5.10 (pretend)'\n"
         "import sloth_step\n"
         "print('imported')\n"],
        env={"PYTHONPATH": jobenv.step_module_folder(), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=30)
    assert done.returncode == sloth_step.TOO_OLD_STATUS and done.stdout == ""
    assert done.stderr.count("\n") == 1 and sloth_step.is_too_old(done.stderr.strip())
    assert f"Python 3.5.10 ({sys.executable})" in done.stderr
    assert "needs Python 3.6 or later" in done.stderr


def test_this_python_imports_the_shim_as_the_module_itself():
    done = subprocess.run(
        [sys.executable, "-c", "import sloth_step\n"
         "print(sloth_step.__file__)\n"
         "print(sloth_step.step('x', lambda: 4), sloth_step.PYTHON_FLOOR)\n"
         "print(sloth_step.__doc__.splitlines()[0])\n"
         "print(sloth_step.StepRefused.__module__)\n"],
        env={"PYTHONPATH": jobenv.step_module_folder(), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(SHIM), "4 (3, 6)", MODULE.read_text().splitlines()[0]
                                        .strip('"'), "sloth_step"]


def test_a_jobs_python_gets_the_parts_as_submodules_and_no_name_of_its_own():
    parts = [path.stem for path in PARTS if path != MODULE]
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import sys, sloth_step\n"
         f"parts = {parts!r}\n"
         "print(sorted(m for m in sys.modules if m.split('.')[-1] in parts))\n"
         "print(sloth_step.result_problem((1,)) is not None)\n"],
        env={"PYTHONPATH": jobenv.step_module_folder(), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [repr(sorted(f"sloth_step.{part}" for part in parts)),
                                        "True"]
