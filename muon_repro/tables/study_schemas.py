"""The study tables' declarations: the original study's own runs (muon_repro.study), read per step.

A declarative literal like :mod:`muon_repro.tables.schemas`, which registers these in ``SCHEMAS``.
"""

from __future__ import annotations

from muon_repro.tables.schema import TableSchema, columns_of

_STUDY_RUN = (
    ("run", "string", "", "run id: '<profile>/comparison/<the study's run name>' (its files trace_<name>_rank<r>.json.gz)"),
    ("profile", "string", "", "the study's hardware profile (4xRTXA4000-pcie-nccl), derived from its traces"),
)
_RANK = ("rank", "Int64", "rank", "global rank (the trace's distributedInfo)")
_TRIAL = ("trial", "Int64", "", "which recording of the run (a round; the study's own traces: 0)")
_STEP = ("step", "Int64", "", "the step within the trace, from 0 (one repeat of the study's record_function scopes)")
_SCOPE = (
    "scope",
    "string",
    "",
    "the study's record_function scope (FWD_BWD, Attach_Grads, AdamW_AllReduce, AdamW_Step, Muon_Step, ...), or 'step' "
    "for the whole step",
)

STUDY_RUNS = TableSchema(
    "study_runs",
    "The original study's runs, read from its published traces: one row per configuration (4 ranks, or rank 0 alone "
    "for the async runs), with what it did (collectives, bytes per rank and step) and its per-step times, each a mean "
    "over steps of the mean over its traced ranks.",
    ("run", "trial"),
    columns_of(
        *_STUDY_RUN,
        _TRIAL,
        (
            "protocol",
            "string",
            "",
            "study (the study's experiment as its muon_vs_adam.py ran it) or study-equal-work (the same with both "
            "optimizers reducing and sharding alike; docs/recording.md)",
        ),
        ("recorded_by", "string", "", "'the original study' (its published traces) or 'muon_repro' (recorded here)"),
        (
            "command",
            "string",
            "",
            "the command line that recorded the run (config.json); null for the original study's, whose traces keep none",
        ),
        (
            "git_sha",
            "string",
            "",
            "commit of the code that recorded the run (environment.json); null for the original study's",
        ),
        ("group", "string", "", "comparison (the study's folder), study_protocol or study_equal_work (recorded here)"),
        ("name", "string", "", "the study's run name (adamw, muon_dp2_tp2, adamw_FULLSTEP, ...)"),
        ("optimizer", "string", "", "muon or adamw"),
        (
            "variant",
            "string",
            "",
            "optimizer_only (gradients attached, then the optimizer) or full_step (a simulated forward-backward first)",
        ),
        ("async_op", "boolean", "", "the study's async_op=True variant"),
        ("dp", "Int64", "ranks", "data-parallel size (AdamW: every rank, all-reducing full gradients)"),
        ("tp", "Int64", "ranks", "tensor-parallel size"),
        ("world_size", "Int64", "ranks", "ranks of the run (distributedInfo)"),
        ("ranks_traced", "Int64", "ranks", "ranks whose trace was published"),
        ("steps", "Int64", "count", "steps in each trace"),
        ("device", "string", "", "accelerator (deviceProperties, environment.json), or cpu"),
        ("backend", "string", "", "collective backend: nccl or gloo"),
        ("collectives_per_step", "Float64", "count", "collectives a traced rank issues per step, mean over ranks"),
        (
            "payload_bytes_per_step",
            "Float64",
            "bytes",
            "full arrays of its collectives per step (an all-gather's output, an all-reduce's input), mean over ranks",
        ),
        ("ring_bytes_per_step", "Float64", "bytes", "bytes a rank sends per step, ring model, mean over ranks"),
        ("ring_bytes_per_step_max", "Float64", "bytes", "the same on the rank that sends most"),
        (
            "step_ms",
            "Float64",
            "ms",
            "step time: from the previous step's completion to its own (its last scope returned and its last GPU work "
            "ended); the study synchronises only inside FWD_BWD",
        ),
        ("step_cpu_ms", "Float64", "ms", "the step's CPU window: from its first scope's start to the next step's"),
        (
            "optimizer_cpu_ms",
            "Float64",
            "ms",
            "CPU span of the optimizer's scopes per step (AdamW_AllReduce or AdamW_Comm_AllReduce, AdamW_Step; Muon_Step): "
            "what the study's 'optimizer compute' sums",
        ),
        (
            "optimizer_gpu_busy_ms",
            "Float64",
            "ms",
            "GPU busy time (union) of the kernels the optimizer's scopes launched, per step",
        ),
        (
            "optimizer_done_ms",
            "Float64",
            "ms",
            "from the optimizer's first scope's start to the end of its last GPU work, per step (in the optimizer-only "
            "runs, which never synchronise, this grows with the queue)",
        ),
        (
            "optimizer_busy_ms",
            "Float64",
            "ms",
            "the optimizer's device time per step: its kernels' GPU busy time on GPU traces, its scopes' CPU span on CPU",
        ),
        ("fwd_bwd_gpu_busy_ms", "Float64", "ms", "GPU busy time of the kernels FWD_BWD launched, per step; null without one"),
        (
            "comm_ms",
            "Float64",
            "ms",
            "collective time per step: union of the transfer intervals (NCCL kernels; gloo's worker spans), waits included",
        ),
        (
            "comm_transfer_ms",
            "Float64",
            "ms",
            "transfer time per step: each collective from the last rank's arrival to its own end, summed; null where a "
            "group's ranks were not all traced",
        ),
    ),
)

