"""How the report writes a number: milliseconds, percentages, ratios, MB, MiB and GiB as short strings.

Every helper refuses a missing value (None, NaN) with a :class:`~muon_repro.report.data.MissingMetric`
naming it (``what``), so a gap in the tables stops the report instead of printing "nan".
"""

from __future__ import annotations

from typing import Any

from muon_repro.report import style
from muon_repro.report.data import MissingMetric, is_missing


def as_number(value: Any, what: str) -> float:
    """``value`` as a float; a missing one raises MissingMetric naming ``what``."""
    if is_missing(value):
        raise MissingMetric(f"metric {what} is missing")
    return float(value)


def ms(value: Any, what: str = "time") -> str:
    """``123 ms``, ``12.3 ms``, ``1.23 ms``: three significant digits up to 100 ms."""
    v = as_number(value, what)
    return f"{v:.0f} ms" if abs(v) >= 100 else (f"{v:.1f} ms" if abs(v) >= 10 else f"{v:.2f} ms")


def pct(value: Any, what: str = "fraction", signed: bool = False) -> str:
    """A fraction as ``33.6%`` (``+33.6%`` when ``signed``)."""
    v = 100 * as_number(value, what)
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def ratio(value: Any, what: str = "ratio", digits: int = 2) -> str:
    return f"{as_number(value, what):.{digits}f}×"


def mb(value: Any, what: str = "bytes") -> str:
    return f"{as_number(value, what) / style.MB:.2f} MB"


def mib(value: Any, what: str = "bytes") -> str:
    return f"{as_number(value, what) / style.MIB:.1f} MiB"


def gib(value: Any, what: str = "bytes") -> str:
    return f"{as_number(value, what) / 2**30:.1f} GiB"
