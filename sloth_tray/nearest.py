"""The known name nearest a mistyped one: every "did you mean" says it the same way.

difflib's ratio: a name close enough to be the one meant, or none rather than a guess
(the command line's choices, a header's options, config.toml's keys, lanes).
"""

from __future__ import annotations

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from collections.abc import Iterable

CLOSE = 0.6  # difflib's own default: "retries" is near nothing, "max_atempts" is near


def nearest(word: str, known: Iterable[str], cutoff: float = CLOSE) -> str | None:
    """The one of `known` closest to `word`, if any is close enough."""
    import difflib  # here: only a mistake needs it

    near = difflib.get_close_matches(word, [str(name) for name in known], n=1, cutoff=cutoff)
    return near[0] if near else None


def did_you_mean(word: str, known: Iterable[str], cutoff: float = CLOSE) -> str:
    """`; did you mean max_attempts?`, to end a refusal with; "" when nothing is near."""
    near = nearest(word, known, cutoff)
    return f"; did you mean {near}?" if near else ""
