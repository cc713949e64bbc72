"""The report's "Convergence on real text" section and its two figures, from the ``convergence``,
``leading_steps`` and ``budget_match`` tables alone, one configuration (``group``) after another.

The section says what ran, the three splits, each optimizer's sweep on the validation loss and the
best learning rates (and whether they coincide, as Moonlight's update-RMS matching says they
should), the final test loss, the leading ratio at the end in steps, FLOPs and wall clock at both
smoothings with its t interval over seeds, and the result beside published ones with the scale
stated. Every measured number it writes is a value of those tables.

The figures, tables in, path out (numbered among the results' figures, :data:`muon_repro.report.figures.FIGURES`);
with no convergence run in the tables each says so and names the command:

    convergence_sweep  the learning-rate sweep's validation-loss curves, one panel per optimizer
    leading_steps      the PR thread's three panels: smoothed loss, leading steps, leading ratio
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from muon_repro.report import style
from muon_repro.report.plotting import (
    add_title,
    cut_axis,
    legend_below,
    legend_height,
    legends_under_panels,
    new_figure,
    save_figure,
    show_no_data,
    styled,
)
from muon_repro.rundir import CONVERGENCE_GROUP
from muon_repro.values import counted

HEADLINE_ALPHA = 0.05  # analysis.convergence.HEADLINE_ALPHA (the report does not import the analysis)
COMMAND = "muon-repro converge --out traces && muon-repro analyze traces --out metrics"
# The leading_steps columns of the end ratio in each unit (analysis.convergence.UNITS), with how the report names them.
UNITS = (("leading_ratio", "steps"), ("leading_ratio_flops", "FLOPs"), ("leading_ratio_wall", "wall clock"))

# Published results, as their authors state them (the scale is what differs most from ours), each with where it is.
PUBLISHED = (
    "modded-nanogpt's GPT-2-small record (github.com/KellerJordan/modded-nanogpt; 124M parameters, FineWeb): Muon reached "
    "3.28 validation loss in 3,250 steps where AdamW needed 5,625, a leading ratio of (5,625 - 3,250) / 3,250 = 0.73 at "
    "that loss, counted in steps.",
    "Moonlight (arXiv 2502.16982) reports about 2x the computational efficiency of AdamW in its scaling-law experiments at "
    "LLM scale (hundreds of millions to billions of parameters, billions of tokens), its compute counted as 6ND (in "
    "proportion to tokens): a leading ratio in tokens near 1. The claims table judges ours against it.",
    "In the thread of NVIDIA/Megatron-LM pull request #1428 (github.com/NVIDIA/Megatron-LM/pull/1428, Moonshot's proof "
    "of concept for Distributed Muon), where Moonshot measured 'Muon leading steps', a user's 1B-parameter MoE run saw "
    "Muon lose its lead after about 20k steps, and Moonshot's rerun of those settings (about 17k steps) kept Muon ahead.",
)


def _best_run(conv: pd.DataFrame, opt: str, steps: object = None) -> pd.DataFrame:
    """``opt``'s runs at its best learning rate, of ``steps`` steps when it has such runs, else its longest."""
    best = conv[(conv["optimizer"] == opt) & conv["best_lr"].fillna(False).astype(bool)]
    if not len(best):
        return best
    return best[best["steps"] == (steps if (best["steps"] == steps).any() else best["steps"].max())]


def _interval(mean: object, low: object, high: object, signed: bool = True) -> str:
    """``+0.107 [+0.081, +0.133]``; one end open (``[+0.034, no upper end]``) when a censored seed leaves none (the
    tables hold the infinite end as null); the mean alone when there is no interval (one seed), ``not recorded`` when
    null."""
    values = [float("nan") if pd.isna(v) else float(v) for v in (mean, low, high)]
    fmt = "+.3f" if signed else ".3f"
    if not math.isfinite(values[0]):
        return "not recorded"
    if not (math.isfinite(values[1]) or math.isfinite(values[2])):
        return f"{values[0]:{fmt}} (one seed: no interval)"
    low_end = f"{values[1]:{fmt}}" if math.isfinite(values[1]) else "no lower end"
    high_end = f"{values[2]:{fmt}}" if math.isfinite(values[2]) else "no upper end"
    return f"{values[0]:{fmt}} [{low_end}, {high_end}]"


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
    muon_best = _best_run(conv, "muon")
    lines = []
    for opt, label in (("muon", "Muon"), ("adamw", "AdamW")):
        s = sweep[sweep["optimizer"] == opt]
        if s.empty:
            continue
        finals = s.dropna(subset=["val_loss"]).sort_values("step").groupby("lr")["val_loss"].last().astype(float)
        # at Muon's length, the runs compared: AdamW's longer budgets are budget_match's (_budget_lines)
        best = _best_run(conv, opt, muon_best["steps"].iloc[0] if len(muon_best) else None)
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
            + ". The claims table gives the verdict, in tokens (6ND, the lead in steps at equal tokens per step); the "
            "figures show the sweep and the three panels."
        )
    return lines


