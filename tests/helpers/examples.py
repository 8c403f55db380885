"""How many Hypothesis examples a test tries, under the profile tests/conftest.py loads."""

from __future__ import annotations

from hypothesis import settings


def examples(on_ci: int) -> int:
    """How many examples a test that tries `on_ci` of them on CI tries under the loaded
    profile (`ci`: that many; `dev`: a fifth)."""
    return max(1, on_ci * settings.default.max_examples // 100)
