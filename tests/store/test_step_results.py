"""What a Python step keeps: `sloth_step.step()` in this process, inside a real run
(a job claimed with a run token on a real queue file, its environment as the runner
sets it). A result is kept only if a later run gets back exactly what the first run
got: anything else is refused at the first run, as a TypeError naming the step, and
the step is recorded failed (never left running, which would read as cut short)."""

from __future__ import annotations

import enum
import math
import os
import sqlite3
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sloth_tray.for_jobs import sloth_step
from sloth_tray.store.queue import Queue
from sloth_tray.store.states import State


class Run:
    """One job on a real queue; `held()` is a run of it holding its lease, with the
    environment the runner gives a job's process."""

    def __init__(self, path: Path) -> None:
        self.queue = Queue(path)
        self.job = self.queue.push("stepped", max_attempts=5)

    @contextmanager
    def held(self, monkeypatch=None):
        token = uuid.uuid4().hex
        claimed = self.queue.claim("me", token=token)
        assert claimed is not None and claimed.id == self.job
        env = {sloth_step.QUEUE_ENV: str(self.queue.path), sloth_step.JOB_ENV: self.job,
               sloth_step.TOKEN_ENV: token, sloth_step.OWNER_ENV: "me"}
        before = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def step_state(self, name: str) -> str:
        with sqlite3.connect(self.queue.path) as db:
            return db.execute("SELECT state FROM steps WHERE job = ? AND name = ? "
                              "ORDER BY occurrence DESC", (self.job, name)).fetchone()[0]


@pytest.fixture
def run(tmp_path):
    made = Run(tmp_path / "queue.db")
    try:
        yield made
    finally:
        made.queue.close()


def not_again():
    raise AssertionError("a step recorded done ran again")


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_result_nested_too_deep_is_refused_and_the_step_recorded_failed(run, capsys):
    with run.held():
        with pytest.raises(TypeError) as refused:
            sloth_step.step("deep", nested, 100_000)
        assert '"deep"' in str(refused.value)
        assert run.step_state("deep") == "failed"
        # The job caught it and ended well: done, never `step_unsure` ("may or may not
        # have happened": the function returned).
        assert run.queue.complete(run.job, "me") == State.DONE
    job = run.queue.get(run.job)
    assert (job.state, job.reason) == (State.DONE, None)


class Colour(enum.IntEnum):
    RED = 1


class Label(str):
    pass


def cycle() -> list:
    value: list = []
    value.append(value)
    return value


@pytest.mark.parametrize("value", [
    {7: "x"}, {True: 1}, {None: 1}, {1.5: 2}, {"a": {2: "b"}},
    (1, 2), [1, (2,)], {"a": ()},
    math.nan, -math.inf, [math.inf],
    Colour.RED, Label("a"), {"k": Label("v")}, {Label("k"): 1},
    {1, 2}, b"bytes", object(),
    cycle(),
    nested(sloth_step.RESULT_DEPTH),  # one list more than RESULT_DEPTH, one in another
], ids=lambda value: type(value).__name__)
def test_a_result_json_would_give_back_changed_is_refused_at_the_first_run(run, value):
    with run.held():
        with pytest.raises(TypeError) as refused:
            sloth_step.step("odd", lambda: value)
        assert str(refused.value).startswith('step "odd" returned ')
        assert "\n" not in str(refused.value) and "nothing was recorded" in str(refused.value)
        assert run.step_state("odd") == "failed"
        assert run.queue.release(run.job, "me")
    with run.held():  # a failed step is never kept: it runs again
        assert sloth_step.step("odd", lambda: "fine") == "fine"


def test_a_result_nested_result_depth_deep_is_kept(run):
    deepest = nested(sloth_step.RESULT_DEPTH - 1)  # RESULT_DEPTH lists, one in another
    with run.held():
        assert sloth_step.step("deep", lambda: deepest) is deepest
        assert run.queue.release(run.job, "me")
    with run.held():
        assert sloth_step.step("deep", not_again) == deepest


def same(first, second) -> bool:
    """Equal, and of the very same types all the way down (a -0.0 stays -0.0)."""
    if type(first) is not type(second):
        return False
    if isinstance(first, list):
        return len(first) == len(second) and all(map(same, first, second))
    if isinstance(first, dict):
        return list(first) == list(second) and all(same(first[k], second[k]) for k in first)
    if isinstance(first, float):
        return repr(first) == repr(second)
    return first == second


KEPT = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)
ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.floats()
    | st.binary(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.none() | st.booleans() | st.integers() | st.text() | st.floats(),
                      inner, max_size=3),
    max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=ANY | KEPT, plain=KEPT)
def test_whatever_step_keeps_a_later_run_gets_back_exactly(value, plain):
    """For any value step() accepts, a later run's step() returns one equal to it, of
    the same types; and a value of JSON's own types (text keys, finite floats, lists) is
    always accepted."""
    with tempfile.TemporaryDirectory() as folder:
        run = Run(Path(folder) / "queue.db")
        try:
            with run.held():
                try:
                    first = sloth_step.step("s", lambda: value)
                except TypeError:
                    accepted = False
                    assert run.step_state("s") == "failed"
                else:
                    accepted = True
                    assert first is value
                assert sloth_step.step("plain", lambda: plain) is plain
                assert run.queue.release(run.job, "me")
            with run.held():
                if accepted:
                    assert same(sloth_step.step("s", not_again), value)
                assert same(sloth_step.step("plain", not_again), plain)
        finally:
            run.queue.close()


def test_a_result_past_the_cap_is_still_a_value_error_and_recorded_failed(run):
    with run.held():
        with pytest.raises(ValueError) as refused:
            sloth_step.step("big", lambda: "x" * sloth_step.OUTPUT_CAP)
        assert '"big"' in str(refused.value)
        assert run.step_state("big") == "failed"
