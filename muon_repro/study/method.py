"""The original study's own method, rebuilt from its description, and what each of its numbers is made of.

The study computed its numbers with ``analysis_scripts/performance_comparison.py`` on rank 0's trace of each
run. Read for what it does (no code of it is copied here), it:

* **communication**: sums the ``dur`` of every event whose lower-cased name contains ``all_reduce`` /
  ``allreduce``, ``all_gather`` / ``allgather``, ``reduce_scatter`` / ``reducescatter`` or ``broadcast``,
  and counts them, over the whole trace (all 5 steps);
* **scopes**: sums the ``dur`` of every event whose name contains a scope's name (``Muon_Step``,
  ``AdamW_Step``, ``FWD_BWD``, ``*_Full_Training_Step``, ...), each event going to the first name of its list
  that it contains;
* **shares**: divides an optimizer scope's sum by the full-step scope's sum.

Whatever the category: a collective is counted as its CPU operator (``c10d::allreduce_``), its ``nccl:*``
annotation, its NCCL kernel and that kernel's GPU annotation, and AdamW's ``AdamW_AllReduce`` scope (both
views) besides; a scope's CPU and GPU annotations are both counted where both exist. :func:`method_numbers`
rebuilds every published number from the traces; the ``study_method_parts`` table
(:mod:`muon_repro.study.tables`) says, per number, which event categories the sum holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from muon_repro.analysis.reader import read_trace
from muon_repro.claims import STUDY_SHARE
from muon_repro.study.scopes import PHASE_SCOPES

# performance_comparison.py's communication needles, in its order (an event goes to the first it matches).
COMM_NEEDLES = (
    ("all_reduce", ("all_reduce", "allreduce")),
    ("all_gather", ("all_gather", "allgather")),
    ("reduce_scatter", ("reduce_scatter", "reducescatter")),
    ("broadcast", ("broadcast",)),
)
# Its scope keys, in its order (case-sensitive "contains"; the first match wins). Two never match the traces'
# "nccl:" annotations: the colon is not an underscore.
SCOPE_KEYS = (
    "nccl_all_reduce",
    "nccl_all_gather",
    "Muon_Step",
    "AdamW_Step",
    "Muon_Full_Training_Step",
    "AdamW_Full_Training_Step",
    "FWD_BWD",
    "AdamW_AllReduce",
    "Attach_Grads",
)


@dataclass(frozen=True)
class Published:
    """One number the study published, and how its method computes it from a trace."""

    number_id: str
    table: str  # where it was published
    quantity: str
    optimizer: str
    value: float
    unit: str
    digits: int  # decimals it was published with
    run: str  # the study's run name whose rank-0 trace it is computed on ("" for a ratio or a derived number)


PUBLISHED = (
    Published("comm_ms_muon", "Table 5.1", "total communication time", "muon", 139.53, "ms", 2, "muon_FULLSTEP_dp2_tp2"),
    Published("comm_ms_adamw", "Table 5.1", "total communication time", "adamw", 245.84, "ms", 2, "adamw_FULLSTEP"),
    Published("comm_ratio", "Table 5.1", "communication time, Muon/AdamW", "both", 0.57, "ratio", 2, ""),
    Published("comm_calls_muon", "Table 5.1", "number of calls", "muon", 40, "count", 0, "muon_FULLSTEP_dp2_tp2"),
    Published("comm_calls_adamw", "Table 5.1", "number of calls", "adamw", 110, "count", 0, "adamw_FULLSTEP"),
    Published("comm_per_call_muon", "Table 5.1", "average per call", "muon", 3.49, "ms", 2, "muon_FULLSTEP_dp2_tp2"),
    Published("comm_per_call_adamw", "Table 5.1", "average per call", "adamw", 2.23, "ms", 2, "adamw_FULLSTEP"),
    Published("comm_calls_ratio", "Table 5.1", "number of calls, Muon/AdamW", "both", 0.36, "ratio", 2, ""),
    # 1.57 is 3.49 / 2.23, the averages as published: from the unrounded ones the ratio is 1.56
    Published("comm_per_call_ratio", "Table 5.1", "average per call, Muon/AdamW (as rounded)", "both", 1.57, "ratio", 2, ""),
    Published("fwd_bwd_ms_muon", "Table 5.2", "forward-backward", "muon", 271, "ms", 0, "muon_FULLSTEP_dp2_tp2"),
    Published("fwd_bwd_ms_adamw", "Table 5.2", "forward-backward", "adamw", 281, "ms", 0, "adamw_FULLSTEP"),
    Published("optimizer_ms_muon", "Table 5.2", "optimizer compute", "muon", 4.29, "ms", 2, "muon_FULLSTEP_dp2_tp2"),
    Published("optimizer_ms_adamw", "Table 5.2", "optimizer compute", "adamw", 1.46, "ms", 2, "adamw_FULLSTEP"),
    Published("total_ms_muon", "Table 5.2", "total per step", "muon", 388.86, "ms", 2, "muon_FULLSTEP_dp2_tp2"),
    Published("total_ms_adamw", "Table 5.2", "total per step", "adamw", 338.51, "ms", 2, "adamw_FULLSTEP"),
    Published("fwd_bwd_ratio", "Table 5.2", "forward-backward, Muon/AdamW", "both", 0.96, "ratio", 2, ""),
    Published("optimizer_ratio", "Table 5.2", "optimizer compute, Muon/AdamW", "both", 2.94, "ratio", 2, ""),
    Published("total_ratio", "Table 5.2", "total per step, Muon/AdamW", "both", 1.15, "ratio", 2, ""),
    Published(
        "optimizer_share_muon", "README", "Muon optimizer share of training time", "muon", STUDY_SHARE.value, "fraction", 3, ""
    ),
    Published("async_comm_ms_muon", "Table 6", "async communication", "muon", 294.09, "ms", 2, "muon_FULLSTEP_dp2_tp2_async"),
    Published("async_comm_ms_adamw", "Table 6", "async communication", "adamw", 377.44, "ms", 2, "adamw_FULLSTEP_async"),
    Published("async_ratio_muon", "Table 6", "async over original communication", "muon", 2.1, "ratio", 1, ""),
    Published("async_ratio_adamw", "Table 6", "async over original communication", "adamw", 1.5, "ratio", 1, ""),
    Published("multinode_comm_ms_muon", "Table 7", "multi-node communication", "muon", 418.59, "ms", 2, ""),
    Published("multinode_comm_ms_adamw", "Table 7", "multi-node communication", "adamw", 737.52, "ms", 2, ""),
    Published("multinode_total_ms_muon", "Table 7", "multi-node total", "muon", 694, "ms", 0, ""),
    Published("multinode_total_ms_adamw", "Table 7", "multi-node total", "adamw", 1020, "ms", 0, ""),
)
PUBLISHED_BY_ID = {p.number_id: p for p in PUBLISHED}
MULTINODE_FACTOR = 3  # Table 7: the single-node communication (as rounded) times 3, not a measurement


@dataclass(frozen=True)
class Sums:
    """The study's sums over one trace: communication by kind, and per scope key; each with its events."""

    comm_ms: float
    comm_calls: int
    scope_ms: dict[str, float]
    scope_calls: dict[str, int]
    parts: pd.DataFrame  # one row per (what, category): events, ms


