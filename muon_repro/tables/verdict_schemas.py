"""The verdict tables' declarations: Muon against AdamW run by run (comparisons), the claims judged on those runs
(claims), the consistency checks of quantities set by construction (checks), and the numbers their explanations
state (stated_numbers).

A declarative literal like :mod:`muon_repro.tables.schemas`, which registers these in ``SCHEMAS``, in this order.
"""

from __future__ import annotations

from muon_repro.tables.columns import PROFILE, PROFILE_MEANING
from muon_repro.tables.schema import TableSchema, columns_of

COMPARISON_TIME_RATIOS = (
    "comm_ms_ratio",
    "comm_transfer_ms_ratio",
    "exposed_comm_ms_ratio",
    "optimizer_ms_ratio",
    "step_ms_ratio",
    "timed_step_ms_ratio",
)
"""The comparisons' ratios of times: null for a pair not recorded together (bytes and state do not drift)."""

VERDICT_SCHEMAS: tuple[TableSchema, ...] = (
    TableSchema(
        "comparisons",
        "Muon vs AdamW at the same profile, grid (dp, tp, pp, world size, micro-batches), backend and device: ratios "
        "Muon / AdamW (null where AdamW's value is 0 or unknown). A Muon run is never paired with an AdamW run of "
        "another hardware profile, nor with one that did other work (tokens per step, model, precision, ...): a Muon "
        "run without such a twin has no row. Each ratio is of the runs table's column of the same name: the profiled "
        "steps' medians (timed_step_ms_ratio: the steps timed without the profiler). The claims table's times are the "
        "rounds timed without the profiler, which costs Muon and AdamW unequally, paired by round, so a ratio here "
        "can differ from the claim's. Times are compared only between runs recorded "
        "together (recorded_together): a machine's speed drifts from one session to the next, so a pair recorded by "
        "different sweeps keeps its byte and state ratios and has null time ratios.",
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
            ("adamw_run", "string", "", "run id of the AdamW run (one recorded together preferred, then the same group)"),
            (
                "recorded_together",
                "boolean",
                "",
                "whether the two runs share a round recorded by one sweep (the claims' pairing; runs recorded before "
                "sweeps had ids pair as they always did); false: the time ratios are null",
            ),
            ("comm_ms_ratio", "Float64", "ratio", "communication time (wait included)"),
            ("comm_transfer_ms_ratio", "Float64", "ratio", "communication transfer time (from the last rank's arrival)"),
            ("exposed_comm_ms_ratio", "Float64", "ratio", "exposed communication time"),
            ("comm_bytes_ratio", "Float64", "ratio", "bytes sent per rank per step"),
            ("optimizer_ms_ratio", "Float64", "ratio", "optimizer time"),
            ("step_ms_ratio", "Float64", "ratio", "step time"),
            (
                "timed_step_ms_ratio",
                "Float64",
                "ratio",
                "step time timed without the profiler (runs.timed_step_ms, each the median over its rounds; not paired "
                "by round as the claims are); null without timed steps",
            ),
            ("state_bytes_ratio", "Float64", "ratio", "optimizer state bytes per rank"),
        ),
    ),
    TableSchema(
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
    TableSchema(
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
    TableSchema(
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
)
