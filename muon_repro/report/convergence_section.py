"""The report's "Convergence on real text" section, from the ``convergence`` and ``leading_steps``
tables alone: what ran, each optimizer's best learning rate and final held-out loss, the leading
ratio at the end, the wall time, and the result beside published ones with the scale stated."""

from __future__ import annotations

import pandas as pd

HEADLINE_ALPHA = 0.05  # analysis.convergence.HEADLINE_ALPHA (the report does not import the analysis)
COMMAND = "muon-repro converge --out traces && muon-repro analyze traces --out metrics"

# Published results, as their authors state them (the scale is what differs most from ours).
PUBLISHED = (
    "modded-nanogpt's GPT-2-small record (124M parameters, FineWeb): Muon reached 3.28 validation loss in 3,250 steps where "
    "AdamW needed 5,625, a leading ratio of (5,625 - 3,250) / 3,250 = 0.73 at that loss.",
    "Moonlight (arXiv 2502.16982) reports about 2x the compute efficiency of AdamW at LLM scale (hundreds of millions to "
    "billions of parameters, billions of tokens).",
)


def _best_run(conv: pd.DataFrame, opt: str) -> pd.DataFrame:
    best = conv[(conv["optimizer"] == opt) & conv["best_lr"].fillna(False).astype(bool)]
    return best[best["steps"] == best["steps"].max()] if len(best) else best


def convergence_section(conv: pd.DataFrame, lead: pd.DataFrame) -> dict:
    """``{"ran": bool, "lines": [...], "published": [...]}`` for the template."""
    if conv.empty:
        return {
            "ran": False,
            "lines": [f"No convergence run is in the tables. To add one: `{COMMAND}` (about 30-40 minutes on 2 CPU cores)."],
            "published": list(PUBLISHED),
        }
    first = conv.iloc[0]
    lines = [
        f"Corpus: {first['corpus']} {first['corpus_version']} ({first['corpus_license']}), sha256 "
        f"{str(first['corpus_sha256'])[:16]}…, "
        f"split by play; byte-level BPE of {int(first['vocab_size'])} tokens trained on the training plays. Model: the "
        "tensor-parallel GPT "
        f"with split Q/K/V, {int(first['params']):,} parameters, of which the embedding table and LM head are "
        f"{float(first['embedding_share']):.0%} (AdamW updates them under either optimizer). dp={int(first['dp'])}, "
        f"tp={int(first['tp'])} "
        f"on {first['backend']}, {int(first['tokens_per_step']):,} tokens per step, warm-up then cosine, weight decay "
        f"{float(first['weight_decay']):g} on every parameter, RMSNorm gains included.",
    ]
    sweep = conv[conv["sweep"].fillna(False).astype(bool)]
    for opt, label in (("muon", "Muon"), ("adamw", "AdamW")):
        s = sweep[sweep["optimizer"] == opt]
        if s.empty:
            continue
        finals = s.dropna(subset=["val_loss"]).sort_values("step").groupby("lr")["val_loss"].last().astype(float)
        best = _best_run(conv, opt)
        lr = float(best["lr"].iloc[0]) if len(best) else float("nan")
        long_finals = best.dropna(subset=["val_loss"]).sort_values("step").groupby("seed")["val_loss"].last().astype(float)
        start = best[best["step"] == 0]["val_loss"].dropna().astype(float)
        lines.append(
            f"{label}: sweep of {len(finals)} learning rates over {int(s['steps'].iloc[0])} steps ("
            + ", ".join(f"{k:g} → {v:.3f}" for k, v in finals.items())
            + f" held-out nats); best {lr:g}, which over {int(best['steps'].iloc[0]) if len(best) else 0} steps ends at "
            + ", ".join(f"{v:.3f} (seed {k})" for k, v in long_finals.items())
            + (f", from {start.mean():.3f} at step 0" if len(start) else "")
            + "."
        )
    headline = lead[lead["alpha"].astype(float) == HEADLINE_ALPHA] if len(lead) else lead
    ends = []
    for seed, g in headline.groupby("seed") if len(headline) else []:
        matched = g.dropna(subset=["adamw_matching_step"]).sort_values("muon_step")
        if len(matched):
            last = matched.iloc[-1]
            beyond = int(last["muon_step"]) < int(g["muon_step"].max())
            ends.append(
                f"{float(last['leading_ratio']):+.2f} for seed {int(seed)} (Muon step {int(last['muon_step'])} matched by AdamW "
                f"step {int(last['adamw_matching_step'])}{'; Muon lower than AdamW ever got after it' if beyond else ''})"
            )
    if ends:
        lines.append(
            f"Leading ratio at the end (EWM alpha {HEADLINE_ALPHA:g} on the training loss): "
            + "; ".join(ends)
            + ". The claims table gives the verdict; the figures show the sweep and the three panels."
        )
    wall = conv.drop_duplicates("run")["wall_s"].dropna().astype(float)
    if len(wall):
        lines.append(
            f"{conv['run'].nunique()} runs, {wall.sum() / 60:.1f} minutes of training and evaluation in all "
            "(the runs' own wall time, under nice on a shared 2-core machine; startup and tokenizing not included)."
        )
    scale = (
        f"Scale: ours is {int(first['params']):,} parameters and {int(conv['steps'].max()) * int(first['tokens_per_step']):,} "
        "training tokens per run at most, orders of magnitude below the published runs above in both; a Muon lead "
        "(or its absence) at this scale says little about theirs."
    )
    return {"ran": True, "lines": lines, "published": [*PUBLISHED, scale]}
