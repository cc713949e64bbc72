"""The claims judged on the original study's own runs: the claims table's rows for the study's profile.

The claims, their regions and the verdict rule are :mod:`muon_repro.analysis.claims`'s, the same for every
profile. On the study's runs a claim's conditions hold by definition (they are the runs it was made on), so
the verdict comes from our measurement, per step: a value per step (the mean over the run's traced ranks),
and a 95% interval over the 5 steps (Welch's t on the log of each run's per-step values for a ratio of two
runs; Student's t for a share within one run). The 5 steps are one recording: the interval speaks to
step-to-step spread, not to a second recording's.

Compared runs get an equal-work check (collectives, bytes per rank and step, the gradient reduction each
performs). Where they did unequal work the verdict is ``unequal work``, with the measured difference:
a ratio of unequal work cannot confirm or refute a claim about the optimizers; it comes before the claim's
conditions, as on every profile (:func:`muon_repro.claims.judge`). Where the collectives table holds none of
their collectives, their work is unknown and the claim is ``not measured``. Each row also says what the
study's own method gives on these traces (:mod:`muon_repro.study.method`) and whether that rebuilds the
number the study published.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from muon_repro.analysis.rounds import LEVEL, align_rounds, natural_logs, paired_ratio_interval, share_interval, t_quantile
from muon_repro.claims import ANY_MACHINE, CLAIMS, NOT_COMPARABLE, STUDY, STUDY_SHARE, UNEQUAL_WORK, Claim, judge
from muon_repro.study.scopes import OPTIMIZER_SCOPES, STEP
from muon_repro.study.sources import GROUP, STUDY_PROFILE


def run_names(dp: int = 2, tp: int = 2) -> dict[str, str]:
    """The runs the measures compare, by role, on a DP x TP grid: Muon's names carry the grid (the study's, DP2·TP2)."""
    grid = f"dp{dp}_tp{tp}"
    return {"adamw_full": "adamw_FULLSTEP", "muon_full": f"muon_FULLSTEP_{grid}", "muon_async": f"muon_FULLSTEP_{grid}_async"}


RUN_NAMES = run_names()


def runs_of(prefix: str, dp: int = 2, tp: int = 2) -> dict[str, str]:
    """The run ids the measures compare, under ``<profile>/<group>``."""
    return {key: f"{prefix}/{name}" for key, name in run_names(dp, tp).items()}


RUN = runs_of(f"{STUDY_PROFILE}/{GROUP}")
# The published number each claim rests on (study_method), and the claim's own phrasing of it.
METHOD_NUMBER = {
    "comm_time_dp2_tp2": "comm_ratio",
    "optimizer_share": "optimizer_share_muon",
    "async_slowdown": "async_ratio_muon",
}
STEPS_NOTE = (
    "an interval over the 5 steps of one recording (step-to-step spread, not a second recording's), the first traced "
    "step included as the study's sums include it"
)


def welch_log_ratio(a: np.ndarray, b: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(estimate, low, high) of a/b from two unpaired samples: exp of the difference of mean logs, Welch's t."""
    la, lb = (natural_logs(x[np.isfinite(x) & (x > 0)]) for x in (np.asarray(a, "float64"), np.asarray(b, "float64")))
    if la.size < 2 or lb.size < 2:
        return math.nan, math.nan, math.nan
    va, vb = la.var(ddof=1) / la.size, lb.var(ddof=1) / lb.size
    diff = float(la.mean() - lb.mean())
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (la.size - 1) + vb**2 / (lb.size - 1)) if se > 0 else float(la.size + lb.size - 2)
    half = t_quantile(0.5 + level / 2, df) * se
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def _per_step(steps: pd.DataFrame, run: str, scopes: tuple[str, ...], column: str, rank: int | None = None) -> pd.Series:
    """The run's values, one per unit: per step the mean over traced ranks (or ``rank`` alone) of ``column`` summed
    over ``scopes``; with several recordings (rounds), one value per round, the mean of its steps' (rounds, not
    steps, are the independent units), indexed by the round's id (:func:`ratio_interval` pairs rounds by it)."""
    sel = steps[(steps["run"] == run) & steps["scope"].isin(scopes)]
    if rank is not None:
        sel = sel[sel["rank"] == rank]
    if sel.empty:
        return pd.Series(dtype="float64")
    trial = sel["trial"] if "trial" in sel.columns else pd.Series(0, index=sel.index)
    per_rank = sel.assign(trial=trial).groupby(["trial", "step", "rank"])[column].sum(min_count=1)
    per_step = per_rank.groupby(["trial", "step"]).mean().astype("float64")
    if per_step.index.get_level_values("trial").nunique() > 1:
        return per_step.groupby("trial").mean()
    return per_step


