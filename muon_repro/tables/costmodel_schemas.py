"""The cost model's tables' declarations (muon_repro.analysis.costmodel_tables): a machine's calibration, the
predictions and their validation, the regime sweep, the model lines and thresholds, and the pipeline's scale-out.

A declarative literal like :mod:`muon_repro.tables.schemas`, which registers these in ``SCHEMAS``, in this order.
"""

from __future__ import annotations

from muon_repro.tables.columns import PROFILE, PROFILE_MEANING
from muon_repro.tables.schema import TableSchema, columns_of

_RECORD_PROFILE = (
    "profile",
    "string",
    "",
    "hardware profile of the machine that wrote the record (its 'profile' column, "
    "else the costmodel folder's machine.json name; muon_repro.hardware)",
)

CALIBRATION = TableSchema(
    "calibration",
    "One row per measurement of a machine by `muon-repro calibrate`: a compute kernel at one shape (kind 'kernel'), "
    "the share of a rank's compute rate left when several ranks compute at once (kind 'share'), how far out of step "
    "ranks sharing cores reach a collective (kind 'jitter'), one collective size (kind 'collective_sample') and the "
    "alpha-beta fit of a collective over its sizes (kind 'collective'). Columns that do not apply to a kind are null.",
    ("profile", "machine", "kind", "kernel", "dtype", "shape", "op", "group_size", "world_size", "bytes"),
    columns_of(
        _RECORD_PROFILE,
        ("machine", "string", "", "machine profile name (machine.json 'name')"),
        ("device", "string", "", "cpu or cuda"),
        ("backend", "string", "", "process-group backend of the collectives: gloo or nccl"),
        ("kind", "string", "", "kernel, share, jitter, collective_sample or collective"),
        (
            "kernel",
            "string",
            "",
            "matmul, newton_schulz, newton_schulz_matmuls (its own matmuls, timed one by one), attention, cross_entropy, gelu, "
            "elementwise, op_overhead, profiled_op_overhead, compute_share, arrival_jitter",
        ),
        ("dtype", "string", "", "fp32 or bf16 (kernels)"),
        (
            "shape",
            "string",
            "",
            "what was timed: a preset's training-step matmuls at a TP size (matmul), [rows,cols] (Newton-Schulz), "
            "[batch,heads,seq,head_dim] (attention), [tokens,width] or [elements] (element-wise kernels)",
        ),
        ("threads", "Int64", "count", "torch threads of the measuring process (kernels: the bench's threads per rank)"),
        (
            "seconds",
            "Float64",
            "s",
            "median time of one call (kernels; collective samples: mean over ranks, median over repetitions)",
        ),
        ("tflops", "Float64", "TFLOP/s", "matmul FLOPs per second (matmul, newton_schulz, attention: 2 per multiply-add)"),
        (
            "gbps",
            "Float64",
            "GB/s",
            "bytes per second: elementwise moves 12 per fp32 element (p.add_(u)); cross_entropy and gelu count 4 per input "
            "element, forward+backward",
        ),
        (
            "us",
            "Float64",
            "us",
            "op_overhead: host time per operator call of a training step (profiled_op_overhead: under the bench's profiler); "
            "arrival_jitter: mean wait per collective for the group's last rank, ranks computing equal work between collectives",
        ),
        (
            "ratio",
            "Float64",
            "",
            "newton_schulz: its time over the summed time of its own matmuls; compute_share: per-rank rate with world_size ranks "
            "computing at once over one rank alone",
        ),
        ("op", "string", "", "collective: all_gather, reduce_scatter or all_reduce"),
        (
            "group_size",
            "Int64",
            "ranks",
            "ranks per group (every group of that size in the world runs the collective at once; jitter: the groups it was "
            "measured on)",
        ),
        ("world_size", "Int64", "ranks", "ranks running at once (collectives, compute_share)"),
        (
            "bytes",
            "Int64",
            "bytes",
            "collective_sample: what one rank sends by the ring model (muon_repro.formulas.ring_bytes)",
        ),
        ("alpha_us", "Float64", "us", "collective: fitted latency, t = alpha + bytes / beta"),
        ("beta_gbps", "Float64", "GB/s", "collective: fitted bus bandwidth (ring bytes per rank per second)"),
        ("fit_rel_rmse", "Float64", "fraction", "collective: root-mean-square relative error of the fit over its samples"),
    ),
)

