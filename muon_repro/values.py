"""Plain values read from configs, JSON and flags: one home for "a whole number of something", checked and said, and
for a recorded command line and commit as the tables hold them.

Plain Python, the standard library only: any module (torch-free or not) can use it.
"""

from __future__ import annotations

import math
import shlex


def is_count(value: object) -> bool:
    """An int, not a bool, at least 1 (True is an int in Python: a JSON ``true`` or a flag must not pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def is_index(value: object) -> bool:
    """An int, not a bool, at least 0: an index, a seed (False is an int in Python: a JSON ``false`` must not pass as 0)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def finite_number(value: object) -> float | None:
    """A table cell or JSON value as a finite float; None where it holds none (None, pandas' NA, NaN, inf, text)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # None, pandas' NA and text, which float() refuses
        return None
    return number if math.isfinite(number) else None


def counted(count: int, noun: str) -> str:
    """``count`` things in words for published text: "1 rank", "4 ranks" (regular plurals only)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def command_line(value: object) -> str | None:
    """A recorded command as the tables hold it: a list of arguments shell-quoted (a string kept as written); None
    for anything else or nothing."""
    if isinstance(value, (list, tuple)) and value:
        return shlex.join(str(arg) for arg in value)
    return value if isinstance(value, str) and value.strip() else None


def recorded_commit(environment: object) -> str | None:
    """The commit a run's environment record names (``git_sha``) as the tables hold it; None when the record or the
    field is missing or not a string."""
    sha = environment.get("git_sha") if isinstance(environment, dict) else None
    return sha if isinstance(sha, str) and sha.strip() else None