STUDY_RANKS = TableSchema(
    "study_ranks",
    "The original study's runs per rank: what each rank held and sent, from the collectives in its trace.",
    ("run", "trial", "rank"),
    columns_of(
        *_STUDY_RUN,
        _TRIAL,
        _RANK,
        ("device", "string", "", "accelerator (deviceProperties)"),
        ("collectives_per_step", "Float64", "count", "collectives the rank issued per step"),
        ("collectives", "string", "", "per op and group: 'all_gather over ranks [0,1] x1; ...' per step"),
        ("payload_bytes_per_step", "Float64", "bytes", "full arrays of its collectives per step"),
        ("ring_bytes_per_step", "Float64", "bytes", "bytes it sends per step, ring model"),
        (
            "held_elements",
            "Int64",
            "count",
            "parameter elements its optimizer holds, as its collectives show: AdamW all-reduces every full gradient; "
            "Muon's DP all-gather takes the rank's ZeRO shard of its TP-local buffer",
        ),
    ),
)

STUDY_STEPS = TableSchema(
    "study_steps",
    "The original study's traces per step and scope: the scope's CPU span, the GPU time of the kernels it launched "
    "(HolisticTraceAnalysis's convention: a kernel belongs to the scope whose CPU window holds its launch), NCCL time. "
    "A scope's CPU and GPU annotations are one scope, never added.",
    ("run", "trial", "rank", "step", "scope"),
    columns_of(
        *_STUDY_RUN,
        _TRIAL,
        _RANK,
        _STEP,
        _SCOPE,
        ("start_ns", "Int64", "ns", "when the scope (the step) started: baseTimeNanoseconds + ts, comparable across ranks"),
        ("cpu_ms", "Float64", "ms", "CPU span of the scope's annotation (of the step: its CPU window)"),
        ("gpu_busy_ms", "Float64", "ms", "GPU busy time (union) of the kernels, copies and memsets it launched"),
        ("gpu_kernel_ms", "Float64", "ms", "the same, summed per kernel (overlapping streams counted twice)"),
        (
            "busy_ms",
            "Float64",
            "ms",
            "the device's time for it: gpu_busy_ms on a GPU trace; its CPU span on a CPU trace, where the CPU does the work",
        ),
        ("comm_ms", "Float64", "ms", "union of the transfer intervals of the collectives it issued (NCCL kernels; gloo's)"),
        ("comm_transfer_ms", "Float64", "ms", "its collectives' transfer time (study_collectives), summed"),
        ("gpu_done_ms", "Float64", "ms", "from its start to the end of its last GPU work (its CPU span when it launched none)"),
        ("kernels", "Int64", "count", "GPU kernels, copies and memsets it launched"),
        ("step_ms", "Float64", "ms", "scope 'step' only: from the previous step's completion to its own (study_runs)"),
    ),
)

