"""The claims of one hardware profile before and after a contribution, side by side, with what changed.

``before`` is the published ``metrics/claims.parquet`` (its rows of the profile, by
:func:`muon_repro.hardware.rows_of_profile`: all rows of a table published before profiles existed),
``after`` the claims of main's runs of that profile analyzed again together with the contributed ones.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from muon_repro.values import finite_number

if TYPE_CHECKING:
    import pandas as pd

KEY = "claim_id"
REL_TOL = 1e-9  # two measurements this close are the same (Parquet round trips keep floats exactly; this absorbs nothing else)


def describe(row: Any | None) -> str:
    """One claim's measurement as ``value [low, high] verdict``."""
    if row is None:
        return "(no row)"
    value, low, high = (finite_number(row.get(c)) for c in ("measured_value", "measured_low", "measured_high"))
    verdict = str(row.get("verdict") or "")
    if value is None:
        return verdict or "not measured"
    interval = f" [{low:.3g}, {high:.3g}]" if low is not None and high is not None else ""
    return f"{value:.3g}{interval} {verdict}".strip()


def _same(a: float | None, b: float | None) -> bool:
    return a == b or (a is not None and b is not None and math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12))


def change(before: Any | None, after: Any | None) -> str:
    """What the contribution did to one claim, in words."""
    if before is None:
        return "new claim"
    if after is None:
        return "not re-measured here"
    b, a = (finite_number(r.get("measured_value")) for r in (before, after))
    if b is None and a is None:
        return "unchanged (not measured)"
    if b is None:
        return f"now measured: {after.get('verdict')}"
    if a is None:
        return "not re-measured here (it rests on records besides this profile's trial folders)"
    if before.get("verdict") != after.get("verdict"):
        return f"verdict {before.get('verdict')} -> {after.get('verdict')}"
    bounds = [(finite_number(r.get("measured_low")), finite_number(r.get("measured_high"))) for r in (before, after)]
    if _same(a, b) and all(_same(x, y) for x, y in zip(*bounds)):
        return "unchanged"
    widths = [hi - lo if lo is not None and hi is not None else None for lo, hi in bounds]
    if None in widths:
        return f"same verdict, value {b:.3g} -> {a:.3g}"
    trend = "narrower" if widths[1] < widths[0] else "wider" if widths[1] > widths[0] else "as wide"
    return f"same verdict, value {b:.3g} -> {a:.3g}, interval {trend} ({widths[0]:.3g} -> {widths[1]:.3g})"


def _rows(claims: pd.DataFrame | None) -> dict[str, dict[str, Any]]:
    if claims is None or KEY not in claims.columns:
        return {}
    return {str(r[KEY]): r for r in claims.to_dict("records")}


def compare_claims(before: pd.DataFrame | None, after: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    """(claim_id, before, after, change) per claim, in the order of ``after`` then any claims only ``before`` has."""
    old, new = _rows(before), _rows(after)
    ids = list(new) + [k for k in old if k not in new]
    return [(k, describe(old.get(k)), describe(new.get(k)), change(old.get(k), new.get(k))) for k in ids]


def format_comparison(rows: list[tuple[str, str, str, str]]) -> list[str]:
    """The comparison as aligned lines under a header."""
    header = ("claim", "before (main)", "after (main + pull request)", "change")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    return [f"  {r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in [header, *rows]]
