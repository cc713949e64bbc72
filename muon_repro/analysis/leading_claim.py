"""How the convergence claim ("Muon reaches AdamW's loss with about half the compute") is measured: the
leading ratio in FLOPs at the end, from the leading_steps table's summaries, and the explanation that names
its causes (steps against per-step cost, both smoothings, the scale the runs trained at).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from muon_repro.analysis.claim_inputs import Measurement, ProfileTables, is_missing
from muon_repro.claims import LEADING_MIN_SEEDS


def leading_steps_claim(t: ProfileTables) -> Measurement | str:
    """The leading ratio in FLOPs at the end (headline smoothing, Moonlight's unit): its mean over seeds and t
    interval, read from the leading_steps table's summaries; steps, wall clock, both smoothings, the test loss and
    the best learning rates beside it. Every number the explanation states is a value of those tables."""
    from muon_repro.analysis.convergence import HEADLINE_ALPHA

    lead, conv = t.leading, t.convergence
    if lead is None or conv is None or lead.empty:
        return (
            "no pair of Muon and AdamW convergence runs at their best learning rates with one seed; "
            "run `muon-repro converge` (then `muon-repro analyze`)"
        )
    head = lead[lead["alpha"].astype(float) == HEADLINE_ALPHA]
    if head.empty or _seeds(head.iloc[0]) == 0:
        return "AdamW never reached any smoothed loss of Muon's run, or the curves are empty"
    first = head.iloc[0]
    value, low, high = _summary(first, "leading_ratio_flops")
    if not np.isfinite(value):
        return (
            "the convergence records hold no FLOPs per step (written before `muon-repro converge` recorded them): "
            "re-run `muon-repro converge`"
        )
    seeds = int(first["seeds"])
    if seeds < LEADING_MIN_SEEDS:  # too few seeds for the claim's interval: not measured, the values still given
        low = high = float("nan")
    explanation = " ".join(
        (
            _leading_in_units(lead, HEADLINE_ALPHA, seeds),
            _leading_per_seed(head),
            _leading_choice(first),
            _leading_scale(conv),
        )
    )
    if seeds < LEADING_MIN_SEEDS:
        explanation += f" Too few seeds for the claim's interval: run `muon-repro converge --seeds {LEADING_MIN_SEEDS}`."
    best = conv[conv["best_lr"].fillna(False).astype(bool)]
    best = best[best["steps"] == best["steps"].max()]  # the long runs (the sweep may be shorter)
    sweep = conv[conv["sweep"].fillna(False).astype(bool)]
    row = best.iloc[0]
    conditions = (
        f"{conv['run'].nunique()} convergence runs on {row['corpus']}: "
        f"a {sweep['lr'].nunique() if len(sweep) else 0}-value learning-rate sweep of "
        f"{int(sweep['steps'].max()) if len(sweep) else 0} steps chosen on the validation loss, "
        f"then {int(row['steps'])} steps x {int(row['tokens_per_step'])} tokens, "
        f"{int(row['params']):,} parameters, dp={int(row['dp'])} tp={int(row['tp'])} on {row['backend']}; "
        f"{seeds} seed(s) at the best learning rates; test loss on the test split"
    )
    trained = pd.Series(
        {
            "run": f"the {int(row['steps'])}-step convergence runs",
            "params": int(row["params"]),
            "tokens_trained": int(row["steps"]) * int(row["tokens_per_step"]),
        }
    )
    return Measurement(value, low, high, conditions, explanation, subject=trained)


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
    if not np.isfinite(mean):
        return "not measured"
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]" if np.isfinite(low) and np.isfinite(high) else f"{mean:+.3f} (no interval)"


def _span(values: pd.Series, fmt: str) -> str:
    """One value, or the range of a per-seed value over seeds."""
    lo, hi = float(values.min()), float(values.max())
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)} to {format(hi, fmt)}"


def _leading_in_units(lead: pd.DataFrame, headline: float, seeds: int) -> str:
    """The end ratio in FLOPs, steps and wall clock at each smoothing, with the per-step costs they use."""
    from muon_repro.analysis.convergence import UNITS

    head = lead[lead["alpha"].astype(float) == headline]
    first = head.iloc[0]
    said = (
        f"At EWM alpha {headline:g} on the training loss, the leading ratio in FLOPs at the end is "
        f"{_with_interval(*_summary(first, 'leading_ratio_flops'))} (mean over {seeds} seeds, t interval): the extra compute "
        f"AdamW needs to reach Muon's loss, over Muon's; per step Muon costs {float(first['muon_gflop_per_step']):.2f} GFLOP "
        f"and AdamW {float(first['adamw_gflop_per_step']):.2f}. In steps: {_with_interval(*_summary(first, 'leading_ratio'))}; "
        f"in wall clock: {_with_interval(*_summary(first, 'leading_ratio_wall'))}, from each run's median step time "
        f"(Muon {_span(head['muon_step_ms_median'].astype(float), '.1f')} ms, "
        f"AdamW {_span(head['adamw_step_ms_median'].astype(float), '.1f')} ms)."
    )
    labels = {"steps": "in steps", "flops": "in FLOPs", "wall": "in wall clock"}
    for alpha in sorted(set(lead["alpha"].astype(float)) - {headline}, reverse=True):
        row = lead[lead["alpha"].astype(float) == alpha].iloc[0]
        if _seeds(row) == 0:
            said += f" At alpha {alpha:g} AdamW reached none of Muon's smoothed losses."
            continue
        units = ", ".join(f"{labels[unit]} {_with_interval(*_summary(row, column))}" for unit, column in UNITS.items())
        said += f" At alpha {alpha:g}: {units} over {int(row['seeds'])} seeds."
    return said


def _leading_per_seed(head: pd.DataFrame) -> str:
    """Each seed's end ratios (steps, FLOPs, wall clock) and where they were read."""
    from muon_repro.analysis.convergence import UNITS

    parts, beyond_any = [], False
    for seed, g in head.groupby("seed"):
        end = g[g["at_end"].fillna(False).astype(bool)]
        if end.empty:
            parts.append(f"seed {int(seed)}: AdamW reached none of Muon's losses")
            continue
        r = end.iloc[0]
        beyond = int(r["muon_step"]) < int(g["muon_step"].max())
        beyond_any |= beyond
        ratios = ", ".join("n/a" if is_missing(r[c]) else f"{float(r[c]):+.3f}" for c in UNITS.values())
        parts.append(f"seed {int(seed)}: {ratios} at Muon step {int(r['muon_step'])}" + (", beyond" if beyond else ""))
    note = " (beyond: Muon's later losses lie below any AdamW reached, so the ratio is a lower bound)" if beyond_any else ""
    return f"Per seed at the end, in steps, FLOPs and wall clock{note}: " + "; ".join(parts) + "."


def _leading_choice(first: pd.Series) -> str:
    """The learning rates chosen on validation, whether they coincide, and the test loss."""
    muon_lr, adamw_lr = float(first["muon_lr"]), float(first["adamw_lr"])
    coincide = "they do" if np.isclose(muon_lr, adamw_lr) else "they do not"
    test = {opt: _with_interval(*_triple(first, f"{opt}_test_loss")).replace("+", "") for opt in ("muon", "adamw")}
    return (
        f"Best learning rates, chosen on the validation loss: Muon {muon_lr:g}, AdamW {adamw_lr:g}. Muon's update is "
        f"scaled to AdamW's update RMS (Moonlight's matching), under which the two best learning rates should coincide: "
        f"{coincide}. Final test loss (the test split, never used to choose): Muon {test['muon']}, AdamW {test['adamw']} nats."
    )


def _leading_scale(conv: pd.DataFrame) -> str:
    row = conv.iloc[0]
    return (
        f"Embeddings and LM head are a share {float(row['embedding_share']):.3f} of the {int(row['params']):,} parameters "
        "and take AdamW's step under either optimizer; Moonlight's claim is made at LLM scale, orders of magnitude larger."
    )
