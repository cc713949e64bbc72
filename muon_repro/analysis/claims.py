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
compared only when they did the same work (:func:`check_same_work`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from muon_repro.analysis.bootstrap import interval, per_step
from muon_repro.hardware import UNKNOWN_PROFILE, ordered_profiles, rows_of_profile
from muon_repro.rundir import DP_ALL_GATHER, DP_GATHER, DP_REDUCE_SCATTER, MODEL_COMM_PHASES, NEWTON_SCHULZ, TP_GATHER

SEED = "seed: HF forum post and dataset card (bird-of-paradise/muon-distributed-reproducibility), 4 GPUs, PCIe Gen4 x4"
PAPER = "paper: Muon is Scalable for LLM Training (arXiv 2502.16982), section 2.3"
MOONSHOT_LEADING = "Moonshot / Moonlight (arXiv 2502.16982; the PR #1428 thread's 'Muon leading steps'), modded-nanogpt's records"
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not measured")
# What two runs must share to be compared: the same work on the same kind of machine.
SAME_WORK = ("preset", "tokens_per_step", "seq_len", "reduce_dtype", "backend", "device")


class UnequalWork(ValueError):
    """Two runs to be compared did different work; the message names both runs and the field."""


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


@dataclass(frozen=True)
class Measurement:
    value: float
    low: float
    high: float
    conditions: str
    explanation: str

    @classmethod
    def over_ranks(cls, values: pd.Series, conditions: str, explanation: str) -> Measurement:
        """A quantity that does not vary between steps: its median, and its range over ranks as the interval."""
        return cls(float(values.median()), float(values.min()), float(values.max()), conditions, explanation)


NOT_MEASURED = float("nan")

CLAIMS = (
    Claim("comm_time_dp2_tp2", "Muon at DP=2, TP=2 spends 0.57x the communication time of AdamW", SEED, 0.57,
          "ratio Muon/AdamW of transfer time per step", Region(0.57 * 0.8, 0.57 * 1.2)),
    Claim("optimizer_share", "The Muon optimizer step is ~1.1% of training time", SEED, 0.011,
          "fraction: optimizer step time / training step time (Muon, DP=2, TP=2)", Region(0.0, 0.022)),
    Claim("state_memory", "Muon keeps 50% less optimizer state than AdamW", SEED, 0.5,
          "ratio Muon/AdamW of the state for the matrices Muon manages, per rank", Region(0.45, 0.55)),
    Claim("hybrid_beats_pure", "DP=2/TP=2 beats pure DP=4 and pure TP=4 (Muon, 4 ranks, same tokens per step)", SEED, None,
          "ratio of step time, DP2·TP2 over the faster of DP4 and TP4", Region(None, 1.0)),
    Claim("async_slowdown", "Naive async_op=True makes Muon ~2x slower", SEED, 2.0,
          "ratio of step time, naive async over synchronous gathers", Region(1.5, 2.5)),
    Claim("comm_bytes_ratio", "Distributed Muon communicates (1, 1.25] times the bytes of ZeRO-1 AdamW (DP group, optimizer traffic)",
          PAPER, 1.25, "ratio Muon/AdamW of the bytes a rank sends per step on the DP group", Region(1.0, 1.25, low_open=True)),
    Claim("latency_overhead", "Distributed Muon adds 1-3% to the end-to-end step time of AdamW", PAPER, 0.03,
          "fraction: Muon step time / AdamW step time - 1", Region(None, 0.03)),
    Claim("muon_leading_steps", "Muon reaches AdamW's loss in fewer steps", MOONSHOT_LEADING, None,
          "fraction: leading ratio at the end, the extra steps AdamW needs to reach Muon's smoothed training loss, (AdamW step - Muon step) / Muon step", Region(0.0, None, low_open=True)),
)  # fmt: skip


# ---------------------------------------------------------------- choosing and checking runs


def check_same_work(a: pd.Series, b: pd.Series, fields: tuple[str, ...] = SAME_WORK) -> None:
    """Refuse to compare runs that did different work; the error names both runs and the field."""
    for name in fields:
        va, vb = a.get(name), b.get(name)
        if _missing(va) and _missing(vb):
            continue
        if _missing(va) or _missing(vb) or va != vb:
            raise UnequalWork(
                f"runs {a['run']} and {b['run']} did different work: {name} is {va!r} vs {vb!r}; "
                f"record them with the same {name} to compare them"
            )


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _first(runs: pd.DataFrame, **where) -> pd.Series | None:
    """The first run matching ``where``, the seed's 'comparison' group and the contiguous layout first."""
    sel = runs
    for col, value in where.items():
        sel = sel[sel[col] == value]
    if sel.empty:
        return None
    order = sel.assign(_g=(sel["group"] != "comparison").astype(int), _l=(sel["layout"].fillna("") != "contiguous").astype(int))
    return order.sort_values(["_g", "_l", "run"], kind="stable").iloc[0]


def _describe(*rows: pd.Series) -> str:
    return "; ".join(
        f"{r['run']} ({r['backend']} on {r['device']}, {int(r['ranks'])} ranks, {int(r['trials'])} trials x "
        f"{int(r['steps']) // max(int(r['trials']), 1)} steps, {int(r['tokens_per_step'])} tokens/step)"
        if not _missing(r.get("tokens_per_step")) and not _missing(r.get("trials")) else f"{r['run']}"
        for r in rows
    )


# ---------------------------------------------------------------- the measurements


@dataclass
class Tables:
    runs: pd.DataFrame
    steps: pd.DataFrame
    ranks: pd.DataFrame
    phases: pd.DataFrame
    regimes: pd.DataFrame = field(default_factory=pd.DataFrame)  # the regime sweep, when one was recorded
    thresholds: pd.DataFrame = field(default_factory=pd.DataFrame)  # the cost model's regime_thresholds
    convergence: pd.DataFrame | None = None  # analysis/convergence.py's tables, when given
    leading: pd.DataFrame | None = None

    def samples(self, run: pd.Series, column: str, how: str = "mean") -> np.ndarray:
        return per_step(self.steps, str(run["run"]), column, how)

    def phase_mean(self, run: pd.Series, phase: str, column: str) -> float:
        rows = self.phases[(self.phases["run"] == run["run"]) & (self.phases["phase"] == phase)][column].dropna()
        return float(rows.astype("float64").mean()) if len(rows) else 0.0


def _ns_cause(t: Tables, muon: pd.Series) -> str:
    """Newton-Schulz FLOPs against forward+backward FLOPs on the busiest rank: the cause of Muon's time cost."""
    ns, train, world = muon.get("ns_flops_max_rank"), muon.get("train_flops"), muon.get("world_size")
    if _missing(ns) or _missing(train) or _missing(world) or not train:
        return ""
    per_rank = float(train) / float(world)
    ratio = float(ns) / per_rank
    ns_ms = t.phase_mean(muon, NEWTON_SCHULZ, "ms_per_step")
    return (
        f"Newton-Schulz does {float(ns) / 1e9:.2f} GFLOP per step on the busiest rank, {ratio:.2g}x that rank's forward+backward "
        f"({per_rank / 1e9:.2f} GFLOP at {int(muon['tokens_per_step'])} tokens per step) and takes {ns_ms:.0f} ms per step; "
        f"the ratio falls as 1/tokens per step (about 3.3 d_model / T for MLP-shaped matrices), so the seed's and the paper's "
        f"regimes (hundreds to millions of tokens per d_model) make it small.{_regime_note(t, muon)}"
    )


def _regime_note(t: Tables, muon: pd.Series) -> str:
    """What the regime sweep measured at the largest step of the run's width, and where the cost model puts the claimed levels."""
    note = ""
    r = t.regimes
    if len(r) and "d_model" in r.columns:
        main = r[(r["optimizer"] == "muon") & (r["dp"] == 2) & (r["tp"] == 2) & (r["layout"] == "contiguous")]
        if len(main):
            widths = main["d_model"].astype(float)
            width = widths.iloc[(widths - float(muon.get("hidden") or 256)).abs().argmin()]
            at = main[widths == width].sort_values("tokens_per_step").iloc[-1]
            note += (f" The regime sweep (d_model {int(width)}, DP2·TP2) measures the share at {float(at['optimizer_share']):.1%} "
                     f"[{float(at['optimizer_share_lo']):.1%}, {float(at['optimizer_share_hi']):.1%}] and Muon's extra step time at "
                     f"{float(at['muon_extra']):+.0%} [{float(at['muon_extra_lo']):+.0%}, {float(at['muon_extra_hi']):+.0%}] with "
                     f"{int(at['tokens_per_step']):,} tokens per step.")  # fmt: skip
    th = t.thresholds
    if len(th) and "metric" in th.columns:
        picks = th[(th["metric"] == "muon_extra") & (th["level"].astype(float).round(3) == 0.011) & th["tokens_per_step"].notna()]
        if len(picks):
            said = "; ".join(f"{row.machine} {row.model}: {float(row.tokens_per_step):,.0f}" for row in picks.itertuples())
            note += f" By the cost model, Muon's extra falls to 1.1% at these tokens per step: {said} (regime_thresholds)."
    return note


def _pair(t: Tables) -> tuple[pd.Series, pd.Series] | None:
    muon = _first(t.runs, optimizer="muon", dp=2, tp=2)
    if muon is None:
        return None
    adamw = t.runs[(t.runs["optimizer"] == "adamw") & (t.runs["dp"] == 2) & (t.runs["tp"] == 2)]
    adamw = adamw[(adamw["backend"] == muon["backend"]) & (adamw["device"] == muon["device"])]
    if adamw.empty:
        return None
    same = adamw[adamw["tokens_per_step"] == muon["tokens_per_step"]] if not _missing(muon.get("tokens_per_step")) else adamw
    partner = _first(same if len(same) else adamw)
    check_same_work(muon, partner)
    return muon, partner


def _comm_column(t: Tables) -> str:
    return "comm_transfer_ms" if "comm_transfer_ms" in t.steps.columns and t.steps["comm_transfer_ms"].notna().any() else "comm_ms"


def comm_time(t: Tables) -> Measurement | str:
    pair = _pair(t)
    if pair is None:
        return "needs a Muon run and an AdamW run at dp=2, tp=2 with the same work"
    muon, adamw = pair
    col = _comm_column(t)
    value, low, high = interval(lambda m, a: m / a, [t.samples(muon, col), t.samples(adamw, col)])
    wait = t.phase_mean(muon, DP_GATHER, "wait_ms_per_step") if "wait_ms_per_step" in t.phases.columns else 0.0
    total = interval(lambda m, a: m / a, [t.samples(muon, "comm_ms"), t.samples(adamw, "comm_ms")])[0]
    what = "transfer time (from the last rank's arrival to the end of each collective)" if col == "comm_transfer_ms" else "communication time"
    explanation = (
        f"Compares {what}; with the waiting included the ratio is {total:.2f}. Muon's extra transfer is its DP gather "
        f"({t.phase_mean(muon, DP_GATHER, 'trace_bytes') / 1e6:.2f} MB per rank per step) and TP gather "
        f"({t.phase_mean(muon, TP_GATHER, 'trace_bytes') / 1e6:.2f} MB); in the DP gather a rank also waits "
        f"{wait:.0f} ms per step on average for the ranks still running Newton-Schulz. "
        "On gloo every byte crosses the CPU's memory over loopback TCP; the seed measured NCCL over PCIe, where both "
        "optimizers' collectives overlap differently with compute."
    )
    return Measurement(value, low, high, _describe(muon, adamw), explanation)


def optimizer_share(t: Tables) -> Measurement | str:
    muon = _first(t.runs, optimizer="muon", dp=2, tp=2)
    if muon is None:
        return "needs a Muon run at dp=2, tp=2"
    value, low, high = interval(lambda o, s: o / s, [t.samples(muon, "optimizer_ms"), t.samples(muon, "step_ms", "max")])
    extra = ""
    pair = _pair(t)
    if pair is not None and not _missing(muon.get("tokens_per_step")):
        adamw = pair[1]
        d, dlo, dhi = interval(lambda m, a: (m - a) / float(muon["tokens_per_step"]) * 1000.0,
                               [t.samples(muon, "step_ms", "max"), t.samples(adamw, "step_ms", "max")])  # fmt: skip
        extra = f" Muon's extra over AdamW: {d:.1f} µs per token (95% interval {dlo:.1f} to {dhi:.1f})."
    zero1 = t.phase_mean(muon, DP_REDUCE_SCATTER, "ms_per_step") + t.phase_mean(muon, DP_ALL_GATHER, "ms_per_step")
    explanation = (
        f"The optimizer step holds the ZeRO-1 gradient reduce-scatter and parameter all-gather that AdamW pays too "
        f"({zero1:.0f} ms per step here). {_ns_cause(t, muon)}{extra}"
    )
    return Measurement(value, low, high, _describe(muon), explanation)


def state_memory(t: Tables) -> Measurement | str:
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
    return Measurement.over_ranks(ratios, _describe(muon, adamw), explanation)


def hybrid(t: Tables) -> Measurement | str:
    muon = t.runs[(t.runs["optimizer"] == "muon") & (t.runs["world_size"] == 4)]
    grid = {key: _first(muon, dp=dp, tp=tp) for key, (dp, tp) in {"hybrid": (2, 2), "dp4": (4, 1), "tp4": (1, 4)}.items()}
    if any(r is None for r in grid.values()):
        return "needs Muon runs at dp=2/tp=2, dp=4/tp=1 and dp=1/tp=4 with the same tokens per step"
    h, d, p = grid["hybrid"], grid["dp4"], grid["tp4"]
    check_same_work(h, d)
    check_same_work(h, p)
    samples = [t.samples(r, "step_ms", "max") for r in (h, d, p)]
    value, low, high = interval(lambda x, y, z: x / np.minimum(y, z), samples)
    explanation = (
        f"Median step time at {int(h['tokens_per_step'])} tokens per step: DP2·TP2 {float(h['step_ms']):.0f} ms, "
        f"DP4 {float(d['step_ms']):.0f} ms, TP4 {float(p['step_ms']):.0f} ms. Newton-Schulz per step on the busiest rank: "
        f"DP2·TP2 {float(h['ns_flops_max_rank'] or 0) / 1e9:.1f}, DP4 {float(d['ns_flops_max_rank'] or 0) / 1e9:.1f}, "
        f"TP4 {float(p['ns_flops_max_rank'] or 0) / 1e9:.1f} GFLOP; TP adds the model's all-reduces "
        f"({t.phase_mean(h, MODEL_COMM_PHASES[0], 'ms_per_step'):.0f} ms per step at TP2)."
    )
    return Measurement(value, low, high, _describe(h, d, p), explanation)


def async_slowdown(t: Tables) -> Measurement | str:
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
        return Measurement(value, low, high, _describe(*described), explanation.strip())
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
    same &= muon["layout"].fillna("") == ("" if _missing(run["layout"]) else run["layout"])
    candidates = muon[same & (muon["overlap"] == overlap)]
    recorded_together = candidates[candidates["group"] == run["group"]]  # interleaved in one sweep: preferred
    return _first(recorded_together if len(recorded_together) else candidates)


def _step_ratio(t: Tables, a: pd.Series, b: pd.Series) -> tuple[float, float, float]:
    """Step time of ``a`` over ``b`` (slowest rank per step), with its bootstrap interval."""
    return interval(lambda x, y: x / y, [t.samples(a, "step_ms", "max"), t.samples(b, "step_ms", "max")])


def _dp_optimizer_bytes(t: Tables, run: pd.Series) -> pd.Series:
    """Bytes each (trial, rank) sends per step on the DP group for the optimizer (ring model, from the trace)."""
    rows = t.phases[(t.phases["run"] == run["run"]) & t.phases["phase"].isin((DP_REDUCE_SCATTER, DP_GATHER, DP_ALL_GATHER))]
    return rows.groupby(["trial", "rank"])["trace_bytes"].sum().astype("float64")


def comm_bytes(t: Tables) -> Measurement | str:
    pair = _pair(t)
    if pair is None:
        return "needs a Muon run and an AdamW run at dp=2, tp=2 with the same work"
    adamw = pair[1]
    # The paper's Algorithm 1 DP-gathers every matrix: the bucketed layout. Contiguous and
    # whole-matrix layouts gather only straddling matrices, or none, and are reported beside it.
    muon = _first(t.runs, optimizer="muon", dp=2, tp=2, layout="bucketed")
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
    model_tp = sum(t.phase_mean(muon, p, "trace_bytes") for p in MODEL_COMM_PHASES)
    explanation = (
        f"The paper's quantity: bytes a rank sends on the DP group for the optimizer, ring model, with every matrix "
        f"DP-gathered as in its Algorithm 1 (our {muon['layout']} layout, {muon['run']}: "
        f"{float(_dp_optimizer_bytes(t, muon).mean()) / 1e6:.2f} MB per rank per step). The analytic model, the run-time "
        f"ledger and the trace agree on it. Layouts that gather only the matrices straddling a DP shard boundary send less: "
        f"{'; '.join(others) or 'none recorded'}. Beside it, not in it: Muon's TP gather ({tp_gather / 1e6:.2f} MB per rank "
        f"per step) and the model's own TP traffic ({model_tp / 1e6:.2f} MB), which both optimizers pay."
    )
    loop_m, loop_a = muon.get("loopback_bytes_per_step"), adamw.get("loopback_bytes_per_step")
    if not _missing(loop_m) and not _missing(loop_a) and loop_a:
        explanation += (
            f" Bytes gloo actually sent over loopback, all ranks and all traffic: Muon {float(loop_m) / 1e6:.1f} MB, AdamW "
            f"{float(loop_a) / 1e6:.1f} MB per step (ring model: {float(muon.get('ring_bytes_per_step') or 0) / 1e6:.1f} and "
            f"{float(adamw.get('ring_bytes_per_step') or 0) / 1e6:.1f} MB): gloo's reduce-scatter is an all-reduce of the "
            f"whole input, twice the ring's bytes (docs/method.md#communication-model)."
        )
    return Measurement.over_ranks(ratios, _describe(muon, adamw), explanation)


def latency(t: Tables) -> Measurement | str:
    pair = _pair(t)
    if pair is None:
        return "needs a Muon run and an AdamW run at dp=2, tp=2 with the same work"
    muon, adamw = pair
    value, low, high = interval(lambda m, a: m / a - 1.0, [t.samples(muon, "step_ms", "max"), t.samples(adamw, "step_ms", "max")])
    return Measurement(value, low, high, _describe(muon, adamw), _ns_cause(t, muon) or "Step time of Muon over AdamW at the same work.")


def leading_steps_claim(t: Tables) -> Measurement | str:
    """The leading ratio at the end (headline smoothing), per seed: its mean, and its range over seeds as the interval."""
    from muon_repro.analysis.convergence import HEADLINE_ALPHA, end_ratio

    lead, conv = t.leading, t.convergence
    if lead is None or conv is None or lead.empty:
        return ("no pair of Muon and AdamW convergence runs at their best learning rates with one seed; "
                "run `muon-repro converge` (then `muon-repro analyze`)")  # fmt: skip
    lead = lead[lead["alpha"].astype(float) == HEADLINE_ALPHA]
    ends = {int(seed): end_ratio(g.reset_index(drop=True)) for seed, g in lead.groupby("seed")}
    ratios = np.array([r for r, _, _ in ends.values()], dtype=float)
    if not np.isfinite(ratios).any():
        return "AdamW never reached any smoothed loss of Muon's run, or the curves are empty"
    ratios = ratios[np.isfinite(ratios)]
    # One seed gives no interval: the claim is then not measured (its explanation still gives the value).
    low, high = (float(ratios.min()), float(ratios.max())) if len(ratios) >= 2 else (float("nan"), float("nan"))
    value = float(ratios.mean()) if len(ratios) >= 2 else float("nan")
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
        f"EWM alpha {HEADLINE_ALPHA:g} on the training loss, Muon lr {muon_lr:g} vs AdamW lr {adamw_lr:g} (each its best of the sweep). "
        f"Leading ratio at the end, {per_seed}. Final held-out loss, mean over seeds: Muon {val.get('muon', float('nan')):.3f}, "
        f"AdamW {val.get('adamw', float('nan')):.3f} nats. Update RMS of the hidden matrices per unit lr (median over evaluations): "
        f"Muon {rms.get('muon', float('nan')):.3f}, AdamW {rms.get('adamw', float('nan')):.3f}. Embeddings and LM head are "
        f"{float(first['embedding_share']):.0%} of the {int(first['params']):,} parameters and take AdamW's step under either optimizer."
        + ("" if len(ratios) >= 2 else " One seed gives no interval: run `muon-repro converge --seeds 2` or more.")
    )
    conditions = (
        f"{conv['run'].nunique()} convergence runs on {first['corpus']}: a {sweep['lr'].nunique() if len(sweep) else 0}-value learning-rate "
        f"sweep of {int(sweep['steps'].max()) if len(sweep) else 0} steps, then {int(first['steps'])} steps x {int(first['tokens_per_step'])} tokens, "
        f"{int(first['params']):,} parameters, dp={int(first['dp'])} tp={int(first['tp'])} on {first['backend']}; "
        f"{len(ends)} seed(s) at the best learning rates"
    )
    return Measurement(value, low, high, conditions, explanation)


