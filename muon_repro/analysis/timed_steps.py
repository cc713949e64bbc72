"""The steps a run timed without the profiler (metrics.json's ``timed_*`` fields), before its profiled ones.

* :func:`timed_steps_table`: the ``timed_steps`` table, one row per run, trial, rank and timed step: the
  step, forward+backward and optimizer times, and the step's collectives split into the time waiting
  for the group's last rank and the rest (the transfer);
* :func:`timed_run_columns`: the ``runs`` columns made from it (``timed_step_ms``, ``timed_optimizer_ms``,
  ``profiler_overhead``, ``rounds``), null for a run without timed steps.

Each collective call is stamped on its rank with ``perf_counter_ns`` at entry and exit
(:class:`muon_repro.parallel.comm.CommTimer`): CLOCK_MONOTONIC, one clock for every process of a host,
so the ranks' stamps compare directly. The k-th call of a (phase, op) in a step on a rank is the same
collective on every rank of its group (they run the same program); the group is the call's DP or TP
group (``dp``: the ranks of the same TP rank, ``tp``: those of the same DP rank; global rank =
dp_rank * tp + tp_rank, :mod:`muon_repro.parallel.mesh`). For a call seen on every rank of its group:

    wait     = latest entry among the group's ranks - own entry, within [0, the call's duration]
    transfer = duration - wait = exit - latest entry (unless the rank left before it: then 0)

a call not seen on every rank of its group, or of a (step, phase, op) that the group's ranks called unequally often
(its k-th calls need not be one collective), is all transfer (wait 0), as in the trace analysis
(:mod:`muon_repro.analysis.waits`). Ranks on several hosts share no clock: their wait and transfer are null.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from muon_repro.analysis.batch_read import Analysis
from muon_repro.analysis.estimators import typical_time
from muon_repro.analysis.rounds import per_round, rounds_of
from muon_repro.analysis.waits import dp_group_index, tp_group_index
from muon_repro.run_records import TIMED_COMM_COLUMNS, RankMetrics
from muon_repro.tables.schemas import SCHEMAS

_CALL_COLUMNS = ("rank", "step", "phase", "kind", "group", "start_ns", "end_ns")


def timed_calls(metrics: list[RankMetrics]) -> pd.DataFrame:
    """Every timed collective call of ``metrics`` (the ranks of one trial), names decoded: one row per call."""
    frames = []
    for m in metrics:
        comm = m.timed_comm
        if not comm or not comm.get("step"):
            continue
        cols = {c: np.asarray(comm[c], dtype=np.int64) for c in TIMED_COMM_COLUMNS}
        frames.append(
            pd.DataFrame(
                {
                    "rank": m.rank,
                    "step": cols["step"],
                    "phase": np.asarray(comm["phases"], dtype=object)[cols["phase"]],
                    "kind": np.asarray(comm["kinds"], dtype=object)[cols["kind"]],
                    "group": np.asarray(comm["groups"], dtype=object)[cols["group"]],
                    "start_ns": cols["start_ns"],
                    "end_ns": cols["end_ns"],
                }
            )
        )
    if not frames:
        return pd.DataFrame(
            {c: pd.Series([], dtype=object if c in ("phase", "kind", "group") else "int64") for c in _CALL_COLUMNS}
        )
    return pd.concat(frames, ignore_index=True)


def split_timed_waits(calls: pd.DataFrame, dp: int | None, tp: int | None) -> pd.DataFrame:
    """``calls`` (:func:`timed_calls`) with ``dur_ns``, ``latest_ns`` (the group's latest entry, null when
    unmatched), ``matched``, ``wait_ns`` and ``transfer_ns`` (see the module's docstring). With pipeline stages a
    DP group is the ranks of one stage and one TP rank (:func:`~muon_repro.analysis.waits.dp_group_index`)."""
    out = calls.copy()
    out["dur_ns"] = out["end_ns"] - out["start_ns"]
    out["latest_ns"] = pd.Series(np.nan, index=out.index)
    out["matched"] = False
    if len(out) and dp and tp:
        # plain arrays: this runs once per trial, where pandas' per-call overhead outweighs the work
        rank, step, start = (out[c].to_numpy() for c in ("rank", "step", "start_ns"))
        phase, kind, group = (out[c].to_numpy() for c in ("phase", "kind", "group"))
        group_id = np.where(group == "dp", dp_group_index(rank, dp, tp), np.where(group == "tp", tp_group_index(rank, tp), -1))
        size = np.where(group == "dp", dp, np.where(group == "tp", tp, 0))
        ordinal = _ordinal(_row_groups(rank, step, phase, kind, group), start)
        sequence = _row_groups(step, phase, kind, group, group_id)  # a group's calls of one (phase, op) in a step
        collective = _row_groups(sequence, ordinal)  # the k-th call of a sequence on each rank
        ranks = rank.max() + 1
        rank_in_collective = np.unique(collective * ranks + rank)  # each (collective, rank) once
        ranks_seen = np.bincount(rank_in_collective // ranks)[collective]
        complete = (group_id >= 0) & (ranks_seen == size) & (size > 1)
        # as in the traces: a sequence with a k-th call some rank lacks (its ranks made it unequally often) pairs none
        incomplete = np.bincount(sequence[~complete], minlength=sequence.max() + 1)
        latest = np.full(collective.max() + 1, start.min())  # the latest entry per collective
        np.maximum.at(latest, collective, start)
        out["matched"] = complete & (incomplete[sequence] == 0)
        out["latest_ns"] = pd.Series(latest[collective], index=out.index).where(out["matched"])
    wait = (out["latest_ns"] - out["start_ns"]).fillna(0.0)
    out["wait_ns"] = np.minimum(np.maximum(wait.to_numpy(dtype=float), 0.0), out["dur_ns"].to_numpy(dtype=float))
    out["transfer_ns"] = out["dur_ns"] - out["wait_ns"]
    return out


def _row_groups(*keys: np.ndarray) -> np.ndarray:
    """A group number per row (from 0, no gaps): rows share one where they agree on every key. The keys hold no
    nulls here (ranks, steps, phase, kind and group names); ``pd.factorize`` would give every null one code, -1."""
    groups = np.zeros(len(keys[0]), np.int64)
    for key in keys:  # numbered anew after each key, so that the combined numbers stay below rows**2
        codes, values = pd.factorize(key)
        groups = pd.factorize(groups * len(values) + codes)[0]
    return groups


def _ordinal(groups: np.ndarray, start_ns: np.ndarray) -> np.ndarray:
    """Each row's place in its group (from 0), in order of ``start_ns`` (ties: in row order)."""
    order = np.lexsort((start_ns, groups))  # by group, then start: lexsort is stable
    sorted_groups = groups[order]
    ordinal = np.empty(len(groups), np.int64)
    ordinal[order] = np.arange(len(groups)) - np.searchsorted(sorted_groups, sorted_groups, side="left")
    return ordinal


def _one_host(environment: dict[str, Any]) -> bool:
    nodes = environment.get("nodes")
    return not (isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1)


HOST_LAUNCH = "host_launch"  # NCCL: a collective call returns once its kernel is queued, not when it is done
TRANSFER = "transfer"  # gloo: the call returns when the data has moved


def comm_timing(backend: Any) -> str:
    """What a timed step's collective times hold on ``backend``: the transfer (gloo, blocking) or only the host-side
    launch (NCCL, asynchronous to the host). Claims about communication time never use the latter."""
    return HOST_LAUNCH if str(backend).lower() == "nccl" else TRANSFER


def timed_steps_table(analysis: Analysis) -> pd.DataFrame:
    """One row per run, trial, rank and timed step of the analyzed ranks that have timed steps: those of the
    traced trials and of the trials timed only (``analysis.timed_only``, every rank of each)."""
    rows: list[dict[str, Any]] = []
    traced = [(info, [info.rank(b.meta.rank) for b in items]) for info, items in analysis.runs]
    timed_only = [(info, [info.ranks[r] for r in sorted(info.ranks)]) for info in analysis.timed_only + analysis.timed_runs]
    for info, ranks in traced + timed_only:
        metrics = [m for m in ranks if m is not None and m.timed_step_ms]
        if not metrics:
            continue
        split = split_timed_waits(timed_calls(metrics), info.config.dp, info.config.tp)
        per_step = split.groupby(["rank", "step"])[["dur_ns", "wait_ns", "transfer_ns"]].sum() / 1e6
        comm_of_step = dict(zip(per_step.index, per_step.itertuples(index=False)))  # a dict: .loc per row is slow
        one_clock = _one_host(info.environment)
        timing = comm_timing(info.environment.get("backend") or info.config.backend)
        ids = {"run": info.key, "profile": info.profile, "group": info.group, "name": info.name, "trial": info.trial}
        ids["sweep"] = info.config.sweep
        for m in metrics:
            stamped = bool(m.timed_comm)  # a rank with no record of its calls: its comm columns are unknown
            bubbles = _per_step(m.timed_bubble_ms, m.timed_step_ms)
            # on NCCL the stamp after a backward is when its kernels were queued, not when they ended: no drain
            drained = one_clock and timing == TRANSFER
            drains = _per_step(m.timed_last_backward_ns, m.timed_step_ms) if drained else [None] * len(m.timed_step_ms)
            for step, (s, f, o, bubble, last_backward) in enumerate(
                zip(m.timed_step_ms, m.timed_fwd_bwd_ms, m.timed_optimizer_ms, bubbles, drains)
            ):
                comm = comm_of_step.get((m.rank, step))
                rows.append(
                    {
                        **ids,
                        "rank": m.rank,
                        "stage": m.pp_rank or 0,
                        "step": step,
                        "step_ms": s,
                        "fwd_bwd_ms": f,
                        "optimizer_ms": o,
                        "comm_ms": (float(comm.dur_ns) if comm is not None else 0.0) if stamped else None,
                        "comm_wait_ms": (float(comm.wait_ns) if comm is not None else 0.0) if stamped and one_clock else None,
                        "comm_transfer_ms": (float(comm.transfer_ns) if comm is not None else 0.0)
                        if stamped and one_clock
                        else None,
                        "bubble_ms": bubble,
                        "last_backward_ns": last_backward,
                        "pipeline": (m.dp_rank, m.tp_rank),
                        "comm_timing": timing if stamped else None,
                    }
                )
    return drain_idle(pd.DataFrame(rows)) if rows else SCHEMAS["timed_steps"].empty()


def _per_step(values: list, steps: list) -> list:
    """A per-step list recorded beside ``steps``, or None for every step where it was not recorded in full."""
    return values if len(values) == len(steps) else [None] * len(steps)


def drain_idle(rows: pd.DataFrame) -> pd.DataFrame:
    """``drain_idle_ms`` from each row's ``last_backward_ns``: per run, trial, step and pipeline (the ranks that share a
    DP and a TP rank), the latest end of a last backward over its stages, less this stage's own. The helper columns
    go."""
    ends = pd.to_numeric(rows["last_backward_ns"], errors="coerce").astype("float64")
    keys = [rows["run"], rows["trial"], rows["step"], rows["pipeline"].astype(str)]
    latest = ends.groupby(keys).transform("max")
    return rows.assign(drain_idle_ms=(latest - ends) / 1e6).drop(columns=["last_backward_ns", "pipeline"])


def timed_run_columns(timed: pd.DataFrame, run: str, profiled_by_trial: pd.Series) -> dict[str, Any]:
    """The ``runs`` columns of ``run`` from the ``timed_steps`` table: the slowest rank's step and the mean over
    ranks of the optimizer step and the bubble, each as :func:`~muon_repro.analysis.estimators.typical_time` states
    a run's time (per trial, a round of the sweep, the median over its timed steps; then the median over trials).
    ``profiled_by_trial``: each traced trial's median profiled step (slowest rank); ``profiler_overhead`` pairs it
    with the same trial's timed median, then takes the median over them."""
    mine = timed[timed["run"] == run]
    if mine.empty:
        return {
            "timed_step_ms": None,
            "timed_optimizer_ms": None,
            "timed_bubble_ms": None,
            "profiler_overhead": None,
            "rounds": None,
        }
    if "bubble_ms" not in mine.columns:  # a timed_steps table written before pipeline stages
        mine = mine.assign(bubble_ms=np.nan)
    timed_by_trial = pd.Series(per_round(mine, run, "step_ms", "max"), index=rounds_of(mine, run))
    overhead = (profiled_by_trial / timed_by_trial).replace([np.inf, -np.inf], np.nan).dropna()
    bubble = typical_time(mine, run, "bubble_ms", "mean")
    return {
        "timed_step_ms": typical_time(mine, run, "step_ms", "max"),
        "timed_optimizer_ms": typical_time(mine, run, "optimizer_ms", "mean"),
        "timed_bubble_ms": bubble if bubble == bubble else None,
        "profiler_overhead": float(overhead.median()) if len(overhead) else None,
        "rounds": len(timed_by_trial),
    }
