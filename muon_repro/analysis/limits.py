"""The limits on one trace file (how large it may decompress to, how many events and distinct event names it may
hold, how long a stretch without an event boundary may be, and how deep its JSON may nest) and the command-line
options that set them.

Traces come from strangers (contributions), so a file's size on disk says nothing about what
reading it costs: a 14 MB gzip can hold 10 GB of whitespace. The reader counts as it goes and
stops at the first limit passed with one :class:`~muon_repro.analysis.errors.TraceError` that
names the file, the limit and how to raise it, having read at most the limit plus one buffer.
The defaults are far above any real trace (numbers in the comments; docs/limits.md has the
table). :class:`TraceLimits` overrides them in Python; on the command line the options
``--max-trace-bytes``, ``--max-trace-events``, ``--max-event-bytes`` and ``--max-event-names`` do, for ``muon-repro
analyze`` and any other command that analyzes traces (a review of contributed ones:
:func:`add_limit_options` on its parser, :func:`limits_from_options` on its parsed arguments).

This module imports only the standard library and :mod:`muon_repro.analysis.errors`: worker
processes import it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from muon_repro.analysis.errors import TraceLimitError
from muon_repro.values import is_count

KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40

# Decompressed bytes of one trace. The largest trace recorded here decompresses to 72 MB (one H200 rank,
# 212,000 events); the real traces of ../shared/traces/external (HTA's A100 DDP rank, TraceLens's H100 and B200)
# to 8-13 MB. A long multi-GPU Kineto trace with every kernel runs to a few hundred MB, rarely past the ~2 GB
# a browser (ui.perfetto.dev) opens; 4 GiB leaves twice that. Reading it costs ~15 s at ~300 MB/s, and memory
# ~100 bytes per event, up to ~2.5 times the size for a hostile trace whose every event has a name of its own.
DEFAULT_MAX_TRACE_BYTES = 4 * GIB
# The largest value accepted: an hour of reading at ~300 MB/s, and more decoded events than any machine holds
# in memory (~100 bytes per event, below). Above it a value is a mistake, not a trace.
MAX_TRACE_BYTES_CEILING = TIB

# Events of one trace (every phase). The densest real events here are HTA's A100 rank's, 241 bytes each, so a
# 4 GiB trace of them holds 17.8M; 20M allows that. Decoded, an event costs ~100 bytes of memory (measured on a
# 410 MB trace: 1.66M events, 136 MB over the imports), so the default caps a trace's columns near 2 GB.
DEFAULT_MAX_EVENTS = 20_000_000
# The largest value accepted: names, categories and threads are coded as int32 and a trace can have as many
# distinct names as events.
MAX_EVENTS_CEILING = 2**31 - 1

# Distinct event names in one trace. Real traces name a few hundred kinds of event (1,028 in TraceLens's B200
# trace, 204 in an H200 rank here); a hostile one can give every event its own name, and each distinct name costs
# ~250 bytes of memory beyond its event's ~100 (measured: 10^6 events of 16-character names, 101 MB of JSON, 350 MB).
# 1,000,000 caps what names can cost near 250 MB, whatever the trace's size.
DEFAULT_MAX_EVENT_NAMES = 1_000_000

# Bytes of the events array with no boundary between two events (``}, {"``): one event, one string or one run
# of whitespace. The largest real event seen is 2 KB (a kernel with its arguments), the longest string 2.2 KB;
# 64 MiB is 30,000 times that. The reader's buffer grows to hold such a stretch, and never past it.
DEFAULT_MAX_EVENT_BYTES = 64 * MIB
# The largest value accepted: the buffer holding the stretch is copied when it moves, and a dirty one is
# decoded again as text (up to 4 bytes a character): several times this much memory.
MAX_EVENT_BYTES_CEILING = GIB

# Nesting depth of the JSON: not adjustable. msgspec and json recurse once per level, in C, and stop at
# Python's recursion limit (1000 levels by default, less the caller's frames); raising that limit to go deeper
# risks overflowing the C stack, a crash rather than an error. Real traces nest 7 levels at most.
PARSER_DEPTH_LIMIT = sys.getrecursionlimit()

CLI_COMMAND = "muon-repro analyze"  # the command whose options raise the limits


@dataclass(frozen=True)
class LimitSpec:
    """One adjustable limit: its ceiling, what it counts, and its command-line option."""

    ceiling: int
    what: str
    option: str
    is_size: bool


LIMIT_SPECS = {
    "max_trace_bytes": LimitSpec(MAX_TRACE_BYTES_CEILING, "the decompressed size of one trace", "--max-trace-bytes", True),
    "max_events": LimitSpec(MAX_EVENTS_CEILING, "the events in one trace", "--max-trace-events", False),
    "max_event_bytes": LimitSpec(
        MAX_EVENT_BYTES_CEILING, "the size of one event, string or run of whitespace", "--max-event-bytes", True
    ),
    "max_event_names": LimitSpec(MAX_EVENTS_CEILING, "the distinct event names in one trace", "--max-event-names", False),
}


@dataclass(frozen=True)
class TraceLimits:
    """How much one trace file may hold; each field an integer from 1 to its ceiling (module constants).

    ``TraceLimits(max_trace_bytes=16 * GIB)`` reads larger traces; pass it to
    :func:`~muon_repro.analysis.reader.read_trace` or
    :func:`~muon_repro.analysis.batch_read.analyze_paths` (``limits=``).
    """

    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    max_events: int = DEFAULT_MAX_EVENTS
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_event_names: int = DEFAULT_MAX_EVENT_NAMES

    def __post_init__(self) -> None:
        for f in fields(self):
            value, spec = getattr(self, f.name), LIMIT_SPECS[f.name]
            if not (is_count(value) and value <= spec.ceiling):
                raise ValueError(
                    f"{f.name} ({spec.what}) must be an integer from 1 to {shown_limit(f.name, spec.ceiling)}, got {value!r}"
                )


def format_size(n: int) -> str:
    """``4294967296`` -> ``4 GiB``; exact binary units only, else the bytes."""
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} bytes"


def limit_error(path: str | Path, name: str, limits: TraceLimits, found: str) -> TraceLimitError:
    """The error for a trace past limit ``name``: the file, what was found, the limit and how to raise it."""
    spec = LIMIT_SPECS[name]
    return TraceLimitError(
        path,
        f"{found}: past the limit {name} = {shown_limit(name, getattr(limits, name))} ({spec.what}). Reading stopped there. "
        f"If this is a real trace, raise the limit: `{CLI_COMMAND} {spec.option} N` (at most "
        f"{shown_limit(name, spec.ceiling)}), or TraceLimits({name}=N) in Python; see docs/limits.md",
    )


def shown_limit(name: str, value: int) -> str:
    """A value of limit ``name`` as read: a size in binary units, a count with separators."""
    return format_size(value) if LIMIT_SPECS[name].is_size else f"{value:,}"


def too_deep_problem() -> str:
    """What to say of JSON nested past the parsers' depth (a trace's, after its path)."""
    return (
        f"JSON nested deeper than the decoders' recursion limit (about {PARSER_DEPTH_LIMIT} levels, Python's "
        "recursion limit; not adjustable: going deeper risks a crash); no profiler writes that, real traces nest 7 levels"
    )


class EventBudget:
    """Counts the events of a trace's pieces as they are decoded, and refuses the piece that passes the limit on
    events or on their distinct names."""

    def __init__(self, path: str | Path, limits: TraceLimits) -> None:
        self.path = path
        self.limits = limits
        self.events = 0

    def take(self, n_events: int) -> None:
        self.events += n_events
        if self.events > self.limits.max_events:
            raise limit_error(self.path, "max_events", self.limits, f"more than {self.limits.max_events:,} events")

    def check_names(self, n_names: int) -> None:
        """Refuse the trace once the events decoded so far carry more distinct names than the limit."""
        if n_names > self.limits.max_event_names:
            raise limit_error(
                self.path, "max_event_names", self.limits, f"more than {self.limits.max_event_names:,} distinct event names"
            )


# -- the command-line options

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