def _mean(values: pd.Series) -> float:
    """The mean of ``values``, NaN when there are none (a run without that rank)."""
    return float(np.mean(values)) if len(values) else math.nan


def in_rounds(steps: pd.DataFrame, *runs: str) -> bool:
    """Whether every one of ``runs`` was recorded in several rounds (:func:`_per_step` then gives a value per round)."""
    if "trial" not in steps.columns:
        return False
    return all(steps.loc[steps["run"] == run, "trial"].nunique() > 1 for run in runs)


def ratio_interval(a: pd.Series, b: pd.Series, *, per_round: bool) -> tuple[float, float, float]:
    """a/b with its 95% interval: of values ``per_round`` (:func:`in_rounds`, indexed by round id), paired by round id
    over the rounds both runs have; else Welch's, over the steps of one recording each (or over rounds the two runs
    share fewer than two of)."""
    if per_round:
        a_round, b_round = align_rounds((a.index.to_numpy(), a.to_numpy()), (b.index.to_numpy(), b.to_numpy()))
        if len(a_round) > 1:
            return paired_ratio_interval(a_round, b_round)
    return welch_log_ratio(a.to_numpy(dtype="float64"), b.to_numpy(dtype="float64"))


def _work(
    runs: pd.DataFrame, ranks: pd.DataFrame, a: str, b: str, rank: int | None = None, colls: pd.DataFrame | None = None
) -> tuple[bool | None, str, dict]:
    """Whether run ``a`` did the work of run ``b`` (None: unknown, :func:`_same_collectives`), and the measured
    difference in words and numbers. Equal: per rank and step the same collectives (op, group, dtype, elements); for
    Muon against AdamW, every collective of AdamW's plus Muon's own bf16 gathers of its momentum (what Distributed
    Muon adds, the paper's (1, 1.25] bytes) and nothing else."""
    ra, rb = ranks[ranks["run"] == a], ranks[ranks["run"] == b]
    if rank is not None:
        ra, rb = ra[ra["rank"] == rank], rb[rb["rank"] == rank]
    fa, fb = runs[runs["run"] == a].iloc[0], runs[runs["run"] == b].iloc[0]
    bytes_a, bytes_b = float(ra["ring_bytes_per_step"].mean()), float(rb["ring_bytes_per_step"].mean())
    calls_a, calls_b = float(ra["collectives_per_step"].mean()), float(rb["collectives_per_step"].mean())
    extra_only_gathers = fa["optimizer"] == "muon" and fb["optimizer"] == "adamw"
    equal = _same_collectives(colls, a, b, sorted(set(ra["rank"]) & set(rb["rank"])), extra_only_gathers)
    numbers = {"ring_bytes_a": bytes_a, "ring_bytes_b": bytes_b, "collectives_a": calls_a, "collectives_b": calls_b}
    who = f" on rank {rank}" if rank is not None else " (mean over ranks)"
    text = (
        f"{fa['name']} sends {bytes_a / 1e6:.1f} MB per rank and step in {calls_a:g} collectives{who}, "
        f"{fb['name']} {bytes_b / 1e6:.1f} MB in {calls_b:g}"
    )
    return equal, text, numbers


