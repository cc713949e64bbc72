"""How the report writes a number: milliseconds, percentages, ratios, counts, MB, MiB and GiB as short strings.

One format everywhere, figures and text alike: a percentage never in exponent notation (:func:`percent`),
k = 1,000 and M = 1,000,000 for counts such as tokens per step (:func:`count`).

Every helper refuses a missing value (None, NaN) with a :class:`~muon_repro.report.data.MissingMetric`
naming it (``what``), so a gap in the tables stops the report instead of printing "nan".
"""

from __future__ import annotations

import math
from typing import Any

from muon_repro.report import style
from muon_repro.report.data import MissingMetric, is_missing


def as_number(value: Any, what: str) -> float:
    """``value`` as a float; a missing one raises MissingMetric naming ``what``."""
    if is_missing(value):
        raise MissingMetric(f"metric {what} is missing")
    return float(value)


def ms(value: Any, what: str = "time", signed: bool = False) -> str:
    """``123 ms``, ``12.3 ms``, ``1.23 ms``: three significant digits up to 100 ms (``+123 ms`` when ``signed``)."""
    v = as_number(value, what)
    sign = "+" if signed else ""
    return f"{v:{sign}.0f} ms" if abs(v) >= 100 else (f"{v:{sign}.1f} ms" if abs(v) >= 10 else f"{v:{sign}.2f} ms")


def pct(value: Any, what: str = "fraction", signed: bool = False) -> str:
    """A fraction as ``33.6%`` (``+33.6%`` when ``signed``)."""
    v = 100 * as_number(value, what)
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def percent(value: Any, what: str = "fraction", digits: int = 2, signed: bool = False) -> str:
    """A fraction as a percentage with ``digits`` significant digits, never an exponent: ``1.2%``, ``50%``,
    ``103%``, ``0.12%`` (``+3.4%`` when ``signed``). Like ``format(100 * value, ".2g")`` where that has no
    exponent; from ``10**digits`` % on, the whole percent (``.2g`` would write ``1e+02%``)."""
    v = 100 * as_number(value, what)
    sign = "+" if signed else ""
    if v == 0:
        return f"{0:{sign}.0f}%"
    decimals = max(digits - 1 - math.floor(math.log10(abs(v))), 0)
    text = f"{v:{sign}.{decimals}f}"
    if decimals and "." in text:  # as ``g`` does: no trailing zeros
        text = text.rstrip("0").rstrip(".")
    return f"{text}%"


def count(value: Any, what: str = "count", digits: int = 3) -> str:
    """A count such as tokens per step: ``512``, ``223k``, ``1.29M`` (k = 1,000, M = 1,000,000; never 1,024)."""
    v = as_number(value, what)
    if abs(v) >= 999_500:
        return f"{_sig(v / 1e6, digits)}M"
    if abs(v) >= 1000:
        return f"{_sig(v / 1e3, digits)}k"
    return _sig(v, digits)


def plain(value: float, digits: int = 3) -> str:
    """A number with up to ``digits`` significant digits and no exponent: ``0.01``, ``1``, ``250``, ``1000``."""
    v = float(value)
    return _sig(v, digits) if abs(v) < 10**digits else f"{v:.0f}"


def _sig(v: float, digits: int) -> str:
    """``v`` with ``digits`` significant digits, no exponent, no trailing zeros."""
    if v == 0:
        return "0"
    decimals = max(digits - 1 - math.floor(math.log10(abs(v))), 0)
    text = f"{v:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def ratio(value: Any, what: str = "ratio", digits: int = 2) -> str:
    return f"{as_number(value, what):.{digits}f}×"


def mb(value: Any, what: str = "bytes") -> str:
    return f"{as_number(value, what) / style.MB:.2f} MB"


def in_unit(value: Any, unit: str, what: str = "number") -> str:
    """A number of the original study's tables by its ``unit`` (``study_method.unit``), to the decimals it published:
    ``139.53 ms``, ``1.10%`` (a fraction), ``0.568×`` (a ratio), ``40`` (a count); any other unit as ms."""
    v = as_number(value, what)
    if unit == "fraction":
        return f"{100 * v:.2f}%"
    if unit == "count":
        return f"{v:.0f}"
    if unit == "ratio":
        return f"{v:.3f}×"
    return f"{v:.2f} ms"


def mib(value: Any, what: str = "bytes") -> str:
    return f"{as_number(value, what) / style.MIB:.1f} MiB"


def gib(value: Any, what: str = "bytes") -> str:
    return f"{as_number(value, what) / 2**30:.1f} GiB"
