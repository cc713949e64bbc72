"""What the cost model predicts for a run: each rank's step (:class:`RankPrediction`), and the run's
(:class:`Prediction`; a pipeline's is :class:`~muon_repro.costmodel.pipeline.PipelinePrediction`), with the means
over ranks the measured runs' tables count and the JSON form both share (:class:`StepPrediction`). How the
numbers are made is :mod:`muon_repro.costmodel.predict`'s.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from muon_repro.bench.configs import BenchConfig
from muon_repro.costmodel.workload import Workload
from muon_repro.phases import (
    BACKWARD,
    DP_ALL_GATHER,
    DP_GATHER,
    DP_REDUCE_SCATTER,
    FORWARD,
    MOMENTUM,
    NEWTON_SCHULZ,
    OPTIMIZER,
    TP_ALL_GATHER,
    TP_ALL_REDUCE,
    TP_GATHER,
    UPDATE,
)

PARTS = (FORWARD, BACKWARD, OPTIMIZER)
OPTIMIZER_PARTS = (DP_REDUCE_SCATTER, MOMENTUM, DP_GATHER, TP_GATHER, NEWTON_SCHULZ, UPDATE, DP_ALL_GATHER)
MODEL_COMM = (TP_ALL_REDUCE, TP_ALL_GATHER)


@dataclass
class RankPrediction:
    """One rank's predicted step, in milliseconds."""

    rank: int
    dp_rank: int
    tp_rank: int
    step_ms: float = 0.0
    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(OPTIMIZER_PARTS + MODEL_COMM, 0.0))
    compute_ms: float = 0.0
    transfer_ms: float = 0.0
    wait_ms: float = 0.0

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "dp_rank": self.dp_rank,
            "tp_rank": self.tp_rank,
            "step_ms": self.step_ms,
            **{f"{p}_ms": v for p, v in self.parts.items()},
            "compute_ms": self.compute_ms,
            "comm_ms": self.transfer_ms + self.wait_ms,
            "comm_transfer_ms": self.transfer_ms,
            "comm_wait_ms": self.wait_ms,
            "phases_ms": dict(self.phases),
        }


class StepPrediction:
    """What a run's and a pipeline run's predictions share: means over their ``ranks``, as the measured runs' tables
    count them (mean over ranks), and their JSON form."""

    cfg: BenchConfig
    machine: str
    device: str
    profiled: bool
    ranks: tuple[RankPrediction, ...]
    workload: Workload
    notes: tuple[str, ...]
    beyond_calibration: tuple[str, ...]

    @property
    def step_ms(self) -> float:
        """The slowest rank's step."""
        return max(r.step_ms for r in self.ranks)

    def mean(self, attribute: str) -> float:
        return statistics.fmean(value_of(r, attribute) for r in self.ranks)

    @property
    def optimizer_ms(self) -> float:
        return self.mean(OPTIMIZER)

    @property
    def comm_ms(self) -> float:
        """Collectives' transfer and wait."""
        return self.mean("transfer_ms") + self.mean("wait_ms")

    def to_dict(self) -> dict:
        return self._as_dict([r.to_dict() for r in self.ranks])

    def _as_dict(self, ranks: list[dict], after_step: dict | None = None, after_times: dict | None = None) -> dict:
        """The JSON form: ``ranks`` as given, and a subclass's own figures after the step and after the times."""
        w = self.workload
        return {
            "config": self.cfg.key,
            "run": self.cfg.to_dict(),
            "machine": self.machine,
            "device": self.device,
            "profiled": self.profiled,
            "step_ms": self.step_ms,
            **(after_step or {}),
            "forward_ms": self.mean(FORWARD),
            "backward_ms": self.mean(BACKWARD),
            "optimizer_ms": self.optimizer_ms,
            "compute_ms": self.mean("compute_ms"),
            "comm_ms": self.comm_ms,
            "comm_transfer_ms": self.mean("transfer_ms"),
            "comm_wait_ms": self.mean("wait_ms"),
            **(after_times or {}),
            "ranks": ranks,
            "notes": list(self.notes),
            "beyond_calibration": list(self.beyond_calibration),
            "inputs": {
                "train_flops": w.train_flops,
                "ns_dtype": w.ns_dtype,
                "ns_flops": list(w.ns_flops),
                "analytic_bytes": [dict(b) for b in w.analytic_bytes],
            },
        }


@dataclass(frozen=True)
class Prediction(StepPrediction):
    """A run's predicted step on a machine, and the FLOP and byte inputs it was built from."""

    cfg: BenchConfig
    machine: str
    device: str
    profiled: bool
    ranks: tuple[RankPrediction, ...]
    workload: Workload
    notes: tuple[str, ...] = ()  # the profile's figures that change nothing here (MachineProfile.unused_figures)
    beyond_calibration: tuple[str, ...] = ()  # what was priced past the profile's measurements (calibration_range)


def value_of(rank: RankPrediction, attribute: str) -> float:
    """A rank's part (forward, backward, optimizer) or other time, by name."""
    return rank.parts[attribute] if attribute in rank.parts else getattr(rank, attribute)