def _comm_kind(name: str) -> str | None:
    low = name.lower()
    return next((kind for kind, needles in COMM_NEEDLES if any(n in low for n in needles)), None)


def _scope_key(name: str) -> str | None:
    return next((key for key in SCOPE_KEYS if key in name), None)


def study_sums(path: str | Path) -> Sums:
    """The study's method on one trace: every complete event goes to its sums (one without a ``dur`` as a call
    of 0 ms, as the trace reader reads it)."""
    ev = read_trace(path).events
    names = ev["name"].astype(str)
    comm = names.map(_comm_kind)
    scope = names.map(_scope_key)
    # a collective's own events, or a scope of the study's loop whose name happens to hold a needle
    source = names.map(lambda n: "scope" if n in PHASE_SCOPES else "collective")
    frame = pd.DataFrame(
        {"cat": ev["cat"].astype(str) + " (" + source + ")", "dur": ev["dur"].to_numpy(), "comm": comm, "scope": scope}
    )
    in_comm = frame[frame["comm"].notna()]
    parts = [
        in_comm.groupby("cat").agg(events=("dur", "size"), ms=("dur", "sum")).reset_index().assign(what="communication"),
        frame[frame["scope"].notna()]
        .groupby(["scope", "cat"])
        .agg(events=("dur", "size"), ms=("dur", "sum"))
        .reset_index()
        .rename(columns={"scope": "what"}),
    ]
    table = pd.concat(parts, ignore_index=True)
    table["ms"] = table["ms"] / 1000.0
    by_scope = frame[frame["scope"].notna()].groupby("scope")["dur"]
    return Sums(
        comm_ms=float(in_comm["dur"].sum()) / 1000.0,
        comm_calls=len(in_comm),
        scope_ms={str(k): float(v) / 1000.0 for k, v in by_scope.sum().items()},
        scope_calls={str(k): int(v) for k, v in by_scope.size().items()},
        parts=table[["what", "cat", "events", "ms"]],
    )


