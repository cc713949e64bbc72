"""Every claim the artifact judges, declared once: its text, source, claimed value, unit, region and conditions.

The analysis measures each claim and judges it with :func:`judge`; the cost model prices the levels; the
report and the README write the claims in their own words from these declarations. Nothing else spells a
claim's value, region or level (``tests/test_claims_declared.py`` scans the package for the literals).

A claim's *region* is the set of values that agree with it. With the measured 95% interval, the verdict is

* ``reproduced``: the whole interval lies inside the region;
* ``not reproduced``: the whole interval lies outside it;
* ``inconclusive``: the interval straddles a boundary of the region;
* ``not comparable here``: the runs were not made under the claim's conditions (:class:`MadeUnder`: the
  device and backend, the tokens per step per unit of d_model, one rank per core), so they cannot
  refute or confirm it; the value and interval are still given;
* ``not measured``: no analyzed run can speak to the claim;
* ``unequal work``: the runs compared did different work (on the original study's own runs, their
  collectives; on ours, the only runs a claim could compare were recorded apart), so no ratio of theirs
  can judge the claim.

:func:`judge` applies them in one order on every profile: unequal work, then the claim's conditions, then
:func:`verdict` on its region.

Torch-, numpy- and pandas-free: a run is read through its ``.get`` (a dict or a table row).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from muon_repro.values import finite_number

# A source label: the text before its first colon is its short name in tables (the report, the README).
STUDY = (
    "Wei's study: 'Reproducing and Validating Distributed Muon' (Jen Wei, Hugging Face dataset "
    "bird-of-paradise/muon-distributed-reproducibility), 4 GPUs, PCIe Gen4 x4"
)
PAPER = "paper: Muon is Scalable for LLM Training (arXiv 2502.16982), section 2.3"
MOONSHOT_LEADING = (
    "Moonlight (arXiv 2502.16982): ~2x the computational efficiency of AdamW in its scaling-law experiments; "
    "the leading-steps measure from Moonshot in the thread of NVIDIA/Megatron-LM pull request #1428"
)
ROADMAP = (
    "Wei's study roadmap: 'test Muon inside a full 3D parallelism setup (DP + TP + PP)', asked of its DP2·TP2 result "
    "and of the pipeline bubble"
)

NOT_COMPARABLE = "not comparable here"
UNEQUAL_WORK = "unequal work"  # the compared runs did different work: their ratio cannot judge the claim
VERDICTS = ("reproduced", "not reproduced", "inconclusive", UNEQUAL_WORK, NOT_COMPARABLE, "not measured")
STUDY_MACHINE = "4xRTXA4000-pcie-nccl"  # the shipped profile of the original study's 4 RTX A4000s over PCIe Gen4 x4
LEADING_MIN_SEEDS = 5  # the leading-steps claim's t interval is over at least this many seeds


@dataclass(frozen=True)
class Level:
    """A claimed level of Muon's overhead, at which the cost model finds the tokens per step."""

    value: float  # a fraction: 0.011 is 1.1%
    label: str  # how figures label its line
    metric: str  # the quantity the level is claimed of: "optimizer_share" or "muon_extra" (the cost model's names)

    @property
    def percent(self) -> str:
        """The level as its source writes it: ``1.1%``, ``3%``."""
        return f"{100 * self.value:g}%"


STUDY_SHARE = Level(0.011, "Wei's study ~1.1%", "optimizer_share")  # the original study's optimizer share of the step
PAPER_LATENCY = Level(0.03, "paper 3%", "muon_extra")  # the paper's 1-3% added latency, its upper end
LEVELS = (STUDY_SHARE, PAPER_LATENCY)


def claimed_level(metric: str) -> Level:
    """The level a claim states for ``metric``: a threshold of one quantity is never read at another's level."""
    for level in LEVELS:
        if level.metric == metric:
            return level
    raise ValueError(f"no claim states a level of {metric!r}; declared: {', '.join(lv.metric for lv in LEVELS)}")


def level_of(value: float) -> Level:
    """The declared level ``value`` stands for (a table's ``level`` column, read back as a float)."""
    for level in LEVELS:
        if math.isclose(float(value), level.value, rel_tol=1e-9, abs_tol=1e-12):
            return level
    raise ValueError(f"{value!r} is not a declared level ({', '.join(f'{lv.value:g}' for lv in LEVELS)})")


UnitKind = Literal["ratio", "fraction", "change"]  # ×; a share in %; a signed change in %


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

    def columns(self) -> dict[str, Any]:
        """The region as the claims table's numeric columns (an unbounded side is null)."""
        return {"region_low": self.low, "region_high": self.high, "region_low_open": self.low_open}