def groups_in_order(conv: pd.DataFrame) -> list[str]:
    """The configurations (``group``) of the convergence rows: the reference ``convergence`` first, the figures' one."""
    groups = sorted(str(g) for g in conv["group"].dropna().unique()) if "group" in conv.columns else []
    return sorted(groups, key=lambda g: g != CONVERGENCE_GROUP)


def _shown_configuration(conv: pd.DataFrame) -> str:
    """Which configuration a convergence figure draws (the first of :func:`groups_in_order`), and where the others are."""
    groups = groups_in_order(conv)
    if not groups:
        return "no configuration"
    others = f" (the text also gives {', '.join(groups[1:])})"
    return f"configuration {groups[0]}" + (others if len(groups) > 1 else "")


def of_group(table: pd.DataFrame | None, group: str) -> pd.DataFrame:
    """``table``'s rows of one configuration (all of them when it has no ``group`` column)."""
    if table is None or table.empty or "group" not in table.columns:
        return pd.DataFrame() if table is None else table
    return table[table["group"] == group].reset_index(drop=True)


def _tokens_per_param(conv: pd.DataFrame) -> float:
    """Training tokens per parameter of Muon's long runs at its best learning rate (NaN when unknown)."""
    best = _best_run(conv, "muon")
    first = (best if len(best) else conv).iloc[0]
    return int(first["steps"]) * int(first["tokens_per_step"]) / float(first["params"]) if first["params"] else float("nan")


def _budget_lines(budget: pd.DataFrame) -> list[str]:
    """AdamW's longer budgets: each budget's final test loss per seed, the tokens AdamW needs to reach Muon's final
    test loss, and the lead over seeds (budget_match)."""
    first = budget.iloc[0]
    finals = budget.groupby("budget_ratio")["adamw_test_loss"].apply(lambda v: _span(v.astype(float), ".3f"))
    rates = budget.groupby("budget_ratio")["adamw_lr"].apply(lambda v: _span(v.astype(float), "g"))
    per_seed = budget.drop_duplicates("seed").sort_values("seed")
    leads = "; ".join(
        f"seed {int(r['seed'])}: "
        + (f"{float(r['lead']):+.3f}" if r["censored"] == "none" else f"censored {r['censored']} ({float(r['lead_bound']):+.3f})")
        for _, r in per_seed.iterrows()
    )
    return [
        f"AdamW trained again to {', '.join(f'{r:g}x' for r in finals.index)} Muon's {int(first['muon_steps'])} steps, "
        "each its own warm-up and cosine schedule and its own learning rate, the best of its sweep on the validation "
        f"loss ({', '.join(f'{r:g}x {v}' for r, v in rates.items())}); final test loss per budget over the seeds: "
        + ", ".join(f"{r:g}x {v}" for r, v in finals.items())
        + f" nats, against Muon's {_span(per_seed['muon_test_loss'].astype(float), '.3f')}.",
        "Tokens AdamW needs to reach Muon's final test loss, interpolated between the budgets that bracket it (linear in "
        f"loss against log tokens), over Muon's tokens, less 1: {leads}; mean over {int(first['seeds'])} seeds (t interval) "
        + _interval(first["lead_mean"], first["lead_low"], first["lead_high"])
        + _censored_note(per_seed)
        + ". This is the lead the claims table judges for this configuration.",
    ]


def _censored_note(per_seed: pd.DataFrame) -> str:
    """What a censored seed does to the mean and the interval (budget_match.censored_mean_interval), if any."""
    kinds = [k for k in ("above", "below") if (per_seed["censored"] == k).any()]
    if not kinds:
        return ""
    count = int((per_seed["censored"] != "none").sum())
    seeds = f"{counted(count, 'seed')} censored {' and '.join(kinds)}, counted at the bound"
    if kinds == ["above"]:
        return f" ({seeds}: the mean is a lower bound; the low end is not, a larger lead would widen the interval)"
    if kinds == ["below"]:
        return f" ({seeds}: the mean is an upper bound; the high end is not, a smaller lead would widen the interval)"
    return f" ({seeds}: no interval)"


