"""How each claim of :mod:`muon_repro.analysis.claims` is measured, and the measured cause its explanation names.

Each function takes one profile's :class:`~muon_repro.analysis.claim_inputs.ProfileTables` and returns a
:class:`Measurement` (value, 95% interval, the runs it was measured on, an explanation), or a sentence
saying which runs it needs; :data:`MEASURE` maps each claim id to its function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from muon_repro.analysis.claim_inputs import (
    ProfileTables,
    absent_or,
    check_same_work,
    describe_runs,
    first_run,
    is_missing,
)
from muon_repro.analysis.rounds import mean_interval, paired_ratio_interval
from muon_repro.phases import DP_ALL_GATHER, DP_GATHER, DP_REDUCE_SCATTER, MODEL_COMM_PHASES, NEWTON_SCHULZ, TP_GATHER


@dataclass(frozen=True)
class Measurement:
    """A claim's measured value and 95% interval, the runs it was measured on, and what explains it."""

    value: float
    low: float
    high: float
    conditions: str
    explanation: str
    runs: tuple[pd.Series, ...] = ()  # the runs measured, whose conditions the claim's are compared with

    @classmethod
    def over_ranks(cls, values: pd.Series, conditions: str, explanation: str, runs: tuple[pd.Series, ...] = ()) -> Measurement:
        """A quantity that does not vary between steps: its median, and its range over ranks as the interval."""
        return cls(float(values.median()), float(values.min()), float(values.max()), conditions, explanation, runs)


def paired_ratio(t: ProfileTables, a: pd.Series, b: pd.Series, column: str, how: str = "mean") -> tuple[float, float, float]:
    """``column`` of ``a`` over ``b``, per round (the rounds both were recorded in), with its paired 95% interval."""
    return paired_ratio_interval(*t.paired(column, how, a, b))


def _ns_cause(t: ProfileTables, muon: pd.Series) -> str:
    """Newton-Schulz FLOPs against forward+backward FLOPs on the busiest rank: the cause of Muon's time cost."""
    ns, train, world = muon.get("ns_flops_max_rank"), muon.get("train_flops"), muon.get("world_size")
    if is_missing(ns) or is_missing(train) or is_missing(world) or not train:
        return ""
    per_rank = float(train) / float(world)
    ratio = float(ns) / per_rank
    ns_ms = t.phase_mean(muon, NEWTON_SCHULZ, "ms_per_step")
    return (
        f"Newton-Schulz does {float(ns) / 1e9:.2f} GFLOP per step on the busiest rank, {ratio:.2g}x that rank's forward+backward "
        f"({per_rank / 1e9:.2f} GFLOP at {int(muon['tokens_per_step'])} tokens per step) and takes "
        f"{absent_or(ns_ms, f'{ns_ms:.0f} ms')} per step; "
        f"the ratio falls as 1/tokens per step (about 3.3 d_model / T for MLP-shaped matrices), so the seed's and the paper's "
        f"regimes (hundreds to millions of tokens per d_model) make it small.{_regime_note(t, muon)}"
    )


def _regime_note(t: ProfileTables, muon: pd.Series) -> str:
    """What the regime sweep measured at the largest step of the run's width, and where the cost model puts the claimed levels."""
    note = ""
    r = t.regimes
    if len(r) and "d_model" in r.columns:
        main = r[(r["optimizer"] == "muon") & (r["dp"] == 2) & (r["tp"] == 2) & (r["layout"] == "contiguous")]
        if len(main):
            widths = main["d_model"].astype(float)
            width = widths.iloc[(widths - float(muon.get("hidden") or 256)).abs().argmin()]
            at = main[widths == width].sort_values("tokens_per_step").iloc[-1]
            note += (
                f" The regime sweep (d_model {int(width)}, DP2·TP2) measures the share at {float(at['optimizer_share']):.1%} "
                f"[{float(at['optimizer_share_lo']):.1%}, {float(at['optimizer_share_hi']):.1%}] and Muon's extra step time at "
                f"{float(at['muon_extra']):+.0%} [{float(at['muon_extra_lo']):+.0%}, {float(at['muon_extra_hi']):+.0%}] with "
                f"{int(at['tokens_per_step']):,} tokens per step."
            )
    th = t.thresholds
    if len(th) and "metric" in th.columns:
        picks = th[(th["metric"] == "muon_extra") & (th["level"].astype(float).round(3) == 0.011) & th["tokens_per_step"].notna()]
        if len(picks):
            said = "; ".join(f"{row.machine} {row.model}: {float(row.tokens_per_step):,.0f}" for row in picks.itertuples())
            note += f" By the cost model, Muon's extra falls to 1.1% at these tokens per step: {said} (regime_thresholds)."
    return note


