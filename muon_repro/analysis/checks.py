"""Consistency checks: quantities set by construction, judged holds or fails, beside the claims.

Two of the claims are counts, not measurements: Muon's optimizer state for the matrices it manages
(one fp32 momentum where AdamW keeps two moments: 0.5 by construction) and the bytes Distributed
Muon sends (priced by the same ring model as the analytic bytes, so the paper's ratio follows from
the layout). A 95% interval over them means nothing and a "reproduced" verdict could not have come
out otherwise, so they are *checks*: what the construction says (``expected``), what the run did
(``measured``), whether the two agree (``holds``), and what would make a check fail (``fails_if``).
Where a source stated the quantity, the row says whether the measured value lies in its region.

* ``state_accounting``: what each rank's optimizer holds, measured by storage (every tensor in its state whatever
  its name, every buffer it keeps), is what the shard plan calls for: 4 bytes for each element routed to Muon, 8 for
  each routed to AdamW, and no buffer Muon keeps beyond AdamW's. Its value is Muon's state over AdamW's for the
  elements Muon manages (0.5); the whole-model ratio ``1 - f/2`` follows from it and is stated, not checked apart;
* ``state_with_transients``: Muon's state plus its transient gather buffers against AdamW's state;
* ``bytes_<layout>``: per ZeRO-1 layout, the DP optimizer bytes in the traces equal the analytic ring
  model's and the run-time ledger's, and where the ratio lies against the paper's ``(1, 1.25]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from muon_repro.analysis.claim_inputs import ProfileTables, UnequalWork, describe_runs, dp2_tp2_pair, first_run, work_difference
from muon_repro.claims import PAPER, STUDY, UnitKind
from muon_repro.hardware import UNKNOWN_PROFILE, ordered_profiles, rows_of_profile
from muon_repro.phases import DP_ALL_GATHER, DP_GATHER, DP_REDUCE_SCATTER
from muon_repro.tables.schemas import SCHEMAS

EXACT = 1e-9  # relative: the quantities compared are byte counts, equal or not
FP32 = 4
DP_OPTIMIZER_PHASES = (DP_REDUCE_SCATTER, DP_GATHER, DP_ALL_GATHER)


@dataclass(frozen=True)
class Outcome:
    """One check's result: the value by construction, the measured value (and its range over ranks), whether they agree."""

    expected: float
    measured: float
    low: float
    high: float
    holds: bool | None  # None: nothing recorded to hold against (no analytic bytes, no ledger)
    explanation: str
    runs: tuple[pd.Series, ...]
    layout: str | None = None
    in_claimed_region: bool | None = None
    quoted: dict[str, float] = field(default_factory=dict)  # the numbers the explanation states that no cell holds


@dataclass(frozen=True)
class Check:
    check_id: str
    check: str  # what is checked, in one line
    claim: str  # the claim the check stands beside
    source: str
    unit: str
    fails_if: str
    claimed_region: str | None = None  # the source's values, where it stated the quantity
    unit_kind: UnitKind = "ratio"  # how its numbers read, in the claims' words (every check so far is a ratio)


STATE_CLAIM = "Muon keeps 50% less optimizer state than AdamW"
BYTES_CLAIM = "Distributed Muon communicates (1, 1.25] times the bytes of ZeRO-1 AdamW (DP group, optimizer traffic)"
BYTES_REGION = (1.0, 1.25)  # (low, high]: the paper's open lower bound

CHECKS = {
    "state_accounting": Check(
        "state_accounting",
        "What each rank's optimizer holds, measured by storage, is what the shard plan calls for: one fp32 momentum per "
        "Muon element, two fp32 moments per AdamW element, no extra buffer",
        STATE_CLAIM,
        STUDY,
        "ratio Muon/AdamW of the state held for the elements Muon manages, per rank, measured by storage",
        "either optimizer holds state the plan does not call for (a copy of the weights or a second momentum, under "
        "any name; another dtype), or Muon keeps a buffer AdamW does not",
        "[0.5, 0.5]",
    ),
    "state_with_transients": Check(
        "state_with_transients",
        "Muon's state plus its transient gather buffers stays below AdamW's state, on every rank",
        STATE_CLAIM,
        STUDY,
        "ratio: (Muon's state + its transient gather buffers) / AdamW's state, on the rank where it is largest",
        "the full matrices Muon gathers for Newton-Schulz take more memory than the momentum it saves",
    ),
    "bytes": Check(
        "bytes",
        "The DP optimizer bytes in the traces equal the analytic ring model's and the run-time ledger's",
        BYTES_CLAIM,
        PAPER,
        "ratio Muon/AdamW of the bytes a rank sends per step on the DP group for the optimizer",
        "a DP collective the model does not price (an extra gather, another dtype, a matrix gathered twice), or one "
        "the traces miss",
        "(1, 1.25]",
    ),
}


