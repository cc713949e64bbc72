"""The report's "Setup" section: the machines and software stacks the runs were recorded on, and the
model and training settings, each with the distinct values the runs used."""

from __future__ import annotations

from typing import Any

import pandas as pd

import muon_repro
from muon_repro.hardware import topology_matrix
from muon_repro.report import style
from muon_repro.report.data import MissingMetric, ReportData, is_missing, metric, require_columns
from muon_repro.report.formatting import gib
from muon_repro.report.selection import counted_by_group, pipeline_runs, pp_of, sort_runs, study_runs
from muon_repro.values import counted

REQUIRED_ENV = ("hostname", "os", "python", "torch", "backend", "host_cpu", "host_cpu_cores", "host_memory_bytes")


def _env_value(env: dict[str, str], key: str, run: str) -> str:
    if env.get(key) in (None, ""):
        raise MissingMetric(f"environment field {key!r} is missing for run {run} (metrics table 'environment')")
    return env[key]


def _sha(row: pd.Series) -> str:
    return str(metric(row, "git_sha"))


def environments(data: ReportData) -> list[dict[str, Any]]:
    """One entry per distinct machine and software stack, with the runs recorded on it."""
    require_columns(data.runs, "runs", ("run", "git_sha"))
    groups: dict[tuple, dict[str, Any]] = {}
    for _, r in data.runs.iterrows():
        run = str(r["run"])
        env = data.environment_of(run)
        for key in REQUIRED_ENV:
            _env_value(env, key, run)
        key = (*(env.get(k, "") for k in ("hostname", "torch", "backend", "accelerator", "cuda", "nccl")), _sha(r))
        if key not in groups:
            groups[key] = {"env": env, "sha": _sha(r), "runs": []}
        groups[key]["runs"].append(run)
    out = []
    for g in groups.values():
        env = g["env"]
        accel = env.get("accelerator")
        dirty = env.get("git_dirty") == "True"  # environment values are text
        memory = gib(env["host_memory_bytes"], "environment.host_memory_bytes")
        if accel:
            each = f", {gib(env['accelerator_memory_bytes'])} each" if env.get("accelerator_memory_bytes") else ""
            accelerator = f"{env.get('accelerator_count') or 1} × {accel}{each}"
        else:
            accelerator = "none (CPU only)"
        if accel and str(env.get("accelerator_count") or "1") == "1":
            interconnect = "none (one device)"  # nvidia-smi's matrix of one GPU says nothing more
        elif env.get("interconnect_topology"):
            interconnect = topology_matrix(str(env["interconnect_topology"]))
        elif not accel:
            interconnect = "none between accelerators (one CPU host; ranks are processes talking through gloo)"
        else:
            interconnect = "not recorded"
        nodes = f" on {counted(int(env['nodes']), 'node')}" if env.get("nodes") else ""
        rows = [
            ("host", f"{env['hostname']} ({env['os']})"),
            ("CPU", f"{env['host_cpu']}, {env['host_cpu_cores']} cores, {memory} memory"),
            ("accelerator", accelerator),
            ("interconnect", interconnect),
            ("Python", env["python"]),
            ("PyTorch", env["torch"]),
            ("CUDA", env.get("cuda") or "not used"),
            ("NCCL", env.get("nccl") or "not used"),
            ("backend", f"{env['backend']}, {_ranks(env.get('world_size'))}{nodes}"),
            ("torch threads per rank", env.get("torch_num_threads") or "not recorded"),
            ("muon_repro", f"{muon_repro.__version__}, git {g['sha'][:12]}" + (" (uncommitted changes)" if dirty else "")),
        ]
        out.append({"rows": rows, "runs": g["runs"], "count": len(g["runs"])})
    return out


def _ranks(world_size: Any) -> str:
    """``4 ranks``, ``1 rank``; ``? ranks`` where the run did not record its world size."""
    return counted(int(world_size), "rank") if str(world_size or "").isdigit() else "? ranks"


def _grid(row: pd.Series) -> str:
    return style.grid_label(int(metric(row, "dp")), int(metric(row, "tp")), pp_of(row))


def micro_batches(data: ReportData) -> str:
    """How the batch is cut: one pass outside the pipeline runs; their micro-batches per step and grid."""
    study, pipeline = study_runs(data.runs), pipeline_runs(data.runs)
    groups = ", ".join(dict.fromkeys(str(g) for g in study["group"]))
    said = f"the batch in one pass per step: {len(study)} runs ({groups})" if len(study) else ""
    if "micro_batches" in pipeline.columns and len(pipeline):
        per_grid: dict[str, set[int]] = {}  # a grid recorded in two groups may cut its batch differently in each
        for _, r in sort_runs(pipeline).iterrows():
            per_grid.setdefault(_grid(r), set()).add(int(metric(r, "micro_batches")))
        listed = ", ".join(f"{grid} {' or '.join(map(str, sorted(n)))}" for grid, n in per_grid.items())
        said += ("; " if said else "") + f"micro-batches per step in the pipeline runs, {counted_by_group(pipeline)}: {listed}"
    return said


def tokens_per_step(data: ReportData) -> str:
    """``1,024 for every run``, or each distinct value with its runs (runs that differ are never compared)."""
    require_columns(data.runs, "runs", ("tokens_per_step",))
    by_value: dict[int, list[str]] = {}
    for _, r in data.runs.iterrows():
        by_value.setdefault(int(metric(r, "tokens_per_step")), []).append(str(r["run"]))
    if len(by_value) == 1:
        return f"{next(iter(by_value)):,} for every run"
    return "; ".join(f"{v:,} ({', '.join(runs)})" for v, runs in by_value.items())


