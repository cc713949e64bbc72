"""The claims we test, measured on the analyzed runs, each with an explicit verdict rule.

From the seed (DESIGN.md section 1: the HF forum post and dataset card, 4 GPUs over PCIe
Gen4 x4) and from the paper (arXiv 2502.16982, section 2.3). A claim that no analyzed run
can speak to is listed as ``not measured``, with the runs it would need, so the table always
has every claim.

Verdicts: ``supported`` (the number agrees within the rule's tolerance), ``partly supported``
(the direction holds, the magnitude does not), ``not supported``, ``not measured``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

SEED = "seed: HF forum post and dataset card (bird-of-paradise/muon-distributed-reproducibility), 4 GPUs, PCIe Gen4 x4"
PAPER = "paper: Muon is Scalable for LLM Training (arXiv 2502.16982), section 2.3"


@dataclass(frozen=True)
class Claim:
    claim_id: str
    claim: str
    source: str
    seed_value: float | None
    unit: str
    rule: str
    verdict: Callable[[float], str]


def _within(center: float, rel: float, direction: Callable[[float], bool]) -> Callable[[float], str]:
    def verdict(x: float) -> str:
        if abs(x - center) <= rel * abs(center):
            return "supported"
        return "partly supported" if direction(x) else "not supported"

    return verdict


def _bytes_verdict(x: float) -> str:
    if 1.0 < x <= 1.25 + 1e-9:
        return "supported"
    if 1.0 <= x <= 4 / 3 + 1e-9:
        return "partly supported"
    return "not supported"


def _latency_verdict(x: float) -> str:
    if x <= 0.03:
        return "supported"
    return "partly supported" if x <= 0.10 else "not supported"


def _share_verdict(x: float) -> str:
    if x <= 2 * 0.011:
        return "supported"
    return "partly supported" if x <= 0.05 else "not supported"


def _below_one(x: float) -> str:
    return "supported" if x < 1.0 else "not supported"


def _async_verdict(x: float) -> str:
    if x >= 1.5:
        return "supported"
    return "partly supported" if x > 1.0 else "not supported"


CLAIMS = (
    Claim(
        "comm_time_dp2_tp2",
        "Muon at DP=2, TP=2 spends 0.57x the communication time of AdamW",
        SEED,
        0.57,
        "ratio Muon/AdamW",
        "supported within 20% of 0.57; partly supported if below 1 (less time than AdamW); else not supported",
        _within(0.57, 0.20, lambda x: x < 1.0),
    ),
    Claim(
        "optimizer_share",
        "The Muon optimizer step is ~1.1% of training time",
        SEED,
        0.011,
        "fraction of step time",
        "supported up to 2.2% (twice the claim); partly supported up to 5%; else not supported",
        _share_verdict,
    ),
    Claim(
        "state_memory",
        "Muon keeps 50% less optimizer state than AdamW",
        SEED,
        0.5,
        "ratio Muon/AdamW",
        "supported within 0.1 of 0.5 (Muon's non-matrix parameters keep AdamW state); partly supported if below 1",
        _within(0.5, 0.2, lambda x: x < 1.0),
    ),
    Claim(
        "hybrid_beats_pure",
        "DP=2/TP=2 beats pure DP=4 and pure TP=4 (Muon, 4 ranks)",
        SEED,
        None,
        "ratio of step time, DP2/TP2 over the faster of DP4 and TP4",
        "supported if below 1",
        _below_one,
    ),
    Claim(
        "async_slowdown",
        "Naive async_op=True makes Muon ~2x slower",
        SEED,
        2.0,
        "ratio of step time, async over sync",
        "supported from 1.5; partly supported above 1",
        _async_verdict,
    ),
    Claim(
        "comm_bytes_ratio",
        "Distributed Muon communicates (1, 1.25] times the bytes of ZeRO-1 AdamW (fp32 gradients and parameters)",
        PAPER,
        1.25,
        "ratio Muon/AdamW, bytes per rank per step",
        "supported in (1, 1.25]; partly supported in [1, 4/3] (the bound with a bf16 parameter all-gather); else not supported",
        _bytes_verdict,
    ),
    Claim(
        "latency_overhead",
        "Distributed Muon adds 1-3% to the end-to-end step time of AdamW",
        PAPER,
        0.03,
        "fraction: Muon step time / AdamW step time - 1",
        "supported up to 3% (no slower counts); partly supported up to 10%; else not supported",
        _latency_verdict,
    ),
)


def _conditions(row: pd.Series, runs: pd.DataFrame, cols: tuple[str, ...]) -> str:
    described = []
    for col in cols:
        run = runs[runs["run"] == row[col]]
        if len(run):
            r = run.iloc[0]
            described.append(f"{r['run']} ({r['backend']} on {r['device']}, {int(r['ranks'])} ranks, {int(r['steps'])} steps)")
    return "; ".join(described)


def _preferred(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Comparisons at DP=2, TP=2, the seed's 'comparison' group and contiguous layout first."""
    c = comparisons[(comparisons["dp"] == 2) & (comparisons["tp"] == 2)].copy()
    c["_rank"] = (c["group"] != "comparison").astype(int) * 2 + (c["layout"].fillna("") != "contiguous").astype(int)
    return c.sort_values(["_rank", "muon_run"], kind="stable")