def _work_words(equal: bool | None) -> str:
    """:func:`_work`'s verdict on the work, as the explanations say it."""
    return {True: "the same work", False: "unequal work"}.get(equal, "work not known to be equal (no collectives table)")


def _same_collectives(colls: pd.DataFrame | None, a: str, b: str, ranks: list[int], extra_gathers: bool) -> bool | None:
    """Per rank, in each run's first recording and step: ``a``'s collectives are ``b``'s (plus, with
    ``extra_gathers``, only bf16 all-gathers). None when that is unknown: no collectives table, or no rank traced
    in both. Two runs on one rank issue none, so an empty table says they did the same."""
    from collections import Counter

    if colls is None or "run" not in colls.columns or not ranks:
        return None

    def of(run: str, r: int) -> Counter:
        c = colls[(colls["run"] == run) & (colls["rank"] == r)]
        c = c[(c["trial"] == c["trial"].min()) & (c["step"] == c["step"].min())]
        return Counter(zip(c["op"], c["group_ranks"], c["dtype"], c["elements"]))

    for r in ranks:
        mine, theirs = of(a, r), of(b, r)
        extra = mine - theirs
        if theirs - mine:
            return False
        if extra and not (extra_gathers and all(op == "all_gather" and dtype == "bfloat16" for op, _, dtype, _ in extra)):
            return False
    return True


def study_claim_rows(study: dict[str, pd.DataFrame]) -> list[dict]:
    """The claims table's rows on the study's profile (none without the study's runs: the protocol's runs recorded
    here are other profiles', judged in ``study_protocols``)."""
    runs, steps, ranks, method, colls = (
        study.get(k) for k in ("study_runs", "study_steps", "study_ranks", "study_method", "study_collectives")
    )
    if runs is None or runs.empty or not (runs["profile"] == STUDY_PROFILE).any():
        return []
    rebuilt = {r.number_id: (float(r.rebuilt), bool(r.rebuilt_matches)) for r in method.itertuples()} if len(method) else {}
    rows = []
    for claim in CLAIMS:
        measure = _MEASURES.get(claim.claim_id)
        m = measure(runs, steps, ranks, colls=colls) if measure is not None and set(RUN.values()) <= set(runs["run"]) else None
        rows.append(_row(claim, m, rebuilt.get(METHOD_NUMBER.get(claim.claim_id, ""))))
    return rows


class _Measured:
    """A claim measured on the study's runs."""

    def __init__(self, value, low, high, conditions, explanation, quoted, equal_work=None, work=""):
        self.value, self.low, self.high = value, low, high
        self.conditions, self.explanation, self.quoted = conditions, explanation, quoted
        self.equal_work, self.work = equal_work, work


