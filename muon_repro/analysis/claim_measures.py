"""How each claim of :mod:`muon_repro.analysis.claims` is measured, and the measured cause its explanation names.

Each function takes one profile's :class:`~muon_repro.analysis.claim_inputs.ProfileTables` and returns a
:class:`~muon_repro.analysis.claim_inputs.Measurement` (value, 95% interval, the runs it was measured on, an
explanation), or a sentence saying which runs it needs; :data:`MEASURE` maps each claim id to its function. The
convergence claim's measurement is :mod:`muon_repro.analysis.leading_claim`'s.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from muon_repro.analysis.claim_inputs import (
    Measurement,
    ProfileTables,
    absent_or,
    check_same_work,
    describe_runs,
    dp2_tp2_pair,
    first_run,
    is_missing,
    ns_gflop,
    without_pipeline,
    work_difference,
)
from muon_repro.analysis.estimators import RunSteps, muon_extra, time_ratio
from muon_repro.analysis.estimators import optimizer_share as estimated_share
from muon_repro.analysis.leading_claim import leading_steps_claim
from muon_repro.analysis.pipeline_claims import bubble_hides_step, hybrid_survives_pp
from muon_repro.analysis.rounds import closest_rival_ratio, geometric_mean
from muon_repro.phases import DP_ALL_GATHER, DP_GATHER, DP_REDUCE_SCATTER, MODEL_COMM_PHASES, NEWTON_SCHULZ, TP_GATHER


def paired_ratio(t: ProfileTables, a: pd.Series, b: pd.Series, column: str, how: str = "mean") -> tuple[float, float, float]:
    """``column`` of ``a`` over ``b``, per round (the rounds both were recorded in), with its paired 95% interval."""
    return tuple(time_ratio(*t.sources(a, b), column, how))


def _ns_cause(t: ProfileTables, muon: pd.Series, quoted: dict[str, float]) -> str:
    """Newton-Schulz FLOPs against forward+backward FLOPs on the busiest rank: the cause of Muon's time cost."""
    ns, train, world = muon.get("ns_flops_max_rank"), muon.get("train_flops"), muon.get("world_size")
    if is_missing(ns) or is_missing(train) or is_missing(world) or not train:
        return ""
    per_rank = float(train) / float(world)
    ratio = float(ns) / per_rank
    quoted |= {"fwd_bwd_flops_per_rank": per_rank, "ns_over_fwd_bwd_busiest_rank": ratio}
    ns_ms = t.phase_mean(muon, NEWTON_SCHULZ, "ms_per_step")
    return (
        f"Newton-Schulz does {float(ns) / 1e9:.2f} GFLOP per step on the busiest rank, {ratio:.2g}x its forward+backward "
        f"at {int(muon['tokens_per_step']):,} tokens per step, in {absent_or(ns_ms, f'{ns_ms:.0f} ms profiled')}; the ratio "
        "falls as 1/tokens per step (regime_thresholds: where it reaches the claim's level)."
    )


def _comm_column(sources: list[RunSteps]) -> str:
    """The transfer time where every compared run's steps have one, else the communication time with the waits:
    one column for all of them, and never another run's (a profile's other runs do not decide this pair's)."""

    def has_transfer(source: pd.DataFrame, run: str) -> bool:
        return "comm_transfer_ms" in source.columns and source.loc[source["run"] == run, "comm_transfer_ms"].notna().any()

    return "comm_transfer_ms" if all(has_transfer(*source) for source in sources) else "comm_ms"


def comm_time(t: ProfileTables) -> Measurement | str:
    pair = dp2_tp2_pair(t)
    if pair is None:
        return "needs a Muon run and an AdamW run at dp=2, tp=2 with the same work"
    muon, adamw = pair
    untraced = [str(r["run"]) for r in pair if str(r.get("backend")).lower() == "nccl" and not (t.steps["run"] == r["run"]).any()]
    if untraced:
        return (
            f"needs the traced NCCL kernels of {' and '.join(untraced)}: on NCCL a collective call returns once its kernel "
            "is queued, so the steps timed without the profiler hold launch times, not communication"
        )
    sources = t.sources(muon, adamw, comm=True)
    col = _comm_column(sources)
    value, low, high = time_ratio(*sources, col, "mean")
    total = time_ratio(*sources, "comm_ms", "mean")[0]
    quoted = {"comm_ms_ratio_with_waiting": total}
    dp_gather_mb = t.phase_mean(muon, DP_GATHER, "trace_bytes") / 1e6
    tp_gather_mb = t.phase_mean(muon, TP_GATHER, "trace_bytes") / 1e6
    what = "transfer time (from the last rank's arrival)" if col == "comm_transfer_ms" else "communication time"
    explanation = (
        f"Compares {what}; with the waiting included the ratio is {total:.2f}. Muon's DP gather: "
        f"{absent_or(dp_gather_mb, f'{dp_gather_mb:.2f} MB per rank per step')}; its TP gather: "
        f"{absent_or(tp_gather_mb, f'{tp_gather_mb:.2f} MB')}. {_waits_compared(t, muon, adamw)}"
    ).strip()
    return Measurement(value, low, high, describe_runs(muon, adamw), explanation, (muon, adamw), quoted, comm=True)


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
    adamw_has = waits["adamw"].dropna().index  # a phase AdamW never issues has a row with no wait: not a wait of 0
    said = "; ".join(
        f"{phase} {row.muon:.1f} " + (f"against {row.adamw:.1f}" if phase in adamw_has else "(AdamW has none)")
        for phase, row in longer.iterrows()
    )
    return f"Muon waits longer than AdamW (ms per step): {said}. "