def _pair(t: ProfileTables) -> tuple[pd.Series, pd.Series] | None:
    """The Muon run at dp=2, tp=2 and the AdamW run beside it that did the same work; None without both."""
    muon = first_run(t.runs, optimizer="muon", dp=2, tp=2)
    if muon is None:
        return None
    adamw = t.runs[(t.runs["optimizer"] == "adamw") & (t.runs["dp"] == 2) & (t.runs["tp"] == 2)]
    adamw = adamw[(adamw["backend"] == muon["backend"]) & (adamw["device"] == muon["device"])]
    if adamw.empty:
        return None
    same = adamw[adamw["tokens_per_step"] == muon["tokens_per_step"]] if not is_missing(muon.get("tokens_per_step")) else adamw
    partner = first_run(same if len(same) else adamw)
    check_same_work(muon, partner)
    return muon, partner


def _comm_column(t: ProfileTables) -> str:
    return (
        "comm_transfer_ms" if "comm_transfer_ms" in t.steps.columns and t.steps["comm_transfer_ms"].notna().any() else "comm_ms"
    )


def comm_time(t: ProfileTables) -> Measurement | str:
    pair = _pair(t)
    if pair is None:
        return "needs a Muon run and an AdamW run at dp=2, tp=2 with the same work"
    muon, adamw = pair
    col = _comm_column(t)
    value, low, high = paired_ratio(t, muon, adamw, col)
    total = paired_ratio(t, muon, adamw, "comm_ms")[0]
    dp_gather_mb = t.phase_mean(muon, DP_GATHER, "trace_bytes") / 1e6
    tp_gather_mb = t.phase_mean(muon, TP_GATHER, "trace_bytes") / 1e6
    what = (
        "transfer time (from the last rank's arrival to the end of each collective)"
        if col == "comm_transfer_ms"
        else "communication time"
    )
    explanation = (
        f"Compares {what}; with the waiting included the ratio is {total:.2f}. Muon's DP gather: "
        f"{absent_or(dp_gather_mb, f'{dp_gather_mb:.2f} MB per rank per step')}; its TP gather: "
        f"{absent_or(tp_gather_mb, f'{tp_gather_mb:.2f} MB per rank per step')}. {_waits_compared(t, muon, adamw)}"
        "On gloo every byte crosses the CPU's memory over loopback TCP; the seed measured NCCL over PCIe, where both "
        "optimizers' collectives overlap differently with compute."
    )
    return Measurement(value, low, high, describe_runs(muon, adamw), explanation, (muon, adamw))


def _waits_compared(t: ProfileTables, muon: pd.Series, adamw: pd.Series, top: int = 2) -> str:
    """The phases where Muon waits longest beyond AdamW (ms per step, mean over trials and ranks), as a sentence."""
    if "wait_ms_per_step" not in t.phases.columns:
        return ""
    waits = {
        name: t.phases[t.phases["run"] == run["run"]].groupby("phase")["wait_ms_per_step"].mean().astype("float64")
        for name, run in (("muon", muon), ("adamw", adamw))
    }
    both = pd.DataFrame(waits).fillna({"adamw": 0.0}).dropna(subset=["muon"])
    both = both.assign(extra=both["muon"] - both["adamw"]).sort_values("extra", ascending=False)
    longer = both[both["extra"] > 0].head(top)
    if longer.empty:
        return "Muon waits no longer than AdamW in any phase. "
    said = "; ".join(
        f"{phase} {row.muon:.1f} against {row.adamw:.1f}" + ("" if phase in waits["adamw"].index else " (AdamW has none)")
        for phase, row in longer.iterrows()
    )
    return f"Where Muon waits longer than AdamW (ms per step, Muon against AdamW): {said}. "