STUDY_COLLECTIVES = TableSchema(
    "study_collectives",
    "Every collective in the original study's traces, in issue order, with its group, bytes and NCCL kernel; wait and "
    "transfer from the same collective on every rank of its group (matched by group and issue order).",
    ("run", "trial", "rank", "step", "group_ranks", "seq"),
    columns_of(
        *_STUDY_RUN,
        _TRIAL,
        _RANK,
        _STEP,
        _SCOPE,
        ("op", "string", "", "collective kind (all_reduce, all_gather, ...)"),
        (
            "group_ranks",
            "string",
            "",
            "global ranks of the group, comma-separated (NCCL: the trace's process groups; gloo: the label around the "
            "call and the run's DP x TP grid)",
        ),
        ("seq", "Int64", "", "issue order within the group on this rank, from 0"),
        ("group_size", "Int64", "ranks", "ranks in the group"),
        ("dtype", "string", "", "element type"),
        ("elements", "Int64", "count", "the full array: an all-gather's output, a reduction's input"),
        ("payload_bytes", "Int64", "bytes", "elements x element size"),
        ("ring_bytes", "Int64", "bytes", "bytes this rank sends, ring model"),
        ("start_ns", "Int64", "ns", "its transfer's start (the NCCL kernel; gloo's worker span), on the shared clock"),
        ("end_ns", "Int64", "ns", "its transfer's end"),
        ("transfer_span_ms", "Float64", "ms", "end minus start: the transfer with the wait for the group"),
        ("wait_ms", "Float64", "ms", "kernel time before the last rank of the group started it; null if not all traced"),
        ("transfer_ms", "Float64", "ms", "kernel time after the last rank started it; null if not all traced"),
    ),
)

STUDY_METHOD = TableSchema(
    "study_method",
    "Every number the original study published, rebuilt from its traces by its own method (performance_comparison.py: "
    "sums of event durations over the whole 5-step trace of rank 0, matched by name), beside what we measure per step "
    "for the same quantity.",
    ("number_id",),
    columns_of(
        ("number_id", "string", "", "short stable identifier"),
        ("profile", "string", "", "the study's hardware profile"),
        ("published_in", "string", "", "where the study published it (Table 5.1, 5.2, 6, 7; its README)"),
        ("quantity", "string", "", "what the study called it"),
        ("optimizer", "string", "", "muon, adamw or both (a ratio)"),
        ("published", "Float64", "", "the number as published (unit)"),
        ("unit", "string", "", "ms, count, ratio or fraction"),
        ("rebuilt", "Float64", "", "the study's method on its traces, unrounded"),
        ("rebuilt_matches", "boolean", "", "rebuilt, rounded as the study rounded it, equals the published number"),
        ("study_run", "string", "", "the study's run whose rank-0 trace it sums; null for ratios and derived numbers"),
        ("rebuilt_per_step", "Float64", "", "a total over the trace's 5 steps divided by 5 (null for an average per call)"),
        ("measured_per_step", "Float64", "", "our per-step measure of the same quantity on the same trace (study_steps)"),
        ("measured_what", "string", "", "what measured_per_step is"),
    ),
)

STUDY_METHOD_PARTS = TableSchema(
    "study_method_parts",
    "What each of the original study's summed numbers is made of: its events by Kineto category, and whether they are a "
    "collective's own events or a scope of the study's loop whose name holds a collective's name.",
    ("number_id", "category"),
    columns_of(
        ("number_id", "string", "", "study_method's number"),
        ("profile", "string", "", "the study's hardware profile"),
        ("category", "string", "", "Kineto category of the events (cpu_op, user_annotation, kernel, gpu_user_annotation)"),
        ("events", "Int64", "count", "events of that category in the sum"),
        ("ms", "Float64", "ms", "their summed durations"),
    ),
)

# The cost model on the study's machine (muon_repro.study.costmodel_check).

STUDY_COSTMODEL = TableSchema(
    "study_costmodel",
    "The original study's runs priced by the cost model on its machine's profile (4xRTXA4000-pcie-nccl): per run and "
    "quantity, the measured median over steps and ranks against the price by the datasheet profile (published peaks "
    "times assumed efficiencies) and by the same profile with its efficiencies and alphas fitted to these measurements "
    "(muon_repro.study.costmodel_check).",
    ("run", "quantity"),
    columns_of(
        ("run", "string", "", "run id: '<profile>/comparison/<the study's run name>' (study_runs.run)"),
        ("profile", "string", "", "the cost-model profile priced (the shipped profile of the study's machine)"),
        (
            "quantity",
            "string",
            "",
            "fwd_bwd (FWD_BWD: a 2048 x 2048 fp32 randn, 20 chained fp32 matmuls); optimizer (the optimizer scopes' "
            "kernels less NCCL's; '[ranks]' when the run's ranks did unequal work); or 'transfer <op> <dtype> "
            "x<elements> [<group>]' (one collective's NCCL transfer)",
        ),
        ("ranks", "string", "", "the traced ranks the median is taken over, comma-separated"),
        (
            "measured_ms",
            "Float64",
            "ms",
            "median over steps and ranks: study_steps.gpu_kernel_ms of the scopes less their study_collectives.kernel_ms, "
            "or study_collectives.transfer_ms",
        ),
        ("datasheet_ms", "Float64", "ms", "the cost model's kernel (or transfer) time on the shipped profile"),
        ("datasheet_rel_error", "Float64", "fraction", "datasheet_ms / measured_ms - 1"),
        ("fitted_ms", "Float64", "ms", "the same on the profile fitted to the rows with fitted_on"),
        ("fitted_rel_error", "Float64", "fraction", "fitted_ms / measured_ms - 1"),
        (
            "fitted_on",
            "boolean",
            "",
            "whether the fit used the row (the async runs' rows are not: rank 0 alone, compute beside NCCL kernels)",
        ),
    ),
)