def _single_device_pair(t: ProfileTables) -> tuple[pd.Series, pd.Series] | None:
    """Muon and AdamW on one device (one rank: dp, tp and pp 1) at the largest tokens per step both were recorded
    at, whether or not they did the same work (a comparison checks that; a measure of Muon's run alone need not). The
    convergence runs (``muon-repro converge``: learning curves over learning rates and budgets, not rounds of timed
    steps) are not among them."""
    r = without_pipeline(t.runs)
    one = r[(r["dp"] == 1) & (r["tp"] == 1) & (r["group"] != "convergence")]
    muon, adamw = one[one["optimizer"] == "muon"], one[one["optimizer"] == "adamw"]
    common = set(muon["tokens_per_step"].dropna()) & set(adamw["tokens_per_step"].dropna())
    if not common:
        return None
    tokens = max(common)
    return first_run(muon, tokens_per_step=tokens), first_run(adamw, tokens_per_step=tokens)


def _one_device_cause(t: ProfileTables, muon: pd.Series, adamw: pd.Series | None, quoted: dict[str, float]) -> str:
    """Why Muon's step costs what it does on one device; AdamW's step beside it when ``adamw`` did the same work."""
    muon_ms = float(muon["timed_optimizer_ms"])
    quoted["muon_optimizer_ms"] = muon_ms
    beside = ""
    if adamw is not None:
        adamw_ms = quoted["adamw_optimizer_ms"] = float(adamw["timed_optimizer_ms"])
        beside = f", AdamW's {adamw_ms:.0f} ms; neither grows with the tokens (the GPU section: every tokens per step)"
    return (
        f"One device, no communication: Muon's own work (Newton-Schulz on every matrix, momentum, update) against "
        f"forward+backward. At {int(muon['tokens_per_step']):,} tokens per step its optimizer step takes {muon_ms:.0f} ms"
        f"{beside}."
    )


def optimizer_share(t: ProfileTables) -> Measurement | str:
    muon = first_run(without_pipeline(t.runs), optimizer="muon", dp=2, tp=2)
    if muon is None:
        single = _single_device_pair(t)
        if single is None:
            return "needs a Muon run at dp=2, tp=2"
        muon, adamw = single  # the share is Muon's alone: AdamW's run is quoted only if it did the same work
        value, low, high = estimated_share(*t.steps_of(muon))
        quoted: dict[str, float] = {}
        explanation = _one_device_cause(t, muon, adamw if work_difference(muon, adamw) is None else None, quoted)
        return Measurement(value, low, high, describe_runs(muon), explanation, (muon,), quoted)
    value, low, high = estimated_share(*t.steps_of(muon))  # the share formed within each step
    quoted: dict[str, float] = {}
    scatter = t.phase_mean(muon, DP_REDUCE_SCATTER, "ms_per_step")
    gather = t.phase_mean(muon, DP_ALL_GATHER, "ms_per_step")
    explanation = (
        f"The optimizer step holds the ZeRO-1 reduce-scatter ({absent_or(scatter, f'{scatter:.0f} ms per step profiled')}) "
        f"and all-gather ({absent_or(gather, f'{gather:.0f} ms')}) that AdamW pays too. {_ns_cause(t, muon, quoted)}"
    ).strip()
    return Measurement(value, low, high, describe_runs(muon), explanation, (muon,), quoted)


