"""Trace analysis: a fast reader of PyTorch profiler traces, and every table built from them (``runs``,
``steps``, ``collectives``, ``comparisons``, ``claims``, ``ranks``, ``phases``, ``timeline``, ``losses``,
``environment``, ...): profiler traces in, documented tables out.

Data flow, one module per step::

    batch_read          many trace files analyzed at once, in worker processes, grouped into runs (discover)
    reader              trace file -> TraceEvents (trace_events: typed events table, tolerant of dirty data),
                        within limits (limits: size, events, longest event, and their CLI options)
      scan              the document's layout, and its traceEvents array streamed in checked pieces
                        (byte_source: plain or gzip bytes; parallel_scan: a plain file's pieces shared with
                        worker processes)
      decode            one piece -> PieceColumns (piece_columns): fast, plain, or tolerant for dirty pieces
      assemble          the pieces merged into one TraceEvents
    collectives         NCCL / gloo / our phase labels -> one row per collective, bytes, busbw
    breakdown           per rank and step: phases, compute, comm, overlap, exposed, idle, memory
                        (step_windows: which step a time belongs to; step_columns: the columns)
    tables              the tables built: runs / steps / collectives / comparisons / claims, ...
                        (written and read through muon_repro.tables)
    claims              the original study's and the paper's claims, their regions and verdicts -> the claims table
    claim_measures      how each claim is measured: value, 95% interval, the measured cause
    claim_inputs        what the claims are measured on: one profile's tables, runs chosen, same-work check

``muon-repro analyze`` is :mod:`muon_repro.analyze_cli`, and the whole table set, with the original study's
tables beside these, :mod:`muon_repro.table_set`. Its benchmark and trace fuzzer are development tools outside the package
(``python -m tools.analysis_benchmark``, ``python -m tools.fuzz_traces``).

Importing this package is cheap (no pandas): worker processes import
:mod:`muon_repro.analysis.parallel_scan` and the reading modules under it, none of which needs pandas.
"""

from __future__ import annotations

from typing import Any

from muon_repro.analysis.errors import TraceError, TraceLimitError, TraceWarning

_LAZY = {
    "read_trace": "muon_repro.analysis.reader",
    "TraceLimits": "muon_repro.analysis.limits",
    "TraceEvents": "muon_repro.analysis.trace_events",
    "analyze_trace": "muon_repro.analysis.breakdown",
    "TraceBreakdown": "muon_repro.analysis.breakdown",
}

__all__ = ["TraceError", "TraceLimitError", "TraceWarning", *_LAZY.keys()]  # noqa: PLE0604 - the lazily imported names are strings


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
