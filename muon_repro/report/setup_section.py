"""The report's "Setup" section: the machines and software stacks the runs were recorded on, and the
model and training settings, each with the distinct values the runs used."""

from __future__ import annotations

from typing import Any

import pandas as pd

import muon_repro
from muon_repro.claims import BY_ID
from muon_repro.hardware import topology_matrix
from muon_repro.report.data import MissingMetric, ReportData, is_missing, metric, require_columns, study_profile
from muon_repro.report.formatting import gib
from muon_repro.report.selection import counted_by_group, grid_said, pipeline_runs, sort_runs, study_runs
from muon_repro.rundir import ONE_RANK_SUFFIX
from muon_repro.tables.rounds_rule import DISTURBED_MADS, DISTURBED_MIN_SHIFT, MIN_ROUNDS_JUDGED
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
            ("CPU", f"{env['host_cpu']}{cpu_instructions(env)}, {env['host_cpu_cores']} cores, {memory} memory"),
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


def cpu_instructions(env: dict[str, str]) -> str:
    """`` (AVX2, no bf16 instructions)``: what the run's environment.json says of the CPU's vector and bf16
    instructions; empty for a run recorded before it said."""
    said = [env[key] for key in ("host_cpu_capability",) if env.get(key)]
    bf16 = {"True": "bf16 instructions", "False": "no bf16 instructions"}.get(str(env.get("host_cpu_bf16")))
    said += [bf16] if bf16 else []
    return f" ({', '.join(said)})" if said else ""


def _ranks(world_size: Any) -> str:
    """``4 ranks``, ``1 rank``; ``? ranks`` where the run did not record its world size."""
    return counted(int(world_size), "rank") if str(world_size or "").isdigit() else "? ranks"


def micro_batches(data: ReportData) -> str:
    """How the batch is cut: one pass outside the pipeline runs; their micro-batches per step and grid."""
    study, pipeline = study_runs(data.runs), pipeline_runs(data.runs)
    groups = ", ".join(dict.fromkeys(str(g) for g in study["group"]))
    said = f"the batch in one pass per step: {len(study)} runs ({groups})" if len(study) else ""
    if "micro_batches" in pipeline.columns and len(pipeline):
        per_grid: dict[str, set[int]] = {}  # a grid recorded in two groups may cut its batch differently in each
        for _, r in sort_runs(pipeline).iterrows():
            per_grid.setdefault(grid_said(r), set()).add(int(metric(r, "micro_batches")))
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
        batches.setdefault(grid_said(r), batch)
    timed = timed_steps_per_round(data.timed_steps)
    trials_steps: dict[str, list[str]] = {}  # each distinct text, with the groups of the runs it describes
    for _, r in data.runs.iterrows():
        groups = trials_steps.setdefault(rounds_and_steps(r, timed.get(str(r["run"]))), [])
        if str(r.get("group")) not in groups:
            groups.append(str(r.get("group")))
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
        (
            "rounds × steps per run",
            "; ".join(f"{', '.join(groups)}: {text}" for text, groups in trials_steps.items())
            + "; the claims' times are measured on the steps timed without the profiler, where a run has them; the "
            "rounds of all configurations are interleaved",
        ),
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


def timed_steps_per_round(timed: pd.DataFrame) -> dict[str, str]:
    """Per run, the steps each round timed without the profiler (the ``timed_steps`` table's distinct steps per run,
    trial and rank): ``8``, or ``5–8`` where its rounds or ranks timed different counts. Runs without timed steps are
    absent."""
    if timed.empty or not {"run", "trial", "rank", "step"} <= set(timed.columns):
        return {}
    counts = timed.groupby(["run", "trial", "rank"])["step"].nunique()
    out = {}
    for run, n in counts.groupby(level="run"):
        low, high = int(n.min()), int(n.max())
        out[str(run)] = str(low) if low == high else f"{low}–{high}"
    return out


def _steps(n: str) -> str:
    """``8 steps``, ``1 step``, ``5–8 steps``."""
    return f"{n} step" if n == "1" else f"{n} steps"


def rounds_and_steps(run: pd.Series, timed_steps: str | None = None) -> str:
    """A run's rounds and steps: each round times ``timed_steps`` steps without the profiler (the ``timed_steps``
    table's, counted by :func:`timed_steps_per_round`; None: the run has none) over runs.rounds rounds, the steps the
    claims' times are measured on; the first runs.trials rounds then run a traced pass of runs.train_steps steps, the
    warm-up and the profiled ones (runs.steps profiled steps over all traced rounds). A run without timed steps was
    traced in every round: ``3 traced × 6 steps (5 profiled)``."""
    traced, profiled, train = int(metric(run, "trials")), int(metric(run, "steps")), int(metric(run, "train_steps"))
    per_round = profiled // max(traced, 1)
    rounds = run.get("rounds")
    if timed_steps is None or is_missing(rounds):  # recorded before steps were timed without the profiler
        return f"{traced} traced × {train} steps ({per_round} profiled)"
    said = f"{counted(int(rounds), 'round')}, each timing {_steps(timed_steps)} without the profiler"
    per_trace = f"a traced pass of {counted(train, 'step')} ({per_round} of them profiled)"
    if traced == 0:
        return f"{said}, none traced"
    if traced >= int(rounds):
        return f"{said}, every round then running {per_trace}"
    first = "the first round" if traced == 1 else f"the first {traced} rounds"
    return f"{said}, {first} then running {per_trace}"


