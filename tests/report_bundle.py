"""A small synthetic bundle (run directories with traces + the five metrics tables) for the report tests.

Built in well under a second, without torch.distributed: each run directory holds the files
``muon-repro bench`` writes (config.json, environment.json, metrics.json, log.txt, one Chrome
trace per rank with our phase labels inside ProfilerStep#N), and ``metrics/`` holds tables that
conform to :data:`muon_repro.analysis.tables.SCHEMAS`, with the claims measured by the real
:func:`muon_repro.analysis.claims.claims_table`. Bytes are the analytic model's, so the three
byte sources agree.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from muon_repro.analysis.claims import claims_table
from muon_repro.analysis.collectives import COMM_KINDS
from muon_repro.analysis.tables import SCHEMAS, write_tables
from muon_repro.report.analytic import analytic_bytes


@dataclass(frozen=True)
class Run:
    group: str
    optimizer: str
    dp: int
    tp: int
    layout: str = "contiguous"

    @property
    def name(self) -> str:
        grid = f"dp{self.dp}_tp{self.tp}" if self.dp > 1 and self.tp > 1 else (f"dp{self.dp}" if self.dp > 1 else f"tp{self.tp}")
        suffix = f"_{self.layout}" if self.group == "layout_ablation" else ""
        return f"{self.optimizer}_{grid}{suffix}"

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}"


FULL = (
    Run("comparison", "adamw", 2, 2),
    Run("comparison", "muon", 2, 2),
    Run("distributed_muon", "muon", 4, 1),
    Run("distributed_muon", "muon", 1, 4),
    Run("distributed_muon", "muon", 2, 2),
    Run("distributed_muon", "adamw", 4, 1),
    Run("distributed_muon", "adamw", 1, 4),
    Run("layout_ablation", "muon", 2, 2, "bucketed"),
    Run("layout_ablation", "muon", 2, 2, "whole_matrix"),
)
STEPS = (2, 3, 4)
BASE_NS = 1_790_000_000_000_000_000


def _config(run: Run) -> dict:
    return {
        "group": run.group, "name": run.name, "optimizer": run.optimizer, "dp": run.dp, "tp": run.tp, "layout": run.layout,
        "scale": "tiny", "preset": "tiny", "batch_per_dp": 2, "seq_len": 16, "bucket_elems": 4096 if run.layout == "bucketed" else None,
        "qkv": "fused", "wait": 1, "warmup": 1, "active": 3, "lr": 0.003, "weight_decay": 0.1, "ns_dtype": None, "gather_dtype": "bf16",
        "reduce_dtype": "fp32", "seed": 0, "key": run.key, "steps": 5, "world_size": run.dp * run.tp, "backend": "gloo", "device": "cpu",
        "command": ["muon-repro", "bench", "reference", "--scale", "tiny", "--out", "traces"],
    }  # fmt: skip


def _environment(run: Run) -> dict:
    return {
        "hostname": "testhost", "os": "Linux-test", "python": "3.11.7", "torch": "2.13.0+cpu", "cuda": None, "nccl": None,
        "backend": "gloo", "world_size": run.dp * run.tp, "nodes": 1, "host_cpu": "Test CPU", "host_cpu_cores": 2,
        "host_memory_bytes": 8 * 2**30, "torch_num_threads": 1, "accelerator": None, "accelerator_count": 0,
        "accelerator_memory_bytes": None, "interconnect_topology": None, "git_sha": "0123456789abcdef0123", "git_dirty": False,
        "pip_freeze": ["torch==2.13.0"],
    }  # fmt: skip


def _timing(run: Run, rank: int, step: int) -> dict[str, float]:
    """Deterministic per-rank step times (ms): Muon's optimizer is slower, ranks differ a little."""
    wobble = 1 + 0.03 * rank + 0.02 * (step - 3)
    fwd, bwd = 40 * wobble, 60 * wobble
    opt = (90 if run.optimizer == "muon" else 15) * wobble * (1.3 if run.layout == "bucketed" else 1.0)
    return {"forward": fwd, "backward": bwd, "optimizer": opt, "step": fwd + bwd + opt + 5}