def optimizer_share(t: ProfileTables) -> Measurement | str:
    muon = first_run(t.runs, optimizer="muon", dp=2, tp=2)
    if muon is None:
        return "needs a Muon run at dp=2, tp=2"
    value, low, high = mean_interval(t.per_round_share(muon, "optimizer_ms", "step_ms"))  # the share formed within each step
    extra = ""
    pair = _pair(t)
    if pair is not None and not is_missing(muon.get("tokens_per_step")):
        adamw = pair[1]
        muon_ms, adamw_ms = t.paired("step_ms", "max", muon, adamw)
        extra_ms = muon_ms - adamw_ms
        d, dlo, dhi = mean_interval(extra_ms / float(muon["tokens_per_step"]) * 1000.0)
        extra = f" Muon's extra over AdamW: {d:.1f} µs per token (95% interval {dlo:.1f} to {dhi:.1f})."
    zero1 = t.phase_mean(muon, DP_REDUCE_SCATTER, "ms_per_step") + t.phase_mean(muon, DP_ALL_GATHER, "ms_per_step")
    explanation = (
        f"The optimizer step holds the ZeRO-1 gradient reduce-scatter and parameter all-gather that AdamW pays too "
        f"({absent_or(zero1, f'{zero1:.0f} ms per step here')}). {_ns_cause(t, muon)}{extra}"
    )
    return Measurement(value, low, high, describe_runs(muon), explanation, (muon,))


def state_memory(t: ProfileTables) -> Measurement | str:
    pair = _pair(t)
    if pair is None:
        return "needs a Muon run and an AdamW run at dp=2, tp=2 with the same work and layout"
    muon, adamw = pair
    m = t.ranks[(t.ranks["run"] == muon["run"]) & (t.ranks["trial"] == t.ranks["trial"].min())].set_index("rank")
    a = t.ranks[(t.ranks["run"] == adamw["run"]) & (t.ranks["trial"] == t.ranks["trial"].min())].set_index("rank")
    if m.empty or a.empty or m["muon_state_bytes"].isna().any() or a["adamw_state_bytes"].isna().any():
        return "needs per-rank optimizer state (metrics.json) for both runs"
    # The AdamW moments the AdamW run keeps for the same elements Muon manages on that rank: both runs
    # lay out the same flat buffer, so its state minus Muon's AdamW-routed state is the Muon matrices' share.
    adamw_for_matrices = a["adamw_state_bytes"].astype("float64") - m["adamw_state_bytes"].astype("float64")
    held = adamw_for_matrices > 0
    ratios = (m["muon_state_bytes"].astype("float64")[held] / adamw_for_matrices[held]).dropna()
    if ratios.empty:
        return "no rank holds Muon-managed matrices"
    whole = (m["state_bytes"].astype("float64") / a["state_bytes"].astype("float64")).max()
    muon_elems = m["muon_state_bytes"].astype("float64").sum() / 4.0
    all_elems = a["adamw_state_bytes"].astype("float64").sum() / 8.0
    f = muon_elems / all_elems if all_elems else float("nan")
    explanation = (
        f"Per rank, Muon keeps one fp32 momentum where AdamW keeps two fp32 moments for the same matrix elements "
        f"(ratios {ratios.min():.3f} to {ratios.max():.3f} over {len(ratios)} ranks). Over the whole model the largest "
        f"rank's ratio is {whole:.3f}: embeddings, the LM head and norms keep AdamW state in both optimizers, and Muon "
        f"manages a fraction f = {f:.2f} of the elements, so the whole-model ratio cannot fall below 1 - f/2 = {1 - f / 2:.3f}."
    )
    return Measurement.over_ranks(ratios, describe_runs(muon, adamw), explanation, (muon, adamw))