def rounds_said(runs: Any) -> str:
    """The rounds the configurations were timed in: ``10``, and the pipeline runs' apart by group, each recorded by
    its own command (``10 (the pipeline runs' groups: pipeline 6, pipeline_bubble 10)``)."""

    def listed(rows: Any) -> str:
        return ", ".join(str(n) for n in sorted({_rounds(r) for _, r in rows.iterrows()}))

    study, pipeline = study_runs(runs), pipeline_runs(runs)
    if study.empty or pipeline.empty:
        return listed(runs)
    groups = ", ".join(f"{group} {listed(rows)}" for group, rows in pipeline.groupby("group", sort=True))
    return f"{listed(study)} (the pipeline runs' groups: {groups})"


def _rounds(run) -> int:
    """The rounds a run was timed in (its traced trials, for a run recorded before timed steps)."""
    return int(run["rounds"]) if not is_missing(run.get("rounds")) else int(metric(run, "trials"))


def traced_rounds(runs: pd.DataFrame) -> str:
    """Which of a trial's rounds also run the profiler, for the Method: ``only the first also runs the profiler and
    keeps traces``, ``only the first 2 also run ...`` (runs.trials); runs traced in none are said apart."""
    traced = sorted({int(metric(r, "trials")) for _, r in runs.iterrows()})
    some = [t for t in traced if t > 0]
    if not some:
        return "none also runs the profiler"
    if some == [1]:
        said = "only the first also runs the profiler and keeps traces"
    else:
        said = f"only the first {' or '.join(map(str, some))} also run the profiler and keep traces"
    return said + (" (none in some runs)" if 0 in traced else "")


def _tokens_said(runs: pd.DataFrame) -> str:
    """``1,024 tokens per step for every run``; ``8,192, 32,768 or 262,144 tokens per step`` (runs.tokens_per_step)."""
    values = sorted({int(metric(r, "tokens_per_step")) for _, r in runs.iterrows()})
    if len(values) == 1:
        return f"{values[0]:,} tokens per step for every run"
    listed = ", ".join(f"{v:,}" for v in values[:-1]) + f" or {values[-1]:,}"
    return f"{listed} tokens per step, a run compared only with runs at its own"


def _traced_said(runs: pd.DataFrame) -> str:
    """``the first also traced``; ``the first also traced in 4 runs, none traced in 4`` (runs.trials)."""

    def phrase(traced: int) -> str:
        return "none traced" if traced == 0 else ("the first also traced" if traced == 1 else f"the first {traced} also traced")

    by_traced = runs["trials"].astype(int).value_counts().sort_index(ascending=False)
    if len(by_traced) == 1:
        return phrase(int(by_traced.index[0]))
    return ", ".join(f"{phrase(int(t))} in {counted(int(n), 'run')}" for t, n in by_traced.items())


def like_for_like(everything: ReportData, view: str) -> list[str]:
    """Per hardware profile of the claims table, what its runs train and how they were recorded: our profiles' tokens
    per step (runs.tokens_per_step), rounds (runs.rounds), steps timed without the profiler in each round (the
    ``timed_steps`` table) and traced rounds (runs.trials), ``view`` (the profile the prose describes) first; then the
    original study's runs, which train no tokens (study_runs: its trials and steps)."""
    require_columns(everything.runs, "runs", ("run", "profile", "tokens_per_step", "trials"))
    timed = timed_steps_per_round(everything.timed_steps)
    runs = everything.runs
    parts = []
    for profile in [view, *(p for p in everything.profiles if p != view)]:
        mine = runs[runs["profile"].astype(str) == profile]
        if mine.empty:
            continue
        where = "the summary, sections and figures" if profile == view else "its claims column"
        steps = sorted({timed[r] for r in mine["run"].astype(str) if r in timed}, key=lambda n: int(n.split("–")[0]))
        if steps:
            recorded = (
                f"rounds: {rounds_said(mine)}, each timing {_steps(' or '.join(steps))} without the profiler, "
                f"{_traced_said(mine)}"
            )
        else:
            recorded = f"rounds: {rounds_said(mine)}, each traced, no step timed without the profiler"
        parts.append(f"The runs of {profile} ({where}): {_tokens_said(mine)}; {recorded}.")
    study = study_profile(everything)
    if study is not None:
        own = everything.study_runs[everything.study_runs["profile"].astype(str) == study]
        trials = {int(n) for n in own.groupby("run")["trial"].nunique()}
        steps = " or ".join(str(n) for n in sorted({int(n) for n in own["steps"].dropna()}))
        once = "each recorded once" if trials == {1} else f"recorded in {' or '.join(map(str, sorted(trials)))} trials"
        parts.append(
            f"The original study's runs ({study}, the claims table's first column) train no tokens (their optimizers "
            f"step on random gradients, the full-step runs beside a simulated forward-backward), {once}: judged as "
            f"the study recorded them, over the {steps} steps of a recording, with the verdict unequal work where the "
            "runs compared did different work."
        )
    return parts