PREDICTIONS = TableSchema(
    "predictions",
    "One row per recorded run: its step and optimizer times as measured (metrics.json's steps timed without the "
    "profiler: the median over trials of each trial's median) and as predicted by the cost model "
    "(muon_repro.costmodel) from its config.json, twice: by the run's own calibration (the machine profile scaled by "
    "the day's speed the run's speed probes measured, environment.json speed_probe) and by the profile as calibrated. "
    "Relative errors are (predicted - measured) / measured.",
    ("run", "machine"),
    columns_of(
        ("run", "string", "", "run id: '<profile>/<group>/<name>' (environment.json's profile, config.json 'key')"),
        PROFILE,
        ("machine", "string", "", "machine profile the prediction used"),
        ("optimizer", "string", "", "muon or adamw"),
        ("layout", "string", "", "ZeRO-1 layout"),
        ("overlap", "string", "", "how Muon's gathers are scheduled"),
        ("dp", "Int64", "ranks", "data-parallel size"),
        ("tp", "Int64", "ranks", "tensor-parallel size"),
        (
            "pp",
            "Int64",
            "ranks",
            "pipeline stages (config.json 'pp'; 1: no pipeline, as every row written before the column); a run with "
            "pp > 1 is priced stage by stage and over its 1F1B schedule (docs/method.md#pipeline-parallelism)",
        ),
        ("trials", "Int64", "count", "trials (rounds) with measured steps: what the measured times are the median over"),
        ("steps", "Int64", "count", "measured steps over those trials"),
        (
            "profiled",
            "boolean",
            "",
            "whether the measured steps ran under the profiler (runs recorded before unprofiled timed steps existed), "
            "and were priced with its per-operator cost",
        ),
        (
            "recorded_on",
            "string",
            "",
            "UTC date its first trial was recorded (environment.json recorded_at): one machine's speed drifts between days",
        ),
        (
            "measured_step_ms",
            "Float64",
            "ms",
            "median over trials (rounds) of each trial's median over its steps timed without the profiler "
            "(metrics.json timed_step_ms) of the slowest rank's step time: runs.timed_step_ms",
        ),
        ("predicted_step_ms", "Float64", "ms", "predicted step time of the slowest rank, priced_by the run's own calibration"),
        ("step_rel_error", "Float64", "fraction", "(predicted - measured) / measured step time"),
        (
            "measured_optimizer_ms",
            "Float64",
            "ms",
            "median over the same trials of each one's median over its steps of the mean over ranks of the optimizer "
            "step (metrics.json timed_optimizer_ms): runs.timed_optimizer_ms",
        ),
        ("predicted_optimizer_ms", "Float64", "ms", "predicted optimizer step, mean over ranks"),
        ("optimizer_rel_error", "Float64", "fraction", "(predicted - measured) / measured optimizer time"),
        ("predicted_forward_ms", "Float64", "ms", "predicted forward, mean over ranks (TP collectives included)"),
        ("predicted_backward_ms", "Float64", "ms", "predicted backward, mean over ranks (TP collectives included)"),
        ("predicted_comm_ms", "Float64", "ms", "predicted collective time (transfer + wait), mean over ranks"),
        ("predicted_wait_ms", "Float64", "ms", "predicted time waiting for a group's last rank, mean over ranks"),
        (
            "predicted_optimizer_exposed_ms",
            "Float64",
            "ms",
            "runs with pipeline stages: the optimizer time the predicted step pays beyond its 1F1B schedule, steps back to "
            "back, each stage's optimizer step after its own drain (docs/method.md#pipeline-parallelism); null without "
            "stages, and in records written before the column",
        ),
        (
            "priced_by",
            "string",
            "",
            "'own_calibration': the predicted_* columns use the profile scaled by the run's day speed; 'profile': the "
            "run has no speed probe (recorded before probes existed) or the profile no calibration probe",
        ),
        (
            "day_compute",
            "Float64",
            "ratio",
            "the day's speed: the run's matmul rate over the calibration's (speed probes, median over trials; > 1: faster "
            "that day); own_calibration scales every figure of the profile by it",
        ),
        ("day_memory", "Float64", "ratio", "the run's memory bandwidth over the calibration's (measured, not applied)"),
        ("day_host", "Float64", "ratio", "the calibration's time per operator call over the run's (measured, not applied)"),
        ("day_network", "Float64", "ratio", "the calibration's all-reduce time over the run's (measured, not applied)"),
        ("profile_predicted_step_ms", "Float64", "ms", "predicted step time by the profile as calibrated (no day speed)"),
        ("profile_step_rel_error", "Float64", "fraction", "(profile prediction - measured) / measured step time"),
        ("profile_predicted_optimizer_ms", "Float64", "ms", "predicted optimizer step by the profile as calibrated"),
        ("profile_optimizer_rel_error", "Float64", "fraction", "(profile prediction - measured) / measured optimizer time"),
        (
            "within_calibration",
            "boolean",
            "",
            "whether every figure the prediction used was priced within what the profile measured (no "
            "beyond_calibration note); null in records written before the column",
        ),
        (
            "beyond_calibration",
            "string",
            "",
            "what the prediction priced past the profile's measurements, '; ' between notes (muon_repro.costmodel."
            "calibration_range): a size curve past its ends, a collective past its largest sample, a group or world "
            "size not measured, the compute share of more ranks per node, flat figures where no size curve prices the "
            "run; null when within_calibration",
        ),
        (
            "held_out",
            "boolean",
            "",
            "a configuration the cost model was never tuned on (muon_repro.bench.regimes.HELD_OUT): what its "
            "thresholds' ranges rest on",
        ),
        (
            "validation_set",
            "string",
            "",
            "held_out (HELD_OUT), first_held_out (FIRST_HELD_OUT: held out until the model's last change saw it), or null "
            "(the sweep's own points and the reference runs)",
        ),
        ("path", "string", "", "the run folder"),
    ),
)


