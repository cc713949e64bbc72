"""Trace analysis: profiler traces in, documented tables out.

Data flow, one module per step::

    reader (+ decode)   trace file -> TraceEvents (typed events table, tolerant of dirty data)
    collectives         NCCL / gloo / our phase labels -> one row per collective, bytes, busbw
    breakdown           per rank and step: phases, compute, comm, overlap, exposed, idle, memory
    tables              runs / steps / collectives / comparisons / claims, Parquet + CSV
    claims              the seed's and the paper's claims, measured, with verdicts
    cli, benchmark      ``muon-repro analyze``; ``python -m muon_repro.analysis.benchmark``
    fuzz                ``python -m muon_repro.analysis.fuzz``: mutated traces, clean result or clear refusal

Importing this package is cheap (no pandas): worker processes import
:mod:`muon_repro.analysis.decode` and nothing else.
"""

from __future__ import annotations

from typing import Any

from muon_repro.analysis.errors import TraceError, TraceWarning

_LAZY = {
    "read_trace": "muon_repro.analysis.reader",
    "TraceEvents": "muon_repro.analysis.reader",
    "analyze_trace": "muon_repro.analysis.breakdown",
    "TraceBreakdown": "muon_repro.analysis.breakdown",
    "build_tables": "muon_repro.analysis.tables",
    "write_tables": "muon_repro.analysis.tables",
    "SCHEMAS": "muon_repro.analysis.tables",
}

__all__ = ["TraceError", "TraceWarning", *_LAZY.keys()]  # noqa: PLE0604 - the lazily imported names are strings


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
