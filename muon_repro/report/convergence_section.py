"""The report's "Convergence on real text" section, from the ``convergence`` and ``leading_steps``
tables alone.

It says what ran, the three splits, each optimizer's sweep on the validation loss and the
best learning rates (and whether they coincide, as Moonlight's update-RMS matching says they
should), the final test loss, the leading ratio at the end in steps, FLOPs and wall clock at both
smoothings with its t interval over seeds, and the result beside published ones with the scale
stated. Every measured number it writes is a value of those tables."""

from __future__ import annotations

import math

import pandas as pd

HEADLINE_ALPHA = 0.05  # analysis.convergence.HEADLINE_ALPHA (the report does not import the analysis)
COMMAND = "muon-repro converge --out traces && muon-repro analyze traces --out metrics"
# The leading_steps columns of the end ratio in each unit (analysis.convergence.UNITS), with how the report names them.
UNITS = (("leading_ratio", "steps"), ("leading_ratio_flops", "FLOPs"), ("leading_ratio_wall", "wall clock"))

# Published results, as their authors state them (the scale is what differs most from ours).
PUBLISHED = (
    "modded-nanogpt's GPT-2-small record (124M parameters, FineWeb): Muon reached 3.28 validation loss in 3,250 steps where "
    "AdamW needed 5,625, a leading ratio of (5,625 - 3,250) / 3,250 = 0.73 at that loss, counted in steps.",
    "Moonlight (arXiv 2502.16982) reports about 2x the computational efficiency of AdamW in its scaling-law experiments at "
    "LLM scale (hundreds of millions to billions of parameters, billions of tokens): counted in FLOPs, a leading ratio "
    "near 1. The claims table judges ours against it.",
    "In the PR #1428 thread where Moonshot measured 'Muon leading steps', a user's 1B-parameter MoE run saw Muon lose its "
    "lead after about 20k steps, and Moonshot's rerun of those settings (about 17k steps) kept Muon ahead.",
)


def _best_run(conv: pd.DataFrame, opt: str) -> pd.DataFrame:
    best = conv[(conv["optimizer"] == opt) & conv["best_lr"].fillna(False).astype(bool)]
    return best[best["steps"] == best["steps"].max()] if len(best) else best


def _interval(mean: object, low: object, high: object, signed: bool = True) -> str:
    """``+0.107 [+0.081, +0.133]``; the mean alone when there is no interval (one seed), ``not recorded`` when null."""
    values = [float("nan") if pd.isna(v) else float(v) for v in (mean, low, high)]
    fmt = "+.3f" if signed else ".3f"
    if not math.isfinite(values[0]):
        return "not recorded"
    if not (math.isfinite(values[1]) and math.isfinite(values[2])):
        return f"{values[0]:{fmt}} (one seed: no interval)"
    return f"{values[0]:{fmt}} [{values[1]:{fmt}}, {values[2]:{fmt}}]"


def _span(values: pd.Series, fmt: str) -> str:
    """One value, or the range of a per-run value over the seeds."""
    v = values.dropna().astype(float)
    if v.empty:
        return "not recorded"
    lo, hi = format(v.min(), fmt), format(v.max(), fmt)
    return lo if lo == hi else f"{lo} to {hi}"


def _setup_line(conv: pd.DataFrame) -> str:
    first = conv.iloc[0]
    return (
        f"Corpus: {first['corpus']} {first['corpus_version']} ({first['corpus_license']}), sha256 "
        f"{str(first['corpus_sha256'])[:16]}…, split by whole play into training, validation (which picks each "
        "optimizer's learning rate) and test (which the results are reported on, never used to choose); byte-level BPE "
        f"of {int(first['vocab_size'])} tokens trained on the training plays. Model: the tensor-parallel GPT with split "
        f"Q/K/V, {int(first['params']):,} parameters, of which the embedding table and LM head are a share "
        f"{float(first['embedding_share']):.3f} (AdamW updates them under either optimizer). dp={int(first['dp'])}, "
        f"tp={int(first['tp'])} on {first['backend']}, {int(first['tokens_per_step']):,} tokens per step, warm-up then "
        f"cosine, weight decay {float(first['weight_decay']):g} on every parameter, RMSNorm gains included."
    )


def _sweep_lines(conv: pd.DataFrame) -> list[str]:
    """Each optimizer's sweep (final validation loss per learning rate), its best, and its long runs' test loss."""
    sweep = conv[conv["sweep"].fillna(False).astype(bool)]
    lines = []
    for opt, label in (("muon", "Muon"), ("adamw", "AdamW")):
        s = sweep[sweep["optimizer"] == opt]
        if s.empty:
            continue
        finals = s.dropna(subset=["val_loss"]).sort_values("step").groupby("lr")["val_loss"].last().astype(float)
        best = _best_run(conv, opt)
        lr = float(best["lr"].iloc[0]) if len(best) else float("nan")
        last = best[best["step"] == best["steps"]].dropna(subset=["test_loss"]).sort_values("seed")
        tests = ", ".join(f"{float(v):.3f} (seed {int(k)})" for k, v in zip(last["seed"], last["test_loss"]))
        lines.append(
            f"{label}: sweep of {len(finals)} learning rates over {int(s['steps'].iloc[0])} steps, final validation loss "
            + ", ".join(f"{k:g} → {v:.3f}" for k, v in finals.items())
            + f" nats; best {lr:g}; final test loss of its {int(best['steps'].iloc[0]) if len(best) else 0}-step runs: "
            + (tests or "not recorded (these records have no test split)")
            + "."
        )
    return lines