MEASURE: dict[str, Callable[[Tables], Measurement | str]] = {
    "comm_time_dp2_tp2": comm_time,
    "optimizer_share": optimizer_share,
    "state_memory": state_memory,
    "hybrid_beats_pure": hybrid,
    "async_slowdown": async_slowdown,
    "comm_bytes_ratio": comm_bytes,
    "latency_overhead": latency,
    "muon_leading_steps": leading_steps_claim,
}
RULES = {
    "muon_leading_steps": "reproduced if the leading ratio at the end is above 0 for every seed (the interval is the range over seeds, "
    "at least 2), not reproduced if at or below 0 for every seed, else inconclusive",
}


def claims_table(
    runs: pd.DataFrame, steps: pd.DataFrame, ranks: pd.DataFrame, phases: pd.DataFrame, *,
    regimes: pd.DataFrame | None = None, thresholds: pd.DataFrame | None = None, convergence: dict[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:  # fmt: skip
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
        t = Tables(
            mine.astype(object).where(mine.notna(), None), *(rows_of_profile(df, profile) for df in (steps, ranks, phases, regimes, thresholds)),
            rows_of_profile(conv, profile), rows_of_profile(lead, profile),
        )  # fmt: skip
        rows += _claim_rows(t, profile)
    return pd.DataFrame(rows)


def _profiles_of(df: pd.DataFrame | None) -> list[str]:
    return [str(p) for p in df["profile"].dropna().unique()] if df is not None and "profile" in df.columns else []


def _claim_rows(t: Tables, profile: str) -> list[dict]:
    rows = []
    for c in CLAIMS:
        m = MEASURE[c.claim_id](t)
        measured = m if isinstance(m, Measurement) else Measurement(NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, "", f"Not measured: {m}.")
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
                "rule": RULES.get(c.claim_id, f"reproduced if the 95% interval lies inside {c.region.text()}, not reproduced if outside, else inconclusive"),
            }
        )
    return rows