def _comm_time(runs, steps, ranks, RUN: dict[str, str] = RUN, colls=None) -> _Measured:
    muon = _per_step(steps, RUN["muon_full"], (STEP,), "comm_transfer_ms")
    adamw = _per_step(steps, RUN["adamw_full"], (STEP,), "comm_transfer_ms")
    value, low, high = ratio_interval(muon, adamw, per_round=in_rounds(steps, RUN["muon_full"], RUN["adamw_full"]))
    kernel_ratio = float(np.mean(_per_step(steps, RUN["muon_full"], (STEP,), "comm_ms"))) / float(
        np.mean(_per_step(steps, RUN["adamw_full"], (STEP,), "comm_ms"))
    )
    equal, work, numbers = _work(runs, ranks, RUN["muon_full"], RUN["adamw_full"], colls=colls)
    bytes_ratio = numbers["ring_bytes_a"] / numbers["ring_bytes_b"]
    traced = steps.loc[steps["run"] == RUN["muon_full"], "rank"].nunique()
    quoted = {
        "muon_transfer_ms": float(np.mean(muon)),
        "adamw_transfer_ms": float(np.mean(adamw)),
        "kernel_time_ratio": kernel_ratio,
        "bytes_ratio": bytes_ratio,
        **numbers,
    }
    explanation = (
        f"NCCL transfer time per step, mean over the {traced} ranks: Muon {np.mean(muon):.1f} ms, AdamW "
        f"{np.mean(adamw):.1f} ms (with the waits for peers: {kernel_ratio:.2f}x). "
        + (
            "Unequal work: the study's AdamW all-reduces every fp32 gradient (DDP, no ZeRO-1), its Muon only gathers "
            f"bf16 momentum ({bytes_ratio:.2f}x the bytes). "
            if equal is False
            else f"{_work_words(equal).capitalize()}: Muon sends {bytes_ratio:.2f}x AdamW's bytes. "
        )
        + "The study's own figure sums each collective's CPU call, annotation, kernel and the kernel's GPU view "
        "(study_method_parts)."
    )
    return _Measured(value, low, high, _conditions(runs, RUN["muon_full"], RUN["adamw_full"]), explanation, quoted, equal, work)


def _optimizer_share(runs, steps, ranks, RUN: dict[str, str] = RUN, colls=None) -> _Measured:
    run = RUN["muon_full"]
    busy = _per_step(steps, run, OPTIMIZER_SCOPES, "busy_ms")
    cpu = _per_step(steps, run, OPTIMIZER_SCOPES, "cpu_ms")
    step = _per_step(steps, run, (STEP,), "step_ms")
    value, low, high = share_interval(busy / step)
    # the study's method reads rank 0's trace alone: its share is rank 0's Muon_Step CPU span over its outer scope's
    # (the step's CPU window, summed over the steps), so the explanation quotes rank 0's, not the mean over ranks
    cpu0 = _mean(_per_step(steps, run, OPTIMIZER_SCOPES, "cpu_ms", rank=0))
    span0 = _mean(_per_step(steps, run, (STEP,), "cpu_ms", rank=0))
    n_ranks = int(steps.loc[steps["run"] == run, "rank"].nunique())
    quoted = {
        "optimizer_gpu_busy_ms": float(np.mean(busy)),
        "optimizer_cpu_ms": float(np.mean(cpu)),
        "step_ms": float(np.mean(step)),
        "cpu_share": float(np.mean(cpu / step)),
        "rank0_optimizer_cpu_ms": cpu0,
        "rank0_step_cpu_ms": span0,
        "rank0_cpu_share": cpu0 / span0 if span0 else math.nan,
        "ranks_traced": n_ranks,
    }
    explanation = (
        f"The GPU is busy {np.mean(busy):.1f} ms per step with Muon_Step's kernels (bf16 Newton-Schulz, gathers) in a "
        f"{np.mean(step):.1f} ms step (means over the {n_ranks} ranks). The study's ~{STUDY_SHARE.percent} is rank 0's "
        f"Muon_Step CPU span ({cpu0:.2f} ms per step: launching those kernels) over rank 0's step span ({span0:.1f} ms); "
        "the kernels finish inside the next FWD_BWD's synchronize, counted as forward-backward."
    )
    return _Measured(value, low, high, _conditions(runs, run), explanation, quoted)


