"""Per step: the declarations of the tables that hold a run's profiled steps (steps), its steps timed without the
profiler (timed_steps) and its collectives by phase and op (collectives).

A declarative literal like :mod:`muon_repro.tables.schemas`, which registers these in ``SCHEMAS``, in this order.
"""

from __future__ import annotations

from muon_repro.tables.columns import RANK_ID, TRIAL_ID
from muon_repro.tables.schema import TableSchema, columns_of

COMM_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv", "other")
"""Collective kinds with their own time column; ``other`` holds barrier, reduce, gather, scatter."""

SWEEP = (
    "sweep",
    "string",
    "",
    "the bench command that recorded the trial (config.json sweep, one id per command): round k of two runs pairs "
    "only within one sweep; null: recorded before sweeps were named",
)

STEP_SCHEMAS: tuple[TableSchema, ...] = (
    TableSchema(
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
            *TRIAL_ID,
            ("rank", "Int64", "", "global rank (distributedInfo, else the file name, else the --rank argument, else 0)"),
            ("step", "Int64", "", "profiler step number N of ProfilerStep#N; -1 for a trace without steps"),
            ("file", "string", "", "trace file"),
            ("device", "string", "", "cpu or cuda"),
            SWEEP,
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
                "largest spread, across its process group's ranks, of one collective's start in this step; null for one rank or "
                "a step of point-to-point transfers only",
            ),
            (
                "late_ms",
                "Float64",
                "ms",
                "this rank's mean delay entering the step's collectives, after its group's earliest rank",
            ),
            ("straggler_rank", "Int64", "", "the rank with the largest late_ms in this step (null where start_skew_ms is)"),
        ),
    ),
    TableSchema(
        "timed_steps",
        "One row per run, rank and timed step: the steps a profiled run trains and times with no profiler at all "
        "(config.json timed_steps, after timed_warmup steps not kept) before its profiled steps, on the batches before "
        "theirs. Times are time.perf_counter_ns() on the rank's host, the device synchronized around each part "
        "(metrics.json timed_step_ms, timed_fwd_bwd_ms, timed_optimizer_ms, timed_comm). Empty for runs recorded "
        "without timed steps.",
        ("run", "trial", "rank", "step"),
        columns_of(
            *RANK_ID,
            SWEEP,
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
                "stage 0 under 1F1B); null without pipeline stages, for runs recorded before, across hosts, or on NCCL "
                "(the host reads its clock after a backward once its kernels are queued, not when they end)",
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
    TableSchema(
        "collectives",
        "One row per run, rank, phase and collective op: totals over the profiled steps. bytes must agree with the byte "
        "ledger (ledger_bytes) and the analytic model.",
        ("run", "trial", "rank", "phase", "op"),
        columns_of(
            *TRIAL_ID,
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
)
