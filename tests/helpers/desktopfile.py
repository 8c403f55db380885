"""A .desktop file's Exec line read back as a desktop reads it."""

from __future__ import annotations

import re


def read_exec(value: str) -> list[str]:
    """Undo what a desktop undoes: the string escapes first, then the quoting, then %%."""
    general = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    text = re.sub(r"\\(.)", lambda m: general.get(m[1], "\\" + m[1]), value)
    args: list[str] = []
    current: str | None = None
    quoted = False
    i = 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\" and text[i + 1] in '"`$\\':
                current = (current or "") + text[i + 1]
                i += 1
            elif c == '"':
                quoted = False
            else:
                assert c != "\\", f"a lone backslash in a quoted argument: {value!r}"
                current = (current or "") + c
        elif c == " ":
            if current is not None:
                args.append(current)
            current = None
        elif c == '"':
            quoted = True
            current = current or ""
        else:
            assert c not in "\t\n\"'\\><~|&;$*?#()`", f"unquoted reserved {c!r} in {value!r}"
            current = (current or "") + c
        i += 1
    assert not quoted, f"an unclosed quote in {value!r}"
    if current is not None:
        args.append(current)
    for arg in args:
        assert re.fullmatch(r"([^%]|%%)*", arg), f"a field code in {arg!r}"
    return [arg.replace("%%", "%") for arg in args]