def _state_frames(t: ProfileTables, muon: pd.Series, adamw: pd.Series) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Both runs' per-rank state (their first trial), indexed by rank, as floats; None without it."""

    def first_trial(run: pd.Series) -> pd.DataFrame:
        rows = t.ranks[t.ranks["run"] == run["run"]]
        return rows[rows["trial"] == rows["trial"].min()].set_index("rank")

    m, a = first_trial(muon), first_trial(adamw)
    needed = ("muon_state_bytes", "adamw_state_bytes", "state_bytes")
    if m.empty or a.empty or any(c not in m.columns or m[c].isna().any() or a[c].isna().any() for c in needed):
        return None
    numeric = [c for c in (*needed, *STORAGE_COLUMNS, "shard_elems", "transient_bytes") if c in m.columns]
    return m.astype({c: "float64" for c in numeric}), a.astype({c: "float64" for c in numeric})


STORAGE_COLUMNS = ("held_state_bytes", "held_buffer_bytes", "muon_elems", "ns_matrices")  # the storage census


def _has(frame: pd.DataFrame, column: str) -> bool:
    return column in frame.columns and frame[column].notna().all()


def state_accounting(m: pd.DataFrame, a: pd.DataFrame, runs: tuple[pd.Series, ...]) -> Outcome | None:
    """What each rank of the Muon run (``m``) and of the AdamW run (``a``, the same shard plan) holds, by storage,
    against the plan: ``8 * shard`` bytes for AdamW, ``4 * e + 8 * (shard - e)`` for Muon with ``e`` its Muon
    elements, and the same buffers for both but Muon's update-RMS statistic (one fp32 scalar per matrix the rank
    orthogonalizes). None for runs recorded before the census."""
    if not all(_has(f, c) for f in (m, a) for c in (*STORAGE_COLUMNS, "shard_elems")) or not m.index.equals(a.index):
        return None
    muon_elems, shard = m["muon_elems"], m["shard_elems"]
    adamw_routed = 2 * FP32 * (shard - muon_elems)  # the Muon run's AdamW-routed elements, by the plan
    extra_state = pd.concat(
        [m["held_state_bytes"] - (FP32 * muon_elems + adamw_routed), a["held_state_bytes"] - 2 * FP32 * a["shard_elems"]]
    )
    extra_buffers = m["held_buffer_bytes"] - a["held_buffer_bytes"] - FP32 * m["ns_matrices"]
    managed = muon_elems > 0
    ratios = ((m["held_state_bytes"] - adamw_routed) / (a["held_state_bytes"] - adamw_routed))[managed]
    if ratios.empty:
        return None
    exact = bool(np.allclose(ratios, 0.5, rtol=EXACT, atol=0.0))
    holds = exact and bool((extra_state == 0).all()) and bool((extra_buffers == 0).all())
    top = (m["held_state_bytes"] / a["held_state_bytes"]).idxmax()
    share = float(muon_elems[top] / shard[top])
    whole = float(m.loc[top, "held_state_bytes"] / a.loc[top, "held_state_bytes"])
    worst_state, worst_buffers = float(extra_state.abs().max()), float(extra_buffers.abs().max())
    return Outcome(
        0.5,
        float(ratios.median()),
        float(ratios.min()),
        float(ratios.max()),
        holds,
        f"By storage on {len(m)} ranks of each run: at most {worst_state:,.0f} bytes of state beyond the plan; Muon's "
        f"other buffers, less one fp32 update RMS per matrix it orthogonalizes, differ from AdamW's by at most "
        f"{worst_buffers:,.0f} bytes. Rank {top}'s whole-model "
        f"ratio is {whole:.3f} = 1 - f/2, Muon managing a share f = {share:.3f} of its elements.",
        runs,
        in_claimed_region=exact,
        quoted={
            "ranks": len(m),
            "state_beyond_plan_bytes": worst_state,
            "buffer_difference_bytes": worst_buffers,
            "rank": int(top),
            "whole_model_ratio": whole,
            "muon_share_of_elements": share,
        },
    )


