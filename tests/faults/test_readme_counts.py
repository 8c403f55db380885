"""tests/faults/README.md states each fault's trial count: keep it true to the code."""

from __future__ import annotations

import re
from pathlib import Path

import test_bad_files
import test_database
import test_disk_full
import test_kill
import test_sleep
import test_steps_faults

README = Path(__file__).with_name("README.md")


def trials_column() -> dict[str, str]:
    """{test file: its `trials` cell} from the README's table."""
    cells = {}
    for line in README.read_text().splitlines():
        row = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(row) == 4 and row[1].startswith("`test_"):
            cells.setdefault(row[1].strip("`"), []).append(row[2])
    return {name: " / ".join(found) for name, found in cells.items()}


def steps_trials() -> int:
    """The test cases test_steps_faults.py holds, parametrized ones counted each."""
    text = Path(test_steps_faults.__file__).read_text()
    tests = re.findall(r"^(?:@pytest\.mark\.parametrize\([^\n]*\[([^\]]*)\][^\n]*\n)?"
                       r"def test_", text, flags=re.MULTILINE)
    return sum(len(values.split(",")) if values else 1 for values in tests)


def test_the_readme_counts_match_the_code():
    locks = len(re.findall(r"= Lock\(pids, home.db\)", Path(test_database.__file__).read_text()))
    expected = {
        "test_kill.py": f"{test_kill.TRIALS} kills",
        "test_sleep.py": f"{test_sleep.TRIALS}",
        "test_database.py": f"{locks} locks / {len(test_database.DAMAGED)} files",
        "test_bad_files.py": f"{len(test_bad_files.files(Path('/x')))} files + 1 final job",
        "test_disk_full.py": f"{test_disk_full.JOBS} jobs",
        "test_steps_faults.py": str(steps_trials()),
    }
    assert trials_column() == expected
