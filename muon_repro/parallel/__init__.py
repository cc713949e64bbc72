"""Process grid, collectives with a byte ledger, and tensor-parallel building blocks."""

from muon_repro.parallel.comm import CommLedger, CommRecord, Group, ring_bytes_per_rank
from muon_repro.parallel.mesh import ParallelDims

__all__ = ["CommLedger", "CommRecord", "Group", "ParallelDims", "ring_bytes_per_rank"]