def judge(low: float, high: float, region: Region, *, unequal_work: bool, outside: bool) -> str:
    """A claim's verdict, by one precedence on every profile: unequal work first (a ratio of other work cannot
    speak to the optimizers), then the claim's conditions (``outside``), then its region (:func:`verdict`)."""
    if unequal_work:
        return UNEQUAL_WORK
    return NOT_COMPARABLE if outside else verdict(low, high, region)


def verdict(low: float, high: float, region: Region) -> str:
    """The rule shared by every claim (see the module docstring). An infinite end is a one-sided interval (a bound)."""
    if math.isnan(low) or math.isnan(high):
        return "not measured"
    if region.contains(low) and region.contains(high):
        return "reproduced"
    if (region.below(low) and region.below(high)) or (region.above(low) and region.above(high)):
        return "not reproduced"
    return "inconclusive"


@dataclass(frozen=True)
class MadeUnder:
    """The conditions a claim was made under: runs outside them cannot refute or confirm it."""

    text: str
    devices: tuple[str, ...] = ()  # device types ("cuda"); empty: any
    backends: tuple[str, ...] = ()  # process-group backends ("nccl", which also keeps one rank per GPU); empty: any
    min_tokens_per_d_model: float | None = None  # tokens per step per unit of d_model, at least
    one_rank_per_core: bool = False  # a time claim: no more ranks than cores (else wall time follows summed work)
    min_tokens_per_param: float | None = None  # a training claim: tokens trained per model parameter, at least
    min_params: int | None = None  # a training claim: the model's parameters, at least
    min_ranks: int | None = None  # the ranks (GPUs) the claim's runs had, at least: one device has no communication

    def outside(self, run: Mapping[str, Any], ranks_per_core: float | None, quoted: dict[str, float]) -> list[str]:
        """How ``run`` (a runs-table row) differs from these conditions, each difference in a few words as
        ``what it had, not what the claim had`` (empty: it was made under them); the numbers a difference states
        that no table cell holds go into ``quoted``. A condition whose numbers the run did not record is not met
        (``... not recorded``): a run is comparable only where it is shown to be."""
        reasons = []
        device, backend = str(run.get("device")), str(run.get("backend"))
        if (self.devices and device not in self.devices) or (self.backends and backend not in self.backends):
            wanted = " on ".join("/".join(names) for names in (self.backends, self.devices) if names)
            reasons.append(f"{backend} on {device}, not {wanted}")
        if self.min_tokens_per_d_model is not None:
            d_model, tokens = d_model_of(run), finite_number(run.get("tokens_per_step"))
            if not d_model or tokens is None:
                reasons.append("tokens per step per d_model not recorded")
            elif (per_d := tokens / d_model) < self.min_tokens_per_d_model:
                quoted |= {"d_model": d_model, "tokens_per_d_model": per_d}
                reasons.append(f"{per_d:.0f} tokens per step per d_model, not {self.min_tokens_per_d_model:,.0f}+")
        params, trained = finite_number(run.get("params")), finite_number(run.get("tokens_trained"))
        if self.min_tokens_per_param is not None:
            if not params or trained is None:
                reasons.append("tokens trained per parameter not recorded")
            elif (per_param := trained / params) < self.min_tokens_per_param:
                quoted["tokens_per_param"] = per_param
                reasons.append(f"{per_param:.1f} tokens per parameter, not {self.min_tokens_per_param:g}+")
        if self.min_params is not None:
            if params is None:
                reasons.append("the model's parameters not recorded")
            elif params < self.min_params:
                reasons.append(f"{int(params):,} parameters, not {self.min_params:,}+")
        world = finite_number(run.get("world_size"))
        if self.min_ranks is not None:
            if world is None:
                reasons.append("ranks not recorded")
            elif world < self.min_ranks:
                alone = int(world) == 1
                reasons.append(
                    f"{int(world)} rank{'' if alone else 's'} ({'no communication' if alone else 'fewer'}), not {self.min_ranks}+"
                )
        if self.one_rank_per_core and ranks_per_core is not None and ranks_per_core > 1:
            quoted["ranks_per_core"] = ranks_per_core
            reasons.append(f"{ranks_per_core:g} ranks per core, not one per device")
        elif self.one_rank_per_core and ranks_per_core is None and device == "cpu":
            reasons.append("ranks per core not recorded (the host's cores)")
        return reasons


def d_model_of(run: Mapping[str, Any]) -> int | None:
    """The run's model width: the runs table's ``d_model`` (its shape override, else its preset's); for a table
    written before that column, its preset's (None for an unknown preset)."""
    from muon_repro.model_config import PRESETS

    if (width := finite_number(run.get("d_model"))) is not None:
        return int(width)
    preset = PRESETS.get(str(run.get("preset")))
    return int(preset.hidden) if preset is not None else None


