"""A small synthetic ``metrics/`` folder for the report tests: every table the report reads, made by the analysis.

The tables are not written by hand: :func:`write_traces` records each configuration of :data:`FULL` as the
benchmark lays it out (``traces/<profile>/<group>/<name>/trial<k>/`` with ``config.json``,
``environment.json``, ``metrics.json`` and one gloo Chrome trace per rank), and :func:`tables` runs the real
analysis (:func:`~muon_repro.analysis.batch_read.analyze_paths` in this process, ``workers=1``: no worker is
started) and returns its tables. Only the cost model's and the regime sweep's tables come from elsewhere, the
committed ones: they are made from records, not from runs (:func:`costmodel_tables`).

Each trace holds the profiled steps :data:`STEPS` as ``ProfilerStep#N`` spans, our phase scopes (forward,
backward, optimizer and the optimizer's fine phases, :data:`OPTIMIZER_PHASES`; ``tp_all_reduce`` in the forward
with TP), CPU ops for the computation, a ``[memory]`` event per step and, for every collective of a phase, its
``c10d::`` caller on the main thread and its ``gloo:`` transfer on a ``pt_gloo_runloop`` worker, sized so that
the ring model gives :func:`analytic` bytes (the same bytes metrics.json's analytic model and ledger record, so
the three sources agree). The durations are :func:`timing`'s deterministic step times: Muon's optimizer slower
than AdamW's (slower still in the bucketed layout), rank ``r`` 3% slower per rank and starting 0.15 r ms late,
every trial 5% slower than the one before, all training :data:`TOKENS_PER_STEP` tokens per step in
:data:`TRIALS` trials, so the claims have 95% intervals and the runs did the same work. Rank 0's loopback count
reads 25% above the ring model (:data:`LOOPBACK_OVER_RING`: gloo sends a reduce-scatter as an all-reduce).

Analyzed once per configuration set and test run (:func:`tables` caches; under pytest-xdist the workers share the
first one's tables through :data:`SHARED_DIR`), in well under ten seconds, without torch.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from run_once import build_once

from muon_repro.analysis.batch_read import analyze_paths
from muon_repro.formulas import ring_bytes
from muon_repro.phases import (
    BACKWARD,
    DP_ALL_GATHER,
    DP_GATHER,
    DP_REDUCE_SCATTER,
    FORWARD,
    OPTIMIZER,
    OPTIMIZER_COMM_PHASES,
    TP_ALL_REDUCE,
    TP_GATHER,
)
from muon_repro.rundir import CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE, trace_name, trial_dir
from muon_repro.table_set import tables_of
from muon_repro.tables.io import read_tables, write_tables
from muon_repro.tables.schemas import SCHEMAS

PROFILE = "cpu-2c-gloo"  # the hardware profile environment.json describes (2 CPU cores, gloo): every run's


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
        """The run's id in the tables, as the analysis makes it: ``<profile>/<group>/<name>``."""
        return f"{PROFILE}/{self.group}/{self.name}"

    @property
    def world(self) -> int:
        return self.dp * self.tp


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
TRAIN_STEPS = 5
WARMUP_STEPS = 2
STEPS = tuple(range(WARMUP_STEPS, TRAIN_STEPS))  # the profiled steps (2, 3, 4), after the profiler's warm-up
TRIALS = (0, 1)  # every configuration recorded twice
MODEL_PARAMS = 53_376
MATRIX_PARAMS = 40_000  # the part of the model Muon manages
TOKENS_PER_STEP = 1_024  # the same for every run (equal work); batch per DP rank = TOKENS_PER_STEP / (dp * SEQ_LEN)
SEQ_LEN = 16
LOCAL_STATE_ELEMS = 10_000  # optimizer-managed elements per TP rank, split in ZeRO-1 chunks over DP
EMBED_ELEMS = 2_000  # of them, the embedding's (AdamW state under both optimizers), in DP rank 0's chunk
MODEL_TP_ELEMS = 12_500  # the fp32 activations the model all-reduces over TP once per forward
LOOPBACK_OVER_RING = 1.25  # gloo's loopback bytes over the ring model's (reduce-scatters sent as all-reduces, headers)
COMMAND = "muon-repro bench reference --scale tiny --out traces"
RECORDED_AT = "2026-01-02T03:04:05+00:00"
BASE_TIME_NS = 1_767_323_045_000_000_000  # RECORDED_AT: every rank's trace counts ts from it (one machine, one clock)
STEP_SPACING_MS = 1_000.0  # profiled steps start this far apart (each shorter)
RANK_DELAY_MS = 0.15  # rank r enters each step r * this late
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
SCOPE_SHARE = 0.9  # of its slot of the optimizer step, the time a fine phase's scope lasts
TRANSFER_SHARE = 0.5  # of its slot, the time a phase's gloo transfer lasts
TP_ALL_REDUCE_MS = 2.0  # the model's TP all-reduce scope, 5 ms into the forward; its transfer lasts 1.5 ms