def hybrid(t: ProfileTables) -> Measurement | str:
    muon = t.runs[(t.runs["optimizer"] == "muon") & (t.runs["world_size"] == 4)]
    grid = {key: first_run(muon, dp=dp, tp=tp) for key, (dp, tp) in {"hybrid": (2, 2), "dp4": (4, 1), "tp4": (1, 4)}.items()}
    if any(r is None for r in grid.values()):
        return "needs Muon runs at dp=2/tp=2, dp=4/tp=1 and dp=1/tp=4 with the same tokens per step"
    h, d, p = grid["hybrid"], grid["dp4"], grid["tp4"]
    check_same_work(h, d)
    check_same_work(h, p)
    x, y, z = t.paired("step_ms", "max", h, d, p)
    value, low, high = paired_ratio_interval(x, np.minimum(y, z))
    tp_ms = t.phase_mean(h, MODEL_COMM_PHASES[0], "ms_per_step")
    explanation = (
        f"Median step time at {int(h['tokens_per_step'])} tokens per step: DP2·TP2 {float(h['step_ms']):.0f} ms, "
        f"DP4 {float(d['step_ms']):.0f} ms, TP4 {float(p['step_ms']):.0f} ms. Newton-Schulz per step on the busiest rank: "
        f"DP2·TP2 {float(h['ns_flops_max_rank'] or 0) / 1e9:.1f}, DP4 {float(d['ns_flops_max_rank'] or 0) / 1e9:.1f}, "
        f"TP4 {float(p['ns_flops_max_rank'] or 0) / 1e9:.1f} GFLOP; TP adds the model's all-reduces "
        f"({absent_or(tp_ms, f'{tp_ms:.0f} ms per step at TP2')})."
    )
    return Measurement(value, low, high, describe_runs(h, d, p), explanation, (h, d, p))


def async_slowdown(t: ProfileTables) -> Measurement | str:
    """Naive ``async_op=True`` gathers over the same run with blocking gathers (``overlap`` none);
    the pipelined variant is measured beside it, against the same twin."""
    if "overlap" not in t.runs.columns:
        return "needs the runs table's overlap column: re-run muon-repro analyze"
    muon = t.runs[t.runs["optimizer"] == "muon"]
    for _, naive in muon[muon["overlap"] == "naive_async"].iterrows():
        twin = _overlap_twin(muon, naive, "none")
        if twin is None:
            continue
        check_same_work(naive, twin)
        value, low, high = _step_ratio(t, naive, twin)
        explanation = (
            f"Step time with the DP and TP gathers issued async_op=True and waited for where their result is first "
            f"used, over blocking gathers: {value:.2f}x [{low:.2f}, {high:.2f}] on {naive['backend']}: "
            f"{_versus_one(low, high)}. "
        )
        if str(naive["backend"]) == "gloo":
            explanation += (
                "A naive port overlaps nothing by construction (each wait comes right after its issue), and gloo has no "
                "streams to get wrong; the seed attributes its ~2x to async_op=True without stream management and "
                "pipelining on GPUs (NCCL), which a CPU run cannot show. "
            )
        pipelined = _overlap_twin(muon, naive, "pipelined")
        if pipelined is not None:
            check_same_work(pipelined, twin)
            p_value, p_low, p_high = _step_ratio(t, pipelined, twin)
            explanation += (
                f"Pipelined gathers (the next units' gathers in flight while Newton-Schulz runs): "
                f"{p_value:.2f}x [{p_low:.2f}, {p_high:.2f}] of the blocking run's step time, {_versus_one(p_low, p_high)}."
            )
        described = [r for r in (naive, twin, pipelined) if r is not None]
        return Measurement(value, low, high, describe_runs(*described), explanation.strip(), tuple(described))
    return "needs a Muon run with overlap=naive_async and its twin with blocking gathers (muon-repro bench overlap)"


def _versus_one(low: float, high: float) -> str:
    """What an interval of a ratio says about 1."""
    if low > 1.0:
        return "slower, beyond the noise"
    if high < 1.0:
        return "faster, beyond the noise"
    return "not distinguishable from 1 within the noise"


def _overlap_twin(muon: pd.DataFrame, run: pd.Series, overlap: str) -> pd.Series | None:
    """The Muon run that differs from ``run`` only in how its gathers overlap."""
    same = (muon["dp"] == run["dp"]) & (muon["tp"] == run["tp"]) & (muon["backend"] == run["backend"])
    same &= muon["layout"].fillna("") == ("" if is_missing(run["layout"]) else run["layout"])
    candidates = muon[same & (muon["overlap"] == overlap)]
    recorded_together = candidates[candidates["group"] == run["group"]]  # interleaved in one sweep: preferred
    return first_run(recorded_together if len(recorded_together) else candidates)


def _step_ratio(t: ProfileTables, a: pd.Series, b: pd.Series) -> tuple[float, float, float]:
    """Step time of ``a`` over ``b`` (slowest rank per step), per round, with its paired interval."""
    return paired_ratio(t, a, b, "step_ms", "max")