def _choice_line(lead: pd.DataFrame) -> str:
    """The update-RMS convention, whether the best learning rates coincide, and the test loss over seeds."""
    first = lead.iloc[0]
    muon_lr, adamw_lr = float(first["muon_lr"]), float(first["adamw_lr"])
    coincide = "they coincide" if math.isclose(muon_lr, adamw_lr) else "they do not coincide"
    return (
        "Update RMS: this repository's Muon scales each orthogonalized update by 0.2·√max(A, B) for an A x B matrix "
        "(Moonlight's matching of AdamW's update RMS; the convergence table's update_rms measures it), so both optimizers "
        f"share one learning-rate scale and their best learning rates should coincide: Muon's is {muon_lr:g} and AdamW's "
        f"{adamw_lr:g}, {coincide}. Final test loss over the {lead['seed'].nunique()} seeds compared (mean, t interval): Muon "
        f"{_interval(first['muon_test_loss_mean'], first['muon_test_loss_low'], first['muon_test_loss_high'], False)}, AdamW "
        f"{_interval(first['adamw_test_loss_mean'], first['adamw_test_loss_low'], first['adamw_test_loss_high'], False)} nats."
    )


def _ratio_lines(lead: pd.DataFrame) -> list[str]:
    """The end ratio in each unit at each smoothing, the per-step costs, and each seed's values at the headline."""
    head = lead[lead["alpha"].astype(float) == HEADLINE_ALPHA]
    lines = []
    if len(head) and head[["muon_gflop_per_step", "muon_step_ms_median"]].isna().all().all():
        lines.append("Cost of one step: not recorded (these records have no FLOPs per step or step times).")
    elif len(head):
        lines.append(
            f"Cost of one step: Muon {_span(head['muon_gflop_per_step'], '.2f')} GFLOP, AdamW "
            f"{_span(head['adamw_gflop_per_step'], '.2f')} GFLOP (forward + backward, Newton-Schulz for Muon, element-wise "
            f"optimizer work); median step time per run: Muon {_span(head['muon_step_ms_median'], '.1f')} ms, AdamW "
            f"{_span(head['adamw_step_ms_median'], '.1f')} ms."
        )
    for alpha in sorted(set(lead["alpha"].astype(float)), reverse=True):
        row = lead[lead["alpha"].astype(float) == alpha].iloc[0]
        if pd.isna(row["seeds"]) or not int(row["seeds"]):
            lines.append(f"EWM alpha {alpha:g}: AdamW reached none of Muon's smoothed losses.")
            continue
        said = "; ".join(
            f"in {unit} {_interval(row[f'end_{col}_mean'], row[f'end_{col}_low'], row[f'end_{col}_high'])}" for col, unit in UNITS
        )
        lines.append(
            f"Leading ratio at the end, EWM alpha {alpha:g} on the training loss (mean over {int(row['seeds'])} seeds, "
            f"t interval): {said}."
        )
    ends = []
    for seed, g in head.groupby("seed") if len(head) else []:
        end = g[g["at_end"].fillna(False).astype(bool)]
        if len(end):
            r = end.iloc[0]
            beyond = int(r["muon_step"]) < int(g["muon_step"].max())
            values = ", ".join("n/a" if pd.isna(r[col]) else f"{float(r[col]):+.3f}" for col, _ in UNITS)
            ends.append(
                f"seed {int(seed)}: {values} (Muon step {int(r['muon_step'])} matched by AdamW step "
                f"{int(r['adamw_matching_step'])}{'; Muon lower than AdamW ever got after it' if beyond else ''})"
            )
    if ends:
        lines.append(
            f"Per seed at alpha {HEADLINE_ALPHA:g}, in steps, FLOPs and wall clock: "
            + "; ".join(ends)
            + ". The claims table gives the verdict, in FLOPs; the figures show the sweep and the three panels."
        )
    return lines


def convergence_section(conv: pd.DataFrame, lead: pd.DataFrame) -> dict:
    """``{"ran": bool, "lines": [...], "published": [...]}`` for the template."""
    if conv.empty:
        return {
            "ran": False,
            "lines": [f"No convergence run is in the tables. To add one: `{COMMAND}`."],
            "published": list(PUBLISHED),
        }
    lines = [_setup_line(conv), *_sweep_lines(conv)]
    if len(lead):
        lines += [_choice_line(lead), *_ratio_lines(lead)]
    lines.append(
        "Each run's wall time is the convergence table's wall_s (training and evaluation, under nice on a shared machine; "
        "startup and tokenizing not included)."
    )
    first = conv.iloc[0]
    scale = (
        f"Scale: ours is {int(first['params']):,} parameters and {int(conv['tokens'].max()):,} training tokens per run at "
        "most, orders of magnitude below the published runs above in both; a Muon lead (or its absence) at this scale says "
        "little about theirs."
    )
    return {"ran": True, "lines": lines, "published": [*PUBLISHED, scale]}