# ---------------------------------------------------------------- what the synthetic runs did


def timing(run: Run, rank: int, step: int, trial: int = 0) -> dict[str, float]:
    """Deterministic per-rank step times (ms): Muon's optimizer is slower, ranks and trials differ a little."""
    wobble = (1 + 0.03 * rank + 0.02 * (step - 3)) * (1 + 0.05 * trial)
    fwd, bwd = 40 * wobble, 60 * wobble
    opt = (90 if run.optimizer == "muon" else 15) * wobble * (1.3 if run.layout == "bucketed" else 1.0)
    return {"forward": fwd, "backward": bwd, "optimizer": opt, "step": fwd + bwd + opt + 5}


def phase_ms(run: Run, rank: int, trial: int, phase: str) -> float:
    """ms per step inside ``phase``'s scope in the traces (what the phases table's ms_per_step should read)."""
    timings = [timing(run, rank, s, trial) for s in STEPS]
    if phase in (FORWARD, BACKWARD, OPTIMIZER):
        return sum(t[phase] for t in timings) / len(timings)
    if phase == TP_ALL_REDUCE:
        return TP_ALL_REDUCE_MS
    return SCOPE_SHARE * sum(t[OPTIMIZER] for t in timings) / len(timings) / len(OPTIMIZER_PHASES[run.optimizer])


def transfer_ms(run: Run, rank: int, trial: int, phase: str) -> float:
    """ms per step of ``phase``'s gloo transfer in the traces (the collectives' ms, wait plus transfer)."""
    return phase_ms(run, rank, trial, phase) * TRANSFER_SHARE / SCOPE_SHARE


def _collectives(run: Run) -> dict[str, tuple[str, str, int, int, int]]:
    """Per phase with a collective: (c10d op, group, group size, elements of the full array, bytes per element)."""
    local, matrices = MODEL_PARAMS // run.tp, MATRIX_PARAMS // run.tp
    calls = {
        DP_REDUCE_SCATTER: ("reduce_scatter", "dp", run.dp, local, 4),
        DP_ALL_GATHER: ("all_gather", "dp", run.dp, local, 4),
        TP_ALL_REDUCE: ("all_reduce", "tp", run.tp, MODEL_TP_ELEMS, 4),
    }
    if run.optimizer == "muon":
        straddling = {"contiguous": 0.1, "bucketed": 1.0, "whole_matrix": 0.0}[run.layout]
        calls[DP_GATHER] = ("all_gather", "dp", run.dp, int(straddling * matrices), 2)
        calls[TP_GATHER] = ("all_gather", "tp", run.tp, MATRIX_PARAMS // 2, 2)  # the matrices Newton-Schulz needs whole
    return {phase: call for phase, call in calls.items() if call[2] > 1 and call[3] > 0}  # a group of one sends nothing


def analytic(run: Run) -> dict[str, float]:
    """Bytes per rank per step in each optimizer communication phase (ring model: (n-1) chunks of ceil(E/n))."""
    calls = _collectives(run)
    return {p: float(ring_bytes(*_sized(calls[p])) if p in calls else 0) for p in OPTIMIZER_COMM_PHASES}


def _sized(call: tuple[str, str, int, int, int]) -> tuple[str, int, int, int]:
    """``ring_bytes``'s arguments for a call of :func:`_collectives`: op, elements, bytes per element, group size."""
    op, _, n, elems, size = call
    return op, elems, size, n


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


def environment(run: Run) -> dict:
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
        "recorded_at": RECORDED_AT,
        "pip_freeze": ["torch==2.13.0", "pandas==2.2.3"],
    }