def _async_slowdown(runs, steps, ranks, RUN: dict[str, str] = RUN, colls=None) -> _Measured:
    naive = _per_step(steps, RUN["muon_async"], (STEP,), "step_ms", rank=0)
    sync = _per_step(steps, RUN["muon_full"], (STEP,), "step_ms", rank=0)
    value, low, high = ratio_interval(naive, sync, per_round=in_rounds(steps, RUN["muon_async"], RUN["muon_full"]))
    equal, work, numbers = _work(runs, ranks, RUN["muon_async"], RUN["muon_full"], rank=0, colls=colls)
    nccl_naive = float(np.mean(_per_step(steps, RUN["muon_async"], (STEP,), "comm_ms", rank=0)))
    nccl_sync = float(np.mean(_per_step(steps, RUN["muon_full"], (STEP,), "comm_ms", rank=0)))
    # the optimizer's kernels summed against the time the GPU was busy with them: more than it, they overlapped
    kernels, busy = (
        float(np.mean(_per_step(steps, RUN["muon_async"], ("Muon_Step",), column, rank=0)))
        for column in ("gpu_kernel_ms", "gpu_busy_ms")
    )
    quoted = {
        "async_step_ms": float(np.mean(naive)),
        "sync_step_ms": float(np.mean(sync)),
        "async_nccl_ms": nccl_naive,
        "sync_nccl_ms": nccl_sync,
        "async_optimizer_kernel_ms": kernels,
        "async_optimizer_gpu_busy_ms": busy,
        **numbers,
    }
    overlapped = kernels > busy * 1.01
    explanation = (
        f"Rank 0's step (the only async trace published): {np.mean(naive):.1f} ms with async_op=True against "
        f"{np.mean(sync):.1f} ms synchronous, {_work_words(equal)}. "
        f"Its NCCL kernels take {nccl_naive:.1f} against {nccl_sync:.1f} ms per step"
        + (
            f", unwaited, overlapping each other and Newton-Schulz: Muon_Step's kernels sum to {kernels:.1f} ms in "
            f"{busy:.1f} ms GPU-busy. "
            if overlapped
            else ". "
        )
        + "The study's 2.1x is that kernel time with its annotations, not the step time."
    )
    return _Measured(
        value, low, high, _conditions(runs, RUN["muon_async"], RUN["muon_full"], rank=0), explanation, quoted, equal, work
    )


def _latency_overhead(runs, steps, ranks, RUN: dict[str, str] = RUN, colls=None) -> _Measured:
    muon = _per_step(steps, RUN["muon_full"], (STEP,), "step_ms")
    adamw = _per_step(steps, RUN["adamw_full"], (STEP,), "step_ms")
    per_round = in_rounds(steps, RUN["muon_full"], RUN["adamw_full"])
    value, low, high = ratio_interval(muon, adamw, per_round=per_round)
    equal, work, numbers = _work(runs, ranks, RUN["muon_full"], RUN["adamw_full"], colls=colls)
    # the value is of geometric means (of rounds, or of one recording's steps); the study-runs table gives arithmetic
    # mean steps, whose ratio differs where the steps vary (AdamW's first step): both said, neither read as the other
    mean_muon, mean_adamw = float(np.mean(muon)), float(np.mean(adamw))
    estimator = "paired by round" if per_round else "geometric means of the steps"
    explanation = (
        f"Muon's step over AdamW's minus 1: {value - 1:+.1%} per step ({estimator}), on runs that did "
        f"{_work_words(equal)} (work_difference); the mean steps, {mean_muon:.1f} and {mean_adamw:.1f} ms, differ by "
        f"{mean_muon / mean_adamw - 1:+.1%} (AdamW's {float(np.min(adamw)):.1f}–{float(np.max(adamw)):.1f} ms). "
        "The study's full step is a simulated forward-backward of 20 chained 2048x2048 fp32 matmuls beside five "
        "random-gradient matrices."
    )
    quoted = {
        "muon_step_ms": mean_muon,
        "adamw_step_ms": mean_adamw,
        "mean_step_change": mean_muon / mean_adamw - 1,
        "adamw_step_ms_min": float(np.min(adamw)),
        "adamw_step_ms_max": float(np.max(adamw)),
        **numbers,
    }
    return _Measured(
        value - 1,
        low - 1,
        high - 1,
        _conditions(runs, RUN["muon_full"], RUN["adamw_full"]),
        explanation,
        quoted,
        equal,
        work,
    )


