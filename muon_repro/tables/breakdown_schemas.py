"""The step taken apart: the declarations of the tables that hold one run's step rank by rank (ranks), phase by phase
(phases), stage by stage of a pipeline (stages) and phase interval by phase interval on one clock (timeline).

A declarative literal like :mod:`muon_repro.tables.schemas`, which registers these in ``SCHEMAS``, in this order.
"""

from __future__ import annotations

from muon_repro.tables.columns import RANK_ID, RUN_ID
from muon_repro.tables.schema import TableSchema, columns_of

BREAKDOWN_SCHEMAS: tuple[TableSchema, ...] = (
    TableSchema(
        "ranks",
        "One row per run and rank: what the rank held and computed, as recorded at run time (metrics.json).",
        ("run", "trial", "rank"),
        columns_of(
            *RANK_ID,
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
            (
                "peak_mem_bytes",
                "Int64",
                "bytes",
                "peak memory of the rank's process as recorded at run time: on a GPU the run's own (the allocator's "
                "peak, reset as the run starts); on a CPU the process's highest resident set so far, which one launch "
                "shares among the runs it records in turn (the largest of this run's and those before it: a CPU has "
                "no per-run peak to reset)",
            ),
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
    TableSchema(
        "phases",
        "One row per run, rank and phase (the record_function scopes of the model and the optimizers): time from the "
        "trace, and bytes from three independent sources that must agree: the analytic ring model, the run-time "
        "ledger of the collective wrappers, and the call sizes read back from the trace.",
        ("run", "trial", "rank", "phase"),
        columns_of(
            *RANK_ID,
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
    TableSchema(
        "stages",
        "One row per pipeline run (pp > 1) and stage: what it holds; forward+backward, the bubble (time blocked on its "
        "neighbours) and the optimizer step side by side. timed_*: the steps timed without the profiler (mean over "
        "the stage's ranks, median over steps, then over rounds); the others: the profiled phases.",
        ("run", "stage"),
        columns_of(
            *RUN_ID,
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
    TableSchema(
        "timeline",
        "One row per phase interval of every profiled step of every trial on every rank (the timeline figure): coarse phases, "
        "the "
        "optimizer's and the model's phases, and the collective transfers, on one clock per step.",
        ("run", "trial", "rank", "step", "lane", "start_ms"),
        columns_of(
            *RANK_ID,
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
)