REGIMES = TableSchema(
    "regimes",
    "One row per point of the regime sweep (muon-repro regimes: traces/<profile>/regimes/, timed without the profiler): the "
    "measured step, the optimizer's share of it and, for Muon, its extra over the AdamW run of the same width, tokens "
    "per step and DP x TP, with the cost model's predictions beside them. Times: the median over rounds (trials) of "
    "each round's median step; "
    "intervals: 95% t intervals over rounds (the share formed within each step; Muon's extra paired with its twin by "
    "round). See docs/method.md#regimes.",
    ("run",),
    columns_of(
        ("run", "string", "", "run id: '<profile>/regimes/<name>'"),
        ("profile", "string", "", f"{PROFILE_MEANING}; a point's AdamW twin is of the same profile"),
        ("command", "string", "", "the command line that recorded the point's first trial, shell-quoted"),
        ("git_sha", "string", "", "commit of the code that recorded the point's first trial (environment.json)"),
        ("d_model", "Int64", "", "model width"),
        ("n_layers", "Int64", "count", "transformer blocks"),
        ("tokens_per_step", "Int64", "tokens", "global tokens per step (over all DP ranks)"),
        ("dp", "Int64", "ranks", "data-parallel size"),
        ("tp", "Int64", "ranks", "tensor-parallel size"),
        ("layout", "string", "", "ZeRO-1 layout"),
        (
            "held_out",
            "boolean",
            "",
            "a configuration the cost model was never tuned on (predictions.held_out): its validation, off the sweep's "
            "main lines",
        ),
        (
            "validation_set",
            "string",
            "",
            "predictions.validation_set: a held-out set's name, off the sweep's main lines; null otherwise",
        ),
        ("optimizer", "string", "", "muon or adamw"),
        ("trials", "Int64", "count", "trials recorded"),
        ("steps", "Int64", "count", "recorded steps over its trials"),
        (
            "step_ms",
            "Float64",
            "ms",
            "step time (a step's time is its slowest rank's): the median over rounds of each round's median",
        ),
        ("optimizer_ms", "Float64", "ms", "optimizer step, mean over ranks: the median over rounds of each round's median"),
        (
            "optimizer_share",
            "Float64",
            "fraction",
            "optimizer time (mean over ranks) over step time (slowest rank), formed within each step; the mean over "
            "rounds (disturbed ones left out) of each round's median, as the claims form it",
        ),
        ("optimizer_share_lo", "Float64", "fraction", "95% interval, low (cut at 0, where a share lies)"),
        ("optimizer_share_hi", "Float64", "fraction", "95% interval, high (cut at 1)"),
        ("adamw_run", "string", "", "Muon rows: the AdamW run of the same width, tokens per step, dp and tp"),
        (
            "disturbed_rounds",
            "Int64",
            "count",
            "rounds left out as disturbed (runs.disturbed_rounds' rule): the row's own, left out of its share; on a Muon "
            "row, those of it or its AdamW twin, left out of muon_extra",
        ),
        ("adamw_step_ms", "Float64", "ms", "Muon rows: that run's step time, as step_ms"),
        (
            "muon_extra",
            "Float64",
            "fraction",
            "Muon rows: Muon's added step time, the geometric mean over the paired rounds (disturbed ones left out) of "
            "Muon's median step time over AdamW's, minus 1",
        ),
        ("muon_extra_lo", "Float64", "fraction", "95% interval, low"),
        ("muon_extra_hi", "Float64", "fraction", "95% interval, high"),
        ("muon_extra_ms_per_ktoken", "Float64", "ms", "Muon rows: (step_ms - adamw_step_ms) per 1,000 tokens of the step"),
        ("ns_gflop_max_rank", "Float64", "GFLOP", "Newton-Schulz FLOPs per step of the busiest rank (metrics.json ns_flops)"),
        (
            "fwd_bwd_gflop_per_rank",
            "Float64",
            "GFLOP",
            "forward+backward FLOPs per step and rank (metrics.json train_flops / (dp*tp))",
        ),
        ("flop_ratio", "Float64", "", "Muon rows: ns_gflop_max_rank / fwd_bwd_gflop_per_rank"),
        (
            "closed_form_ratio",
            "Float64",
            "",
            "Muon rows: the closed form (10/3) d_model / T, times tp (every TP rank runs the full matrix) and dp for the "
            "bucketed layout",
        ),
        (
            "ns_time_ratio",
            "Float64",
            "",
            "Muon rows: the measured counterpart of flop_ratio: the optimizer time Muon adds over its AdamW twin's "
            "(optimizer_ms, Newton-Schulz and its gathers) over the twin's step time outside its optimizer (step_ms - "
            "optimizer_ms: forward, backward and the rest of the step)",
        ),
        ("predicted_step_ms", "Float64", "ms", "the cost model's step time (predictions table)"),
        ("predicted_optimizer_ms", "Float64", "ms", "the cost model's optimizer step, mean over ranks"),
        ("predicted_optimizer_share", "Float64", "fraction", "predicted_optimizer_ms / predicted_step_ms"),
        (
            "predicted_muon_extra",
            "Float64",
            "fraction",
            "Muon rows: predicted step over the AdamW twin's predicted step, minus 1",
        ),
    ),
)

