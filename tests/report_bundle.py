"""A small synthetic ``metrics/`` folder for the report tests: every table the report reads.

Built in well under a second, without torch: the tables conform to
:data:`muon_repro.analysis.schemas.SCHEMAS` and are written by the analysis's own
:func:`~muon_repro.analysis.tables.write_tables`, with the claims measured by the real
:func:`~muon_repro.analysis.claims.claims_table`. There are no run directories and no traces:
the report reads the tables alone. Bytes follow a simple ring-model-like formula, the same for
the analytic, ledger and trace sources, so the three agree. Every configuration is recorded in
:data:`TRIALS` trials (a little slower each), all training :data:`TOKENS_PER_STEP` tokens per
step, so the claims have 95% intervals and the runs did the same work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from muon_repro.analysis.checks import checks_table
from muon_repro.analysis.claims import claims_table, stated_numbers
from muon_repro.analysis.collectives import COMM_KINDS
from muon_repro.analysis.estimators import optimizer_share
from muon_repro.phases import OPTIMIZER_COMM_PHASES
from muon_repro.tables.io import write_tables
from muon_repro.tables.schemas import SCHEMAS


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

    @property
    def world(self) -> int:
        return self.dp * self.tp

    def ids(self) -> dict:
        return {"run": self.key, "profile": PROFILE, "group": self.group, "name": self.name}


PROFILE = "cpu-2c-gloo"  # every fabricated run's hardware profile (its run ids keep the old '<group>/<name>' form)

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
STEPS = (2, 3, 4)  # profiled steps (of TRAIN_STEPS)
TRIALS = (0, 1)  # every configuration recorded twice
TRAIN_STEPS = 5
MODEL_PARAMS = 53_376
MATRIX_PARAMS = 40_000  # the part of the model Muon manages
TOKENS_PER_STEP = 1_024  # the same for every run (equal work); batch per DP rank = TOKENS_PER_STEP / (dp * SEQ_LEN)
SEQ_LEN = 16
LOCAL_STATE_ELEMS = 10_000  # optimizer-managed elements per TP rank, split in ZeRO-1 chunks over DP
EMBED_ELEMS = 2_000  # of them, the embedding's (AdamW state under both optimizers), in DP rank 0's chunk
# Columns other engineers are adding to the runs table: filled in when the schema has them.
OPTIONAL_RUN_COLUMNS = {"loopback_bytes_per_step": 2.5e6, "ring_bytes_per_step": 2.0e6}
COMMAND = "muon-repro bench reference --scale tiny --out traces"
OPTIMIZER_PHASES = {
    "muon": (
        "dp_reduce_scatter",
        "momentum",
        "dp_gather",
        "tp_gather",
        "newton_schulz",
        "tp_shard",
        "dp_shard",
        "update",
        "dp_all_gather",
    ),
    "adamw": ("dp_reduce_scatter", "update", "dp_all_gather"),
}


def _environment(run: Run) -> dict:
    return {
        "hostname": "testhost",
        "os": "Linux-test",
        "python": "3.11.7",
        "torch": "2.13.0+cpu",
        "cuda": None,
        "nccl": None,
        "backend": "gloo",
        "world_size": run.world,
        "nodes": 1,
        "host_cpu": "Test CPU",
        "host_cpu_cores": 2,
        "host_memory_bytes": 8 * 2**30,
        "torch_num_threads": 1,
        "accelerator": None,
        "accelerator_count": 0,
        "accelerator_memory_bytes": None,
        "interconnect_topology": None,
        "git_sha": "0123456789abcdef0123",
        "git_dirty": False,
        "recorded_at": "2026-01-02T03:04:05+00:00",
        "pip_freeze": ["torch==2.13.0", "pandas==2.2.3"],
    }


def _timing(run: Run, rank: int, step: int, trial: int = 0) -> dict[str, float]:
    """Deterministic per-rank step times (ms): Muon's optimizer is slower, ranks and trials differ a little."""
    wobble = (1 + 0.03 * rank + 0.02 * (step - 3)) * (1 + 0.05 * trial)
    fwd, bwd = 40 * wobble, 60 * wobble
    opt = (90 if run.optimizer == "muon" else 15) * wobble * (1.3 if run.layout == "bucketed" else 1.0)
    return {"forward": fwd, "backward": bwd, "optimizer": opt, "step": fwd + bwd + opt + 5}