def hybrid(t: ProfileTables) -> Measurement | str:
    muon = without_pipeline(t.runs[(t.runs["optimizer"] == "muon") & (t.runs["world_size"] == 4)])
    muon = muon[muon["group"] != "pipeline"]  # the original study's grids, not the pipeline group's micro-batched twins
    grid = {key: first_run(muon, dp=dp, tp=tp) for key, (dp, tp) in {"hybrid": (2, 2), "dp4": (4, 1), "tp4": (1, 4)}.items()}
    if any(r is None for r in grid.values()):
        return "needs Muon runs at dp=2/tp=2, dp=4/tp=1 and dp=1/tp=4 with the same tokens per step"
    h, d, p = grid["hybrid"], grid["dp4"], grid["tp4"]
    check_same_work(h, d)
    check_same_work(h, p)
    x, y, z = t.paired("step_ms", "max", h, d, p)
    (value, low, high), _ = closest_rival_ratio(x, [y, z])  # over the faster of DP4 and TP4
    tp_ms = t.phase_mean(h, MODEL_COMM_PHASES[0], "ms_per_step")
    _, how = _step_column(t, h, d, p)
    # The times the ratio is made of: each run's per-round medians, averaged as the ratio is (geometric mean).
    hybrid_ms, dp4_ms, tp4_ms = (geometric_mean(v) for v in (x, y, z))
    explanation = (
        f"Step time {how} at {int(h['tokens_per_step'])} tokens per step, geometric mean over {len(x)} paired rounds "
        f"of each round's median: DP2·TP2 {hybrid_ms:.0f} ms, DP4 {dp4_ms:.0f} ms, TP4 {tp4_ms:.0f} ms. "
        "Newton-Schulz per step on the busiest rank: "
        f"DP2·TP2 {ns_gflop(h)}, DP4 {ns_gflop(d)}, TP4 {ns_gflop(p)} GFLOP; TP adds the model's all-reduces "
        f"({absent_or(tp_ms, f'{tp_ms:.0f} ms per step at TP2, profiled')})."
    )
    quoted = {"hybrid_step_ms": hybrid_ms, "dp4_step_ms": dp4_ms, "tp4_step_ms": tp4_ms}
    return Measurement(value, low, high, describe_runs(h, d, p), explanation, (h, d, p), quoted)


def _step_column(t: ProfileTables, *runs: pd.Series) -> tuple[str, str]:
    """The runs table's median step column the interval's times come from, and how it was timed."""
    if t.unprofiled(*runs) and not any(is_missing(r.get("timed_step_ms")) for r in runs):
        return "timed_step_ms", "(no profiler)"
    return "step_ms", "(profiled)"


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
        quoted: dict[str, float] = {}
        explanation = (
            f"Gathers issued async_op=True and waited for where first used, over blocking ones, on {naive['backend']}: "
            f"{_versus_one(low, high)}. "
        )
        if str(naive["backend"]) == "gloo":
            explanation += (
                "A naive port overlaps nothing (each wait follows its issue); gloo has no CUDA streams to mismanage, "
                "where the original study puts its ~2x. "
            )
        pipelined = _overlap_twin(muon, naive, "pipelined")
        if pipelined is not None:
            check_same_work(pipelined, twin)
            p_value, p_low, p_high = _step_ratio(t, pipelined, twin)
            quoted |= {"pipelined_over_blocking": p_value, "pipelined_over_blocking_low": p_low}
            quoted |= {"pipelined_over_blocking_high": p_high}
            explanation += (
                f"Pipelined gathers (in flight during Newton-Schulz): {p_value:.2f}x [{p_low:.2f}, {p_high:.2f}], "
                f"{_versus_one(p_low, p_high)}."
            )
        described = [r for r in (naive, twin, pipelined) if r is not None]
        return Measurement(
            value, low, high, describe_runs(*described), explanation.strip(), tuple(described), quoted, paired=(naive, twin)
        )
    return "needs a Muon run with overlap=naive_async and its twin with blocking gathers (muon-repro bench overlap)"


def _versus_one(low: float, high: float) -> str:
    """What an interval of a ratio says about 1."""
    if is_missing(low) or is_missing(high):
        return "no interval"
    if low > 1.0:
        return "slower, beyond the noise"
    if high < 1.0:
        return "faster, beyond the noise"
    return "not distinguishable from 1"


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


def latency(t: ProfileTables) -> Measurement | str:
    pair, single = dp2_tp2_pair(t), None
    if pair is None:
        single = pair = _single_device_pair(t)
    if pair is None:
        return "needs a Muon run and an AdamW run at dp=2, tp=2 with the same work"
    if single is not None:
        check_same_work(*single)  # dp2_tp2_pair's AdamW is already Muon's equal-work twin
    muon, adamw = pair
    value, low, high = muon_extra(*t.sources(muon, adamw))
    quoted: dict[str, float] = {}
    if single is not None:
        explanation = _one_device_cause(t, muon, adamw, quoted)
    else:
        explanation = _ns_cause(t, muon, quoted) or "Step time of Muon over AdamW at the same work."
    return Measurement(value, low, high, describe_runs(muon, adamw), explanation, (muon, adamw), quoted)


# Each claim's measurement, by the ids of muon_repro.analysis.claims.CLAIMS.
MEASURE: dict[str, Callable[[ProfileTables], Measurement | str]] = {
    "comm_time_dp2_tp2": comm_time,
    "optimizer_share": optimizer_share,
    "hybrid_beats_pure": hybrid,
    "hybrid_survives_pp": hybrid_survives_pp,
    "bubble_hides_step": bubble_hides_step,
    "async_slowdown": async_slowdown,
    "latency_overhead": latency,
    "muon_leading_steps": leading_steps_claim,
}