ON_GPUS = MadeUnder(
    "4 GPUs, NCCL over PCIe Gen4 x4, one rank per GPU", devices=("cuda",), backends=("nccl",), one_rank_per_core=True, min_ranks=4
)
ANY_MACHINE = "any machine: a count, not a time"  # made_under of a claim without conditions


@dataclass(frozen=True)
class Claim:
    claim_id: str
    claim: str
    source: str
    claimed_value: float | None
    claimed_text: str  # the claim's own wording of its value ("~1.1%", "1–3%")
    unit: str
    unit_kind: UnitKind
    region: Region
    short: str  # the quantity in a few words, for tables and figure panels
    topic: str  # the summary line it belongs to
    made_under: MadeUnder | None = None  # None: holds on any machine (a count of bytes or of state)
    prediction: str | None = None  # the regime_thresholds metric that predicts it under its conditions
    level: Level | None = None  # the level the cost model prices it at
    rule: str | None = None  # a rule of its own, instead of the shared one (:meth:`rule_text`)

    def rule_text(self) -> str:
        """How the verdict is decided, in words."""
        if self.rule is not None:
            return self.rule
        rule = f"reproduced if the 95% interval lies inside {self.region.text()}, not reproduced if outside, else inconclusive"
        if self.made_under is not None:
            rule = f"{NOT_COMPARABLE} unless every run compared was made under the claim's conditions; then {rule}"
        return f"{UNEQUAL_WORK} when the runs compared did different work; else {rule}"  # judge's order


COMM_RATIO = 0.57  # the original study's communication time, Muon over AdamW at DP2·TP2
ASYNC_RATIO = 2.0  # the original study's "~2x slower" with naive async_op=True
# "~2x" (Moonlight's compute efficiency, the study's async slowdown) is read as 1.5x to 2.5x
ABOUT_TWICE = Region(1.5, 2.5)