def _config(run: Run, trial: int) -> dict:
    return {
        "group": run.group,
        "name": run.name,
        "key": f"{run.group}/{run.name}",
        "optimizer": run.optimizer,
        "dp": run.dp,
        "tp": run.tp,
        "pp": 1,  # no pipeline stages: the 3-D section says so
        "layout": run.layout,
        "overlap": "none",
        "scale": "tiny",
        "preset": "tiny",
        "qkv": "fused",
        "cross_entropy": "vocab_parallel",
        "precision": "fp32",
        "micro_batches": 1,
        "tokens_per_step": TOKENS_PER_STEP,
        "batch_per_dp": TOKENS_PER_STEP // (run.dp * SEQ_LEN),
        "seq_len": SEQ_LEN,
        "steps": TRAIN_STEPS,
        "wait": 0,
        "warmup": WARMUP_STEPS,
        "active": len(STEPS),
        "profile": True,
        "lr": 0.003,
        "weight_decay": 0.1,
        "ns_dtype": None,
        "gather_dtype": "bf16",
        "reduce_dtype": "fp32",
        "seed": 0,
        "trial": trial,
        "trials": len(TRIALS),
        "world_size": run.world,
        "backend": "gloo",
        "device": "cpu",
        "command": shlex.split(COMMAND),
    }


def _rank_metrics(run: Run, rank: int, trial: int) -> dict:
    """metrics.json's entry for one rank: state, memory, Newton-Schulz work, shard plan, bytes and ledger, losses."""
    dp_rank, muon = rank // run.tp, run.optimizer == "muon"
    steps = [timing(run, rank, s, trial) for s in range(TRAIN_STEPS)]
    calls = _collectives(run)
    ledger = [
        {
            "step": s,
            "phase": phase,
            "op": op,
            "group": group,
            "group_size": n,
            "elements": elems,
            "dtype": "bfloat16" if size == 2 else "float32",
            "bytes": ring_bytes(op, elems, size, n),
        }
        for s in range(TRAIN_STEPS)
        for phase, (op, group, n, elems, size) in calls.items()
    ]
    out = {
        "rank": rank,
        "dp_rank": dp_rank,
        "tp_rank": rank % run.tp,
        "step_ms": [t["step"] for t in steps],
        "optimizer_ms": [t[OPTIMIZER] for t in steps],
        "loss": [_loss(run, dp_rank, s) for s in range(TRAIN_STEPS)],
        "ledger": ledger,
        "state_bytes": _state(run, dp_rank),
        "transient_bytes": 65_536 if muon else 0,
        "peak_memory_bytes": 10**8,
        "peak_memory_source": "process_max_rss",
        "ns_calls": 4 if muon else 0,
        "ns_flops": _ns_flops(run, dp_rank),
        "model_params": MODEL_PARAMS,
        "local_params": MODEL_PARAMS // run.tp,
        "analytic_bytes": {phase: int(nbytes) for phase, nbytes in analytic(run).items()},
        "shard": {
            "layout": run.layout,
            "buckets": 1,
            "shard_elems": MODEL_PARAMS // run.world,
            "muon_matrices": 8 if muon else 0,
            "ns_matrices": 4 if muon else 0,
            "dp_gathered_matrices": 1 if muon and run.dp > 1 else 0,
        },
        "train_flops": 6 * MODEL_PARAMS * TOKENS_PER_STEP,
    }
    if rank == 0:  # rank 0 reads the loopback counter around the profiled steps: every rank's traffic
        ring_per_step = run.world * sum(ring_bytes(*_sized(call)) for call in calls.values())
        out |= {"loopback_bytes": round(LOOPBACK_OVER_RING * ring_per_step * len(STEPS)), "loopback_steps": len(STEPS)}
    return out


# ---------------------------------------------------------------- the traces

MAIN, WORKER, PID = 1, 2, 100  # the training thread, gloo's worker thread, the process
C10D = {"reduce_scatter": "c10d::_reduce_scatter_base_", "all_gather": "c10d::_allgather_base_", "all_reduce": "c10d::allreduce_"}
GLOO = {"reduce_scatter": "gloo:all_reduce", "all_gather": "gloo:all_gather", "all_reduce": "gloo:all_reduce"}
COMPUTE_OP = {"newton_schulz": "aten::mm", "momentum": "aten::lerp_", "update": "aten::add_"}  # else a copy