def _dp_optimizer_bytes(t: ProfileTables, run: pd.Series) -> pd.Series:
    """Bytes each (trial, rank) sends per step on the DP group for the optimizer (ring model, from the trace)."""
    rows = t.phases[(t.phases["run"] == run["run"]) & t.phases["phase"].isin((DP_REDUCE_SCATTER, DP_GATHER, DP_ALL_GATHER))]
    return rows.groupby(["trial", "rank"])["trace_bytes"].sum().astype("float64")


def comm_bytes(t: ProfileTables) -> Measurement | str:
    pair = _pair(t)
    if pair is None:
        return "needs a Muon run and an AdamW run at dp=2, tp=2 with the same work"
    adamw = pair[1]
    # The paper's Algorithm 1 DP-gathers every matrix: the bucketed layout. Contiguous and
    # whole-matrix layouts gather only straddling matrices, or none, and are reported beside it.
    muon = first_run(t.runs, optimizer="muon", dp=2, tp=2, layout="bucketed")
    muon = pair[0] if muon is None else muon
    check_same_work(muon, adamw)
    adamw_bytes = _dp_optimizer_bytes(t, adamw)
    ratios = (_dp_optimizer_bytes(t, muon) / adamw_bytes).replace([np.inf, -np.inf], np.nan).dropna()
    if ratios.empty:
        return "needs trace bytes per phase for both runs"
    others = []
    for _, other in t.runs[(t.runs["optimizer"] == "muon") & (t.runs["dp"] == 2) & (t.runs["tp"] == 2)].iterrows():
        if other["run"] != muon["run"]:
            r = (_dp_optimizer_bytes(t, other) / adamw_bytes).dropna()
            if len(r):
                others.append(f"{other['layout']} layout ({other['run']}) {r.median():.3f}")
    tp_gather = t.phase_mean(muon, TP_GATHER, "trace_bytes")
    model_tp = float(np.nansum([t.phase_mean(muon, p, "trace_bytes") for p in MODEL_COMM_PHASES]))
    explanation = (
        f"The paper's quantity: bytes a rank sends on the DP group for the optimizer, ring model, with every matrix "
        f"DP-gathered as in its Algorithm 1 (our {muon['layout']} layout, {muon['run']}: "
        f"{float(_dp_optimizer_bytes(t, muon).mean()) / 1e6:.2f} MB per rank per step). The analytic model, the run-time "
        f"ledger and the trace agree on it. Layouts that gather only the matrices straddling a DP shard boundary send less: "
        f"{'; '.join(others) or 'none recorded'}. Beside it, not in it: Muon's TP gather "
        f"({absent_or(tp_gather, f'{tp_gather / 1e6:.2f} MB per rank per step')}) and the model's own TP traffic "
        f"({model_tp / 1e6:.2f} MB), which both optimizers pay."
    )
    loop_m, loop_a = muon.get("loopback_bytes_per_step"), adamw.get("loopback_bytes_per_step")
    if not is_missing(loop_m) and not is_missing(loop_a) and loop_a:
        explanation += (
            f" Bytes gloo actually sent over loopback, all ranks and all traffic: Muon {float(loop_m) / 1e6:.1f} MB, AdamW "
            f"{float(loop_a) / 1e6:.1f} MB per step (ring model: {float(muon.get('ring_bytes_per_step') or 0) / 1e6:.1f} and "
            f"{float(adamw.get('ring_bytes_per_step') or 0) / 1e6:.1f} MB): gloo's reduce-scatter is an all-reduce of the "
            f"whole input, twice the ring's bytes (docs/method.md#communication-model)."
        )
    return Measurement.over_ranks(ratios, describe_runs(muon, adamw), explanation, (muon, adamw))


def latency(t: ProfileTables) -> Measurement | str:
    pair = _pair(t)
    if pair is None:
        return "needs a Muon run and an AdamW run at dp=2, tp=2 with the same work"
    muon, adamw = pair
    value, low, high = (r - 1.0 for r in paired_ratio(t, muon, adamw, "step_ms", "max"))
    explanation = _ns_cause(t, muon) or "Step time of Muon over AdamW at the same work."
    return Measurement(value, low, high, describe_runs(muon, adamw), explanation, (muon, adamw))