_LINE = (
    ("machine", "string", "", "machine profile (this machine's calibrated one, or a shipped one)"),
    (
        "model",
        "string",
        "",
        "model priced: d<width> (the sweep's), gpu-scale-369m (Wei's study does not publish its model; the gpu scale's "
        "stands for it) or 7b",
    ),
    ("d_model", "Int64", "", "model width"),
    (
        "model_dtype",
        "string",
        "",
        "the rate the model's matmuls are priced at: fp32 (the bench's own training) or bf16 (mixed precision)",
    ),
    ("dp", "Int64", "ranks", "data-parallel size"),
    ("tp", "Int64", "ranks", "tensor-parallel size"),
    ("layout", "string", "", "ZeRO-1 layout"),
)

REGIME_MODEL = TableSchema(
    "regime_model",
    "The cost model's lines (muon_repro.costmodel.records): Muon's and AdamW's predicted steps at one tokens per step, "
    "on this machine at the regime sweep's widths (kind 'this_machine'), on the shipped profiles for the gpu scale's "
    "model and 7B (kind 'profile'), and for 7B scaled out over H100 nodes at 4M tokens per step (kind 'scale_out'). "
    "Predicted without the profiler's cost.",
    ("profile", "kind", "machine", "model", "dp", "tp", "layout", "tokens_per_step"),
    columns_of(
        _RECORD_PROFILE,
        ("kind", "string", "", "this_machine, profile or scale_out"),
        *_LINE,
        ("model_params", "Int64", "count", "parameters of the full model"),
        ("gpus", "Int64", "ranks", "dp * tp"),
        ("tokens_per_step", "Int64", "tokens", "global tokens per step"),
        ("muon_step_ms", "Float64", "ms", "predicted step, slowest rank"),
        ("muon_optimizer_ms", "Float64", "ms", "predicted optimizer step, mean over ranks"),
        ("muon_comm_ms", "Float64", "ms", "predicted collective time (transfer + wait), mean over ranks"),
        ("adamw_step_ms", "Float64", "ms", "predicted step, slowest rank"),
        ("adamw_optimizer_ms", "Float64", "ms", "predicted optimizer step, mean over ranks"),
        ("adamw_comm_ms", "Float64", "ms", "predicted collective time (transfer + wait), mean over ranks"),
        (
            "optimizer_share",
            "Float64",
            "fraction",
            "muon_optimizer_ms / muon_step_ms (the study's optimizer-share claim)",
        ),
        ("muon_extra", "Float64", "fraction", "muon_step_ms / adamw_step_ms - 1 (the paper's added-latency claim)"),
        (
            "optimizer_share_low",
            "Float64",
            "fraction",
            "the low end of the true share's range at regime_thresholds.range_coverage, from the model's held-out log "
            "errors on the share on this kind of device (muon_repro.costmodel.records.metric_error_spread); null with "
            "fewer than 20 such residuals",
        ),
        ("optimizer_share_high", "Float64", "fraction", "the most the true share can be, by the same errors"),
        ("muon_extra_low", "Float64", "fraction", "the least the true extra can be, by its errors on the Muon/AdamW ratio"),
        ("muon_extra_high", "Float64", "fraction", "the most the true extra can be, by the same errors"),
        ("flop_ratio", "Float64", "", "Newton-Schulz FLOPs of the busiest rank over its forward+backward FLOPs"),
    ),
)

