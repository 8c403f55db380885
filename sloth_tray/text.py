"""Text for a person's terminal: control characters are shown, never obeyed.

Job names, results, errors and paths come from scripts and file names anyone
can write. Printed raw, a newline forges a row of `list`, `\\x1b]0;...` retitles
the terminal, `\\x1b[2J` clears it, and U+202E turns `txt.exe` into `exe.txt`.
Every human line goes through `printable`; JSON output stays exact (json
escapes what it must, and a program reads it, not a terminal).
"""

# Bidirectional controls: they reorder what follows on the line (Trojan Source).
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# C0, DEL and C1; line and paragraph separators (a line break to some terminals);
# lone surrogates (undecodable file-name bytes, which a UTF-8 stdout cannot even encode).
_CATEGORIES = frozenset({"Cc", "Zl", "Zp", "Cs"})


def _unsafe(char: str) -> bool:
    import unicodedata  # here: a line with nothing to look at twice, the usual, never needs it

    return char in _BIDI or unicodedata.category(char) in _CATEGORIES


def _escaped(char: str) -> str:
    """'\\n', '\\t', '\\x1b', '\\x9b', '\\u202e': the way Python would write it."""
    return char.encode("unicode_escape").decode("ascii")


def printable(text: object) -> str:
    """`text` as str, with every control, separator and bidi character escaped."""
    text = str(text)
    if text.isprintable():  # the usual case: nothing to look at twice
        return text
    return "".join(_escaped(char) if _unsafe(char) else char for char in text)