def _trace(run: Run, rank: int) -> dict:
    """A Kineto-like Chrome trace: ProfilerStep#N, our phase labels, gloo transfers on a worker thread."""
    events, t = [], 1000.0
    offset_us = 150.0 * rank  # ranks start at different times on the wall clock
    for step in STEPS:
        tm = _timing(run, rank, step)

        def x(name: str, ts: float, dur: float, tid: int = 1) -> None:
            events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur})

        x(f"ProfilerStep#{step}", t, tm["step"] * 1000)
        f0 = t + 1000
        x("forward", f0, tm["forward"] * 1000)
        if run.tp > 1:
            x("tp_all_reduce", f0 + 5000, 2000)
            x("gloo:all_reduce", f0 + 5200, 1500, tid=2)
        b0 = f0 + tm["forward"] * 1000
        x("backward", b0, tm["backward"] * 1000)
        o0 = b0 + tm["backward"] * 1000
        x("optimizer", o0, tm["optimizer"] * 1000)
        phases = ["dp_reduce_scatter", "momentum", "dp_gather", "tp_gather", "newton_schulz", "tp_shard", "dp_shard", "update", "dp_all_gather"]
        if run.optimizer == "adamw":
            phases = ["dp_reduce_scatter", "update", "dp_all_gather"]
        share = tm["optimizer"] * 1000 / len(phases)
        for i, phase in enumerate(phases):
            x(phase, o0 + i * share, share * 0.9)
            if phase.startswith(("dp_", "tp_")) and phase not in ("dp_shard", "tp_shard"):
                x("gloo:all_gather", o0 + i * share + 10, share * 0.5, tid=2)
        t += tm["step"] * 1000 + 2000
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": run.dp * run.tp},
        "baseTimeNanoseconds": BASE_NS + int(offset_us * 1000),
        "traceEvents": events,
        "traceName": f"rank{rank}",
    }


