"""The process grid and what runs over it: ``ParallelDims(dp, tp, pp=1)`` (process groups, TP ranks adjacent,
pipeline stages outermost), collectives with profiler labels and a byte ledger, tensor-parallel layers,
pipeline stages and their 1F1B schedule, and the launcher of local workers."""

from muon_repro.parallel.comm import CommLedger, CommRecord, Group
from muon_repro.parallel.mesh import ParallelDims

__all__ = ["CommLedger", "CommRecord", "Group", "ParallelDims"]