_MEASURES = {
    "comm_time_dp2_tp2": _comm_time,
    "optimizer_share": _optimizer_share,
    "async_slowdown": _async_slowdown,
    "latency_overhead": _latency_overhead,
}
_NOT_MEASURED = {
    "hybrid_beats_pure": "the study's DP4 and TP4 traces (its card lists distributed_muon/) were not published",
    "hybrid_survives_pp": "the study recorded no pipeline-parallel run",
    "bubble_hides_step": "the study recorded no pipeline-parallel run",
    "muon_leading_steps": "the study trained no model: its runs attach random gradients",
}


def _conditions(runs: pd.DataFrame, *names: str, rank: int | None = None) -> str:
    parts = []
    for name in names:
        r = runs[runs["run"] == name].iloc[0]
        who = f"rank {rank} of {int(r['world_size'])}" if rank is not None else f"{int(r['ranks_traced'])} ranks"
        parts.append(f"{name} (nccl on 4x {r['device']}, {who}, {int(r['steps'])} steps)")
    return "; ".join(parts) + f"; {STEPS_NOTE}"


NO_TOKENS = "a simulated forward-backward with no tokens, not a step that trains on tokens"


def outside_for_study(claim: Claim) -> str:
    """How the study's runs differ from the conditions of a claim made elsewhere (empty: they do not). The study's
    own claims were made on these runs; its runs are 4 GPUs on NCCL, one rank each, whose step is a simulated
    forward-backward of fixed matmuls with no tokens: a claim that needs tokens per step is outside them."""
    if claim.source == STUDY or claim.made_under is None:
        return ""
    return NO_TOKENS if claim.made_under.min_tokens_per_d_model is not None else ""


def _row(claim: Claim, m: _Measured | None, rebuilt: tuple[float, bool] | None) -> dict:
    nan = float("nan")
    if m is None:
        reason = _NOT_MEASURED.get(claim.claim_id, "the study's traces hold no run that can speak to it")
        value = low = high = nan
        verdict_ = "not measured"
        explanation, conditions, quoted, equal, work = f"Not measured on the study's own runs: {reason}.", "", {}, None, ""
        outside = ""
    else:
        value, low, high = m.value, m.low, m.high
        outside = outside_for_study(claim)
        explanation, conditions, quoted, equal, work = m.explanation, m.conditions, m.quoted, m.equal_work, m.work
        if equal is None and work:  # two runs compared whose collectives are not in the tables: their work is unknown
            verdict_ = "not measured"
            explanation = f"Not judged: the study_collectives table holds no collectives of these runs ({work}), so "
            explanation += "whether they did the same work is unknown: run muon-repro analyze again. " + m.explanation
        else:
            verdict_ = judge(low, high, claim.region, unequal_work=equal is False, outside=bool(outside))
    judged = (
        f"reproduced if the 95% interval over the steps lies inside {claim.region.text()}, not reproduced if outside, "
        "else inconclusive"
    )
    unequal = f"{UNEQUAL_WORK} when the compared runs did different work"  # first, as on every profile (judge)
    if claim.source == STUDY:
        rule = f"on the study's own runs its conditions hold (it was made on them): {unequal}; else {judged}"
    else:
        rule = (
            f"{unequal}; else {NOT_COMPARABLE} unless the study's runs meet the claim's conditions (a step that trains "
            f"on tokens, where they need one); then {judged}"
        )
    return {
        "claim_id": claim.claim_id,
        "profile": STUDY_PROFILE,
        "claim": claim.claim,
        "source": claim.source,
        "claimed_value": claim.claimed_value,
        **claim.region.columns(),
        "made_under": claim.made_under.text if claim.made_under is not None else ANY_MACHINE,
        "measured_value": value,
        "measured_low": low,
        "measured_high": high,
        "rounds": None,  # one recording: the interval is over its steps (study_protocols.rounds says 1)
        "unit": claim.unit,
        "unit_kind": claim.unit_kind,
        "conditions": conditions,
        "verdict": verdict_,
        "outside_conditions": outside,
        "explanation": explanation,
        "stated": quoted,
        "rule": rule,
        "study_method_value": rebuilt[0] if rebuilt else nan,
        "study_method_rebuilt": rebuilt[1] if rebuilt else None,
        "equal_work": equal,
        "work_difference": work if equal is False else "",
    }