# How each claim's 95% interval is made (muon_repro.analysis.claim_measures, estimators and rounds): by claim id, the
# scale its per-round values are averaged on and whether it is the largest of several means (Bonferroni intervals).
# tests/test_report_bookkeeping.py checks that every claim is here and that the tables' intervals have these shapes.
LOG_RATIO = ("comm_time_dp2_tp2", "async_slowdown", "latency_overhead")  # estimators.time_ratio / muon_extra
LARGEST_LOG_RATIO = ("hybrid_beats_pure", "hybrid_survives_pp")  # rounds.closest_rival_ratio
SHARE = ("optimizer_share",)  # estimators.optimizer_share: rounds.share_interval, cut to [0, 1]
LARGEST_SHARE = ("bubble_hides_step",)  # pipeline_claims.bubble_hides_step: rounds.largest_mean_interval, linear
OVER_SEEDS = ("muon_leading_steps",)  # leading_claim: a t interval over seeds, not rounds


def _claims_named(ids: tuple[str, ...]) -> str:
    return "; ".join(BY_ID[i].short if i in BY_ID else i for i in ids)


def claim_rounds(claims: pd.DataFrame) -> str:
    """The rounds the claims table's intervals are over (claims.rounds), per profile, fewest first: ``2 rounds on
    1xH200-nccl and 5 or 10 on cpu-2c-gloo``; "" when no claim has two rounds. (No t factor: the report may not import
    the analysis, whose t quantile that is.)"""
    if "rounds" not in claims.columns:
        return ""
    rounds = pd.to_numeric(claims["rounds"], errors="coerce").astype("float64")  # null: NaN, never compared as NA
    by_profile: dict[str, set[int]] = {}
    for profile, n in zip(claims["profile"].astype(str), rounds):
        if n >= 2:  # NaN (no rounds: the study's steps, the seeds) is not
            by_profile.setdefault(profile, set()).add(int(n))
    ordered = sorted(by_profile.items(), key=lambda pn: (min(pn[1]), pn[0]))
    said = [f"{' or '.join(map(str, sorted(n)))}{' rounds' if i == 0 else ''} on {p}" for i, (p, n) in enumerate(ordered)]
    if len(said) <= 1:
        return "".join(said)
    return ", ".join(said[:-1]) + " and " + said[-1]


def disturbed_rule() -> str:
    """Which rounds every estimator leaves out (:mod:`muon_repro.tables.rounds_rule`), as the Method says it."""
    return (
        f"A round is left out as disturbed where its median step time (slowest rank) lies more than {DISTURBED_MADS:g} "
        f"scaled median absolute deviations and more than {DISTURBED_MIN_SHIFT:.0%} from the median of the run's "
        f"rounds (a run of {MIN_ROUNDS_JUDGED} rounds or more), from every statistic over that run and every pair it is "
        "in: a claim's rounds can be fewer than those recorded (the runs table counts them: disturbed_rounds)."
    )


def interval_scales(everything: ReportData) -> str:
    """Which claims' intervals are on the log scale (ratios of times) and which on the linear one (shares), and the
    one over seeds, in the claims' short names; then, where the tables hold the original study's runs, how their
    intervals over the steps of one recording are made (muon_repro.study.claims)."""
    study = (
        " On the original study's runs, each recorded once, the steps of that recording stand in for rounds: a ratio of "
        "two runs takes Welch's t interval on the logs of each run's per-step values, a share Student's t interval, cut "
        "the same way."
        if study_profile(everything) is not None
        else ""
    )
    return (
        "A ratio of two runs' times is formed per round and averaged on the log scale: the estimate is the geometric mean "
        f"of the rounds' ratios and the interval a t interval on their mean log ratio: {_claims_named(LOG_RATIO)} (this "
        "last shown less 1). A share is averaged on the linear scale: the estimate is the "
        "mean of the rounds' shares and the interval a t interval on that mean, cut to [0, 1] where it runs past, "
        f"since no share lies outside (the claims table marks a cut at 0): {_claims_named(SHARE)}. A claim over "
        "the largest of several takes the largest of their means, with Bonferroni intervals, on the same scales: the "
        f"log ratio to the fastest rival grid ({_claims_named(LARGEST_LOG_RATIO)}), and, linear and uncut, the share of "
        f"a stage's optimizer step that a pipeline step pays after its last backward ({_claims_named(LARGEST_SHARE)}). "
        f"The convergence claim's interval ({_claims_named(OVER_SEEDS)}) is a t interval over seeds, not rounds.{study}"
    )


def one_rank_protocol(everything: ReportData) -> bool:
    """Whether the tables hold a study protocol set recorded on one rank (``--world-size 1``: a study_protocols group
    ending in rundir.ONE_RANK_SUFFIX, such as ``study_protocol_1rank``)."""
    table = everything.study_protocols
    if table.empty or "group" not in table.columns:
        return False
    return bool(table["group"].astype(str).str.endswith(ONE_RANK_SUFFIX).any())


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
