"""Text a stranger controls (a pull request's paths, title and author, a run's names), printed safely and checked.

Every name ``review`` and ``contribute`` echo from a contribution goes through :func:`shown`: a name
of printable ASCII prints as it is; any other (a control character, an ANSI escape, a newline, a
Cyrillic letter that looks Latin, a right-to-left override) prints as Python's ``ascii()`` writes
it, quoted, with ``\\x1b``, ``\\n`` and ``\\u0430`` visible. So a file name can neither move the
cursor, colour the terminal, nor forge a line such as "Checks passed". :func:`guarded_echo` is the
second line of defence: it escapes any control character left in a whole line before printing it.

The name rules: a group or run name is 1-64 of ``a-z 0-9 _ . -`` (no leading dot, no ``..``), but a study
protocol's runs keep the study's names (``muon_FULLSTEP_dp2_tp2``); a profile id the same with capitals allowed,
since profile ids name chips (``4xA100-pcie-nccl``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from muon_repro.rundir import PROTOCOL_RUN_NAME, protocol_groups
from muon_repro.terminal import escape_controls, shown

# 64 characters: the longest name the project records is 36 (a regime point); a profile id has the same cap.
MAX_NAME_CHARS = 64
_NAME = re.compile(rf"[a-z0-9_-][a-z0-9_.-]{{0,{MAX_NAME_CHARS - 1}}}")
_PROFILE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_NAME_CHARS - 1}}}")
NAME_RULE = f"1-{MAX_NAME_CHARS} of a-z, 0-9, '_', '.', '-' (ASCII, lowercase), not starting with '.', without '..'"
PROFILE_RULE = f"1-{MAX_NAME_CHARS} of A-Z, a-z, 0-9, '_', '.', '-' (ASCII), starting with a letter or digit, without '..'"

# Ranges of ranks listed in one message before "and N more": a message stays one readable line.
MAX_LISTED_RANGES = 5


def guarded_echo(echo: Callable[[str], None]) -> Callable[[str], None]:
    """``echo`` that escapes control characters first (names are already :func:`shown`; this catches the rest)."""
    return lambda line: echo(escape_controls(line))


def name_problem(value: object, what: str) -> str | None:
    """Why ``value`` cannot be a group or run name (``what`` says which, e.g. "config.json's group"), or None."""
    if isinstance(value, str) and _NAME.fullmatch(value) and ".." not in value:
        return None
    return f"{what} {shown(value)} is not a valid name: use {NAME_RULE}"


def run_name_problem(name: object, group: object, what: str) -> str | None:
    """:func:`name_problem` for a run name in ``group``: a study protocol's runs (its groups) keep the study's own
    names, capitals included (``muon_FULLSTEP_dp2_tp2``), and only those."""
    if group in protocol_groups() and isinstance(name, str) and PROTOCOL_RUN_NAME.fullmatch(name):
        return None
    return name_problem(name, what)


def profile_problem(value: object, what: str) -> str | None:
    """Why ``value`` cannot be a profile id in a path, or None."""
    if isinstance(value, str) and _PROFILE.fullmatch(value) and ".." not in value:
        return None
    return f"{what} {shown(value)} is not a valid profile id: use {PROFILE_RULE}"


def describe_ranks(ranks: Iterable[int]) -> str:
    """Sorted ranks as short text: ``2, 3``, ``2..999 (998 ranks)``, ``0, 5..9, 12 and 3 more ranges (40 ranks)``."""
    ordered = sorted(set(ranks))
    spans: list[tuple[int, int]] = []
    for rank in ordered:
        if spans and rank == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], rank)
        else:
            spans.append((rank, rank))
    parts: list[str] = []
    for first, last in spans[:MAX_LISTED_RANGES]:
        if last - first >= 2:
            parts.append(f"{first}..{last}")
        else:
            parts += [str(r) for r in range(first, last + 1)]
    text = ", ".join(parts)
    if len(spans) > MAX_LISTED_RANGES:
        text += f" and {len(spans) - MAX_LISTED_RANGES} more range(s)"
    if len(ordered) > 2 and (len(spans) > MAX_LISTED_RANGES or any(last - first >= 2 for first, last in spans)):
        text += f" ({len(ordered)} ranks)"
    return text