def _metrics(run: Run) -> dict:
    ranks = []
    world = run.dp * run.tp
    for r in range(world):
        dp_rank = r // run.tp
        if run.optimizer == "adamw":
            state = {"muon": 0, "adamw": 80_000 // run.dp}
        else:  # the first DP chunk holds the embedding (AdamW state), the rest matrices (one moment)
            state = {"muon": 20_000 // run.dp, "adamw": 20_000 // run.dp if dp_rank == 0 else 0}
        loss = [4.85 - (0.25 if run.optimizer == "muon" else 0.1) * s - 0.01 * dp_rank for s in range(5)]
        ranks.append({
            "rank": r, "dp_rank": dp_rank, "tp_rank": r % run.tp, "step_ms": [_timing(run, r, s)["step"] for s in range(5)],
            "optimizer_ms": [_timing(run, r, s)["optimizer"] for s in range(5)], "loss": loss, "ledger": [],
            "state_bytes": state, "transient_bytes": 65_536 if run.optimizer == "muon" else 0, "peak_memory_bytes": 10**8,
            "peak_memory_source": "process_max_rss", "update_rms": {}, "ns_calls": 4, "ns_flops": 10**6,
            "model_params": 53_376, "local_params": 53_376 // run.tp,
        })  # fmt: skip
    return {"config": run.key, "ranks": ranks}


def _write_run(root: Path, run: Run) -> Path:
    d = root / "traces" / run.group / run.name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(_config(run)))
    (d / "environment.json").write_text(json.dumps(_environment(run)))
    (d / "metrics.json").write_text(json.dumps(_metrics(run)))
    (d / "log.txt").write_text(f"{run.key}\n")
    for r in range(run.dp * run.tp):
        with gzip.open(d / f"rank{r}.json.gz", "wt") as fh:
            json.dump(_trace(run, r), fh)
    return d


def _tables(runs: tuple[Run, ...], dirs: dict[str, Path]) -> dict[str, pd.DataFrame]:
    run_rows, step_rows, coll_rows = [], [], []
    for run in runs:
        world = run.dp * run.tp
        analytic = analytic_bytes(_config(run), run.key)
        model_tp = 50_000.0 if run.tp > 1 else 0.0
        per_step = []
        for r in range(world):
            for s in STEPS:
                tm = _timing(run, r, s)
                comm = 0.3 * tm["optimizer"] + (5 if run.tp > 1 else 0)
                compute = tm["step"] - comm - 3
                row = {"run": run.key, "group": run.group, "name": run.name, "rank": r, "step": s, "file": str(dirs[run.key] / f"rank{r}.json.gz"),
                       "device": "cpu", "start_us": 1000.0, "step_ms": tm["step"], "forward_ms": tm["forward"], "backward_ms": tm["backward"],
                       "optimizer_ms": tm["optimizer"], "compute_ms": compute, "comm_ms": comm, "overlap_ms": 0.0, "exposed_comm_ms": comm,
                       "idle_ms": 3.0, "compute_frac": compute / tm["step"], "comm_frac": comm / tm["step"], "exposed_comm_frac": comm / tm["step"],
                       "idle_frac": 3 / tm["step"], "optimizer_share": tm["optimizer"] / tm["step"], "comm_calls": 6,
                       "comm_bytes": int(sum(analytic.values()) + model_tp), "peak_mem_bytes": 10**7, "start_skew_ms": 1.0, "late_ms": 0.5,
                       "straggler_rank": 0}  # fmt: skip
                for k in COMM_KINDS:
                    row[f"comm_{k}_ms"] = {"all_gather": 0.5 * comm, "reduce_scatter": 0.3 * comm, "all_reduce": 0.2 * comm}.get(k, 0.0)
                step_rows.append(row)
                per_step.append(row)
            for phase, nbytes in analytic.items():
                if nbytes:
                    coll_rows.append({"run": run.key, "group": run.group, "name": run.name, "rank": r, "phase": phase,
                                      "op": "reduce_scatter" if phase == "dp_reduce_scatter" else "all_gather", "source": "gloo",
                                      "group_size": run.dp if phase.startswith("dp") else run.tp, "dtype": "float32", "steps": len(STEPS),
                                      "calls": 3, "bytes": int(nbytes * len(STEPS)), "size_bytes": int(nbytes * len(STEPS) * 2), "ms": 3.0,
                                      "bytes_per_step": nbytes, "ms_per_step": 1.0, "algbw_gbps": 1.0, "busbw_gbps": 0.5,
                                      "ledger_bytes": int(nbytes * len(STEPS))})  # fmt: skip
        s = pd.DataFrame(per_step)
        g = s.groupby("step")
        step_ms = g["step_ms"].max()
        run_rows.append({
            "run": run.key, "group": run.group, "name": run.name, "optimizer": run.optimizer, "layout": run.layout, "dp": run.dp, "tp": run.tp,
            "world_size": world, "backend": "gloo", "device": "cpu", "ranks": world, "steps": len(STEPS), "step_ms": step_ms.median(),
            "step_ms_p10": step_ms.quantile(0.1), "step_ms_p90": step_ms.quantile(0.9),
            **{c: g[c].mean().median() for c in ("forward_ms", "backward_ms", "optimizer_ms", "compute_ms", "comm_ms", "overlap_ms",
                                                 "exposed_comm_ms", "idle_ms", "comm_calls", "comm_bytes")},
            "optimizer_share": s["optimizer_ms"].sum() / s["step_ms"].sum(), "start_skew_ms": 1.0,
            "state_bytes": max(sum(v["state_bytes"].values()) for v in _metrics(run)["ranks"]), "peak_mem_bytes": 10**7,
            "peak_mem_source": "trace_allocator", "path": str(dirs[run.key]),
        })  # fmt: skip
    runs_df = SCHEMAS["runs"].conform(pd.DataFrame(run_rows))
    comp = _comparisons(runs_df)
    return {
        "runs": runs_df,
        "steps": SCHEMAS["steps"].conform(pd.DataFrame(step_rows)),
        "collectives": SCHEMAS["collectives"].conform(pd.DataFrame(coll_rows)) if coll_rows else SCHEMAS["collectives"].empty(),
        "comparisons": comp,
        "claims": SCHEMAS["claims"].conform(claims_table(runs_df, comp)),
    }


def _comparisons(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    r = runs.astype(object).where(runs.notna(), None)
    for _, m in r[r["optimizer"] == "muon"].iterrows():
        a = r[(r["optimizer"] == "adamw") & (r["dp"] == m["dp"]) & (r["tp"] == m["tp"])]
        if a.empty:
            continue
        a = a.iloc[0]
        cols = ("comm_ms", "exposed_comm_ms", "comm_bytes", "optimizer_ms", "step_ms", "state_bytes")
        rows.append({"group": m["group"], "dp": m["dp"], "tp": m["tp"], "backend": "gloo", "device": "cpu", "layout": m["layout"],
                     "muon_run": m["run"], "adamw_run": a["run"],
                     **{f"{c}_ratio": float(m[c]) / float(a[c]) if a[c] else None for c in cols}})  # fmt: skip
    return SCHEMAS["comparisons"].conform(pd.DataFrame(rows)) if rows else SCHEMAS["comparisons"].empty()


def make_bundle(root: Path, runs: tuple[Run, ...] = FULL) -> Path:
    """Write ``root/traces/<group>/<name>/`` and ``root/metrics/``; returns ``root``."""
    dirs = {run.key: _write_run(root, run) for run in runs}
    write_tables(_tables(runs, dirs), root / "metrics")
    return root