def claims_table(runs: pd.DataFrame, comparisons: pd.DataFrame) -> pd.DataFrame:
    """One row per claim in :data:`CLAIMS`, measured on ``runs`` and ``comparisons``."""
    runs = runs.astype(object).where(runs.notna(), None)
    comparisons = comparisons.astype(object).where(comparisons.notna(), None)
    measured: dict[str, tuple[float | None, str]] = {}
    pair = _preferred(comparisons)

    def from_pair(col: str, transform=lambda x: x) -> tuple[float | None, str]:
        usable = pair[pair[col].notna()]
        if usable.empty:
            return None, "needs a Muon run and an AdamW run at dp=2, tp=2 (same backend and device)"
        row = usable.iloc[0]
        text = _conditions(row, runs, ("muon_run", "adamw_run"))
        others = comparisons[comparisons[col].notna()]
        if len(others) > 1:
            values = [float(v) for v in others[col]]
            text += f"; all {len(values)} Muon/AdamW pairs: {transform(min(values)):.3g} to {transform(max(values)):.3g}"
        return transform(float(row[col])), text

    measured["comm_time_dp2_tp2"] = from_pair("comm_ms_ratio")
    measured["state_memory"] = from_pair("state_bytes_ratio")
    measured["comm_bytes_ratio"] = from_pair("comm_bytes_ratio")
    measured["latency_overhead"] = from_pair("step_ms_ratio", lambda x: x - 1.0)

    muon = runs[runs["optimizer"] == "muon"]
    m22 = muon[(muon["dp"] == 2) & (muon["tp"] == 2) & muon["optimizer_share"].notna()]
    if len(m22):
        m22 = m22.assign(_rank=(m22["group"] != "comparison").astype(int)).sort_values(["_rank", "run"], kind="stable")
        r = m22.iloc[0]
        measured["optimizer_share"] = (float(r["optimizer_share"]), _conditions(r, runs, ("run",)))
    else:
        measured["optimizer_share"] = (None, "needs a Muon run at dp=2, tp=2")

    measured["hybrid_beats_pure"] = _hybrid(muon, runs)
    measured["async_slowdown"] = _async(muon, runs)

    rows = []
    for c in CLAIMS:
        value, conditions = measured[c.claim_id]
        rows.append(
            {
                "claim_id": c.claim_id,
                "claim": c.claim,
                "source": c.source,
                "seed_value": c.seed_value,
                "measured_value": value,
                "unit": c.unit,
                "conditions": conditions,
                "verdict": c.verdict(value) if value is not None else "not measured",
                "rule": c.rule,
            }
        )
    return pd.DataFrame(rows)


def _hybrid(muon: pd.DataFrame, runs: pd.DataFrame) -> tuple[float | None, str]:
    four = muon[(muon["world_size"] == 4) & muon["step_ms"].notna()]
    for (backend, device), g in four.groupby(["backend", "device"]):
        g = g.assign(_rank=(g["group"] != "distributed_muon").astype(int)).sort_values(["_rank", "run"], kind="stable")
        hybrid = g[(g["dp"] == 2) & (g["tp"] == 2)]
        dp4 = g[(g["dp"] == 4) & (g["tp"] == 1)]
        tp4 = g[(g["dp"] == 1) & (g["tp"] == 4)]
        if len(hybrid) and len(dp4) and len(tp4):
            h, d, t = hybrid.iloc[0], dp4.iloc[0], tp4.iloc[0]
            value = float(h["step_ms"]) / min(float(d["step_ms"]), float(t["step_ms"]))
            text = (
                f"step_ms {h['run']} {float(h['step_ms']):.4g}, {d['run']} {float(d['step_ms']):.4g}, "
                f"{t['run']} {float(t['step_ms']):.4g} ({backend} on {device})"
            )
            return value, text
    return None, "needs Muon runs at dp=2/tp=2, dp=4/tp=1 and dp=1/tp=4 on the same backend and device"


def _async(muon: pd.DataFrame, runs: pd.DataFrame) -> tuple[float | None, str]:
    is_async = muon["name"].astype(str).str.contains("async")
    for _, a in muon[is_async].iterrows():
        sync = muon[
            ~is_async
            & (muon["dp"] == a["dp"])
            & (muon["tp"] == a["tp"])
            & (muon["backend"] == a["backend"])
            & (muon["device"] == a["device"])
            & muon["step_ms"].notna()
        ]
        if len(sync) and a["step_ms"] is not None:
            s = sync.iloc[0]
            return float(a["step_ms"]) / float(s["step_ms"]), f"{a['run']} vs {s['run']} ({a['backend']} on {a['device']})"
    return None, "needs a Muon run with async_op=True (a run name containing 'async') and its synchronous twin"