def _x(name: str, start_ms: float, dur_ms: float, cat: str = "cpu_op", tid: int = MAIN, **args) -> dict:
    ts, dur = round(start_ms * 1000.0, 3), round(dur_ms * 1000.0, 3)  # µs, to the ns
    event = {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def _collective(op: str, n: int, elems: int, size: int, start_ms: float, dur_ms: float) -> list[dict]:
    """A gloo collective as PyTorch records it: the c10d caller on the main thread, the transfer on the worker
    (a reduce-scatter runs as an all-reduce of the whole input; an all-gather's transfer holds this rank's shard)."""
    dtype = "c10::BFloat16" if size == 2 else "float"
    shard = elems // n
    caller_dims = {"reduce_scatter": [[shard], [elems]], "all_gather": [[elems], [shard]], "all_reduce": [[elems]]}[op]
    transfer_dims = [[shard]] if op == "all_gather" else [[elems]]
    caller_args = {"Input Dims": caller_dims, "Input type": [dtype] * len(caller_dims)}
    transfer_args = {"Input Dims": transfer_dims, "Input type": [dtype]}
    return [
        _x(C10D[op], start_ms, 0.02, **caller_args),
        _x(GLOO[op], start_ms + 0.005, dur_ms, cat="user_annotation", tid=WORKER, **transfer_args),
    ]


def _step_events(run: Run, rank: int, trial: int, step: int) -> list[dict]:
    """One profiled step of one rank: its window, the phases in it with their work, its collectives."""
    tm, calls = timing(run, rank, step, trial), _collectives(run)
    t0 = STEP_SPACING_MS * (step - STEPS[0]) + RANK_DELAY_MS * rank
    events = [
        _x(f"ProfilerStep#{step}", t0, tm["step"], cat="user_annotation"),
        {
            "ph": "i",
            "s": "t",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "pid": PID,
            "tid": MAIN,
            "ts": round((t0 + 0.5) * 1000.0, 3),
            "args": {"Total Allocated": 10**7, "Bytes": 4096, "Device Type": 0, "Device Id": -1},
        },
    ]
    f0 = t0 + 1.0
    events.append(_x(FORWARD, f0, tm[FORWARD], cat="user_annotation"))
    if TP_ALL_REDUCE in calls:  # the model's own TP traffic, between two matmuls
        op, _, n, elems, size = calls[TP_ALL_REDUCE]
        events += [
            _x("aten::mm", f0 + 0.1, 4.8),
            _x(TP_ALL_REDUCE, f0 + 5.0, TP_ALL_REDUCE_MS, cat="user_annotation"),
            *_collective(op, n, elems, size, f0 + 5.2, 1.5),
            _x("aten::mm", f0 + 7.1, tm[FORWARD] - 7.2),
        ]
    else:
        events.append(_x("aten::mm", f0 + 0.1, tm[FORWARD] - 0.2))
    b0 = f0 + tm[FORWARD]
    events += [
        _x(BACKWARD, b0, tm[BACKWARD], cat="user_annotation"),
        _x("autograd::engine::evaluate_function: MmBackward0", b0 + 0.1, tm[BACKWARD] - 0.2),
    ]
    o0 = b0 + tm[BACKWARD]
    events.append(_x(OPTIMIZER, o0, tm[OPTIMIZER], cat="user_annotation"))
    phases = OPTIMIZER_PHASES[run.optimizer]
    slot = tm[OPTIMIZER] / len(phases)
    for i, phase in enumerate(phases):
        p0, scope = o0 + i * slot, SCOPE_SHARE * slot
        events.append(_x(phase, p0, scope, cat="user_annotation"))
        if phase in calls:  # the collective, then unpacking what it brought
            op, _, n, elems, size = calls[phase]
            events += _collective(op, n, elems, size, p0 + 0.005, TRANSFER_SHARE * slot)
            events.append(_x("aten::copy_", p0 + TRANSFER_SHARE * slot + 0.02, scope - TRANSFER_SHARE * slot - 0.03))
        else:
            events.append(_x(COMPUTE_OP.get(phase, "aten::copy_"), p0 + 0.01, scope - 0.02))
    return events


def _trace(run: Run, rank: int, trial: int) -> dict:
    threads = [
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": tid, "args": {"name": name}}
        for tid, name in ((MAIN, "thread 1 (python)"), (WORKER, "thread 2 (pt_gloo_runloop)"))
    ]
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": run.world},
        "baseTimeNanoseconds": BASE_TIME_NS,
        "traceEvents": [*threads, *(e for s in STEPS for e in _step_events(run, rank, trial, s))],
    }