def workload(data: ReportData) -> list[tuple[str, str]]:
    """Model and training settings (runs table), each with the distinct values the runs used."""

    def distinct(column: str, fmt=str, rows: pd.DataFrame | None = None) -> str:
        values: list[str] = []
        for _, r in (data.runs if rows is None else rows).iterrows():
            text = fmt(metric(r, column))
            if text not in values:
                values.append(text)
        return ", ".join(values)

    def ns_dtype(value: Any) -> str:
        return "the optimizer's default (fp32 on CPU, bf16 on GPU)" if is_missing(value) else str(value)

    require_columns(data.runs, "runs", ("ns_dtype", "tokens_per_step", "seq_len", "dp", "tp", "trials", "steps", "train_steps"))
    ns = ", ".join(dict.fromkeys(ns_dtype(v) for v in data.runs["ns_dtype"]))  # null is a setting: the default
    # Per-DP-rank batch = tokens per step / (dp x seq_len): the grid decides it, the tokens per step do not change.
    batches: dict[str, str] = {}
    for _, r in sort_runs(data.runs).iterrows():
        tokens, dp, seq = int(metric(r, "tokens_per_step")), int(metric(r, "dp")), int(metric(r, "seq_len"))
        batch = f"{tokens // (dp * seq)} × {seq}" if tokens % (dp * seq) == 0 else f"{tokens / (dp * seq):.3g} × {seq}"
        batches.setdefault(_grid(r), batch)
    trials_steps = []
    for _, r in data.runs.iterrows():
        text = rounds_and_steps(r)
        if text not in trials_steps:
            trials_steps.append(text)
    return [
        (
            "model preset",
            distinct("preset")
            + f" ({distinct('model_params', lambda p: f'{int(p):,}')} parameters, GPT with tensor-parallel attention and MLP)",
        ),
        ("scale", distinct("scale")),
        (
            "tokens per step (all DP ranks)",
            tokens_per_step(data) + "; runs are compared only when they train the same tokens per step",
        ),
        (
            "batch per DP rank × sequence length",
            "tokens per step / (DP × sequence length): " + ", ".join(f"{grid} {b}" for grid, b in batches.items()),
        ),
        *([("micro-batches", micro_batches(data))] if len(pipeline_runs(data.runs)) else []),
        ("rounds × steps per run", "; ".join(trials_steps) + "; the rounds of all configurations are interleaved"),
        (
            "dtypes",
            (
                f"gradient reduce-scatter {distinct('reduce_dtype')}, Muon's gathers {distinct('gather_dtype')}, "
                f"Newton-Schulz {ns}, parameters fp32"
            ),
        ),
        ("learning rate, weight decay", f"{distinct('lr')}, {distinct('weight_decay')}"),
        ("Newton-Schulz variant", ns_methods(data.runs)),
        ("operator calls per optimizer step", op_calls(data.runs)),
    ]


def rounds_and_steps(run: pd.Series) -> str:
    """A run's rounds and steps: every round times its steps without the profiler (the intervals' rounds, runs.rounds);
    the first ``trials`` also run the profiler (runs.trials traced rounds, runs.steps profiled steps in all)."""
    traced, profiled = int(metric(run, "trials")), int(metric(run, "steps"))
    per_trace = f"{int(metric(run, 'train_steps'))} steps ({profiled // max(traced, 1)} profiled)"
    rounds = run.get("rounds")
    if is_missing(rounds) or int(rounds) <= traced:
        return f"{traced} traced × {per_trace}"
    return f"{int(rounds)} rounds timed without the profiler, the first {traced} also traced: {per_trace}"


def ns_methods(runs: pd.DataFrame) -> str:
    """The Newton-Schulz variants the Muon runs used (a run recorded before the variants ran the quintic)."""
    muon = runs[runs["optimizer"] == "muon"]
    if "ns_method" not in runs.columns or muon.empty:
        return "quintic (every run recorded before the variants existed)" if len(muon) else "no Muon run"
    used = dict.fromkeys("quintic" if is_missing(v) else str(v) for v in muon["ns_method"])
    return ", ".join(used) + " (docs/method.md#newton-schulz)"


def op_calls(runs: pd.DataFrame) -> str:
    """Each optimizer's operator calls per step on its busiest rank (runs.optimizer_op_calls), over the runs that
    counted them."""
    counted = runs.dropna(subset=["optimizer_op_calls"]) if "optimizer_op_calls" in runs.columns else runs.iloc[:0]
    if counted.empty:
        return "not counted in these runs (recorded before `muon-repro bench` counted them)"
    parts = []
    for optimizer, rows in counted.groupby("optimizer", sort=True):
        low, high = int(rows["optimizer_op_calls"].min()), int(rows["optimizer_op_calls"].max())
        span = f"{low:,}" if low == high else f"{low:,} to {high:,}"
        parts.append(f"{optimizer} {span} ({len(rows)} of {int((runs['optimizer'] == optimizer).sum())} runs)")
    return (
        "; ".join(parts) + ": the busiest rank's ATen calls in one step, each a kernel launch on a GPU whatever its size "
        "(runs table optimizer_op_calls; runs recorded before the count have none)"
    )
