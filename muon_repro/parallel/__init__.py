"""The process grid and what runs over it: ``ParallelDims(dp, tp, pp=1)`` (process groups, TP ranks adjacent,
pipeline stages outermost), collectives with profiler labels and a byte ledger, tensor-parallel layers,
pipeline stages and their 1F1B schedule, and the launcher of local workers."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Imported on first use, not with the package: `python -m muon_repro.parallel.grid3d` (which mesh imports) would
# otherwise find its module already loaded and warn that it runs it a second time.
_EXPORTS = {"CommLedger": "comm", "CommRecord": "comm", "Group": "comm", "ParallelDims": "mesh"}

__all__ = sorted(_EXPORTS)


def __dir__() -> list[str]:  # the exports too, as if imported: for dir() and completion
    return sorted({*globals(), *_EXPORTS})


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