def state_checks(t: ProfileTables, muon: pd.Series, adamw: pd.Series) -> list[tuple[str, Outcome]]:
    frames = _state_frames(t, muon, adamw)
    if frames is None:
        return []
    m, a = frames
    runs = (muon, adamw)
    out: list[tuple[str, Outcome]] = []
    if (accounting := state_accounting(m, a, runs)) is not None:
        out.append(("state_accounting", accounting))
    if _has(m, "transient_bytes"):
        peak = (m["state_bytes"] + m["transient_bytes"]) / a["state_bytes"]
        worst = peak.idxmax()
        transient_mb = float(m.loc[worst, "transient_bytes"]) / 1e6
        saved_mb = float(a.loc[worst, "state_bytes"] - m.loc[worst, "state_bytes"]) / 1e6
        units = _units_described(muon, m.loc[worst, "ns_matrices"] if "ns_matrices" in m.columns else None)
        out.append(
            (
                "state_with_transients",
                Outcome(
                    1.0,
                    float(peak[worst]),
                    float(peak.min()),
                    float(peak.max()),
                    bool(peak.max() < 1.0),
                    f"Rank {worst}: Muon's gather buffers take {transient_mb:.2f} MB while its state is {saved_mb:.2f} MB "
                    "smaller than AdamW's; the buffers live only during the optimizer step (the full matrices gathered for "
                    f"Newton-Schulz), the state for the whole run. {units}",
                    runs,
                    quoted={"rank": int(worst), "state_saved_bytes": saved_mb * 1e6},
                ),
            )
        )
    return out


def _units_described(muon: pd.Series, ns_matrices: float | None) -> str:
    """What sets the transient peak: the layout's own Newton-Schulz units (all of a rank's matrices at once in the
    contiguous and whole-matrix layouts, a bucket's in the bucketed one), or the run's cap on them."""
    cap = muon.get("ns_unit_elems")
    if cap is not None and not pd.isna(cap):
        return f"Its Newton-Schulz units were capped at {int(cap):,} elements of full matrices (ns_unit_elems)."
    held = f" (the {int(ns_matrices)} it orthogonalizes)" if ns_matrices is not None and not pd.isna(ns_matrices) else ""
    scope = "a bucket's matrices" if muon.get("layout") == "bucketed" else f"all of a rank's matrices{held}"
    return (
        f"The {muon.get('layout')} layout's Newton-Schulz units gather {scope} at once; ns_unit_elems caps a unit's "
        "size, and with it the buffers (docs/method.md#newton-schulz-units)."
    )


def _dp_bytes(t: ProfileTables, run: pd.Series, column: str) -> pd.Series:
    """Bytes each (trial, rank) sends per step on the DP group for the optimizer, by ``column`` (trace, analytic, ledger)."""
    rows = t.phases[(t.phases["run"] == run["run"]) & t.phases["phase"].isin(DP_OPTIMIZER_PHASES)]
    return rows.groupby(["trial", "rank"])[column].sum(min_count=1).astype("float64")