def leading_steps_claim(t: ProfileTables) -> Measurement | str:
    """The leading ratio at the end (headline smoothing), per seed: its mean, and its range over seeds as the interval."""
    from muon_repro.analysis.convergence import HEADLINE_ALPHA, end_ratio

    lead, conv = t.leading, t.convergence
    if lead is None or conv is None or lead.empty:
        return (
            "no pair of Muon and AdamW convergence runs at their best learning rates with one seed; "
            "run `muon-repro converge` (then `muon-repro analyze`)"
        )
    lead = lead[lead["alpha"].astype(float) == HEADLINE_ALPHA]
    ends = {int(seed): end_ratio(g.reset_index(drop=True)) for seed, g in lead.groupby("seed")}
    ratios = np.array([r for r, _, _ in ends.values()], dtype=float)
    if not np.isfinite(ratios).any():
        return "AdamW never reached any smoothed loss of Muon's run, or the curves are empty"
    ratios = ratios[np.isfinite(ratios)]
    # A t interval over seeds; one seed gives none: the claim is then not measured (its explanation still gives the value).
    value, low, high = mean_interval(ratios) if len(ratios) >= 2 else (float("nan"), float("nan"), float("nan"))
    muon_lr, adamw_lr = float(lead["muon_lr"].iloc[0]), float(lead["adamw_lr"].iloc[0])
    best = conv[conv["best_lr"].fillna(False).astype(bool)]
    best = best[best["steps"] == best["steps"].max()]  # the long runs (the sweep may be shorter)
    sweep = conv[conv["sweep"].fillna(False).astype(bool)]
    finals = best.dropna(subset=["val_loss"]).sort_values("step").groupby(["optimizer", "seed"])["val_loss"].last().astype(float)
    rms = best.dropna(subset=["update_rms"]).groupby("optimizer")["update_rms"].median().astype(float)
    first = best.iloc[0]
    per_seed = "; ".join(
        f"seed {s}: {r:+.3f} at Muon step {m}" + (" (Muon's later losses beyond AdamW's reach)" if beyond else "")
        for s, (r, m, beyond) in sorted(ends.items())
    )
    val = {o: float(finals.loc[o].mean()) for o in ("muon", "adamw") if o in finals.index.get_level_values(0)}
    explanation = (
        f"EWM alpha {HEADLINE_ALPHA:g} on the training loss, Muon lr {muon_lr:g} vs AdamW lr {adamw_lr:g} "
        f"(each its best of the sweep). Leading ratio at the end, {per_seed}. Final held-out loss, mean over seeds: "
        f"Muon {val.get('muon', float('nan')):.3f}, AdamW {val.get('adamw', float('nan')):.3f} nats. "
        f"Update RMS of the hidden matrices per unit lr (median over evaluations): "
        f"Muon {rms.get('muon', float('nan')):.3f}, AdamW {rms.get('adamw', float('nan')):.3f}. Embeddings and LM head are "
        f"{float(first['embedding_share']):.0%} of the {int(first['params']):,} parameters "
        f"and take AdamW's step under either optimizer."
        + ("" if len(ratios) >= 2 else " One seed gives no interval: run `muon-repro converge --seeds 2` or more.")
    )
    conditions = (
        f"{conv['run'].nunique()} convergence runs on {first['corpus']}: "
        f"a {sweep['lr'].nunique() if len(sweep) else 0}-value learning-rate "
        f"sweep of {int(sweep['steps'].max()) if len(sweep) else 0} steps, "
        f"then {int(first['steps'])} steps x {int(first['tokens_per_step'])} tokens, "
        f"{int(first['params']):,} parameters, dp={int(first['dp'])} tp={int(first['tp'])} on {first['backend']}; "
        f"{len(ends)} seed(s) at the best learning rates"
    )
    return Measurement(value, low, high, conditions, explanation)


# Each claim's measurement, by the ids of muon_repro.analysis.claims.CLAIMS.
MEASURE: dict[str, Callable[[ProfileTables], Measurement | str]] = {
    "comm_time_dp2_tp2": comm_time,
    "optimizer_share": optimizer_share,
    "state_memory": state_memory,
    "hybrid_beats_pure": hybrid,
    "async_slowdown": async_slowdown,
    "comm_bytes_ratio": comm_bytes,
    "latency_overhead": latency,
    "muon_leading_steps": leading_steps_claim,
}
