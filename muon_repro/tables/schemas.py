"""Every table under ``metrics/``, declared once: its key, its columns (name, pandas dtype, unit,
meaning) and what one row is. The analysis builds frames conformed to these, the writers put the
descriptions into the Parquet field metadata, and the dataset card and docs/method.md document
the columns from them (:mod:`muon_repro.tables.reference`). A declarative literal: read it as a
reference, not as code. The benchmark runs' tables are here; the convergence runs', the cost model's and the
original study's are declared in their own modules (``convergence_schemas``, ``costmodel_schemas``,
``study_schemas``) and gathered into :data:`SCHEMAS` in the order the docs list them.
"""

from __future__ import annotations

from muon_repro.tables.columns import PROFILE, PROFILE_MEANING
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
from muon_repro.tables.schema import TableSchema, columns_of
from muon_repro.tables.study_schemas import STUDY_SCHEMAS

COMM_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv", "other")
"""Collective kinds with their own time column; ``other`` holds barrier, reduce, gather, scatter."""

_RUN_ID = (
    ("run", "string", "", "run id: '<profile>/<group>/<name>' (the run directory under traces/)"),
    PROFILE,
    ("group", "string", "", "run group (config.json 'group', else the parent directory's name)"),
    ("name", "string", "", "run name (config.json 'name', else the directory's name)"),
)
_TIME_NOTE = "median over steps of the mean over ranks"
_TIMED_NOTE = (
    "per trial the median over its timed steps of {}, then the median over trials; null for a run recorded without "
    "timed steps (config timed_steps 0, as every run before they existed)"
)
_TRIAL = ("trial", "Int64", "", "which recording of the configuration (runs are recorded in interleaved trials), from 0")
_TRIAL_ID = (*_RUN_ID, _TRIAL)
_SWEEP = (
    "sweep",
    "string",
    "",
    "the bench command that recorded the trial (config.json sweep, one id per command): round k of two runs pairs "
    "only within one sweep; null: recorded before sweeps were named",
)
_RANK_ID = (*_TRIAL_ID, ("rank", "Int64", "rank", "global rank"))
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
    ("train_steps", "Int64", "count", "training steps run (profiled or not)"),
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
            *_RUN_ID,
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
            ("tokens_per_s", "Float64", "tokens/s", "tokens_per_step / median step time"),
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
            ("optimizer_share_low", "Float64", "fraction", "lower end of its 95% t interval over rounds (null with one round)"),
            ("optimizer_share_high", "Float64", "fraction", "upper end of its 95% t interval over rounds"),
            (
                "disturbed_rounds",
                "Int64",
                "count",
                "rounds the estimators leave out: median step time beyond 3 scaled MADs and 10% of the run's median round "
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
            ("start_skew_ms", "Float64", "ms", "median over steps of the largest spread of a collective's start across ranks"),
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
    "steps": TableSchema(
        "steps",
        "One row per run, rank and profiled step (every ProfilerStep#N, the last one included). Collective and GPU time "
        "(comm_ms, comm_<kind>_ms, comm_calls, comm_bytes; compute_ms on GPU) follows HolisticTraceAnalysis: work counts, whole, "
        "in the step whose window contains its launch (the runtime call launching a kernel, matched by correlation id; "
        "the c10d:: call of a gloo collective), even if it runs after the window ends; work launched outside every step "
        "counts in none. The *_window_ms columns, overlap, exposed, idle and the fractions are lengths of unions of "
        "intervals inside the step's window [start, start + step_ms), so compute_window_ms + comm_window_ms - overlap_ms "
        "+ idle_ms = step_ms.",
        ("run", "trial", "rank", "step"),
        columns_of(
            *_TRIAL_ID,
            ("rank", "Int64", "", "global rank (distributedInfo, else the file name, else the --rank argument, else 0)"),
            ("step", "Int64", "", "profiler step number N of ProfilerStep#N; -1 for a trace without steps"),
            ("file", "string", "", "trace file"),
            ("device", "string", "", "cpu or cuda"),
            _SWEEP,
            ("start_us", "Float64", "us", "step start on the trace's clock (relative to its baseTimeNanoseconds)"),
            ("step_ms", "Float64", "ms", "step duration (the ProfilerStep annotation)"),
            ("forward_ms", "Float64", "ms", "forward annotations (ours, '## forward ##')"),
            ("backward_ms", "Float64", "ms", "backward annotations; without any, the autograd engine's ops"),
            ("optimizer_ms", "Float64", "ms", "optimizer annotations (ours, Optimizer.step#...)"),
            (
                "compute_ms",
                "Float64",
                "ms",
                "on GPU: union of the non-NCCL kernels, memcpys and memsets launched in the step (whole, even past its "
                "end); on CPU: equal to compute_window_ms",
            ),
            (
                "comm_ms",
                "Float64",
                "ms",
                "union of the collective transfers (NCCL kernels, gloo worker annotations, else the calls) launched in "
                "the step (whole, even past its end); overlapping transfers counted once",
            ),
            *(
                (f"comm_{k}_ms", "Float64", "ms", f"sum of the durations of the {k} transfers launched in the step (as HTA)")
                for k in COMM_KINDS
            ),
            (
                "comm_wait_ms",
                "Float64",
                "ms",
                (
                    "sum, over the collectives launched in the step, of the time waiting for the last rank of the call's "
                    "group to arrive (docs/method.md#wait-and-transfer); 0 for calls not matched across ranks"
                ),
            ),
            (
                "comm_transfer_ms",
                "Float64",
                "ms",
                (
                    "sum, over the same collectives, of the rest of their durations (from the last arrival to the end); "
                    "comm_wait_ms + comm_transfer_ms = the sum of the comm_<kind>_ms"
                ),
            ),
            (
                "compute_window_ms",
                "Float64",
                "ms",
                "union of computation inside the step's window, whatever step launched it: non-NCCL kernels and copies "
                "on GPU; CPU ops off the gloo threads, except collective calls and the ops enclosing one, on CPU",
            ),
            (
                "comm_window_ms",
                "Float64",
                "ms",
                "union of all collective transfers inside the step's window, whatever step launched them",
            ),
            ("overlap_ms", "Float64", "ms", "computation and communication at once, inside the window (window-based)"),
            ("exposed_comm_ms", "Float64", "ms", "comm_window_ms - overlap_ms (window-based)"),
            ("idle_ms", "Float64", "ms", "step_ms - (compute_window_ms + comm_window_ms - overlap_ms) (window-based)"),
            ("compute_frac", "Float64", "fraction", "compute_window_ms / step_ms"),
            ("comm_frac", "Float64", "fraction", "comm_window_ms / step_ms"),
            ("exposed_comm_frac", "Float64", "fraction", "exposed_comm_ms / step_ms"),
            ("idle_frac", "Float64", "fraction", "idle_ms / step_ms"),
            ("optimizer_share", "Float64", "fraction", "optimizer_ms / step_ms"),
            ("comm_calls", "Int64", "count", "collective calls this rank launched in the step (same rule as comm_ms)"),
            ("comm_bytes", "Int64", "bytes", "bytes this rank sent in the collectives launched in the step (ring model)"),
            (
                "peak_mem_bytes",
                "Int64",
                "bytes",
                "highest allocator 'Total Allocated' among the step's [memory] events; null without them",
            ),
            (
                "start_skew_ms",
                "Float64",
                "ms",
                "largest spread, across ranks, of the start of one collective of this step; null for one rank",
            ),
            ("late_ms", "Float64", "ms", "this rank's mean delay entering the step's collectives, after the earliest rank"),
            ("straggler_rank", "Int64", "", "the rank with the largest late_ms in this step (null for one rank)"),
        ),
    ),
    "timed_steps": TableSchema(
        "timed_steps",
        "One row per run, rank and timed step: the steps a profiled run trains and times with no profiler at all "
        "(config.json timed_steps, after timed_warmup steps not kept) before its profiled steps, on the batches before "
        "theirs. Times are time.perf_counter_ns() on the rank's host, the device synchronized around each part "
        "(metrics.json timed_step_ms, timed_fwd_bwd_ms, timed_optimizer_ms, timed_comm). Empty for runs recorded "
        "without timed steps.",
        ("run", "trial", "rank", "step"),
        columns_of(
            *_RANK_ID,
            _SWEEP,
            ("stage", "Int64", "rank", "the rank's pipeline stage (0 without pipeline stages)"),
            ("step", "Int64", "step", "timed step, from 0 (the warm-up steps before it are not kept)"),
            ("step_ms", "Float64", "ms", "the whole step: forward+backward and the optimizer step"),
            ("fwd_bwd_ms", "Float64", "ms", "forward and backward (with the model's tensor-parallel collectives)"),
            ("optimizer_ms", "Float64", "ms", "the optimizer step and zero_grad"),
            (
                "comm_ms",
                "Float64",
                "ms",
                "sum over the step's collective calls of exit - entry of the c10d call (perf_counter_ns on the host): on "
                "NCCL the launch only; an all-gather issued asynchronously (overlap naive_async, pipelined) counts from "
                "its issue to the end of its wait, overlapped work included; null when the rank recorded no call times",
            ),
            (
                "comm_wait_ms",
                "Float64",
                "ms",
                "sum over the same calls of the wait for the group's last rank: latest entry among the ranks of the call's "
                "DP or TP group - own entry, within [0, the call's duration] (the k-th call of a phase and op in the step "
                "on every rank of the group is one collective; one clock, CLOCK_MONOTONIC, for every rank of a host); 0 "
                "for calls not seen on every rank of their group; null when the ranks span hosts",
            ),
            (
                "comm_transfer_ms",
                "Float64",
                "ms",
                "comm_ms - comm_wait_ms: from the group's last arrival to each call's exit (the whole call if unmatched); "
                "null when the ranks span hosts",
            ),
            (
                "bubble_ms",
                "Float64",
                "ms",
                "pipeline stages only: perf_counter_ns around the stage's blocking receives and its flush (the wait for "
                "its sends) in the step, summed: the bubble with the transfers' own time; on NCCL the host's wait only "
                "orders the GPU stream, so this reads low; null without pipeline stages",
            ),
            (
                "drain_idle_ms",
                "Float64",
                "ms",
                "pipeline stages only: from the end of this stage's last backward to the end of the last backward of "
                "any stage of its pipeline (the drain), on the host's one clock: the idle time that could hold this "
                "stage's optimizer step once its gradients are complete (0 on the stage that finishes the drain, "
                "stage 0 under 1F1B); null without pipeline stages, for runs recorded before, or across hosts",
            ),
            (
                "comm_timing",
                "string",
                "",
                "what the comm_* columns hold: transfer (gloo: a call returns when its data has moved) or host_launch "
                "(NCCL: a call returns once its kernel is queued, so these are launch times; the communication claim "
                "takes NCCL runs' times from their traced kernels instead); null without recorded calls",
            ),
        ),
    ),
    "collectives": TableSchema(
        "collectives",
        "One row per run, rank, phase and collective op: totals over the profiled steps. bytes must agree with the byte "
        "ledger (ledger_bytes) and the analytic model.",
        ("run", "trial", "rank", "phase", "op"),
        columns_of(
            *_TRIAL_ID,
            ("rank", "Int64", "", "global rank"),
            (
                "phase",
                "string",
                "",
                "innermost phase label at the call (dp_reduce_scatter, tp_gather, ...), else forward/backward/optimizer, else "
                "other",
            ),
            (
                "op",
                "string",
                "",
                "collective: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send_recv, barrier, ...",
            ),
            ("source", "string", "", "nccl_kernel, gloo (worker thread transfer), cpu_op (the call only), or mixed"),
            ("group_size", "Int64", "ranks", "ranks in the collective's group; null if mixed or unknown"),
            ("dtype", "string", "", "element type (float32, bfloat16, ...); 'mixed' or null"),
            ("steps", "Int64", "count", "profiled steps the totals cover"),
            ("calls", "Int64", "count", "collective calls"),
            (
                "bytes",
                "Int64",
                "bytes",
                "bytes this rank sent, ring model (all-gather/reduce-scatter (n-1)*ceil(S/n), all-reduce twice that)",
            ),
            ("size_bytes", "Int64", "bytes", "sum of S, the full array size of each call (nccl-tests convention)"),
            ("ms", "Float64", "ms", "sum of transfer durations"),
            (
                "wait_ms",
                "Float64",
                "ms",
                (
                    "part of ms spent waiting for the last rank of each call's group to arrive: per call, last arrival - "
                    "own arrival, within [0, the call's duration] (docs/method.md#wait-and-transfer); 0 for unmatched calls"
                ),
            ),
            (
                "transfer_ms",
                "Float64",
                "ms",
                "ms - wait_ms: from the group's last arrival to each call's end (the whole call if unmatched)",
            ),
            ("matched_calls", "Int64", "count", "calls matched across the ranks of their group (the others: all transfer)"),
            ("bytes_per_step", "Float64", "bytes", "bytes / steps"),
            ("ms_per_step", "Float64", "ms", "ms / steps"),
            ("algbw_gbps", "Float64", "GB/s", "sum(S) / sum(t), 1 GB = 1e9 bytes"),
            (
                "busbw_gbps",
                "Float64",
                "GB/s",
                "sum(S * factor) / sum(t); factor 2(n-1)/n all-reduce, (n-1)/n all-gather and reduce-scatter, 1 broadcast",
            ),
            (
                "ledger_bytes",
                "Int64",
                "bytes",
                "bytes the run-time byte ledger (metrics.json) recorded for the same rank, phase, op and steps; null without one",
            ),
        ),
    ),
    "comparisons": TableSchema(
        "comparisons",
        "Muon vs AdamW at the same profile, grid (dp, tp, pp, world size, micro-batches), backend and device: ratios "
        "Muon / AdamW (null where AdamW's value is 0 or unknown). A Muon run is never paired with an AdamW run of "
        "another hardware profile, nor with one that did other work (tokens per step, model, precision, ...): a Muon "
        "run without such a twin has no row. Each ratio is of the runs table's column of the same name: the profiled "
        "steps' medians. The claims table's times are the rounds timed without the profiler, which costs Muon and "
        "AdamW unequally, so a ratio here can differ from the claim's.",
        ("muon_run", "adamw_run"),
        columns_of(
            PROFILE,
            ("group", "string", "", "the Muon run's group"),
            ("dp", "Int64", "ranks", "data-parallel size"),
            ("tp", "Int64", "ranks", "tensor-parallel size"),
            ("pp", "Int64", "ranks", "pipeline stages (1 without them)"),
            ("backend", "string", "", "gloo or nccl"),
            ("device", "string", "", "cpu or cuda"),
            ("layout", "string", "", "the Muon run's ZeRO-1 layout"),
            (
                "tokens_per_step",
                "Int64",
                "tokens",
                "tokens per step of both runs (pairs must have the same model, tokens, sequence length, dtypes, backend)",
            ),
            ("muon_run", "string", "", "run id of the Muon run"),
            ("adamw_run", "string", "", "run id of the AdamW run (same group preferred)"),
            ("comm_ms_ratio", "Float64", "ratio", "communication time (wait included)"),
            ("comm_transfer_ms_ratio", "Float64", "ratio", "communication transfer time (from the last rank's arrival)"),
            ("exposed_comm_ms_ratio", "Float64", "ratio", "exposed communication time"),
            ("comm_bytes_ratio", "Float64", "ratio", "bytes sent per rank per step"),
            ("optimizer_ms_ratio", "Float64", "ratio", "optimizer time"),
            ("step_ms_ratio", "Float64", "ratio", "step time"),
            ("state_bytes_ratio", "Float64", "ratio", "optimizer state bytes per rank"),
        ),
    ),
    "claims": TableSchema(
        "claims",
        "The claims of Jen Wei's study 'Reproducing and Validating Distributed Muon' (the original study: 4 GPUs over PCIe), of "
        "the paper and of Moonlight, each measured like for like on these runs, with a 95% interval (paired over "
        "rounds), a verdict and its measured cause. One row per claim and hardware profile: each profile's runs are "
        "measured on their own.",
        ("claim_id", "profile"),
        columns_of(
            ("claim_id", "string", "", "short stable identifier"),
            ("profile", "string", "", f"{PROFILE_MEANING}; the claim is measured on this profile's runs only"),
            ("claim", "string", "", "what was claimed"),
            ("source", "string", "", "who claimed it, where"),
            ("claimed_value", "Float64", "", "the claimed number (see unit); null when the claim is a comparison"),
            ("region_low", "Float64", "", "the values that agree with the claim: their lower bound (null: unbounded)"),
            ("region_high", "Float64", "", "their upper bound, included (null: unbounded)"),
            ("region_low_open", "boolean", "", "whether region_low itself is excluded (the region is (low, high])"),
            (
                "made_under",
                "string",
                "",
                "the conditions the claim was made under (device and backend, tokens per step per d_model, ranks per "
                "core); runs outside them are not comparable here",
            ),
            ("measured_value", "Float64", "", "our estimate, same unit; null when not measured"),
            (
                "measured_low",
                "Float64",
                "",
                "lower end of the 95% interval: a t interval over paired rounds (per-rank minimum for deterministic quantities); "
                "null beside a measured_high: unbounded below, a one-sided interval",
            ),
            (
                "measured_high",
                "Float64",
                "",
                "upper end of the 95% interval (per-rank maximum for deterministic quantities); null beside a "
                "measured_low: unbounded above, a one-sided interval",
            ),
            (
                "rounds",
                "Int64",
                "count",
                "rounds the interval is over: those every run it compares was recorded in, less those the estimators "
                "leave out (disturbed, or recorded by different sweeps); null where it is not over rounds (the "
                "original study's runs, the convergence seeds, or not measured)",
            ),
            ("unit", "string", "", "unit of claimed_value and the measured columns"),
            (
                "unit_kind",
                "string",
                "",
                "how the numbers read: ratio (×), fraction (a share, in %) or change (a signed change, in %)",
            ),
            ("conditions", "string", "", "the runs compared: backend, device, ranks, trials x steps, tokens per step"),
            (
                "verdict",
                "string",
                "",
                "reproduced (interval inside the region), not reproduced (outside), inconclusive (straddles), unequal "
                "work (the runs compared did different work, so no ratio judges the claim), not comparable here (the runs "
                "were not made under the claim's conditions), not measured",
            ),
            (
                "outside_conditions",
                "string",
                "",
                "when the verdict is not comparable here (or unequal work, which comes first): how the runs differ from "
                "the conditions the claim was made under, each as 'what the runs had, not what the claim had', separated "
                "by '; ' (a difference that holds for some of the runs only is followed by ' (only ' and their "
                "names); empty otherwise",
            ),
            (
                "explanation",
                "string",
                "",
                "the measured cause of the value, and of any difference from the claim, in about 60 words at most; "
                "the numbers it and the report state beside it are cells of the tables or rows of stated_numbers",
            ),
            ("rule", "string", "", "how the verdict was decided"),
            (
                "study_method_value",
                "Float64",
                "",
                "on the original study's profile: what the study's own method (performance_comparison.py, sums over its "
                "5-step rank-0 traces) gives on its traces for the number the claim rests on; null elsewhere",
            ),
            (
                "study_method_rebuilt",
                "boolean",
                "",
                "whether study_method_value, rounded as published, is the number the study published (study_method)",
            ),
            (
                "equal_work",
                "boolean",
                "",
                "whether the runs compared did the same work: on the original study's profile, by collectives and bytes "
                "per rank and step; on ours, by the runs table's work (claim_inputs.SAME_WORK) and, for an optimizer's twin, "
                "grid (SAME_GRID): false when the only runs a claim can compare did different work (no ratio is formed); "
                "null where one run or none is measured, or the study's collectives are missing (work unknown)",
            ),
            ("work_difference", "string", "", "the difference in work when equal_work is false"),
        ),
    ),
    "checks": TableSchema(
        "checks",
        "Consistency checks: quantities set by construction (the optimizer state of the matrices Muon manages, "
        "the bytes the ring model prices), each judged holds or fails against the value its construction gives, with "
        "what would make it fail. They stand beside the claims table, not in it: a verdict on them could not have "
        "come out otherwise. One row per check (the bytes check per ZeRO-1 layout) and hardware profile.",
        ("check_id", "profile"),
        columns_of(
            ("check_id", "string", "", "short stable identifier; bytes_<layout> for the bytes check of each layout"),
            ("profile", "string", "", f"{PROFILE_MEANING}; the check is made on this profile's runs only"),
            ("check", "string", "", "what is checked"),
            ("claim", "string", "", "the claim the check stands beside"),
            ("source", "string", "", "who claimed it, where"),
            ("layout", "string", "", "the Muon run's ZeRO-1 layout (bytes checks); null for the state checks"),
            ("expected", "Float64", "", "the value by construction (see unit): what the check holds against"),
            ("measured_value", "Float64", "", "the value the runs give, same unit"),
            ("measured_low", "Float64", "", "its smallest value over ranks (the quantity does not vary between steps)"),
            ("measured_high", "Float64", "", "its largest value over ranks"),
            ("unit", "string", "", "unit of expected and the measured columns"),
            ("unit_kind", "string", "", "how the numbers read, as claims.unit_kind: ratio (×), fraction (%), change (±%)"),
            ("holds", "boolean", "", "whether the runs agree with the construction (the rule is in check)"),
            ("claimed_region", "string", "", "the values the source claimed, where it stated this quantity; else null"),
            (
                "in_claimed_region",
                "boolean",
                "",
                "whether measured_value lies in claimed_region (null without one); by design it may not: the contiguous "
                "layout gathers fewer matrices than the paper's Algorithm 1",
            ),
            ("fails_if", "string", "", "what would make the check fail"),
            ("explanation", "string", "", "the quantities behind the value, measured on these runs"),
            ("conditions", "string", "", "the runs compared: backend, device, ranks, rounds, steps, tokens per step"),
        ),
    ),
    "stated_numbers": TableSchema(
        "stated_numbers",
        "The numbers the claims' and checks' explanations state that no other table cell holds (ratios, intervals, "
        "aggregates over runs), one per row, so that every number an explanation or the report states is a table value. "
        "Every other number an explanation states is a cell of the tables (a phase's: its mean over trials and ranks).",
        ("table", "row_id", "profile", "name"),
        columns_of(
            ("table", "string", "", "the table whose explanation states the number: claims or checks"),
            ("row_id", "string", "", "the row there: its claim_id or check_id"),
            ("profile", "string", "", f"{PROFILE_MEANING}; the row's profile"),
            ("name", "string", "", "what the number is (adamw_transfer_ms, bytes_ratio, ...)"),
            ("value", "Float64", "", "the number, in unit"),
            ("unit", "string", "", "ms, bytes, ratio, fraction, GFLOP, us or empty for a count or a plain number"),
        ),
    ),
    "ranks": TableSchema(
        "ranks",
        "One row per run and rank: what the rank held and computed, as recorded at run time (metrics.json).",
        ("run", "trial", "rank"),
        columns_of(
            *_RANK_ID,
            ("dp_rank", "Int64", "rank", "data-parallel rank"),
            ("tp_rank", "Int64", "rank", "tensor-parallel rank"),
            ("pp_rank", "Int64", "rank", "pipeline stage (0 without pipeline stages)"),
            ("muon_state_bytes", "Int64", "bytes", "Muon momentum buffers this rank keeps (one fp32 moment per element)"),
            ("adamw_state_bytes", "Int64", "bytes", "AdamW moments this rank keeps (two fp32 moments per element)"),
            ("state_bytes", "Int64", "bytes", "muon_state_bytes + adamw_state_bytes: steady-state optimizer state"),
            ("transient_bytes", "Int64", "bytes", "largest set of gather/shard buffers alive at once during a step"),
            (
                "held_state_bytes",
                "Int64",
                "bytes",
                "optimizer state measured by storage: every distinct tensor storage in optimizer.state, whatever its "
                "name, the model's parameters left out (muon_repro.optim.held_memory); null for runs recorded before",
            ),
            (
                "held_buffer_bytes",
                "Int64",
                "bytes",
                "every other storage the optimizer owns at the end of the run (flat gradient buffers, shards, kept "
                "gathers; a ZeRO-1 flat parameter buffer is the model's parameters, left out), each counted once; null "
                "for runs recorded before",
            ),
            ("peak_mem_bytes", "Int64", "bytes", "peak memory of the rank's process as recorded at run time"),
            ("peak_mem_source", "string", "", "cuda_max_allocated or process_max_rss"),
            ("ns_calls", "Int64", "count", "Newton-Schulz calls in one step"),
            ("ns_flops", "Int64", "FLOP", "Newton-Schulz FLOPs in one step, from the shard plan's matrices"),
            (
                "optimizer_op_calls",
                "Int64",
                "count",
                "ATen operator calls of one optimizer step on this rank (views, foreach calls and collectives each "
                "once: the launches a GPU pays whatever their size), counted on a step after the recorded ones; null "
                "for runs recorded before",
            ),
            ("shard_elems", "Int64", "elements", "flat-buffer elements this rank owns under ZeRO-1"),
            (
                "muon_elems",
                "Int64",
                "elements",
                "of shard_elems, those the shard plan routes to Muon's update (0 for AdamW); null for runs recorded before",
            ),
            ("muon_matrices", "Int64", "count", "Muon matrices of the model (TP-local); 0 for AdamW"),
            ("ns_matrices", "Int64", "count", "matrices this rank orthogonalizes each step"),
            (
                "dp_gathered_matrices",
                "Int64",
                "count",
                "matrices that need a DP gather (straddling a shard boundary, or all when bucketed)",
            ),
            ("local_params", "Int64", "count", "parameters this rank holds (its TP shard)"),
        ),
    ),
    "phases": TableSchema(
        "phases",
        "One row per run, rank and phase (the record_function scopes of the model and the optimizers): time from the "
        "trace, and bytes from three independent sources that must agree: the analytic ring model, the run-time "
        "ledger of the collective wrappers, and the call sizes read back from the trace.",
        ("run", "trial", "rank", "phase"),
        columns_of(
            *_RANK_ID,
            ("stage", "Int64", "rank", "the rank's pipeline stage (ranks.pp_rank; 0 without pipeline stages)"),
            (
                "phase",
                "string",
                "",
                "phase name (forward, backward, optimizer, dp_reduce_scatter, ..., pp_recv_activation, ..., docs/method.md); "
                "bubble: the sum of pp_recv_activation, pp_recv_grad and pp_flush, a stage's time blocked on its neighbours",
            ),
            ("steps", "Int64", "count", "profiled steps the per-step values average over"),
            (
                "ms_per_step",
                "Float64",
                "ms",
                "the phase's time per profiled step: on a GPU trace gpu_ms_per_step, else cpu_ms_per_step (null if the "
                "trace has no such scope); its CPU and GPU annotations are one scope, never added",
            ),
            ("cpu_ms_per_step", "Float64", "ms", "the CPU span of the phase's scope per profiled step"),
            (
                "gpu_ms_per_step",
                "Float64",
                "ms",
                "GPU traces: the union of the GPU work the phase's scope launched (its innermost phase), per profiled step "
                "(HolisticTraceAnalysis's launch convention); null on CPU traces",
            ),
            (
                "wait_ms_per_step",
                "Float64",
                "ms",
                (
                    "the phase's collectives: time waiting for the group's last rank per profiled step "
                    "(collectives.wait_ms); null for a phase without collectives"
                ),
            ),
            (
                "transfer_ms_per_step",
                "Float64",
                "ms",
                "the phase's collectives: the rest of their durations per profiled step (collectives.transfer_ms)",
            ),
            (
                "analytic_bytes",
                "Float64",
                "bytes",
                "bytes this rank sends per step in the phase, analytic ring model (optimizer phases)",
            ),
            ("ledger_bytes", "Float64", "bytes", "bytes per profiled step, run-time ledger (metrics.json)"),
            ("trace_bytes", "Float64", "bytes", "bytes per profiled step, ring model applied to the trace's collective sizes"),
        ),
    ),
    "stages": TableSchema(
        "stages",
        "One row per pipeline run (pp > 1) and stage: what it holds; forward+backward, the bubble (time blocked on its "
        "neighbours) and the optimizer step side by side. timed_*: the steps timed without the profiler (mean over "
        "the stage's ranks, median over steps, then over rounds); the others: the profiled phases.",
        ("run", "stage"),
        columns_of(
            *_RUN_ID,
            ("optimizer", "string", "", "'muon' or 'adamw'"),
            ("pp", "Int64", "ranks", "pipeline stages of the run"),
            ("stage", "Int64", "rank", "the stage, from 0 (the first holds the embedding, the last the head and the loss)"),
            ("ranks", "Int64", "count", "ranks of the stage (dp * tp) with a trace or timed steps"),
            ("blocks", "Int64", "count", "transformer blocks the stage holds (contiguous; the spare ones on the first stages)"),
            ("holds", "string", "", "what else the stage holds: embedding, head (final norm, LM head, loss), both, or none"),
            ("local_params", "Int64", "count", "parameters a rank of the stage holds (its TP shard of the stage)"),
            ("state_bytes", "Int64", "bytes", "optimizer state of the stage's largest rank (ranks.state_bytes)"),
            ("ns_flops", "Int64", "FLOP", "Newton-Schulz FLOPs per step of the stage's busiest rank (0 for AdamW)"),
            ("timed_fwd_bwd_ms", "Float64", "ms", "forwards, backwards, transfers and flush per step, no profiler"),
            (
                "timed_bubble_ms",
                "Float64",
                "ms",
                "time blocked in receives and the flush per step, no profiler (timed_steps.bubble_ms)",
            ),
            ("timed_optimizer_ms", "Float64", "ms", "the stage's optimizer step (ZeRO-1 over its DP group), no profiler"),
            ("rounds", "Int64", "count", "rounds (trials) the timed columns are over"),
            ("forward_ms", "Float64", "ms", "profiled: time in the forward scopes per step (every micro-batch)"),
            ("backward_ms", "Float64", "ms", "profiled: time in the backward scopes per step"),
            ("optimizer_ms", "Float64", "ms", "profiled: time in the optimizer scope per step"),
            ("bubble_ms", "Float64", "ms", "profiled: the bubble phase per step (pp_recv_activation + pp_recv_grad + pp_flush)"),
            ("flush_ms", "Float64", "ms", "profiled: the flush (waiting for this stage's sends) per step"),
            ("send_ms", "Float64", "ms", "profiled: issuing the point-to-point sends per step (they complete in the flush)"),
            (
                "bubble_over_optimizer",
                "Float64",
                "ratio",
                "timed_bubble_ms / timed_optimizer_ms: the share of the optimizer step the stage's idle time could hold "
                "(an upper bound: only the idle time after its last backward can take it)",
            ),
        ),
    ),
    "timeline": TableSchema(
        "timeline",
        "One row per phase interval of every profiled step of every trial on every rank (the timeline figure): coarse phases, "
        "the "
        "optimizer's and the model's phases, and the collective transfers, on one clock per step.",
        ("run", "trial", "rank", "step", "lane", "start_ms"),
        columns_of(
            *_RANK_ID,
            ("step", "Int64", "step", "ProfilerStep number"),
            (
                "lane",
                "string",
                "",
                "step (the rank's ProfilerStep window), coarse (forward/backward/optimizer), fine (optimizer and model phases), "
                "transfer (gloo/NCCL), gpu (GPU traces: the GPU work each phase launched, under that phase); coarse and fine "
                "are the scopes' CPU annotations (their GPU copies are not a second span)",
            ),
            ("phase", "string", "", "phase name; 'transfer' for collective transfers"),
            (
                "start_ms",
                "Float64",
                "ms",
                "start, from the earliest rank's start of this step (ranks aligned by baseTimeNanoseconds)",
            ),
            ("end_ms", "Float64", "ms", "end, same clock"),
            ("aligned", "boolean", "", "false when a rank's trace had no baseTimeNanoseconds (each rank then starts at 0)"),
        ),
    ),
    "losses": TableSchema(
        "losses",
        "One row per run, rank and training step: the training loss as recorded at run time (metrics.json).",
        ("run", "trial", "rank", "step"),
        columns_of(
            *_RANK_ID,
            (
                "step",
                "Int64",
                "step",
                "training step, from 0: the profiled steps, after the timed_warmup + timed_steps steps run without the "
                "profiler (which record no loss)",
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
        columns_of(*_TRIAL_ID, ("key", "string", "", "field name"), ("value", "string", "", "value, as text")),
    ),
    "trace_files": TableSchema(
        "trace_files",
        "One row per trace file the tables were made from (each rank of each traced trial, the original study's "
        "included): the index that finds a run's traces, which are JSON files and no config of the dataset "
        "(muon_repro.analysis.trace_files).",
        ("run", "trial", "rank", "path"),
        columns_of(
            *_RANK_ID,
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