def bytes_check(t: ProfileTables, muon: pd.Series, adamw: pd.Series) -> Outcome | None:
    """One layout's bytes check: Muon's DP optimizer bytes over AdamW's, from the traces, against the analytic model."""
    trace = {name: _dp_bytes(t, run, "trace_bytes") for name, run in (("muon", muon), ("adamw", adamw))}
    ratios = (trace["muon"] / trace["adamw"]).replace([np.inf, -np.inf], np.nan).dropna()
    if ratios.empty:
        return None
    # The sources the run recorded beside the trace (a foreign or hand-made run may have neither): with none,
    # there is nothing to hold against, and the check is null rather than a pass.
    others = [c for c in ("analytic_bytes", "ledger_bytes") if t.phases[c].notna().any()] if len(t.phases) else []
    sources_agree = all(
        np.allclose(trace[name], _dp_bytes(t, run, column).reindex(trace[name].index), rtol=EXACT, atol=0.0)
        for name, run in (("muon", muon), ("adamw", adamw))
        for column in others
    )
    analytic = (_dp_bytes(t, muon, "analytic_bytes") / _dp_bytes(t, adamw, "analytic_bytes")).dropna()
    value = float(ratios.median())
    layout = str(muon["layout"])
    gathered = t.ranks[t.ranks["run"] == muon["run"]]["dp_gathered_matrices"].dropna()
    matrices = t.ranks[t.ranks["run"] == muon["run"]]["muon_matrices"].dropna()
    counts = f" ({int(gathered.max())} of {int(matrices.max())} on a rank)" if len(gathered) and len(matrices) else ""
    how = {
        "bucketed": "every matrix is DP-gathered, as in the paper's Algorithm 1: the paper's bound applies",
        "contiguous": f"only the matrices that straddle a DP shard boundary are DP-gathered{counts}",
        "whole_matrix": "each rank's shard ends at a matrix boundary, so no matrix is DP-gathered; the shards are padded "
        "to equal sizes there, which the reduce-scatter and all-gather carry",
    }.get(layout, f"its layout DP-gathers the matrices it plans to{counts}")
    low, high = BYTES_REGION
    return Outcome(
        float(analytic.median()) if len(analytic) else float("nan"),
        value,
        float(ratios.min()),
        float(ratios.max()),
        bool(sources_agree and np.allclose(ratios.sort_index(), analytic.reindex(ratios.index), rtol=EXACT))
        if others and len(analytic)
        else None,
        f"{layout} layout ({muon['run']}): {how}; Muon sends {float(trace['muon'].mean()) / 1e6:.2f} MB per rank per "
        f"step on the DP group for the optimizer, AdamW {float(trace['adamw'].mean()) / 1e6:.2f} MB. Trace, analytic "
        "model and run-time ledger are compared per trial, rank and phase.",
        (muon, adamw),
        layout=layout,
        in_claimed_region=bool(low < value <= high),
        quoted={
            name: float(series.mean()) for name, series in (("muon_dp_bytes", trace["muon"]), ("adamw_dp_bytes", trace["adamw"]))
        },
    )


def _pair(t: ProfileTables) -> tuple[pd.Series, pd.Series] | None:
    """The claims' DP2·TP2 pair (:func:`dp2_tp2_pair`); None without one, or when no AdamW run did Muon's work."""
    try:
        return dp2_tp2_pair(t)
    except UnequalWork:  # the claims say so; a check has no twin to compare with
        return None


def _rows(t: ProfileTables, profile: str) -> list[dict]:
    pair = _pair(t)
    if pair is None:
        return []
    muon, adamw = pair
    outcomes = state_checks(t, muon, adamw)
    muon_dp2_tp2 = t.runs[(t.runs["optimizer"] == "muon") & (t.runs["dp"] == 2) & (t.runs["tp"] == 2)]
    for layout in sorted(muon_dp2_tp2["layout"].dropna().unique()):
        run = first_run(muon_dp2_tp2, layout=layout)  # one run per layout: the original study's group, then by name
        if work_difference(run, adamw) is not None:  # recorded apart (a contributed size): no twin to check against
            continue
        outcome = bytes_check(t, run, adamw)
        if outcome is not None:
            outcomes.append(("bytes", outcome))
    rows = []
    for check_id, o in outcomes:
        c = CHECKS[check_id]
        rows.append(
            {
                "check_id": check_id if o.layout is None else f"{check_id}_{o.layout}",
                "profile": profile,
                "check": c.check if o.layout is None else f"{c.check}: {o.layout} layout",
                "claim": c.claim,
                "source": c.source,
                "layout": o.layout,
                "expected": o.expected,
                "measured_value": o.measured,
                "measured_low": o.low,
                "measured_high": o.high,
                "unit": c.unit,
                "unit_kind": c.unit_kind,
                "holds": o.holds,
                "claimed_region": c.claimed_region,
                "in_claimed_region": o.in_claimed_region,
                "fails_if": c.fails_if,
                "explanation": o.explanation,
                "stated": o.quoted,
                "conditions": describe_runs(*o.runs),
            }
        )
    return rows


def checks_table(runs: pd.DataFrame, ranks: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """One row per check and hardware profile (the profile with most runs first), measured on that profile's rows."""
    counts = {str(p): int(n) for p, n in runs["profile"].value_counts().items()} if "profile" in runs.columns else {}
    rows: list[dict] = []
    for profile in ordered_profiles(counts) or [UNKNOWN_PROFILE]:
        mine = rows_of_profile(runs, profile)
        t = ProfileTables(
            mine.astype(object).where(mine.notna(), None),
            pd.DataFrame(),
            *(rows_of_profile(df, profile) for df in (ranks, phases)),
        )
        rows += _rows(t, profile)
    return pd.DataFrame(rows) if rows else SCHEMAS["checks"].empty()