def method_numbers(rank0: dict[str, Sums]) -> dict[str, float]:
    """Every number of :data:`PUBLISHED`, rebuilt from the study's sums of each run's rank-0 trace
    (``rank0``: study run name -> its sums). A number whose run is absent is left out."""
    out: dict[str, float] = {}

    def put(number_id: str, value: float) -> None:
        out[number_id] = value

    for opt, full, asyn in (
        ("muon", "muon_FULLSTEP_dp2_tp2", "muon_FULLSTEP_dp2_tp2_async"),
        ("adamw", "adamw_FULLSTEP", "adamw_FULLSTEP_async"),
    ):
        step_key, total_key = (
            ("Muon_Step", "Muon_Full_Training_Step") if opt == "muon" else ("AdamW_Step", "AdamW_Full_Training_Step")
        )
        if full in rank0:
            s = rank0[full]
            put(f"comm_ms_{opt}", s.comm_ms)
            put(f"comm_calls_{opt}", s.comm_calls)
            put(f"comm_per_call_{opt}", _ratio(s.comm_ms, s.comm_calls))
            # Table 5.2's forward-backward: the FWD_BWD sum over its CPU and GPU views, halved
            put(f"fwd_bwd_ms_{opt}", s.scope_ms.get("FWD_BWD", float("nan")) / 2)
            put(f"optimizer_ms_{opt}", s.scope_ms.get(step_key, float("nan")))
            put(f"total_ms_{opt}", s.scope_ms.get(total_key, float("nan")))
            # Table 7: the rounded single-node communication times 3, plus the rounded other phases
            comm = round(s.comm_ms, 2) * MULTINODE_FACTOR
            put(f"multinode_comm_ms_{opt}", comm)
            put(
                f"multinode_total_ms_{opt}",
                round(s.scope_ms.get("FWD_BWD", float("nan")) / 2) + comm + round(s.scope_ms.get(step_key, float("nan")), 2),
            )
        if asyn in rank0:
            put(f"async_comm_ms_{opt}", rank0[asyn].comm_ms)
            if full in rank0:
                put(f"async_ratio_{opt}", _ratio(rank0[asyn].comm_ms, rank0[full].comm_ms))
    ratios = (
        ("comm", "comm_ms"),
        ("comm_calls", "comm_calls"),
        ("fwd_bwd", "fwd_bwd_ms"),
        ("optimizer", "optimizer_ms"),
        ("total", "total_ms"),
    )
    for ratio_id, number in ratios:
        if {f"{number}_muon", f"{number}_adamw"} <= out.keys():
            put(f"{ratio_id}_ratio", _ratio(out[f"{number}_muon"], out[f"{number}_adamw"]))
    if {"comm_per_call_muon", "comm_per_call_adamw"} <= out.keys():  # of the averages as Table 5.1 printed them
        put("comm_per_call_ratio", _ratio(round(out["comm_per_call_muon"], 2), round(out["comm_per_call_adamw"], 2)))
    if {"optimizer_ms_muon", "total_ms_muon"} <= out.keys():
        put("optimizer_share_muon", _ratio(out["optimizer_ms_muon"], out["total_ms_muon"]))
    return out


def _ratio(a: float, b: float) -> float:
    """a / b, NaN when b is 0 (a run on one rank has no communication to divide by)."""
    return a / b if b else float("nan")


def matches_published(p: Published, rebuilt: float) -> bool:
    """Whether ``rebuilt``, rounded as the study rounded ``p``, is the published number."""
    return rebuilt == rebuilt and round(rebuilt, p.digits) == round(p.value, p.digits)
