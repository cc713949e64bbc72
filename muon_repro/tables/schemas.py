"""Every table under ``metrics/``, declared once: its key, its columns (name, pandas dtype, unit,
meaning) and what one row is. The analysis builds frames conformed to these, the writers put the
descriptions into the Parquet field metadata, and the dataset card and docs/method.md document
the columns from them (:mod:`muon_repro.tables.reference`). A declarative literal: read it as a
reference, not as code. The benchmark runs' own tables are here; their steps, the verdicts, the step taken apart rank
by rank, the convergence runs', the cost model's and the original study's are declared in their own modules
(``step_schemas``, ``verdict_schemas``, ``breakdown_schemas``, ``convergence_schemas``, ``costmodel_schemas``,
``study_schemas``) and gathered into :data:`SCHEMAS` in the order the docs list them.
"""

from __future__ import annotations

from muon_repro.tables.breakdown_schemas import BREAKDOWN_SCHEMAS
from muon_repro.tables.columns import RANK_ID, RUN_ID, TRIAL_ID
from muon_repro.tables.convergence_schemas import CONVERGENCE_SCHEMAS
from muon_repro.tables.costmodel_schemas import (  # noqa: F401  (their names, imported from here too)
    CALIBRATION,
    COSTMODEL_SCHEMAS,
    PIPELINE_SCALE_OUT,
    PREDICTIONS,
    REGIME_MODEL,
    REGIME_THRESHOLDS,
    REGIMES,
)
from muon_repro.tables.rounds_rule import rule_said
from muon_repro.tables.schema import TableSchema, columns_of
from muon_repro.tables.step_schemas import STEP_SCHEMAS
from muon_repro.tables.study_schemas import STUDY_SCHEMAS
from muon_repro.tables.verdict_schemas import VERDICT_SCHEMAS

_TIME_NOTE = "median over steps of the mean over ranks"
_TIMED_NOTE = (
    "per trial the median over its timed steps of {}, then the median over trials; null for a run recorded without "
    "timed steps (config timed_steps 0, as every run before they existed)"
)
# What config.json and environment.json say, carried into the runs table (null for foreign traces).
_CONFIG_COLUMNS = columns_of(
    ("scale", "string", "", "size preset of the benchmark: tiny, cpu or gpu"),
    ("preset", "string", "", "model preset (tiny, small, medium, large)"),
    ("qkv", "string", "", "attention projections: fused or split"),
    (
        "cross_entropy",
        "string",
        "",
        "how the loss meets the vocab-sharded logits: vocab_parallel (three all-reduces of [tokens]) or gathered (an "
        "all-gather of the full logits; runs recorded before the option)",
    ),
    (
        "precision",
        "string",
        "",
        "fp32, or bf16: forward and backward under bf16 autocast, weights, gradients and optimizer state fp32",
    ),
    ("micro_batches", "Int64", "count", "forward+backward passes per step (gradient accumulation); 1: the whole batch"),
    ("batch_per_dp", "Int64", "sequences", "sequences per step on each DP rank"),
    ("seq_len", "Int64", "tokens", "tokens per sequence"),
    (
        "train_steps",
        "Int64",
        "count",
        "training steps run under the profiler (its warm-up steps and the profiled ones), after the timed_warmup + "
        "timed_steps steps run without it",
    ),
    ("lr", "Float64", "", "learning rate"),
    ("weight_decay", "Float64", "", "decoupled weight decay"),
    ("ns_dtype", "string", "", "Newton-Schulz dtype; null: the optimizer's default (fp32 on CPU, bf16 on GPU)"),
    (
        "ns_method",
        "string",
        "",
        "Newton-Schulz variant: quintic (the default, Moonlight's), polar_express or gram (docs/method.md#newton-schulz)",
    ),
    (
        "ns_unit_elems",
        "Int64",
        "elements",
        "cap on the full-matrix elements of one Newton-Schulz unit per rank (config.json); null: the layout's own units "
        "(docs/method.md#newton-schulz-units)",
    ),
    ("gather_dtype", "string", "", "dtype of Muon's DP/TP gathers"),
    ("reduce_dtype", "string", "", "dtype of the gradient reduce-scatter"),
    ("seed", "Int64", "", "random seed"),
    ("model_params", "Int64", "count", "parameters of the full (unsharded) model"),
    ("d_model", "Int64", "count", "the model's width (hidden size): the run's shape override, else its preset's"),
    ("command", "string", "", "the command line that recorded the run, shell-quoted"),
    ("git_sha", "string", "", "commit of the code that recorded the run (environment.json)"),
    ("recorded_at", "string", "", "when the run was recorded, ISO 8601 (environment.json)"),
)


