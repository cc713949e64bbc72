"""Workers for tests/test_analysis_gloo.py and tests/test_wait_transfer.py: record gloo traces of
known collectives.

Importable by spawned workers: tests/ is on the parent's ``sys.path``, which spawned children
inherit. For the analysis tests each rank records two profiled runs in one launch (launching is
the slow part): an "adamw"-like run and a "muon"-like run with two more gathers, each 3 loop
iterations with ProfilerStep#1 and #2 recorded. For the wait/transfer test one rank arrives late
at a DP gather (:func:`record_late_arrival`).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from muon_repro.parallel import ParallelDims
from muon_repro.parallel.comm import all_gather_into, all_reduce_, reduce_scatter_into

DP, TP = 2, 2
STEPS, ACTIVE = 3, 2  # warmup 1, active 2: ProfilerStep#1 and #2 are recorded

# (phase, op, group, full elements, dtype, in muon only)
KNOWN = (
    ("tp_all_reduce", "all_reduce", "tp", 777, torch.float32, False),
    ("dp_reduce_scatter", "reduce_scatter", "dp", 2000, torch.float32, False),
    ("dp_gather", "all_gather", "dp", 600, torch.bfloat16, True),
    ("tp_gather", "all_gather", "tp", 256, torch.bfloat16, True),
    ("dp_all_gather", "all_gather", "dp", 2000, torch.float32, False),
)


def _step(dims: ParallelDims, muon: bool) -> None:
    groups = {"dp": dims.dp_group, "tp": dims.tp_group}
    spec = {phase: (op, groups[g], n, dt) for phase, op, g, n, dt, only_muon in KNOWN if muon or not only_muon}
    with record_function("forward"):
        x = torch.randn(64, 64)
        (x @ x).sum()
        _, g, n, dt = spec["tp_all_reduce"]
        all_reduce_(torch.ones(n, dtype=dt), g, phase="tp_all_reduce")
    with record_function("backward"):
        _, g, n, dt = spec["dp_reduce_scatter"]
        reduce_scatter_into(torch.empty(n // g.size, dtype=dt), torch.ones(n, dtype=dt), g, phase="dp_reduce_scatter")
    with record_function("optimizer"):
        for phase in ("dp_gather", "tp_gather", "dp_all_gather"):
            if phase in spec:
                _, g, n, dt = spec[phase]
                all_gather_into(torch.empty(n, dtype=dt), torch.ones(n // g.size, dtype=dt), g, phase=phase)
        y = torch.randn(32, 32)
        (y @ y).sum()


def record_known_collectives(out_dir: str) -> dict:
    """Record ``<out_dir>/known/{adamw,muon}_dp2_tp2/rank<r>.json.gz``; return each run's ledger."""
    dims = ParallelDims(DP, TP)
    ledgers = {}
    for optimizer in ("adamw", "muon"):
        run_dir = Path(out_dir) / "known" / f"{optimizer}_dp2_tp2"
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / f"rank{dims.rank}.json.gz"
        dims.ledger.clear()
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=STEPS - ACTIVE, active=ACTIVE),
            record_shapes=True,
            profile_memory=True,
            on_trace_ready=lambda prof, p=path: prof.export_chrome_trace(str(p)),
        ) as prof:
            for step in range(STEPS):
                dims.ledger.step = step
                _step(dims, muon=optimizer == "muon")
                prof.step()
        ledgers[optimizer] = dims.ledger.as_dicts()
    return {"rank": dims.rank, "ledgers": ledgers}


def _late_step(dims: ParallelDims, sleeper: int, sleep_s: float) -> None:
    """A reduce-scatter that lines each DP group up, then a DP gather that ``sleeper`` enters
    ``sleep_s`` late, then a TP gather (whose partners inherit the delay)."""
    with record_function("backward"):
        reduce_scatter_into(torch.empty(500), torch.ones(500 * DP), dims.dp_group, phase="dp_reduce_scatter")
    with record_function("optimizer"):
        with record_function("dp_gather"):
            if dims.rank == sleeper:
                time.sleep(sleep_s)
            all_gather_into(torch.empty(300 * DP), torch.ones(300), dims.dp_group, phase="dp_gather")
        all_gather_into(torch.empty(128 * TP), torch.ones(128), dims.tp_group, phase="tp_gather")


def record_late_arrival(out_dir: str, sleeper: int, sleep_s: float) -> int:
    """Record ``<out_dir>/late/dp2_tp2/rank<r>.json.gz`` (DP=2 x TP=2, ProfilerStep#1 and #2) in
    which rank ``sleeper`` sleeps ``sleep_s`` seconds inside the ``dp_gather`` scope, before the
    gather; returns this rank."""
    dims = ParallelDims(DP, TP)
    run_dir = Path(out_dir) / "late" / "dp2_tp2"
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"rank{dims.rank}.json.gz"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=STEPS - ACTIVE, active=ACTIVE),
        record_shapes=True,
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(STEPS):
            _late_step(dims, sleeper, sleep_s)
            prof.step()
    return dims.rank