def write_traces(traces: Path, runs: tuple[Run, ...] = FULL) -> Path:
    """Every trial of ``runs`` as the benchmark writes it, under ``traces/<profile>/<group>/<name>/trial<k>/``."""
    for run in runs:
        for trial in TRIALS:
            folder = trial_dir(traces / PROFILE / run.group / run.name, trial)
            folder.mkdir(parents=True)
            for rank in range(run.world):
                (folder / trace_name(rank)).write_bytes(gzip.compress(json.dumps(_trace(run, rank, trial)).encode(), 1))
            (folder / CONFIG_FILE).write_text(json.dumps(_config(run, trial)))
            (folder / ENVIRONMENT_FILE).write_text(json.dumps(environment(run)))
            metrics = {"config": f"{run.group}/{run.name}", "ranks": [_rank_metrics(run, r, trial) for r in range(run.world)]}
            (folder / METRICS_FILE).write_text(json.dumps(metrics))
    return traces


# ---------------------------------------------------------------- the tables


SHARED_DIR: Path | None = None  # set by conftest.py: the folder every pytest-xdist worker of the run sees


@functools.cache
def _analyzed(runs: tuple[Run, ...]) -> dict[str, pd.DataFrame]:
    if SHARED_DIR is None:
        return _analyze(runs) | costmodel_tables()
    # One analysis per test run: the first worker writes the tables, every worker (that one too) reads them back,
    # so that all see the same frames (the round trip is exact: tests/test_analysis_gloo.py checks it).
    folder = SHARED_DIR / f"report_bundle_{hashlib.sha256(repr(runs).encode()).hexdigest()[:16]}"

    def analyze(folder: Path) -> str:
        analyzed = _analyze(runs)
        write_tables(analyzed, folder)
        return json.dumps(sorted(analyzed))

    names = json.loads(build_once(folder, analyze, done="names.json"))
    return read_tables(folder, names) | costmodel_tables()


def _analyze(runs: tuple[Run, ...]) -> dict[str, pd.DataFrame]:
    # Analyzed from the folder above traces/, as `muon-repro analyze traces` runs from the repository root: the
    # tables' paths read traces/..., and so does the report's command to remake them.
    with tempfile.TemporaryDirectory(prefix="report_bundle_") as tmp, contextlib.chdir(tmp):
        analysis = analyze_paths([write_traces(Path("traces"), runs)], workers=1)  # in this process: starts none
        problems = [p.message for p in (*analysis.failures, *analysis.incomplete)]
        assert not problems, problems
        return tables_of(analysis)


def tables(runs: tuple[Run, ...] = FULL) -> dict[str, pd.DataFrame]:
    """Every table of the analysis of ``runs``' synthetic traces (fresh copies: callers may edit them)."""
    return {name: df.copy() for name, df in _analyzed(tuple(runs)).items()}


def costmodel_tables() -> dict[str, pd.DataFrame]:
    """The regime sweep's and the cost model's tables as committed (they come from records, not from the runs above)."""
    from muon_repro.analysis.costmodel_tables import COSTMODEL_TABLES

    metrics = Path(__file__).resolve().parents[1] / "metrics"
    committed = {name: pd.read_parquet(metrics / f"{name}.parquet", dtype_backend="numpy_nullable") for name in COSTMODEL_TABLES}
    # tables written before hardware profiles have no profile column: theirs is the synthetic runs' one
    profiled = {name: df if "profile" in df.columns else df.assign(profile=PROFILE) for name, df in committed.items()}
    return {name: SCHEMAS[name].conform(df) for name, df in profiled.items()}


def make_bundle(root: Path, runs: tuple[Run, ...] = FULL) -> Path:
    """Write ``root/metrics/`` (Parquet + CSV, every table); returns ``root``."""
    write_tables(tables(runs), root / "metrics")
    return root
