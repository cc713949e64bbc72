"""The claims we test, each measured like for like, with a 95% interval, a verdict and its cause.

From the original study, Jen Wei's 'Reproducing and Validating Distributed Muon' (a Hugging Face forum
post and dataset card: 4 GPUs over PCIe Gen4 x4), from the paper (arXiv 2502.16982, section 2.3) and
from Moonlight. Every claim has a *region*: the values that agree with it. With the measured 95%
interval, the verdict is

* ``reproduced``: the whole interval lies inside the region;
* ``not reproduced``: the whole interval lies outside it;
* ``inconclusive``: the interval straddles a boundary of the region;
* ``not comparable here``: the runs were not made under the claim's conditions (:class:`MadeUnder`: the
  device and backend, the tokens per step per unit of d_model, one rank per core), so they cannot
  refute or confirm it; the value and interval are still given, with the cause, and the cost model's
  prediction under the claim's conditions where it makes one;
* ``not measured``: no analyzed run can speak to the claim (the explanation names the runs it needs);
* ``unequal work``: on the original study's own runs (:mod:`muon_repro.study.claims`), the runs compared did
  different work, so their ratio cannot judge the claim; the explanation gives the measured difference.

Intervals are paired over rounds (:mod:`muon_repro.analysis.rounds`): each run reduces to one value
per round, the ratio is formed per round, and the interval is a t interval over rounds. Runs are
compared only when they did the same work (:func:`~muon_repro.analysis.claim_inputs.check_same_work`).

This module holds the claims, their regions and the verdict rule, and builds the claims table;
how each claim is measured is in :mod:`muon_repro.analysis.claim_measures`, on the tables and runs
of :mod:`muon_repro.analysis.claim_inputs`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd

from muon_repro.analysis.claim_inputs import Measurement, ProfileTables
from muon_repro.analysis.claim_measures import MEASURE, threshold_with_range
from muon_repro.analysis.leading_claim import LEADING_MIN_SEEDS
from muon_repro.hardware import UNKNOWN_PROFILE, ordered_profiles, rows_of_profile

# A source label: the text before its first colon is its short name in tables (claims_section, the README).
STUDY = (
    "Wei's study: 'Reproducing and Validating Distributed Muon' (Jen Wei, Hugging Face dataset "
    "bird-of-paradise/muon-distributed-reproducibility), 4 GPUs, PCIe Gen4 x4"
)
PAPER = "paper: Muon is Scalable for LLM Training (arXiv 2502.16982), section 2.3"
MOONSHOT_LEADING = (
    "Moonlight (arXiv 2502.16982): ~2x the computational efficiency of AdamW in its scaling-law experiments; "
    "the leading-steps measure from Moonshot in the PR #1428 thread"
)
ROADMAP = (
    "Wei's study roadmap: 'test Muon inside a full 3D parallelism setup (DP + TP + PP)', asked of its DP2·TP2 result "
    "and of the pipeline bubble"
)
NOT_COMPARABLE = "not comparable here"
UNEQUAL_WORK = "unequal work"  # the compared runs did different work: their ratio cannot judge the claim
VERDICTS = ("reproduced", "not reproduced", "inconclusive", UNEQUAL_WORK, NOT_COMPARABLE, "not measured")
STUDY_MACHINE = "4xRTXA4000-pcie-nccl"  # the shipped profile of the original study's 4 RTX A4000s over PCIe Gen4 x4


@dataclass(frozen=True)
class MadeUnder:
    """The conditions a claim was made under: runs outside them cannot refute or confirm it."""

    text: str
    devices: tuple[str, ...] = ()  # device types ("cuda"); empty: any
    min_tokens_per_d_model: float | None = None  # tokens per step per unit of d_model, at least
    one_rank_per_core: bool = False  # a time claim: no more ranks than cores (else wall time follows summed work)
    min_tokens_per_param: float | None = None  # a training claim: tokens trained per model parameter, at least
    min_ranks: int | None = None  # the ranks (GPUs) the claim's runs had, at least: one device has no communication

    def outside(self, run: pd.Series, ranks_per_core: float | None, quoted: dict[str, float]) -> list[str]:
        """Why ``run`` was not made under these conditions, each reason without the run's name (empty: it was);
        the numbers a reason states that no table cell holds go into ``quoted``."""
        reasons = []
        device = str(run.get("device"))
        if self.devices and device not in self.devices:
            reasons.append(f"ran on {device} with {run.get('backend')}, the claim on {'/'.join(self.devices)}")
        d_model = d_model_of(run)
        tokens = run.get("tokens_per_step")
        if self.min_tokens_per_d_model is not None and d_model and tokens is not None and tokens == tokens:
            per_d = float(tokens) / d_model
            if per_d < self.min_tokens_per_d_model:
                quoted |= {"d_model": d_model, "tokens_per_d_model": per_d}
                reasons.append(
                    f"trained {int(tokens):,} tokens per step at d_model {d_model} ({per_d:.0f} per d_model), "
                    f"the claim at {self.min_tokens_per_d_model:,.0f} or more"
                )
        params, trained = run.get("params"), run.get("tokens_trained")
        if self.min_tokens_per_param is not None and params and trained and trained == trained:
            per_param = float(trained) / float(params)
            if per_param < self.min_tokens_per_param:
                quoted["tokens_per_param"] = per_param
                reasons.append(
                    f"trained {int(trained):,} tokens on {int(params):,} parameters ({per_param:.1f} per parameter), "
                    f"the claim at {self.min_tokens_per_param:g} or more"
                )
        world = run.get("world_size")
        if self.min_ranks is not None and world is not None and world == world and int(world) < self.min_ranks:
            alone = int(world) == 1
            reasons.append(
                f"ran on {int(world)} rank{'' if alone else 's'} ({'no communication' if alone else 'fewer'}), "
                f"the claim on {self.min_ranks} or more"
            )
        if self.one_rank_per_core and ranks_per_core is not None and ranks_per_core > 1:
            quoted["ranks_per_core"] = ranks_per_core
            reasons.append(f"ran {ranks_per_core:g} ranks per core, so wall time follows the work summed over ranks")
        return reasons


def d_model_of(run: pd.Series) -> int | None:
    """The run's model width, from its preset (None for an unknown preset)."""
    from muon_repro.model_config import PRESETS

    preset = PRESETS.get(str(run.get("preset")))
    return int(preset.hidden) if preset is not None else None


