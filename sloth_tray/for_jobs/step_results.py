"""What a Python step may return: a value its JSON gives back as it was, equal and of
the same types all the way down (`result_problem`), so that a later run of the job gets
the very value the first run did. Part of sloth_step (for_jobs/sloth_step.py): the
standard library only, Python 3.6 and later.
"""

import math

RESULT_DEPTH = 100  # lists and dicts in a Python step's result, one in another, at most


# What a result's JSON gives back as it was, type for type: anything else (a tuple, a
# key that is not text, NaN, a subclass) would come back changed, so a later run would
# get another value than the first run did.
_AS_IT_WAS = (str, int, bool, type(None))
_COMES_BACK_AS = ((bool, "a bool"), (int, "an int"), (float, "a float"), (str, "text"),
                  (list, "a list"), (tuple, "a list"), (dict, "a dict"))


def result_problem(value: object) -> "str | None":
    """Why JSON would not give `value` back as it is (equal, and of the same types all
    the way down), in words for a sentence; None when it would. Walked without
    recursion, to RESULT_DEPTH: a result nested deeper is refused before json, whose
    own limit moves with the stack the call happens to be on."""
    todo = [(value, "", 0)]
    while todo:
        item, where, depth = todo.pop()
        kind = type(item)
        if kind in _AS_IT_WAS or (kind is float and math.isfinite(item)):
            continue
        what = "it is" if not where else f"result{where} is"
        if kind is float:
            return f"a value that JSON cannot hold: {what} {item!r}"
        if kind not in (list, dict):
            back = next((words for base, words in _COMES_BACK_AS if isinstance(item, base)),
                        None)
            if back is None:
                return f"a value that JSON cannot hold: {what} {_a(kind.__name__)}"
            return (f"a value that would come back changed: {what} {_a(kind.__name__)}, "
                    f"which would come back as {back}")
        if depth == RESULT_DEPTH:
            return (f"lists and dicts nested more than {RESULT_DEPTH} deep (or one that "
                    "holds itself)")
        if kind is list:
            todo.extend((sub, f"{where}[{at}]", depth + 1) for at, sub in enumerate(item))
            continue
        for key, sub in item.items():
            if type(key) is not str:
                return (f"a value that would come back changed: result{where} has the key "
                        f"{key!r}, {_a(type(key).__name__)}, which would come back as text")
            todo.append((sub, f"{where}[{key!r}]", depth + 1))
    return None


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