REGIME_THRESHOLDS = TableSchema(
    "regime_thresholds",
    "Where Muon's overhead falls to the claimed levels, by the cost model: for each profile, model and metric, the "
    "tokens per step at which the metric first reaches the level (log-log interpolation between the regime_model "
    "points around the crossing; null when not reached by 134M tokens).",
    ("profile", "machine", "model", "dp", "tp", "layout", "metric", "level"),
    columns_of(
        _RECORD_PROFILE,
        *_LINE,
        ("metric", "string", "", "optimizer_share or muon_extra (regime_model's columns)"),
        (
            "level",
            "Float64",
            "fraction",
            "a level declared in muon_repro.claims.LEVELS: the original study's optimizer share, or the paper's added "
            "latency (the upper end of its range)",
        ),
        (
            "tokens_per_step",
            "Float64",
            "tokens",
            "tokens per step at which the metric falls to the level; null: it does not within the grid (grid_max_tokens)",
        ),
        (
            "tokens_per_step_low",
            "Float64",
            "tokens",
            "the same, where the metric is as small as the model's held-out errors allow at range_coverage "
            "(regime_model <metric>_low): the earliest the level can be reached; null without a range",
        ),
        (
            "tokens_per_step_high",
            "Float64",
            "tokens",
            "the same, where the metric is as large as they allow: the latest; null without a range, or when that "
            "curve does not reach the level within the grid",
        ),
        ("tokens_per_d_model", "Float64", "tokens", "tokens_per_step / d_model"),
        ("grid_max_tokens", "Float64", "tokens", "the largest tokens per step the grid priced: where 'not within' ends"),
        (
            "range_coverage",
            "Float64",
            "fraction",
            "the stated coverage of the range: from n held-out residuals of the machine's kind of device (GPU residuals "
            "for a GPU machine), the k-th smallest and largest with k = floor(0.05 (n + 1)), covering a new "
            "configuration's residual with probability (n + 1 - 2k) / (n + 1); null: no range (error_basis says why)",
        ),
        ("error_runs", "Int64", "count", "held-out residuals the range is taken from (null without a range)"),
        (
            "error_basis",
            "string",
            "",
            "which residuals set the range (held-out cpu runs, held-out cuda runs), or why there is none (fewer than "
            "20 held-out residuals of the machine's kind)",
        ),
    ),
)