ON_GPUS = MadeUnder("4 GPUs, NCCL over PCIe Gen4 x4, one rank per GPU", devices=("cuda",), one_rank_per_core=True, min_ranks=4)


@dataclass(frozen=True)
class Region:
    """The values that agree with a claim: ``low < x`` (or ``<=``) and ``x <= high``; None is unbounded."""

    low: float | None
    high: float | None
    low_open: bool = False

    def contains(self, x: float) -> bool:
        above = self.low is None or (x > self.low if self.low_open else x >= self.low)
        return above and (self.high is None or x <= self.high)

    def below(self, x: float) -> bool:
        """Whether ``x`` lies below the region."""
        return self.low is not None and (x <= self.low if self.low_open else x < self.low)

    def above(self, x: float) -> bool:
        return self.high is not None and x > self.high

    def text(self) -> str:
        lo = "(-inf" if self.low is None else ("(" if self.low_open else "[") + f"{self.low:g}"
        return f"{lo}, {'+inf)' if self.high is None else f'{self.high:g}]'}"


def verdict(low: float, high: float, region: Region) -> str:
    """The rule shared by every claim (see the module docstring)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "not measured"
    if region.contains(low) and region.contains(high):
        return "reproduced"
    if (region.below(low) and region.below(high)) or (region.above(low) and region.above(high)):
        return "not reproduced"
    return "inconclusive"


@dataclass(frozen=True)
class Claim:
    claim_id: str
    claim: str
    source: str
    claimed_value: float | None
    unit: str
    region: Region
    made_under: MadeUnder | None = None  # None: holds on any machine (a count of bytes or of state)
    prediction: str | None = None  # the regime_thresholds metric that predicts it under its conditions


NOT_MEASURED = float("nan")

CLAIMS = (
    Claim(
        claim_id="comm_time_dp2_tp2",
        claim="Muon at DP=2, TP=2 spends 0.57x the communication time of AdamW",
        source=STUDY,
        claimed_value=0.57,
        unit="ratio Muon/AdamW of transfer time per step",
        region=Region(0.57 * 0.8, 0.57 * 1.2),
        made_under=ON_GPUS,
    ),
    Claim(
        claim_id="optimizer_share",
        claim="The Muon optimizer step is ~1.1% of training time",
        source=STUDY,
        claimed_value=0.011,
        unit="fraction: optimizer step time / training step time (Muon, DP=2, TP=2)",
        region=Region(0.0, 0.022),
        made_under=MadeUnder(
            "4 GPUs, NCCL over PCIe Gen4 x4, one rank per GPU; tokens per step unpublished, but a ~1.1% share needs "
            "a few hundred tokens per step per unit of d_model (docs/method.md#regimes)",
            devices=("cuda",),
            min_tokens_per_d_model=100.0,
            one_rank_per_core=True,
            min_ranks=4,
        ),
        prediction="optimizer_share",
    ),
    Claim(
        claim_id="hybrid_beats_pure",
        claim="DP=2/TP=2 beats pure DP=4 and pure TP=4 (Muon, 4 ranks, same tokens per step)",
        source=STUDY,
        claimed_value=None,
        unit="ratio of step time, DP2·TP2 over the faster of DP4 and TP4",
        region=Region(None, 1.0),
        made_under=ON_GPUS,
    ),
    Claim(
        claim_id="hybrid_survives_pp",
        claim="DP=2/TP=2 stays the fastest 4-rank layout with a PP dimension: it beats PP2·DP2, PP2·TP2 and PP4 (Muon, "
        "same tokens per step, micro-batches of one sequence)",
        source=ROADMAP,
        claimed_value=None,
        unit="ratio of step time, DP2·TP2 over the fastest of PP2·DP2, PP2·TP2 and PP4",
        region=Region(None, 1.0),
        made_under=ON_GPUS,
    ),
    Claim(
        claim_id="bubble_hides_step",
        claim="The pipeline bubble could hide Muon's optimizer step: every stage idles at least as long as its "
        "optimizer step takes (PP4, 4 ranks)",
        source=ROADMAP,
        claimed_value=1.0,
        unit="ratio, bubble over optimizer step on the stage where it is smallest (Muon, the deepest pipeline)",
        region=Region(1.0, None),
        made_under=ON_GPUS,
    ),
    Claim(
        claim_id="async_slowdown",
        claim="Naive async_op=True makes Muon ~2x slower",
        source=STUDY,
        claimed_value=2.0,
        unit="ratio of step time, naive async over synchronous gathers",
        region=Region(1.5, 2.5),
        made_under=MadeUnder(
            "4 GPUs, NCCL: async_op=True without CUDA stream management",
            devices=("cuda",),
            one_rank_per_core=True,
            min_ranks=4,
        ),
    ),
    Claim(
        claim_id="latency_overhead",
        claim="Distributed Muon adds 1-3% to the end-to-end step time of AdamW",
        source=PAPER,
        claimed_value=0.03,
        unit="fraction: Muon step time / AdamW step time - 1",
        region=Region(None, 0.03),
        made_under=MadeUnder(
            "LLM pretraining on GPU clusters (NCCL) with millions of tokens per step: about 1,000 tokens per step per "
            "unit of d_model or more",
            devices=("cuda",),
            min_tokens_per_d_model=1000.0,
            one_rank_per_core=True,
            min_ranks=2,
        ),
        prediction="muon_extra",
    ),
    # Moonlight states compute: AdamW needs ~2x Muon's FLOPs for the same loss, a leading ratio in FLOPs of ~1.
    # "~2x" is read as 1.5x to 2.5x, as for the original study's ~2x async slowdown.
    Claim(
        claim_id="muon_leading_steps",
        claim="Muon reaches AdamW's loss with about half the compute (~2x computational efficiency)",
        source=MOONSHOT_LEADING,
        claimed_value=1.0,
        unit="fraction: leading ratio in FLOPs at the end, the extra compute AdamW needs to reach Muon's smoothed training "
        "loss, (AdamW FLOPs - Muon FLOPs) / Muon FLOPs",
        region=Region(0.5, 1.5),
        made_under=MadeUnder(
            "compute-optimal training, as in Moonlight's scaling-law experiments (Chinchilla's ~20 training tokens per "
            "parameter; at least half of that here)",
            min_tokens_per_param=10.0,
        ),
    ),
)
RULES = {
    "muon_leading_steps": f"reproduced if the 95% t interval over seeds (at least {LEADING_MIN_SEEDS}) of the leading ratio "
    "in FLOPs at the end (EWM alpha 0.05) lies inside [0.5, 1.5], AdamW needing 1.5x to 2.5x Muon's compute (Moonlight's "
    "~2x, read as the original study's ~2x async slowdown is); not reproduced if it lies wholly outside, else inconclusive; not "
    f"measured with fewer than {LEADING_MIN_SEEDS} seeds; not comparable here when the runs trained fewer than 10 tokens "
    "per parameter (the claim is made for compute-optimal training)",
}


def claims_table(
    runs: pd.DataFrame,
    steps: pd.DataFrame,
    ranks: pd.DataFrame,
    phases: pd.DataFrame,
    *,
    regimes: pd.DataFrame | None = None,
    thresholds: pd.DataFrame | None = None,
    convergence: dict[str, pd.DataFrame] | None = None,
    environment: pd.DataFrame | None = None,
    predictions: pd.DataFrame | None = None,
    timed: pd.DataFrame | None = None,
    study: dict[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """One row per claim in :data:`CLAIMS` and hardware profile, measured on that profile's rows of the tables
    (never across profiles), with its interval, verdict and explanation; the profile with most runs first.
    ``regimes`` and ``thresholds``: the regime sweep and the cost model's thresholds, cited in the time claims'
    explanations when given; ``convergence``: the ``convergence`` and ``leading_steps`` tables (the
    leading-steps claim is not measured without them); ``environment``: the runs' machines (ranks per core);
    ``predictions``: the cost model against the recorded runs (its validated error, quoted with its predictions);
    ``timed``: the steps timed without the profiler, which the time claims use for the runs that have them;
    ``study``: the study tables (:mod:`muon_repro.study.tables`), whose claims rows come first: the claims judged
    on the runs they were made on."""
    from muon_repro.study.claims import study_claim_rows

    empty = pd.DataFrame()
    convergence = convergence or {}
    regimes = empty if regimes is None else regimes
    thresholds = empty if thresholds is None else thresholds
    environment = empty if environment is None else environment
    predictions = empty if predictions is None else predictions
    timed = empty if timed is None else timed
    conv, lead = convergence.get("convergence"), convergence.get("leading_steps")
    counts = {str(p): int(n) for p, n in runs["profile"].value_counts().items()} if "profile" in runs.columns else {}
    for other in (regimes, conv):
        for p in _profiles_of(other):
            counts.setdefault(p, 0)
    rows = study_claim_rows(study or {})
    for profile in ordered_profiles(counts) or ([] if rows else [UNKNOWN_PROFILE]):
        mine = rows_of_profile(runs, profile)
        t = ProfileTables(
            mine.astype(object).where(mine.notna(), None),
            *(rows_of_profile(df, profile) for df in (steps, ranks, phases, regimes, thresholds)),
            rows_of_profile(conv, profile),
            rows_of_profile(lead, profile),
            rows_of_profile(environment, profile),
            rows_of_profile(predictions, profile),
            rows_of_profile(timed, profile),
        )
        rows += _claim_rows(t, profile)
    return pd.DataFrame(rows)


def _profiles_of(df: pd.DataFrame | None) -> list[str]:
    return [str(p) for p in df["profile"].dropna().unique()] if df is not None and "profile" in df.columns else []


def _claim_rows(t: ProfileTables, profile: str) -> list[dict]:
    rows = []
    for c in CLAIMS:
        m = MEASURE[c.claim_id](t)
        if isinstance(m, Measurement):
            measured = m
        else:  # the reason it could not be measured
            measured = Measurement(NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, "", f"Not measured: {m}.")
        quoted = dict(measured.quoted)
        outside = _outside(c, measured, t, quoted)
        rule = f"reproduced if the 95% interval lies inside {c.region.text()}, not reproduced if outside, else inconclusive"
        if c.made_under is not None:
            rule = f"{NOT_COMPARABLE} unless every run compared was made under the claim's conditions; then {rule}"
        explanation = measured.explanation
        if outside:
            explanation = f"Not comparable here: {'; '.join(outside)}. {_prediction(c, t, quoted)}Measured here: {explanation}"
        rows.append(
            {
                "claim_id": c.claim_id,
                "profile": profile,
                "claim": c.claim,
                "source": c.source,
                "claimed_value": c.claimed_value,
                "region": c.region.text(),
                "made_under": c.made_under.text if c.made_under is not None else "any machine: a count, not a time",
                "measured_value": measured.value,
                "measured_low": measured.low,
                "measured_high": measured.high,
                "unit": c.unit,
                "conditions": measured.conditions + _timing_note(c, measured, t),
                "verdict": NOT_COMPARABLE if outside else verdict(measured.low, measured.high, c.region),
                "explanation": explanation,
                "quoted": json.dumps({k: round(float(v), 12) for k, v in sorted(quoted.items())}),
                "rule": RULES.get(c.claim_id, rule),
                "study_method_value": None,
                "study_method_rebuilt": None,
                "equal_work": None,
                "work_difference": "",
            }
        )
    return rows


def _timing_note(claim: Claim, measured: Measurement, t: ProfileTables) -> str:
    """For a time claim: whether its times were taken without the profiler, which costs Muon and AdamW unequally."""
    if claim.made_under is None or not measured.runs:
        return ""
    if claim.claim_id == "comm_time_dp2_tp2" and any(str(r.get("backend")).lower() == "nccl" for r in measured.runs):
        return "; communication from the traced NCCL kernels (timed NCCL calls return at launch), one median per round"
    if t.unprofiled(*measured.runs):
        return "; times from the steps timed without the profiler, one median per round"
    return "; times from the profiled steps (these runs have no steps timed without the profiler), one median per round"


def _outside(claim: Claim, measured: Measurement, t: ProfileTables, quoted: dict[str, float]) -> list[str]:
    """Why the measurement's runs were not made under the claim's conditions (empty: they were, or it has none)."""
    subjects = measured.runs or ((measured.subject,) if measured.subject is not None else ())
    if claim.made_under is None or not subjects:
        return []
    runs_of: dict[str, list[str]] = {}  # reason -> the runs it applies to, in order
    for run in subjects:
        for reason in claim.made_under.outside(run, t.ranks_per_core(run), quoted):
            runs_of.setdefault(reason, []).append(str(run["run"]))
    return [f"{' and '.join(runs)} {reason}" for reason, runs in runs_of.items()]


def _prediction(claim: Claim, t: ProfileTables, quoted: dict[str, float]) -> str:
    """What the cost model predicts under the claim's conditions (the original study's hardware), with its validated error."""
    th = t.thresholds
    if claim.prediction is None or th.empty or "metric" not in th.columns:
        return "The cost model makes no prediction of this quantity. "
    level = claim.claimed_value if claim.claim_id == "optimizer_share" else claim.region.high
    # the shipped profile, or (a profile of one device measured alone) its interconnect with that device's kernel rates
    on_study = th["machine"].astype(str).str.split("+").str[0] == STUDY_MACHINE
    picks = th[
        (th["metric"] == claim.prediction)
        & on_study
        & (th["level"].astype(float).round(4) == round(float(level), 4))
        & th["tokens_per_step"].notna()
    ]
    if picks.empty:
        return "The cost model makes no prediction of this quantity on the original study's hardware. "
    said = "; ".join(
        f"{row.model} (d_model {int(row.d_model)}) at {threshold_with_range(row)} tokens per step "
        f"({float(row.tokens_per_d_model):.0f} per d_model)"
        for row in picks.itertuples()
    )
    machines = sorted(set(picks["machine"].astype(str)))
    where = STUDY_MACHINE if machines == [STUDY_MACHINE] else f"{', '.join(machines)}: its links, this device's kernel rates"
    return (
        f"Predicted by the cost model on the original study's 4 GPUs ({where}, DP2·TP2): {claim.prediction} falls to "
        f"{float(level):.1%} at {said}{_validated_error(t, quoted)}. "
    )


def _validated_error(t: ProfileTables, quoted: dict[str, float]) -> str:
    """The cost model's median |error| against this profile's recorded runs (predictions table)."""
    p = t.predictions
    if p.empty or "step_rel_error" not in p.columns:
        return ""
    step = p["step_rel_error"].astype("float64").abs().median()
    opt = p["optimizer_rel_error"].astype("float64").abs().median()
    quoted |= {"predicted_runs": len(p), "step_median_abs_error": step, "optimizer_median_abs_error": opt}
    return (
        f", a model whose median |error| against this machine's {len(p)} recorded runs is {step:.0%} on the step, "
        f"{opt:.0%} on the optimizer"
    )