CLAIMS = (
    Claim(
        claim_id="comm_time_dp2_tp2",
        claim="Muon at DP=2, TP=2 spends 0.57x the communication time of AdamW",
        source=STUDY,
        claimed_value=COMM_RATIO,
        claimed_text="0.57×",
        unit="ratio Muon/AdamW of transfer time per step",
        unit_kind="ratio",
        region=Region(COMM_RATIO * 0.8, COMM_RATIO * 1.2),
        short="communication (transfer) time Muon/AdamW",
        topic="Communication",
        made_under=ON_GPUS,
    ),
    Claim(
        claim_id="optimizer_share",
        claim="The Muon optimizer step is ~1.1% of training time",
        source=STUDY,
        claimed_value=STUDY_SHARE.value,
        claimed_text="~1.1%",
        unit="fraction: Muon's optimizer step time / its training step time",
        unit_kind="fraction",
        region=Region(0.0, 2 * STUDY_SHARE.value),
        short="optimizer share of the step",
        topic="Time",
        made_under=MadeUnder(
            "4 GPUs, NCCL over PCIe Gen4 x4, one rank per GPU; tokens per step unpublished, but a ~1.1% share needs "
            "a few hundred tokens per step per unit of d_model (docs/method.md#regimes)",
            devices=("cuda",),
            backends=("nccl",),
            min_tokens_per_d_model=100.0,
            one_rank_per_core=True,
            min_ranks=4,
        ),
        prediction="optimizer_share",
        level=STUDY_SHARE,
    ),
    Claim(
        claim_id="hybrid_beats_pure",
        claim="DP=2/TP=2 beats pure DP=4 and pure TP=4 (Muon, 4 ranks, same tokens per step)",
        source=STUDY,
        claimed_value=None,
        claimed_text="below 1×",
        unit="ratio of step time, DP2·TP2 over the faster of DP4 and TP4",
        unit_kind="ratio",
        region=Region(None, 1.0),
        short="DP2·TP2 over the faster pure grid",
        topic="Time",
        made_under=ON_GPUS,
    ),
    Claim(
        claim_id="hybrid_survives_pp",
        claim="DP=2/TP=2 stays the fastest 4-rank layout with a PP dimension: it beats PP2·DP2, PP2·TP2 and PP4 (Muon, "
        "same tokens per step, micro-batches of one sequence)",
        source=ROADMAP,
        claimed_value=None,
        claimed_text="at most 1× (a roadmap question)",
        unit="ratio of step time, DP2·TP2 over the fastest of PP2·DP2, PP2·TP2 and PP4",
        unit_kind="ratio",
        region=Region(None, 1.0),
        short="DP2·TP2 over the fastest pipeline grid",
        topic="3-D parallelism",
        made_under=ON_GPUS,
    ),
    Claim(
        claim_id="bubble_hides_step",
        claim="The pipeline bubble could hide Muon's optimizer step: after its last backward a PP4 step pays at most "
        "half of a stage's optimizer step (PP4, 4 ranks)",
        source=ROADMAP,
        claimed_value=0.5,
        claimed_text="at most 0.5× (a roadmap question)",
        unit="ratio, the optimizer time the step pays after the pipeline's last backward over a stage's optimizer step "
        "(the mean over stages; Muon, the deepest pipeline)",
        unit_kind="ratio",
        region=Region(None, 0.5),
        short="Muon's optimizer step paid after the last backward (PP4)",
        topic="3-D parallelism",
        made_under=ON_GPUS,
    ),
    Claim(
        claim_id="async_slowdown",
        claim="Naive async_op=True makes Muon ~2x slower",
        source=STUDY,
        claimed_value=ASYNC_RATIO,
        claimed_text="~2×",
        unit="ratio of step time, naive async over synchronous gathers",
        unit_kind="ratio",
        region=ABOUT_TWICE,
        short="async over sync",
        topic="Time",
        made_under=MadeUnder(
            "4 GPUs, NCCL: async_op=True without CUDA stream management",
            devices=("cuda",),
            backends=("nccl",),
            one_rank_per_core=True,
            min_ranks=4,
        ),
    ),
    Claim(
        claim_id="latency_overhead",
        claim="Distributed Muon adds 1-3% to the end-to-end step time of AdamW",
        source=PAPER,
        claimed_value=PAPER_LATENCY.value,
        claimed_text="1–3%",
        unit="fraction: Muon step time / AdamW step time - 1",
        unit_kind="change",
        region=Region(None, PAPER_LATENCY.value),
        short="Muon step over AdamW step",
        topic="Time",
        made_under=MadeUnder(
            "LLM pretraining on GPU clusters (NCCL) with millions of tokens per step: about 1,000 tokens per step per "
            "unit of d_model or more",
            devices=("cuda",),
            backends=("nccl",),
            min_tokens_per_d_model=1000.0,
            one_rank_per_core=True,
            min_ranks=2,
        ),
        prediction="muon_extra",
        level=PAPER_LATENCY,
    ),
    # Moonlight states compute: AdamW needs ~2x Muon's FLOPs for the same loss, a leading ratio in FLOPs of ~1.
    Claim(
        claim_id="muon_leading_steps",
        claim="Muon reaches AdamW's loss with about half the compute (~2x computational efficiency)",
        source=MOONSHOT_LEADING,
        claimed_value=1.0,
        claimed_text="100% (~2× compute efficiency)",
        unit="fraction: the extra training compute (Moonlight's 6ND accounting: compute in proportion to tokens, for "
        "either optimizer) AdamW needs to reach Muon's loss, (AdamW tokens - Muon tokens) / Muon tokens: on AdamW "
        "runs trained to longer budgets, Muon's final test loss; else Muon's smoothed training loss within runs of "
        "its length (a lower bound when AdamW never reached it)",
        unit_kind="fraction",
        region=Region(ABOUT_TWICE.low - 1, ABOUT_TWICE.high - 1),
        short="extra tokens AdamW needs",
        topic="Convergence",
        made_under=MadeUnder(
            "LLM pretraining as in Moonlight's scaling-law experiments: models of hundreds of millions of parameters "
            "or more (100,000,000 at least here), trained compute-optimally (Chinchilla's ~20 training tokens per "
            "parameter; at least half of that here)",
            min_tokens_per_param=10.0,
            min_params=100_000_000,
        ),
        rule=f"reproduced if the 95% t interval over seeds (at least {LEADING_MIN_SEEDS}) of the extra tokens AdamW "
        "needs (interpolated between AdamW's budgets where it trained longer; else the leading ratio at the end, EWM "
        "alpha 0.05) lies inside [0.5, 1.5], AdamW needing 1.5x to 2.5x Muon's "
        "compute (Moonlight's ~2x, read as the original study's ~2x async slowdown is); not reproduced if it lies "
        "wholly outside, else inconclusive; one-sided, [low, +inf), when the lead on a seed is a lower bound (beyond "
        "AdamW's budgets, or never matched within Muon's steps); (-inf, high] when AdamW reached Muon's loss at Muon's own "
        "length on a seed (its lead at most 0), and no interval when seeds are bounded both ways; "
        f"not measured with fewer than {LEADING_MIN_SEEDS} seeds; not comparable here when the runs trained fewer than 10 "
        "tokens per parameter (the claim is made for compute-optimal training) or the model has fewer than 100,000,000 "
        "parameters (it is made at LLM scale)",
    ),
)
BY_ID = {c.claim_id: c for c in CLAIMS}
TOPICS = tuple(dict.fromkeys(c.topic for c in CLAIMS))


def claim(claim_id: str) -> Claim:
    """The declared claim ``claim_id``; a clear error for an id no declaration has."""
    try:
        return BY_ID[claim_id]
    except KeyError:
        raise ValueError(f"unknown claim {claim_id!r}: the declared claims are {', '.join(BY_ID)}") from None