SCHEMAS: dict[str, TableSchema] = {
    "runs": TableSchema(
        "runs",
        "One row per run (a benchmark configuration across all its trials and ranks). Per-step quantities are medians "
        "over the profiled steps of every trial; a step's time is its slowest rank's.",
        ("run",),
        columns_of(
            *RUN_ID,
            (
                "protocol",
                "string",
                "",
                "benchmark: our like-for-like benchmark (every run of this table); the runs of the original study's "
                "protocol (study, study-equal-work) are in study_runs",
            ),
            ("optimizer", "string", "", "'muon' or 'adamw' (config.json); null for foreign traces"),
            ("layout", "string", "", "ZeRO-1 layout of the flat buffer: contiguous, bucketed, whole_matrix (config.json)"),
            (
                "overlap",
                "string",
                "",
                "how Muon schedules its DP and TP gathers: none, naive_async, pipelined (config.json; none for AdamW)",
            ),
            ("dp", "Int64", "ranks", "data-parallel size (config.json)"),
            ("tp", "Int64", "ranks", "tensor-parallel size (config.json)"),
            ("pp", "Int64", "ranks", "pipeline stages (config.json; 1 for runs without them, null for foreign traces)"),
            ("world_size", "Int64", "ranks", "dp * tp * pp, else distributedInfo.world_size"),
            ("backend", "string", "", "process-group backend: gloo or nccl"),
            ("device", "string", "", "cpu or cuda (cuda when the traces have GPU kernels)"),
            ("ranks", "Int64", "count", "ranks of the run (rank traces of one trial)"),
            (
                "trials",
                "Int64",
                "count",
                "traced trials: those recorded with the profiler, whose traces every trace-based column is over (a "
                "sweep's later rounds are timed only: see rounds); 0 for a run recorded without any trace",
            ),
            (
                "tokens_per_step",
                "Int64",
                "tokens",
                "tokens trained per step over all DP ranks (config.json); equal for runs that are compared",
            ),
            (
                "tokens_per_s",
                "Float64",
                "tokens/s",
                "tokens_per_step / the run's step time without the profiler (timed_step_ms); a run recorded without "
                "timed steps: / its profiled step_ms",
            ),
            (
                "steps",
                "Int64",
                "count",
                "profiled steps (ProfilerStep#N) per rank, summed over trials; 1 for a trace without steps, 0 for a run "
                "recorded without any trace",
            ),
            ("step_ms", "Float64", "ms", "median step time (per step: the slowest rank)"),
            ("step_ms_p10", "Float64", "ms", "10th percentile of step time"),
            ("step_ms_p90", "Float64", "ms", "90th percentile of step time"),
            ("forward_ms", "Float64", "ms", f"forward phase, {_TIME_NOTE}"),
            ("backward_ms", "Float64", "ms", f"backward phase, {_TIME_NOTE}"),
            ("optimizer_ms", "Float64", "ms", f"optimizer phase (ours, or Optimizer.step#...), {_TIME_NOTE}"),
            (
                "optimizer_share",
                "Float64",
                "fraction",
                "optimizer step time / training step time (the original study's quantity), by the claims' estimator: per step "
                "the optimizer's time (mean over ranks) over the step's (slowest rank), the median of each round's steps, the "
                "mean over rounds; on the steps timed without the profiler when the run has them, else the profiled steps",
            ),
            (
                "optimizer_share_low",
                "Float64",
                "fraction",
                "lower end of its 95% t interval over rounds, cut at 0 where a share lies (null with one round)",
            ),
            ("optimizer_share_high", "Float64", "fraction", "upper end of its 95% t interval over rounds, cut at 1"),
            (
                "disturbed_rounds",
                "Int64",
                "count",
                f"rounds the estimators leave out: median step time {rule_said()} "
                "(muon_repro.analysis.estimators; docs/method.md)",
            ),
            ("compute_ms", "Float64", "ms", f"computation (union of kernels, or of CPU ops off the comm threads), {_TIME_NOTE}"),
            ("comm_ms", "Float64", "ms", f"communication (union of collective transfers), {_TIME_NOTE}"),
            (
                "comm_wait_ms",
                "Float64",
                "ms",
                f"collective time spent waiting for the group's last rank to arrive (steps.comm_wait_ms), {_TIME_NOTE}",
            ),
            (
                "comm_transfer_ms",
                "Float64",
                "ms",
                f"collective time from the group's last arrival to the end (steps.comm_transfer_ms), {_TIME_NOTE}",
            ),
            ("overlap_ms", "Float64", "ms", f"communication overlapped with computation, {_TIME_NOTE}"),
            ("exposed_comm_ms", "Float64", "ms", f"communication not overlapped with computation, {_TIME_NOTE}"),
            ("idle_ms", "Float64", "ms", f"step time with neither computation nor communication, {_TIME_NOTE}"),
            ("comm_calls", "Float64", "count", f"collective calls per rank per step, {_TIME_NOTE}"),
            (
                "comm_bytes",
                "Int64",
                "bytes",
                f"bytes sent per rank per step (ring model, docs/method.md#communication-model), {_TIME_NOTE}",
            ),
            (
                "start_skew_ms",
                "Float64",
                "ms",
                "median over steps of the largest spread of a collective's start across the ranks of its process group",
            ),
            ("state_bytes", "Int64", "bytes", "optimizer state per rank, steady state (metrics.json), the largest rank"),
            (
                "ring_bytes_per_step",
                "Float64",
                "bytes",
                "bytes all ranks together send per recorded step by the ring model (steps.comm_bytes summed over ranks, "
                "mean over the steps of every trial): the scope of loopback_bytes_per_step",
            ),
            (
                "loopback_bytes_per_step",
                "Float64",
                "bytes",
                "bytes that crossed the loopback interface per recorded step (rank 0's /proc/net/dev 'lo' transmit delta, "
                "pooled over trials): what gloo sent for all ranks, TCP/IP headers included, when every rank shares the "
                "machine; null on NCCL, across machines or without /proc/net/dev (docs/method.md#communication-model)",
            ),
            ("peak_mem_bytes", "Int64", "bytes", "peak memory of the largest rank: trace [memory] events, else metrics.json"),
            ("peak_mem_source", "string", "", "where peak_mem_bytes comes from: trace_allocator or metrics.json's source"),
            ("path", "string", "", "run directory (or trace file) analyzed, relative to the working directory when inside it"),
            (
                "train_flops",
                "Int64",
                "FLOP",
                "forward+backward FLOPs of the whole model in one step, all ranks together (6 N T + attention)",
            ),
            (
                "ns_flops_max_rank",
                "Int64",
                "FLOP",
                "Newton-Schulz FLOPs in one step on the busiest rank (the shard plan decides who orthogonalizes what)",
            ),
            (
                "optimizer_op_calls",
                "Int64",
                "count",
                "ATen operator calls of one optimizer step on the rank that made the most (ranks.optimizer_op_calls): "
                "the kernel launches a GPU pays whatever their size; null for runs recorded before the count",
            ),
            (
                "optimizer_gpu_busy_ms",
                "Float64",
                "ms",
                "GPU busy time (union of its kernels, copies and memsets) of the optimizer step per profiled step, mean "
                "over traced trials and ranks (phases.gpu_ms_per_step); null off a GPU",
            ),
            (
                "optimizer_gpu_busy_share",
                "Float64",
                "fraction",
                "optimizer_gpu_busy_ms over the optimizer step's host span, both means per profiled step over the same "
                "trials and ranks (phases.cpu_ms_per_step): near 1 the GPU computes the whole step, well below 1 it waits "
                "for the host to launch; null off a GPU",
            ),
            ("typical_trial", "Int64", "", "trial of typical_step"),
            (
                "typical_step",
                "Int64",
                "step",
                "the profiled step whose slowest rank is the median one, over all trials (what the timeline figure shows)",
            ),
            (
                "timed_step_ms",
                "Float64",
                "ms",
                f"step time with no profiler at all (timed_steps.step_ms): {_TIMED_NOTE.format('the slowest rank')}",
            ),
            (
                "timed_optimizer_ms",
                "Float64",
                "ms",
                f"optimizer step with no profiler (timed_steps.optimizer_ms): {_TIMED_NOTE.format('the mean over ranks')}",
            ),
            (
                "timed_bubble_ms",
                "Float64",
                "ms",
                "pipeline stages only: time a stage blocks on its neighbours (receives and flush) with no profiler "
                f"(timed_steps.bubble_ms): {_TIMED_NOTE.format('the mean over ranks')}",
            ),
            (
                "profiler_overhead",
                "Float64",
                "ratio",
                "profiled over unprofiled step time, paired within each traced trial (its profiled steps' median over "
                "its own timed steps' median, slowest rank), then the median over traced trials (1.05: profiling adds "
                "5%); null without timed steps",
            ),
            (
                "rounds",
                "Int64",
                "count",
                "trials (rounds of the sweep) with timed steps, traced or timed only: what timed_step_ms is the median "
                "over; a claim's interval is over these less the disturbed or unpaired ones (claims.rounds)",
            ),
            *_CONFIG_COLUMNS,
        ),
    ),
    # the steps, profiled and timed, and their collectives: their own module
    **{s.name: s for s in STEP_SCHEMAS},
    # Muon against AdamW and the verdicts: their own module
    **{s.name: s for s in VERDICT_SCHEMAS},
    # the step taken apart, rank by rank, phase by phase: their own module
    **{s.name: s for s in BREAKDOWN_SCHEMAS},
    "losses": TableSchema(
        "losses",
        "One row per run, rank and training step: the training loss as recorded at run time (metrics.json).",
        ("run", "trial", "rank", "step"),
        columns_of(
            *RANK_ID,
            (
                "step",
                "Int64",
                "step",
                "training step, from 0: the steps run under the profiler (its warmup steps, then the profiled ones), "
                "after the timed_warmup + timed_steps steps run without it (which record no loss)",
            ),
            ("loss", "Float64", "nats", "cross-entropy loss of the rank's batch"),
        ),
    ),
    "environment": TableSchema(
        "environment",
        "One row per run and environment field (environment.json, nested keys joined with '.'): hardware, software, "
        "provenance, from each traced trial, and from each trial of a run recorded without traces. Lists are joined "
        "with ', '.",
        ("run", "trial", "key"),
        columns_of(*TRIAL_ID, ("key", "string", "", "field name"), ("value", "string", "", "value, as text")),
    ),
    "trace_files": TableSchema(
        "trace_files",
        "One row per trace file the tables were made from (each rank of each traced trial, the original study's "
        "included): the index that finds a run's traces, which are JSON files and no config of the dataset "
        "(muon_repro.analysis.trace_files).",
        ("run", "trial", "rank", "path"),
        columns_of(
            *RANK_ID,
            (
                "path",
                "string",
                "",
                "the file, from the folder above the one analyzed: in the dataset, from its root (traces/<run>/trial<k>/"
                "rank<r>.json.gz), ready for hf_hub_download",
            ),
            ("bytes", "Int64", "bytes", "the file's size as stored (gzipped for .json.gz)"),
            (
                "read_by",
                "string",
                "",
                "which tables hold its numbers: 'analysis' (runs, steps, ...) or 'study' (study_runs, study_steps, "
                "...: the original study's traces and runs of its protocol)",
            ),
        ),
    ),
    # convergence on real text (`muon-repro converge`, docs/method.md#convergence-on-real-text): their own module
    **{s.name: s for s in CONVERGENCE_SCHEMAS},
}

# The cost model's tables (muon_repro.analysis.costmodel_tables), declared in their own module.
SCHEMAS.update({s.name: s for s in COSTMODEL_SCHEMAS})

# The original study's own runs (muon_repro.study), declared in their own module.
SCHEMAS.update({s.name: s for s in STUDY_SCHEMAS})

TABLE_NAMES = tuple(SCHEMAS)