def convergence_section(conv: pd.DataFrame, lead: pd.DataFrame, budget: pd.DataFrame | None = None) -> dict:
    """``{"ran": bool, "lines": [...], "published": [...]}`` for the template: each configuration's lines, the
    reference one first."""
    if conv.empty:
        return {
            "ran": False,
            "lines": [f"No convergence run is in the tables. To add one: `{COMMAND}`."],
            "published": list(PUBLISHED),
        }
    lines: list[str] = []
    groups = groups_in_order(conv) or [None]
    for group in groups:
        c, g_lead, g_budget = (of_group(t, group) if group else t for t in (conv, lead, budget))
        if len(groups) > 1:
            lines.append(
                f"Configuration `{group}`: {_tokens_per_param(c):.1f} training tokens per parameter"
                + (" (the figures show this one)." if group == groups[0] else ".")
            )
        lines += [_setup_line(c), *_sweep_lines(c)]
        if len(g_lead):
            lines += [_choice_line(g_lead), *_ratio_lines(g_lead)]
        if g_budget is not None and len(g_budget):
            lines += _budget_lines(g_budget)
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


# ---------------------------------------------------------------- the figures


LR_DASHES = ((0, (1, 1)), (0, (4, 1.5)), (0, (4, 1.5, 1, 1.5)), (0, (7, 2)), (0, (2, 2, 2, 2, 6, 2)))
NO_RUN = "no convergence run in the tables:\nrun `muon-repro converge`, then `muon-repro analyze`"


def _empty(headline: str, out: str | Path, ncols: int = 1) -> Path:
    fig, axes = new_figure(2.4, ncols)
    for ax in axes:
        show_no_data(ax, NO_RUN)
    add_title(fig, headline, "the convergence and leading_steps tables are empty")
    return save_figure(fig, out)


@styled
def convergence_sweep(convergence: pd.DataFrame, out: str | Path) -> Path:
    """Validation loss against step for every learning rate (seed 0), one panel per optimizer, the best in bold."""
    headline = "Validation loss over the learning-rate sweep (same schedule, weight decay on every parameter)"
    shown = _shown_configuration(convergence)
    convergence = of_group(convergence, (groups_in_order(convergence) or [""])[0])
    runs = convergence
    if len(convergence):
        runs = convergence[convergence["sweep"].fillna(False).astype(bool)].dropna(subset=["val_loss"])
    if runs.empty:
        return _empty(headline, out, ncols=2)
    fig, axes = new_figure(3.4, 2, sharey=True)
    finals = []
    for ax, opt in zip(axes, ("muon", "adamw")):
        sub = runs[runs["optimizer"] == opt]
        if sub.empty:
            show_no_data(ax, f"no {style.OPTIMIZER_LABELS[opt]} run")
            continue
        lrs = sorted(sub["lr"].astype(float).unique())
        shades = np.linspace(0.35, 1.0, len(lrs))
        for i, (lr, shade) in enumerate(zip(lrs, shades)):
            g = sub[sub["lr"].astype(float) == lr].sort_values("step")
            best = bool(g["best_lr"].fillna(False).iloc[0])
            ax.plot(
                g["step"],
                g["val_loss"].astype(float),
                color=style.OPTIMIZER_COLORS[opt],
                alpha=1.0 if best else 0.25 + 0.4 * float(shade),
                linewidth=2.2 if best else 1.0,
                # shades of one colour alone did not tell the learning rates apart: a dash pattern each as well
                linestyle="-" if best else LR_DASHES[i % len(LR_DASHES)],
                label=f"lr {lr:g}" + (" (best)" if best else ""),
            )
            if best:
                finals.append(f"{style.OPTIMIZER_LABELS[opt]} {g['val_loss'].astype(float).iloc[-1]:.3f} at lr {lr:g}")
        ax.set_title(style.OPTIMIZER_LABELS[opt], fontsize=9)
        ax.set_xlabel("step")
    axes[0].set_ylabel("validation loss (nats)")
    lo, hi = runs["val_loss"].astype(float).min(), runs["val_loss"].astype(float).max()
    cut_axis(axes[0], lo - 0.1, 2.6, hi, "curves")  # the panels share the axis
    first = runs.iloc[0]
    entries = max(len(ax.get_legend_handles_labels()[0]) for ax in axes)
    add_title(
        fig,
        headline,
        f"{shown}: best final validation loss (seed 0), the choice: {', '.join(finals)}; {int(first['steps'])} steps x "
        f"{int(first['tokens_per_step'])} tokens, {int(first['params']):,} parameters, {first['corpus']}",
        bottom_in=legend_height(entries, 3),
    )
    legends_under_panels(fig, axes, ncol=3)
    return save_figure(fig, out)