def _analytic(run: Run) -> dict[str, float]:
    """Bytes per rank per step in each optimizer communication phase (ring model: (n-1) chunks of ceil(E/n))."""

    def ring(elems: int, n: int, nbytes: int) -> float:
        return float((n - 1) * math.ceil(elems / n) * nbytes)

    local, matrices = MODEL_PARAMS // run.tp, MATRIX_PARAMS // run.tp
    out = dict.fromkeys(OPTIMIZER_COMM_PHASES, 0.0)
    out["dp_reduce_scatter"] = ring(local, run.dp, 4)
    out["dp_all_gather"] = ring(local, run.dp, 4)
    if run.optimizer == "muon":
        straddling = {"contiguous": 0.1, "bucketed": 1.0, "whole_matrix": 0.0}[run.layout]
        out["dp_gather"] = ring(int(straddling * matrices), run.dp, 2)
        out["tp_gather"] = ring(MATRIX_PARAMS // 2, run.tp, 2)  # the matrices Newton-Schulz needs whole
    return out


def _state(run: Run, dp_rank: int) -> dict[str, int]:
    """Bytes of optimizer state of one rank: its ZeRO-1 chunk of the TP-local elements; the
    embedding (first chunk) keeps AdamW's two moments, the matrices one moment under Muon."""
    chunk = LOCAL_STATE_ELEMS // run.dp
    embed = min(EMBED_ELEMS, chunk) if dp_rank == 0 else 0
    if run.optimizer == "adamw":
        return {"muon": 0, "adamw": 8 * chunk}
    return {"muon": 4 * (chunk - embed), "adamw": 8 * embed}


def _ns_flops(run: Run, dp_rank: int) -> int:
    """Newton-Schulz FLOPs per step: uneven across DP ranks in the contiguous layout (who holds which matrix)."""
    if run.optimizer != "muon":
        return 0
    return {"contiguous": 1_200_000 if dp_rank == 0 else 800_000, "bucketed": 2_000_000, "whole_matrix": 1_000_000}[run.layout]


def _loss(run: Run, dp_rank: int, step: int) -> float:
    return 4.85 - (0.25 if run.optimizer == "muon" else 0.1) * step - 0.01 * dp_rank


def _model_tp_bytes(run: Run) -> float:
    return 50_000.0 if run.tp > 1 else 0.0


# ---------------------------------------------------------------- one table each


def _steps(run: Run) -> list[dict]:
    analytic = _analytic(run)
    rows = []
    for t in TRIALS:
        for r in range(run.world):
            for s in STEPS:
                tm = _timing(run, r, s, t)
                comm = 0.3 * tm["optimizer"] + (5 if run.tp > 1 else 0)
                compute = tm["step"] - comm - 3
                row = {
                    **run.ids(),
                    "trial": t,
                    "rank": r,
                    "step": s,
                    "file": f"traces/{run.key}/trial{t}/rank{r}.json.gz",
                    "device": "cpu",
                    "start_us": 1000.0,
                    "step_ms": tm["step"],
                    "forward_ms": tm["forward"],
                    "backward_ms": tm["backward"],
                    "optimizer_ms": tm["optimizer"],
                    "compute_ms": compute,
                    "comm_ms": comm,
                    "comm_wait_ms": 0.4 * comm,
                    "comm_transfer_ms": 0.6 * comm,
                    "compute_window_ms": compute,
                    "comm_window_ms": comm,
                    "overlap_ms": 0.0,
                    "exposed_comm_ms": comm,
                    "idle_ms": 3.0,
                    "compute_frac": compute / tm["step"],
                    "comm_frac": comm / tm["step"],
                    "exposed_comm_frac": comm / tm["step"],
                    "idle_frac": 3 / tm["step"],
                    "optimizer_share": tm["optimizer"] / tm["step"],
                    "comm_calls": 6,
                    "comm_bytes": int(sum(analytic.values()) + _model_tp_bytes(run)),
                    "peak_mem_bytes": 10**7,
                    "start_skew_ms": 1.0,
                    "late_ms": 0.5,
                    "straggler_rank": 0,
                }
                for k in COMM_KINDS:
                    row[f"comm_{k}_ms"] = {"all_gather": 0.5 * comm, "reduce_scatter": 0.3 * comm, "all_reduce": 0.2 * comm}.get(
                        k, 0.0
                    )
                rows.append(row)
    return rows


def _collectives(run: Run) -> list[dict]:
    rows = []
    for t in TRIALS:
        for r in range(run.world):
            for phase, nbytes in _analytic(run).items():
                if nbytes:
                    total = int(nbytes * len(STEPS))
                    rows.append(
                        {
                            **run.ids(),
                            "trial": t,
                            "rank": r,
                            "phase": phase,
                            "op": "reduce_scatter" if phase == "dp_reduce_scatter" else "all_gather",
                            "source": "gloo",
                            "group_size": run.dp if phase.startswith("dp") else run.tp,
                            "dtype": "float32",
                            "steps": len(STEPS),
                            "calls": 3,
                            "bytes": total,
                            "size_bytes": 2 * total,
                            "ms": 3.0,
                            "wait_ms": 1.2,
                            "transfer_ms": 1.8,
                            "matched_calls": 3,
                            "bytes_per_step": nbytes,
                            "ms_per_step": 1.0,
                            "algbw_gbps": 1.0,
                            "busbw_gbps": 0.5,
                            "ledger_bytes": total,
                        }
                    )
    return rows


def _ranks(run: Run) -> list[dict]:
    rows = []
    for t in TRIALS:
        for r in range(run.world):
            dp_rank, state = r // run.tp, _state(run, r // run.tp)
            muon = run.optimizer == "muon"
            rows.append(
                {
                    **run.ids(),
                    "trial": t,
                    "rank": r,
                    "dp_rank": dp_rank,
                    "tp_rank": r % run.tp,
                    "muon_state_bytes": state["muon"],
                    "adamw_state_bytes": state["adamw"],
                    "state_bytes": sum(state.values()),
                    "transient_bytes": 65_536 if muon else 0,
                    "peak_mem_bytes": 10**8,
                    "peak_mem_source": "process_max_rss",
                    "ns_calls": 4 if muon else 0,
                    "ns_flops": _ns_flops(run, dp_rank),
                    "shard_elems": MODEL_PARAMS // run.world,
                    "muon_matrices": 8 if muon else 0,
                    "ns_matrices": 4 if muon else 0,
                    "dp_gathered_matrices": 1 if muon and run.dp > 1 else 0,
                    "local_params": MODEL_PARAMS // run.tp,
                }
            )
    return rows


def phase_ms(run: Run, rank: int, trial: int, phase: str) -> float:
    """ms per step inside ``phase``'s scope (the phases table's ms_per_step)."""
    timings = [_timing(run, rank, s, trial) for s in STEPS]
    if phase in ("forward", "backward", "optimizer"):
        return sum(t[phase] for t in timings) / len(timings)
    if phase == "tp_all_reduce":
        return 2.0
    return 0.9 * sum(t["optimizer"] for t in timings) / len(timings) / len(OPTIMIZER_PHASES[run.optimizer])


def _phases(run: Run) -> list[dict]:
    analytic = _analytic(run)
    fine = (*OPTIMIZER_PHASES[run.optimizer], *(("tp_all_reduce",) if run.tp > 1 else ()))
    rows = []
    for t in TRIALS:
        for r in range(run.world):
            for phase in ("forward", "backward", "optimizer", *fine):
                ms = phase_ms(run, r, t, phase)
                sent = _model_tp_bytes(run) if phase == "tp_all_reduce" else analytic.get(phase)
                comm = bool(sent)  # a phase with collectives: its time splits into wait and transfer
                rows.append(
                    {
                        **run.ids(),
                        "trial": t,
                        "rank": r,
                        "phase": phase,
                        "steps": len(STEPS),
                        "ms_per_step": ms,
                        "cpu_ms_per_step": ms,  # a CPU run: the phase's time is its CPU span
                        "gpu_ms_per_step": None,
                        "wait_ms_per_step": 0.3 * ms if comm else None,
                        "transfer_ms_per_step": 0.5 * ms if comm else None,
                        "analytic_bytes": analytic.get(phase),
                        "ledger_bytes": sent or None,
                        "trace_bytes": sent or None,
                    }
                )
    return rows


def _timeline(run: Run) -> list[dict]:
    """Every profiled step of every trial and rank, as the analysis lays it out: ms from the earliest
    rank's step start (rank r starts 0.15 r ms late), the step window, phases, sub-phases, transfers."""
    rows = []
    for t in TRIALS:
        for r in range(run.world):
            for s in STEPS:
                rows += _one_step(run, t, r, s)
    return rows


def _one_step(run: Run, trial: int, rank: int, step: int) -> list[dict]:
    tm = _timing(run, rank, step, trial)
    key = {**run.ids(), "trial": trial, "rank": rank, "step": step}
    spans = []

    def span(lane: str, phase: str, start: float, dur: float) -> None:
        spans.append({**key, "lane": lane, "phase": phase, "start_ms": start, "end_ms": start + dur, "aligned": True})

    t0 = 0.15 * rank
    span("step", "step", t0, tm["step"])
    f0 = t0 + 1.0
    span("coarse", "forward", f0, tm["forward"])
    if run.tp > 1:
        span("fine", "tp_all_reduce", f0 + 5.0, 2.0)
        span("transfer", "transfer", f0 + 5.2, 1.5)
    b0 = f0 + tm["forward"]
    span("coarse", "backward", b0, tm["backward"])
    o0 = b0 + tm["backward"]
    span("coarse", "optimizer", o0, tm["optimizer"])
    phases = OPTIMIZER_PHASES[run.optimizer]
    share = tm["optimizer"] / len(phases)
    for i, phase in enumerate(phases):
        span("fine", phase, o0 + i * share, 0.9 * share)
        if phase in OPTIMIZER_COMM_PHASES:
            span("transfer", "transfer", o0 + i * share + 0.01, 0.5 * share)
    return spans


def _losses(run: Run) -> list[dict]:
    return [
        {**run.ids(), "trial": t, "rank": r, "step": s, "loss": _loss(run, r // run.tp, s)}
        for t in TRIALS
        for r in range(run.world)
        for s in range(TRAIN_STEPS)
    ]


def _environment_rows(run: Run) -> list[dict]:
    def text(v) -> str:
        return ", ".join(map(str, v)) if isinstance(v, list) else str(v)

    return [
        {**run.ids(), "trial": t, "key": k, "value": text(v)}
        for t in TRIALS
        for k, v in sorted(_environment(run).items())
        if v is not None
    ]


def _runs(run: Run, steps: pd.DataFrame) -> dict:
    """The run's row as the analysis computes it: medians over the (trial, step)s of every trial."""
    s = steps[steps["run"] == run.key]
    g = s.groupby(["trial", "step"])
    step_ms = g["step_ms"].max()
    ordered = step_ms.sort_values(kind="stable")
    typical_trial, typical_step = ordered.index[len(ordered) // 2]
    ns_flops = max(_ns_flops(run, d) for d in range(run.dp))
    optional = {c: v for c, v in OPTIONAL_RUN_COLUMNS.items() if c in SCHEMAS["runs"].names}
    return {
        **run.ids(),
        "protocol": "benchmark",
        "optimizer": run.optimizer,
        "layout": run.layout,
        "overlap": "none",
        "dp": run.dp,
        "tp": run.tp,
        "pp": 1,  # no pipeline stages: the 3-D section says so
        "world_size": run.world,
        "backend": "gloo",
        "device": "cpu",
        "ranks": run.world,
        "trials": len(TRIALS),
        "tokens_per_step": TOKENS_PER_STEP,
        "tokens_per_s": TOKENS_PER_STEP / step_ms.median() * 1000.0,
        "steps": len(STEPS) * len(TRIALS),
        "step_ms": step_ms.median(),
        "step_ms_p10": step_ms.quantile(0.1),
        "step_ms_p90": step_ms.quantile(0.9),
        **{
            c: g[c].mean().median()
            for c in (
                "forward_ms",
                "backward_ms",
                "optimizer_ms",
                "compute_ms",
                "comm_ms",
                "comm_wait_ms",
                "comm_transfer_ms",
                "overlap_ms",
                "exposed_comm_ms",
                "idle_ms",
                "comm_calls",
                "comm_bytes",
            )
        },
        **dict(zip(("optimizer_share", "optimizer_share_low", "optimizer_share_high"), optimizer_share(steps, run.key))),
        "start_skew_ms": 1.0,
        "state_bytes": max(sum(_state(run, d).values()) for d in range(run.dp)),
        "peak_mem_bytes": 10**7,
        "peak_mem_source": "trace_allocator",
        "path": f"traces/{run.key}",
        "train_flops": 6 * MODEL_PARAMS * TOKENS_PER_STEP,
        "ns_flops_max_rank": ns_flops,
        "typical_trial": int(typical_trial),
        "typical_step": int(typical_step),
        **dict.fromkeys(("timed_step_ms", "timed_optimizer_ms", "timed_bubble_ms", "profiler_overhead", "rounds")),
        "scale": "tiny",
        "preset": "tiny",
        "qkv": "fused",
        "cross_entropy": "vocab_parallel",
        "precision": "fp32",
        "micro_batches": 1,
        "batch_per_dp": TOKENS_PER_STEP // (run.dp * SEQ_LEN),
        "seq_len": SEQ_LEN,
        "train_steps": TRAIN_STEPS,
        "lr": 0.003,
        "weight_decay": 0.1,
        "ns_dtype": None,
        "gather_dtype": "bf16",
        "reduce_dtype": "fp32",
        "seed": 0,
        "model_params": MODEL_PARAMS,
        "command": COMMAND,
        "git_sha": _environment(run)["git_sha"],
        "recorded_at": _environment(run)["recorded_at"],
        **optional,
    }


def _comparisons(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    r = runs.astype(object).where(runs.notna(), None)
    for _, m in r[r["optimizer"] == "muon"].iterrows():
        a = r[
            (r["optimizer"] == "adamw")
            & (r["dp"] == m["dp"])
            & (r["tp"] == m["tp"])
            & (r["tokens_per_step"] == m["tokens_per_step"])
        ]
        if a.empty:
            continue
        a = a.iloc[0]
        cols = ("comm_ms", "comm_transfer_ms", "exposed_comm_ms", "comm_bytes", "optimizer_ms", "step_ms", "state_bytes")
        rows.append(
            {
                "profile": PROFILE,
                "group": m["group"],
                "dp": m["dp"],
                "tp": m["tp"],
                "backend": "gloo",
                "device": "cpu",
                "layout": m["layout"],
                "tokens_per_step": m["tokens_per_step"],
                "muon_run": m["run"],
                "adamw_run": a["run"],
                **{f"{c}_ratio": float(m[c]) / float(a[c]) if a[c] else None for c in cols},
            }
        )
    return _frame("comparisons", rows)


# What the tables say of a run without pipeline stages (the columns the pipeline runs added).
NO_STAGES = {"pp": 1, "pp_rank": 0, "stage": 0}


def _frame(name: str, rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """``rows`` as table ``name``, the columns pipeline runs added filled as for a run without stages."""
    if len(rows) == 0:
        return SCHEMAS[name].empty()
    frame = pd.DataFrame(rows)
    missing = {c: v for c, v in NO_STAGES.items() if c in SCHEMAS[name].names and c not in frame.columns}
    return SCHEMAS[name].conform(frame.assign(**missing))


def tables(runs: tuple[Run, ...] = FULL) -> dict[str, pd.DataFrame]:
    """Every table of the analysis, for ``runs``."""
    steps = _frame("steps", [row for run in runs for row in _steps(run)])
    runs_df = _frame("runs", [_runs(run, steps) for run in runs])
    ranks = _frame("ranks", [row for run in runs for row in _ranks(run)])
    phases = _frame("phases", [row for run in runs for row in _phases(run)])
    claims, checks = claims_table(runs_df, steps, ranks, phases), checks_table(runs_df, ranks, phases)
    return {
        "runs": runs_df,
        "steps": steps,
        "timed_steps": SCHEMAS["timed_steps"].empty(),  # runs recorded before timed steps: the report still builds
        "collectives": _frame("collectives", [row for run in runs for row in _collectives(run)]),
        "comparisons": _comparisons(runs_df),
        "claims": SCHEMAS["claims"].conform(claims),
        "checks": SCHEMAS["checks"].conform(checks),
        "stated_numbers": SCHEMAS["stated_numbers"].conform(
            stated_numbers([("claims", "claim_id", claims), ("checks", "check_id", checks)])
        ),
        "ranks": ranks,
        "phases": phases,
        "timeline": _frame("timeline", [row for run in runs for row in _timeline(run)]),
        "losses": _frame("losses", [row for run in runs for row in _losses(run)]),
        "environment": _frame("environment", [row for run in runs for row in _environment_rows(run)]),
        **costmodel_tables(),
        "convergence": SCHEMAS["convergence"].empty(),  # no `muon-repro converge` run: the report still builds
        "leading_steps": SCHEMAS["leading_steps"].empty(),
    }


def costmodel_tables() -> dict[str, pd.DataFrame]:
    """The regime sweep's and the cost model's tables as committed (they come from records, not from the runs above)."""
    from muon_repro.analysis.costmodel_tables import COSTMODEL_TABLES

    metrics = Path(__file__).resolve().parents[1] / "metrics"
    committed = {name: pd.read_parquet(metrics / f"{name}.parquet", dtype_backend="numpy_nullable") for name in COSTMODEL_TABLES}
    # tables written before hardware profiles have no profile column: theirs is the fabricated runs' one
    return {name: _frame(name, df if "profile" in df.columns else df.assign(profile=PROFILE)) for name, df in committed.items()}


def make_bundle(root: Path, runs: tuple[Run, ...] = FULL) -> Path:
    """Write ``root/metrics/`` (Parquet + CSV, every table); returns ``root``."""
    write_tables(tables(runs), root / "metrics")
    return root
