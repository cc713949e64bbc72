"""How many training tokens AdamW needs to reach Muon's final test loss, measured on complete schedules.

``muon-repro converge --adamw-budgets 1.5,2,3`` trains AdamW for those multiples of Muon's steps, each with its own
warm-up and cosine schedule, at the learning rate its own sweep (seed 0, validation loss) finds best for that
budget, as Muon's is best for its length. For each seed, AdamW's final test loss over its budgets (Muon's
own length among them) brackets Muon's final test loss; the tokens AdamW needs are interpolated between the two
bracketing budgets, linear in the loss and in log tokens (loss falls about linearly in log compute over such a
span). The lead is those tokens over Muon's, less 1: Moonlight's compute-efficiency ratio in its 6ND unit, since
the two optimizers' forward and backward cost the same per token.

This replaces the leading-steps curves' lower bound when AdamW never reached Muon's last loss in a run of Muon's
length: a point of a longer AdamW schedule is not a schedule that ends there, so only final losses are compared.
A seed whose longest AdamW budget stays above Muon's loss is censored above (its lead is more than that budget's);
one whose AdamW run of Muon's length is already at or below it is censored below (no lead). The summary over seeds
(mean, 95% t interval) counts a censored seed at its bound and says so: a bound above makes the interval one-sided,
``[low, +inf)``, and the mean a lower bound, the low end not one (:func:`censored_mean_interval`); a bound below
likewise ``(-inf, high]``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from muon_repro.analysis.rounds import mean_interval

CENSORED = ("none", "above", "below")


def matched_tokens(budgets: np.ndarray, losses: np.ndarray, target: float) -> tuple[float, str]:
    """The tokens at which AdamW's final loss over ``budgets`` (tokens, increasing) reaches ``target``, interpolated
    linearly in the loss against log tokens between the first budget at or below it and the one before; with
    ``"none"``, or NaN and ``"above"`` (no budget reaches it) or ``"below"`` (the smallest already does)."""
    budgets, losses = np.asarray(budgets, dtype=float), np.asarray(losses, dtype=float)
    if budgets.ndim != 1 or budgets.shape != losses.shape or len(budgets) == 0 or np.any(np.diff(budgets) <= 0):
        raise ValueError(f"budgets must be increasing and match the losses one to one, got {budgets!r} and {losses!r}")
    if not math.isfinite(target):
        return float("nan"), "above"
    reached = np.flatnonzero(np.isfinite(losses) & (losses <= target))
    if len(reached) == 0:
        return float("nan"), "above"
    j = int(reached[0])
    if j == 0:
        return float("nan"), "below"
    lo, hi = losses[j - 1], losses[j]  # lo > target >= hi
    fraction = (lo - target) / (lo - hi) if math.isfinite(lo) and lo > hi else 1.0
    return float(math.exp(math.log(budgets[j - 1]) + fraction * (math.log(budgets[j]) - math.log(budgets[j - 1])))), "none"


def budget_match_table(conv: pd.DataFrame) -> pd.DataFrame:
    """One row per seed and AdamW budget of one profile's configuration (its ``convergence`` rows with the
    ``best_lr`` flag): each optimizer's final test loss, the tokens AdamW needs to reach Muon's, the lead and its
    summary over seeds. Empty when AdamW trained no budget beyond Muon's length."""
    best = conv[conv["best_lr"].fillna(False).astype(bool)]
    finals = best[best["step"] == best["steps"]]
    muon = finals[finals["optimizer"] == "muon"]
    length = int(muon["steps"].max()) if len(muon) else 0  # Muon's long runs (the sweep may be shorter)
    # at Muon's length and each longer budget, AdamW's best there (a longer schedule has its own sweep and best)
    adamw = finals[(finals["optimizer"] == "adamw") & (finals["steps"] >= length)]
    rows = []
    for seed, m in muon.groupby("seed"):
        m = m[m["steps"] == m["steps"].max()].iloc[0]  # Muon's long run of this seed (the sweep may be shorter)
        a = adamw[(adamw["seed"] == seed) & (adamw["steps"] >= m["steps"])].sort_values("steps")
        if len(a) < 2 or int(a["steps"].iloc[0]) != int(m["steps"]):  # AdamW at Muon's length and at least one more
            continue
        tokens_per_step = int(m["tokens_per_step"])
        if set(a["tokens_per_step"].astype(int)) != {tokens_per_step}:
            continue  # a budget in tokens is one in steps only at equal tokens per step
        muon_tokens = int(m["steps"]) * tokens_per_step
        budgets = a["steps"].astype(int).to_numpy() * tokens_per_step
        losses = pd.to_numeric(a["test_loss"], errors="coerce").to_numpy(dtype=float)
        target = float(pd.to_numeric(pd.Series([m["test_loss"]]), errors="coerce").iloc[0])
        tokens, censored = matched_tokens(budgets, losses, target)
        bound = {"above": budgets[-1] / muon_tokens - 1, "below": 0.0}.get(censored, float("nan"))
        for (_, run), budget, loss in zip(a.iterrows(), budgets, losses):
            rows.append(
                {
                    "seed": int(seed),
                    "muon_lr": float(m["lr"]),
                    "adamw_lr": float(run["lr"]),
                    "muon_steps": int(m["steps"]),
                    "tokens_per_step": tokens_per_step,
                    "params": m["params"],
                    "tokens_per_param": muon_tokens / float(m["params"]) if m["params"] else float("nan"),
                    "muon_test_loss": target,
                    "adamw_steps": int(run["steps"]),
                    "budget_ratio": budget / muon_tokens,
                    "adamw_test_loss": loss,
                    "matched_tokens": tokens,
                    "lead": tokens / muon_tokens - 1 if censored == "none" else float("nan"),
                    "censored": censored,
                    "lead_bound": bound,
                }
            )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    per_seed = table.drop_duplicates("seed")
    mean, low, high = censored_mean_interval(per_seed["lead"], per_seed["censored"], per_seed["lead_bound"])
    censored = int((per_seed["censored"] != "none").sum())
    return table.assign(seeds=len(per_seed), censored_seeds=censored, lead_mean=mean, lead_low=low, lead_high=high)


def censored_mean_interval(lead: pd.Series, censored: pd.Series, bound: pd.Series) -> tuple[float, float, float]:
    """The mean lead over seeds and its 95% t interval, a censored seed counted at its bound: censored above, the
    mean is then a lower bound and the high end is +inf; censored below, the mean is an upper bound and the low end
    is -inf (both: no interval). The other end is no bound: a censored seed further out moves the mean by 1/n of
    the distance and the half-width faster (about t/n of it), so that end moves the other way, without limit."""
    kinds = set(censored)
    values = np.where(censored == "none", pd.to_numeric(lead, errors="coerce"), pd.to_numeric(bound, errors="coerce"))
    mean, low, high = mean_interval(values.astype(float))
    if {"above", "below"} <= kinds:
        return float("nan"), float("nan"), float("nan")
    if "above" in kinds:
        return mean, low, float("inf")
    if "below" in kinds:
        return mean, float("-inf"), high
    return mean, low, high
