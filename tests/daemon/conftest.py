"""The daemon tests' own fixtures."""

from __future__ import annotations

import uuid

import pytest
from helpers.tagged import sweep


@pytest.fixture
def tag():
    """A tag in the environment of everything a test starts; whatever still carries it
    at the end (a job's processes) is killed by pid."""
    tag = uuid.uuid4().hex
    try:
        yield tag
    finally:
        sweep(tag)