# Not in SCHEMAS yet: muon_repro.costmodel.pipeline_scale_out.pipeline_scale_out_table() returns it (torch: it
# predicts); the analysis has no record of it to read until `muon-repro regimes` writes one.
PIPELINE_SCALE_OUT = TableSchema(
    "pipeline_scale_out",
    "The cost model's 7B model as TP8 x PP4 x DP on H100 nodes over InfiniBand, 32 to 1,024 GPUs, 4M tokens per step "
    "in micro-batches of one sequence, bf16, 1F1B: one row per GPU count and optimizer.",
    ("profile", "machine", "model", "optimizer", "gpus", "dp", "tp", "pp", "layout", "tokens_per_step"),
    columns_of(
        _RECORD_PROFILE,
        ("machine", "string", "", "machine profile"),
        ("model", "string", "", "model priced (7b)"),
        ("model_dtype", "string", "", "the training's priced precision (bf16: mixed precision)"),
        ("optimizer", "string", "", "muon or adamw"),
        ("gpus", "Int64", "ranks", "dp * tp * pp"),
        ("dp", "Int64", "ranks", "data-parallel size (per stage)"),
        ("tp", "Int64", "ranks", "tensor-parallel size"),
        ("pp", "Int64", "ranks", "pipeline stages"),
        ("layout", "string", "", "ZeRO-1 layout"),
        ("tokens_per_step", "Int64", "tokens", "global tokens per step"),
        ("micro_batches", "Int64", "count", "micro-batches per DP replica and step (M)"),
        (
            "step_ms",
            "Float64",
            "ms",
            "predicted step: the period of steps back to back, each stage's optimizer step after its own drain; "
            "pipeline_ms + optimizer_exposed_ms",
        ),
        ("pipeline_ms", "Float64", "ms", "the 1F1B schedule's forwards, backwards and transfers, first to last"),
        ("optimizer_ms", "Float64", "ms", "optimizer step, mean over ranks"),
        (
            "stage_optimizer_max_ms",
            "Float64",
            "ms",
            "the slowest stage's optimizer step (its slowest rank)",
        ),
        (
            "optimizer_exposed_ms",
            "Float64",
            "ms",
            "step_ms - pipeline_ms: the optimizer time the drain and the next step's fill do not hide, from stage 0's "
            "optimizer step (it ends the drain) up to stage_optimizer_max_ms",
        ),
        ("optimizer_share", "Float64", "fraction", "stage_optimizer_max_ms / step_ms: the optimizer's part of the step"),
        ("bubble_ms", "Float64", "ms", "mean over stages of pipeline_ms minus the stage's own forwards and backwards"),
        ("bubble_max_ms", "Float64", "ms", "the largest stage bubble"),
        ("bubble_fraction", "Float64", "fraction", "bubble_ms / pipeline_ms"),
        ("ideal_bubble_fraction", "Float64", "fraction", "(pp - 1) / (M + pp - 1): equal stages, free transfers"),
        ("activation_bytes", "Int64", "bytes", "one micro-batch's activation (or gradient) between two stages"),
        ("p2p_ms", "Float64", "ms", "one activation's transfer across a stage boundary (the slowest boundary)"),
        ("muon_extra", "Float64", "fraction", "Muon rows: step_ms over the AdamW row's at the same GPU count, minus 1"),
    ),
)

COSTMODEL_SCHEMAS = (CALIBRATION, PREDICTIONS, REGIMES, REGIME_MODEL, REGIME_THRESHOLDS, PIPELINE_SCALE_OUT)