PROTOCOL_CLAIMS = ("comm_time_dp2_tp2", "optimizer_share", "async_slowdown", "latency_overhead")
ONE_RANK_CLAIMS = ("optimizer_share", "latency_overhead")  # a set on one rank has no collective to time


def protocol_rows(study: dict[str, pd.DataFrame], method_sums: dict[tuple[str, str], dict] | None = None) -> list[dict]:
    """The study_protocols table: each claimed number measured, by the measures above, on every set of the study's
    runs (the study's own traces; the study's protocol and its equal-work variant recorded here, on 4 ranks or on
    one), side by side, with what the study's own method gives on the same traces (``method_sums``: per
    ``(profile, group)``, per round, the study's sums of each run's rank-0 trace, :func:`method_values`)."""
    runs, steps, ranks, colls = (study.get(k) for k in ("study_runs", "study_steps", "study_ranks", "study_collectives"))
    if runs is None or runs.empty:
        return []
    rows = []
    sets = runs.drop_duplicates(["profile", "group"])[["profile", "group", "protocol", "recorded_by"]]
    for s in sets.itertuples():
        mine = runs[(runs["profile"] == s.profile) & (runs["group"] == s.group) & (runs["optimizer"] == "muon")]
        dp, tp = (int(mine["dp"].iloc[0]), int(mine["tp"].iloc[0])) if len(mine) else (2, 2)
        run_ids = runs_of(f"{s.profile}/{s.group}", dp, tp)
        if not set(run_ids.values()) <= set(runs["run"]):
            continue
        # the rounds every run of the set has: the ones a paired interval can pair
        rounds = len(set.intersection(*(set(runs.loc[runs["run"] == run, "trial"]) for run in run_ids.values())))
        by_method = method_values((method_sums or {}).get((s.profile, s.group), {}), dp, tp)
        for claim_id in PROTOCOL_CLAIMS if dp * tp > 1 else ONE_RANK_CLAIMS:
            m = _MEASURES[claim_id](runs, steps, ranks, RUN=run_ids, colls=colls)
            rows.append(
                {
                    "claim_id": claim_id,
                    "profile": s.profile,
                    "group": s.group,
                    "protocol": s.protocol,
                    "recorded_by": s.recorded_by,
                    "rounds": rounds,
                    "measured_value": m.value,
                    "measured_low": m.low,
                    "measured_high": m.high,
                    "equal_work": m.equal_work,
                    "work_difference": m.work if m.equal_work is False else "",
                    "study_method_value": by_method.get(METHOD_NUMBER.get(claim_id, ""), math.nan),
                }
            )
    return rows


def method_values(sums_by_round: dict[int, dict[str, object]], dp: int, tp: int) -> dict[str, float]:
    """The study's method (:func:`muon_repro.study.method.method_numbers`) on one set's rank-0 traces, each number
    the mean over the rounds it was computed in. Muon's runs are renamed to the study's grid, which the method's
    run names hold."""
    from muon_repro.study.method import method_numbers

    grid, study_grid = f"dp{dp}_tp{tp}", "dp2_tp2"
    per_round = [
        method_numbers({name.replace(grid, study_grid): sums for name, sums in rank0.items()}) for rank0 in sums_by_round.values()
    ]
    numbers = {key for numbers in per_round for key in numbers}
    return {key: float(np.mean([n[key] for n in per_round if key in n])) for key in numbers}