STUDY_COSTMODEL_THRESHOLDS = TableSchema(
    "study_costmodel_thresholds",
    "How far fitting the study machine's profile to the study's measured kernel times moves the regime thresholds the "
    "cost model computes on it (regime_thresholds' settings on 4xRTXA4000-pcie-nccl, DP2·TP2): per model, metric and "
    "level, the tokens per step on the datasheet profile and on the fitted one.",
    ("profile", "model", "dp", "tp", "metric", "level"),
    columns_of(
        ("profile", "string", "", "the shipped profile of the study's machine (4xRTXA4000-pcie-nccl)"),
        ("machine", "string", "", "the fitted profile's name (<profile>-fitted-to-study)"),
        ("model", "string", "", "model priced: gpu-scale-369m (standing for the study's unpublished model) or 7b"),
        ("d_model", "Int64", "", "hidden width"),
        ("dp", "Int64", "ranks", "data-parallel size"),
        ("tp", "Int64", "ranks", "tensor-parallel size"),
        ("metric", "string", "", "optimizer_share or muon_extra (regime_model's columns)"),
        (
            "level",
            "Float64",
            "fraction",
            "a level declared in muon_repro.claims.LEVELS: the original study's optimizer share, or the paper's added "
            "latency (the upper end of its range)",
        ),
        ("datasheet_tokens_per_step", "Float64", "tokens", "tokens per step at which the metric falls to the level, datasheet"),
        ("fitted_tokens_per_step", "Float64", "tokens", "the same on the fitted profile"),
        ("ratio", "Float64", "x", "fitted_tokens_per_step / datasheet_tokens_per_step"),
    ),
)

STUDY_COSTMODEL_SCHEMAS = (STUDY_COSTMODEL, STUDY_COSTMODEL_THRESHOLDS)

STUDY_PROTOCOLS = TableSchema(
    "study_protocols",
    "Each claimed number of the original study measured the same way on every set of its protocol's runs: its own "
    "traces, its protocol recorded here (study) and the same with equal work (study-equal-work), side by side with "
    "the claims table's value on our benchmark. Measurements, not verdicts: the claims are judged in the claims table.",
    ("claim_id", "profile", "group"),
    columns_of(
        ("claim_id", "string", "", "the claims table's claim"),
        ("profile", "string", "", "hardware profile of the runs"),
        ("group", "string", "", "the runs' group: comparison (the study's own), study_protocol, study_equal_work"),
        ("protocol", "string", "", "study or study-equal-work"),
        ("recorded_by", "string", "", "'the original study' or 'muon_repro'"),
        (
            "rounds",
            "Int64",
            "count",
            "rounds every run of the set was recorded in: 1 (the interval is over steps), else over these rounds",
        ),
        ("measured_value", "Float64", "", "the claim's quantity (its unit in the claims table), as the claims measure it"),
        ("measured_low", "Float64", "", "lower end of the 95% interval: over rounds (paired), else over the steps"),
        ("measured_high", "Float64", "", "upper end of the 95% interval"),
        (
            "equal_work",
            "boolean",
            "",
            "whether the runs compared did the same work; null for one run, or when their collectives are missing",
        ),
        ("work_difference", "string", "", "the measured difference in work when equal_work is false"),
        (
            "study_method_value",
            "Float64",
            "",
            "the study's own method on the same runs' rank-0 traces (study_method; mean over rounds): its "
            "communication ratio, optimizer share (Muon_Step's summed events over Muon_Full_Training_Step's) or async "
            "ratio; null for latency_overhead",
        ),
    ),
)

STUDY_SCHEMAS = (
    STUDY_RUNS,
    STUDY_RANKS,
    STUDY_STEPS,
    STUDY_COLLECTIVES,
    STUDY_METHOD,
    STUDY_METHOD_PARTS,
    STUDY_PROTOCOLS,
    *STUDY_COSTMODEL_SCHEMAS,
)