@styled
def leading_steps(convergence: pd.DataFrame, leading: pd.DataFrame, out: str | Path) -> Path:
    """The PR thread's three panels at the headline smoothing: smoothed training loss of both optimizers at
    their best learning rates, leading steps and leading ratio against the Muon step (one line per seed)."""
    headline = "Muon leading steps: when does AdamW reach Muon's (smoothed) training loss?"
    leading = of_group(leading, (groups_in_order(convergence) or [""])[0])
    lead = leading[leading["alpha"].astype(float) == HEADLINE_ALPHA] if len(leading) else leading
    if lead.empty:
        return _empty(headline, out, ncols=3)
    fig, axes = new_figure(3.2, 3)
    seeds = sorted(lead["seed"].astype(int).unique())
    dashes = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1))]
    for i, seed in enumerate(seeds):
        g = lead[lead["seed"] == seed].sort_values("muon_step")
        ls = dashes[i % len(dashes)]
        axes[0].plot(
            g["muon_step"],
            g["muon_loss_ewm"].astype(float),
            color=style.OPTIMIZER_COLORS["muon"],
            linestyle=ls,
            label=f"Muon, seed {seed}",
        )
        axes[0].plot(
            g["muon_step"],
            g["adamw_loss_ewm"].astype(float),
            color=style.OPTIMIZER_COLORS["adamw"],
            linestyle=ls,
            label=f"AdamW, seed {seed}",
        )
        axes[1].plot(g["muon_step"], g["leading_steps"].astype(float), color="#333333", linestyle=ls, label=f"seed {seed}")
        axes[2].plot(g["muon_step"], g["leading_ratio"].astype(float), color="#333333", linestyle=ls, label=f"seed {seed}")
    losses = lead[["muon_loss_ewm", "adamw_loss_ewm"]].astype(float)
    lo = losses.min().min()
    cut_axis(axes[0], lo - 0.1, 2.1, losses.max().max(), "curves")
    axes[0].set_ylabel(f"training loss, EWM alpha {HEADLINE_ALPHA:g}")
    axes[1].set_ylabel("AdamW step - Muon step")
    axes[2].set_ylabel("leading ratio")
    for ax in axes:
        ax.set_xlabel("Muon step")
    for ax in axes[1:]:
        ax.axhline(0, color="#999999", linewidth=0.6)
    # The first steps' ratios divide by small step numbers: the axis follows the rest.
    later = lead[lead["muon_step"] > 10]["leading_ratio"].astype(float).to_numpy(dtype=float, na_value=np.nan)
    top = np.nanmax(later) if np.isfinite(later).any() else 1.0
    axes[2].set_ylim(min(-1.0, np.nanmin(later) * 1.1 if np.isfinite(later).any() else -1.0), max(1.0, top * 1.1))
    handles = [Line2D([], [], color=style.OPTIMIZER_COLORS[o], label=style.OPTIMIZER_LABELS[o]) for o in ("muon", "adamw")]
    handles += [
        Line2D([], [], color="#333333", linestyle=dashes[i % len(dashes)], label=f"seed {s}") for i, s in enumerate(seeds)
    ]
    bottom = legend_below(fig, handles, ncol=len(handles))
    ends = []
    for seed in seeds:
        g = lead[lead["seed"] == seed].dropna(subset=["adamw_matching_step"]).sort_values("muon_step")
        if len(g):
            last = g.iloc[-1]
            ends.append(f"seed {seed}: {float(last['leading_ratio']):+.2f} at Muon step {int(last['muon_step'])}")
    first = lead.iloc[0]
    add_title(
        fig,
        headline,
        f"{_shown_configuration(convergence)}: Muon lr {float(first['muon_lr']):g} vs AdamW lr "
        f"{float(first['adamw_lr']):g} (each its best); "
        f"leading ratio at the last Muon step AdamW reaches: {'; '.join(ends) or 'none'}. "
        "Lines end where AdamW never gets as low.",
        bottom_in=bottom,
    )
    return save_figure(fig, out)
