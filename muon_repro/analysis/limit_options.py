"""The command-line options that set the trace reader's limits (:mod:`muon_repro.analysis.limits`):
``--max-trace-bytes``, ``--max-trace-events``, ``--max-event-bytes``, for ``muon-repro analyze`` and
any other command that analyzes traces (a review of contributed ones: :func:`add_limit_options`
on its parser, :func:`limits_from_options` on its parsed arguments)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from muon_repro.analysis.limits import GIB, KIB, LIMIT_SPECS, MIB, TIB, TraceLimits, shown_limit

_COUNT = re.compile(r"^\s*(\d+)\s*([KMGT]i?B?)?\s*$", re.IGNORECASE)
_UNITS = {"K": KIB, "M": MIB, "G": GIB, "T": TIB}


def parse_count(text: str, *, is_size: bool) -> int:
    """``"4GiB"``, ``"512M"``, ``"1000000"`` -> an int (sizes take binary units K, M, G, T: 4G = 4 GiB);
    ``ValueError`` naming the text else."""
    match = _COUNT.match(text)
    if match is None or (match[2] and not is_size):
        unit = " with an optional unit K, M, G or T (binary: 4G = 4 GiB)" if is_size else ""
        raise ValueError(f"expected a whole number{unit}, got {text!r}")
    return int(match[1]) * (_UNITS[match[2][0].upper()] if match[2] else 1)


def _option_type(name: str) -> Callable[[str], int]:
    spec = LIMIT_SPECS[name]

    def convert(text: str) -> int:
        try:
            value = parse_count(text, is_size=spec.is_size)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if not 1 <= value <= spec.ceiling:
            raise argparse.ArgumentTypeError(f"expected 1 to {shown_limit(name, spec.ceiling)} ({spec.what}), got {value:,}")
        return value

    return convert


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """The limit options, each defaulting to :class:`TraceLimits`'s value."""
    defaults = TraceLimits()
    for name, spec in LIMIT_SPECS.items():
        parser.add_argument(
            spec.option,
            dest=name,
            type=_option_type(name),
            default=getattr(defaults, name),
            metavar="N",
            help=f"refuse a trace past this limit on {spec.what} (default: {shown_limit(name, getattr(defaults, name))}; "
            "see docs/limits.md)",
        )


def limits_from_options(args: argparse.Namespace) -> TraceLimits:
    """The :class:`TraceLimits` of parsed :func:`add_limit_options` options (the default for any absent)."""
    defaults = TraceLimits()
    return TraceLimits(**{name: getattr(args, name, getattr(defaults, name)) for name in LIMIT_SPECS})
