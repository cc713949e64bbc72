"""The claims we test, each measured like for like, with a 95% interval, a verdict and its cause.

From the seed (a Hugging Face forum post and dataset card: 4 GPUs over PCIe Gen4 x4) and from
the paper (arXiv 2502.16982, section 2.3). Every claim has a *region*: the values that agree with
it. With the measured 95% interval (two-level bootstrap over trials and steps, see
:mod:`muon_repro.analysis.bootstrap`), the verdict is

* ``reproduced``: the whole interval lies inside the region;
* ``not reproduced``: the whole interval lies outside it;
* ``inconclusive``: the interval straddles a boundary of the region;
* ``not measured``: no analyzed run can speak to the claim (the explanation names the runs it needs).

The same rule for every claim and every machine: a time claim made on GPUs that does not hold
here is ``not reproduced`` here, and the explanation names the measured cause (for example how
Newton-Schulz FLOPs compare with forward+backward FLOPs at these tokens per step). Runs are
compared only when they did the same work (:func:`~muon_repro.analysis.claim_inputs.check_same_work`).

This module holds the claims, their regions and the verdict rule, and builds the claims table;
how each claim is measured is in :mod:`muon_repro.analysis.claim_measures`, on the tables and runs
of :mod:`muon_repro.analysis.claim_inputs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from muon_repro.analysis.claim_inputs import ProfileTables
from muon_repro.analysis.claim_measures import MEASURE, Measurement
from muon_repro.hardware import UNKNOWN_PROFILE, ordered_profiles, rows_of_profile

SEED = "seed: HF forum post and dataset card (bird-of-paradise/muon-distributed-reproducibility), 4 GPUs, PCIe Gen4 x4"
PAPER = "paper: Muon is Scalable for LLM Training (arXiv 2502.16982), section 2.3"
MOONSHOT_LEADING = "Moonshot / Moonlight (arXiv 2502.16982; the PR #1428 thread's 'Muon leading steps'), modded-nanogpt's records"
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not measured")


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


NOT_MEASURED = float("nan")

CLAIMS = (
    Claim(
        claim_id="comm_time_dp2_tp2",
        claim="Muon at DP=2, TP=2 spends 0.57x the communication time of AdamW",
        source=SEED,
        claimed_value=0.57,
        unit="ratio Muon/AdamW of transfer time per step",
        region=Region(0.57 * 0.8, 0.57 * 1.2),
    ),
    Claim(
        claim_id="optimizer_share",
        claim="The Muon optimizer step is ~1.1% of training time",
        source=SEED,
        claimed_value=0.011,
        unit="fraction: optimizer step time / training step time (Muon, DP=2, TP=2)",
        region=Region(0.0, 0.022),
    ),
    Claim(
        claim_id="state_memory",
        claim="Muon keeps 50% less optimizer state than AdamW",
        source=SEED,
        claimed_value=0.5,
        unit="ratio Muon/AdamW of the state for the matrices Muon manages, per rank",
        region=Region(0.45, 0.55),
    ),
    Claim(
        claim_id="hybrid_beats_pure",
        claim="DP=2/TP=2 beats pure DP=4 and pure TP=4 (Muon, 4 ranks, same tokens per step)",
        source=SEED,
        claimed_value=None,
        unit="ratio of step time, DP2·TP2 over the faster of DP4 and TP4",
        region=Region(None, 1.0),
    ),
    Claim(
        claim_id="async_slowdown",
        claim="Naive async_op=True makes Muon ~2x slower",
        source=SEED,
        claimed_value=2.0,
        unit="ratio of step time, naive async over synchronous gathers",
        region=Region(1.5, 2.5),
    ),
    Claim(
        claim_id="comm_bytes_ratio",
        claim="Distributed Muon communicates (1, 1.25] times the bytes of ZeRO-1 AdamW (DP group, optimizer traffic)",
        source=PAPER,
        claimed_value=1.25,
        unit="ratio Muon/AdamW of the bytes a rank sends per step on the DP group",
        region=Region(1.0, 1.25, low_open=True),
    ),
    Claim(
        claim_id="latency_overhead",
        claim="Distributed Muon adds 1-3% to the end-to-end step time of AdamW",
        source=PAPER,
        claimed_value=0.03,
        unit="fraction: Muon step time / AdamW step time - 1",
        region=Region(None, 0.03),
    ),
    Claim(
        claim_id="muon_leading_steps",
        claim="Muon reaches AdamW's loss in fewer steps",
        source=MOONSHOT_LEADING,
        claimed_value=None,
        unit="fraction: leading ratio at the end, the extra steps AdamW needs to reach Muon's smoothed training loss, "
        "(AdamW step - Muon step) / Muon step",
        region=Region(0.0, None, low_open=True),
    ),
)
RULES = {
    "muon_leading_steps": "reproduced if the leading ratio at the end is above 0 for every seed "
    "(the interval is the range over seeds, at least 2), not reproduced if at or below 0 for every seed, else inconclusive",
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
) -> pd.DataFrame:
    """One row per claim in :data:`CLAIMS` and hardware profile, measured on that profile's rows of the tables
    (never across profiles), with its interval, verdict and explanation; the profile with most runs first.
    ``regimes`` and ``thresholds``: the regime sweep and the cost model's thresholds, cited in the time claims'
    explanations when given; ``convergence``: the ``convergence`` and ``leading_steps`` tables (the
    leading-steps claim is not measured without them)."""
    empty = pd.DataFrame()
    convergence = convergence or {}
    regimes = empty if regimes is None else regimes
    thresholds = empty if thresholds is None else thresholds
    conv, lead = convergence.get("convergence"), convergence.get("leading_steps")
    counts = {str(p): int(n) for p, n in runs["profile"].value_counts().items()} if "profile" in runs.columns else {}
    for other in (regimes, conv):
        for p in _profiles_of(other):
            counts.setdefault(p, 0)
    rows = []
    for profile in ordered_profiles(counts) or [UNKNOWN_PROFILE]:
        mine = rows_of_profile(runs, profile)
        t = ProfileTables(
            mine.astype(object).where(mine.notna(), None),
            *(rows_of_profile(df, profile) for df in (steps, ranks, phases, regimes, thresholds)),
            rows_of_profile(conv, profile),
            rows_of_profile(lead, profile),
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
        rule = f"reproduced if the 95% interval lies inside {c.region.text()}, not reproduced if outside, else inconclusive"
        rows.append(
            {
                "claim_id": c.claim_id,
                "profile": profile,
                "claim": c.claim,
                "source": c.source,
                "claimed_value": c.claimed_value,
                "region": c.region.text(),
                "measured_value": measured.value,
                "measured_low": measured.low,
                "measured_high": measured.high,
                "unit": c.unit,
                "conditions": measured.conditions,
                "verdict": verdict(measured.low, measured.high, c.region),
                "explanation": measured.explanation,
                "rule": RULES.get(c.claim_id, rule),
            }
        )
    return rows
