"""How the convergence claim ("Muon reaches AdamW's loss with about half the compute") is measured: the extra
tokens AdamW needs to reach Muon's loss, in Moonlight's unit (6ND: training compute in proportion to tokens, the
same for either optimizer).

The claim is judged on one configuration (convergence group) per profile: one trained inside the claim's
conditions (tokens per parameter, parameters) when there is one, else one trained compute-optimally, else the one
closest to them. Where AdamW was trained to
longer budgets (:mod:`muon_repro.analysis.budget_match`), the lead is measured on complete schedules; else it is
the leading ratio at the end of the smoothed training-loss curves, from the leading_steps table's summaries, a
lower bound when AdamW never reached Muon's final loss. The lead counting Newton-Schulz's FLOPs as compute too is
stated apart.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from muon_repro.analysis.claim_inputs import Measurement, ProfileTables, is_missing
from muon_repro.claims import LEADING_MIN_SEEDS, claim
from muon_repro.values import counted


def leading_steps_claim(t: ProfileTables) -> Measurement | str:
    """The extra tokens AdamW needs to reach Muon's loss (Moonlight's 6ND unit), mean over seeds and t interval, on
    the configuration :func:`claim_group` picks: from budget_match where AdamW trained longer budgets, else the
    leading ratio at the end from the leading_steps table's summaries (at equal tokens per step, the lead in steps).
    Every number the explanation states is a value of those tables."""
    from muon_repro.analysis.convergence import HEADLINE_ALPHA

    lead, conv = t.leading, t.convergence
    if lead is None or conv is None or lead.empty:
        return (
            "no pair of Muon and AdamW convergence runs at their best learning rates with one seed; "
            "run `muon-repro converge` (then `muon-repro analyze`)"
        )
    group = claim_group(conv)
    conv, lead = _of_group(conv, group), _of_group(lead, group)
    budget = _of_group(t.budget, group) if t.budget is not None and len(t.budget) else pd.DataFrame()
    head = lead[lead["alpha"].astype(float) == HEADLINE_ALPHA]
    if head.empty or _seeds(head.iloc[0]) == 0:
        return "AdamW never reached any smoothed loss of Muon's run, or the curves are empty"
    first = head.iloc[0]
    tokens = conv.groupby("optimizer")["tokens_per_step"].unique()
    if any(len(t) != 1 for t in tokens) or len({int(t[0]) for t in tokens}) != 1:
        return "the Muon and AdamW convergence runs trained different tokens per step: a lead in steps is not one in tokens"
    if len(budget):
        value, low, high, seeds, explanation = _budget_lead(budget, head)
    else:
        value, low, high = _summary(first, "leading_ratio")
        if np.isfinite(low) and np.isnan(high):
            high = float("inf")  # the table's null high end: the seeds' leads are lower bounds, the interval one-sided
        seeds = int(first["seeds"])
        explanation = _leading_cause(head, seeds)
    if seeds < LEADING_MIN_SEEDS:  # too few seeds for the claim's interval: not measured, the values still given
        low = high = float("nan")
    if seeds < LEADING_MIN_SEEDS:
        explanation += f" Too few seeds for the claim's interval: run `muon-repro converge --seeds {LEADING_MIN_SEEDS}`."
    best = conv[conv["best_lr"].fillna(False).astype(bool) & (conv["optimizer"] == "muon")]
    best = best[best["steps"] == best["steps"].max()]  # Muon's long runs (the sweep may be shorter; AdamW's budgets longer)
    sweep = conv[conv["sweep"].fillna(False).astype(bool)]
    row = best.iloc[0]
    budgets = (
        f"; AdamW also trained to {', '.join(f'{r:g}x' for r in sorted(set(budget['budget_ratio'].astype(float))) if r > 1)} "
        "Muon's steps, each its own schedule"
        if len(budget)
        else ""
    )
    conditions = (
        f"{conv['run'].nunique()} convergence runs ({group}) on {row['corpus']}: "
        f"a {sweep['lr'].nunique() if len(sweep) else 0}-value learning-rate sweep of "
        f"{int(sweep['steps'].max()) if len(sweep) else 0} steps chosen on the validation loss, "
        f"then {int(row['steps'])} steps x {int(row['tokens_per_step'])} tokens, "
        f"{int(row['params']):,} parameters, dp={int(row['dp'])} tp={int(row['tp'])} on {row['backend']}; "
        f"{counted(seeds, 'seed')} at the best learning rates; test loss on the test split{budgets}"
    )
    trained = pd.Series(
        {
            "run": f"the {int(row['steps'])}-step convergence runs",
            "params": int(row["params"]),
            "tokens_trained": int(row["steps"]) * int(row["tokens_per_step"]),
        }
    )
    return Measurement(value, low, high, conditions, explanation, subject=trained)


def claim_group(conv: pd.DataFrame) -> str:
    """The configuration (convergence ``group``) the claim is judged on: among those trained inside its conditions
    (Muon's long runs at least the claim's tokens per parameter, a model of at least its parameters), the one with
    most seeds; else among those trained compute-optimally (the tokens per parameter alone), the one with most
    seeds; else the one with most seeds and tokens per parameter."""
    made_under = claim("muon_leading_steps").made_under
    need = made_under.min_tokens_per_param or 0.0
    best = conv[conv["best_lr"].fillna(False).astype(bool) & (conv["optimizer"] == "muon")]
    ranked = []
    for group, rows in (best if len(best) else conv).groupby("group"):
        rows = rows[rows["steps"] == rows["steps"].max()]
        first = rows.iloc[0]
        trained = int(first["steps"]) * int(first["tokens_per_step"])
        per_param = trained / float(first["params"]) if first["params"] else 0.0
        inside = not made_under.outside({"params": first["params"], "tokens_trained": trained}, None, {})
        ranked.append((inside, per_param >= need, rows["seed"].nunique(), per_param, str(group)))
    return max(ranked)[-1]


def _of_group(table: pd.DataFrame, group: str) -> pd.DataFrame:
    return table[table["group"] == group].reset_index(drop=True)


def _budget_lead(budget: pd.DataFrame, head: pd.DataFrame) -> tuple[float, float, float, int, str]:
    """The lead measured on complete schedules (budget_match's summary over seeds), its seeds, and the explanation:
    where AdamW's budgets bracketed Muon's final loss, and the within-run curves' lead beside it."""
    from muon_repro.analysis.convergence import HEADLINE_ALPHA

    first = budget.iloc[0]
    seeds, censored = int(first["seeds"]), int(first["censored_seeds"])
    value, low, high = _triple(first, "lead")
    per_seed = budget.drop_duplicates("seed")
    above, below = per_seed[per_seed["censored"] == "above"], per_seed[per_seed["censored"] == "below"]
    if len(above) and not len(below):
        high = float("inf")  # a lead beyond the largest budget: the interval is one-sided
    if len(below) and not len(above):
        low = float("-inf")  # AdamW reached Muon's loss at Muon's own length: the lead is at most 0, one-sided below
    said = (
        f"AdamW's final test loss over its budgets reached Muon's on {seeds - censored} of {seeds} seeds, "
        f"interpolated in log tokens. Within runs of Muon's length the smoothed curves' lead at the end (EWM alpha "
        f"{HEADLINE_ALPHA:g}) is {_with_interval(*_summary(head.iloc[0], 'leading_ratio'))}."
    )
    largest = f"{float(above['lead_bound'].max()) + 1:g}x" if len(above) else ""
    if len(above) and len(below):
        said += (
            f" Censored both ways ({counted(len(above), 'seed')} beyond {largest}, {len(below)} reached at Muon's length): "
            "no mean, no interval."
        )
    elif len(above):
        said += (
            f" On {counted(len(above), 'seed')} no budget up to {largest} reached it: counted at that bound, only the "
            "mean is a lower bound."
        )
    elif len(below):
        said += (
            f" On {counted(len(below), 'seed')} AdamW reached it at Muon's own length: counted at a lead of 0, only the "
            "mean is an upper bound."
        )
    return value, low, high, seeds, said


def _seeds(row: pd.Series) -> int:
    """The seeds a leading_steps row's end_* summaries are over (0 when null)."""
    return 0 if is_missing(row["seeds"]) else int(row["seeds"])


def _summary(row: pd.Series, column: str) -> tuple[float, float, float]:
    """The leading_steps summary over seeds of a ratio (end_<column>_mean, _low, _high)."""
    return _triple(row, f"end_{column}")


def _triple(row: pd.Series, prefix: str) -> tuple[float, float, float]:
    """``<prefix>_mean``, ``_low`` and ``_high`` of a leading_steps row as floats, NaN where null."""
    values = (row[f"{prefix}_{k}"] for k in ("mean", "low", "high"))
    return tuple(float("nan") if is_missing(v) else float(v) for v in values)


def _with_interval(mean: float, low: float, high: float) -> str:
    """``+0.611 [+0.555, +0.667]``, or ``+0.611 [+0.555, +inf)`` where the seeds' ratios are lower bounds (the
    table's high end null): the leading_steps table's numbers as they are written there."""
    if np.isfinite(low) and np.isfinite(high):
        return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"
    if np.isfinite(low):
        return f"{mean:+.3f} [{low:+.3f}, +inf)"
    return f"{mean:+.3f} (no interval)"


def _leading_cause(head: pd.DataFrame, seeds: int) -> str:
    """The lead in tokens said as the lead in steps, the lead in FLOPs with Newton-Schulz counted beside it, and on how
    many seeds it is a lower bound (:func:`~muon_repro.analysis.convergence.end_ratio`'s flag)."""
    from muon_repro.analysis.convergence import HEADLINE_ALPHA

    first = head.iloc[0]
    bounded = _bounded_seeds(head)
    said = (
        f"At EWM alpha {HEADLINE_ALPHA:g}, equal tokens per step: the lead in tokens is the lead in steps (mean over "
        f"{seeds} seeds). Counting Newton-Schulz as compute too, Muon's step costs "
        f"{float(first['muon_gflop_per_step']):.2f} GFLOP against AdamW's {float(first['adamw_gflop_per_step']):.2f}, "
        f"and the lead in FLOPs is {_with_interval(*_summary(first, 'leading_ratio_flops'))}."
    )
    paired = head["seed"].nunique()  # either case below makes the interval one-sided (convergence._bounded_below)
    if bounded:
        said += f" A lower bound, one-sided, on {bounded} of {paired} seeds: AdamW never reached Muon's last loss."
    if paired > seeds:
        left_out = counted(paired - seeds, "seed")
        said += f" {left_out} left out, one-sided: AdamW reached none of Muon's smoothed losses."
    return said


def _bounded_seeds(head: pd.DataFrame) -> int:
    """The seeds whose lead at the end is a lower bound (:func:`~muon_repro.analysis.convergence.end_ratio`'s flag):
    AdamW reached some of Muon's smoothed losses, not its last. A seed where it reached none has no lead at all."""
    from muon_repro.analysis.convergence import end_ratio

    ends = (end_ratio(g.sort_values("muon_step")) for _, g in head.groupby("seed"))
    return sum(bool(flag) and np.isfinite(ratio) for ratio, _, flag in ends)
