"""Collective calls matched across a run's ranks, and what the matching gives: wait and transfer (how much of
each call is spent waiting for the group's last rank) and the start skew (how late each rank issues).

A collective cannot move data before every rank of its group has arrived, so on a rank that
enters early the call's interval (gloo worker annotation, NCCL kernel) includes waiting for the
last one. Per call and rank (docs/method.md#wait-and-transfer)::

    wait     = last arrival in the group - own arrival, within [0, duration]
    transfer = duration - wait          (= own end - last arrival)

* **duration**: ``end - start`` of the call's row, as the ``collectives`` table counts it, so
  ``wait + transfer == duration`` for every call.
* **arrival**: when this rank's data mover entered the call: the later of its issue (the
  ``c10d::`` / ``record_param_comms`` caller, ``issue_ts``) and the transfer's start. On gloo
  the worker thread can start tens of ms after the caller on a busy machine, and its peers wait
  for the worker, not the caller; an NCCL kernel may start long after the CPU issued it.
* **clock**: absolute time, ``baseTimeNanoseconds + ts * 1000`` ns (docs/method.md#clock-alignment-across-ranks).
* **matching**: the k-th call (in issue order) of a given (step, phase, op) on the ranks of one
  process group is one collective (the ranks run the same program). Our phases name the group:
  ``dp_*`` runs on the DP group (the ranks with the same ``tp_rank``), ``tp_*`` on the TP group
  (same ``dp_rank``; TP ranks adjacent: ``rank = dp_rank * tp + tp_rank``), with the sizes from
  config.json. Any other call is matched within the whole world by (step, op, position) when
  every rank issued the same sequence of ops in that step.

A call is **unmatched** (wait 0, transfer = its whole duration) when its group cannot be
completed: a single rank's trace, a group of one rank (no peer to wait for), a rank without
``baseTimeNanoseconds`` or without a trace, two traces claiming one rank, ranks of the group with
unequal numbers of that (step, phase, op), differing world sequences, or a ``dp_`` / ``tp_`` phase
without the dp and tp sizes.

The **start skew** reads the same matching (:meth:`MatchedCalls.start_skew`): a rank's lateness on a matched
call is its issue minus the earliest issue of the call's group; unmatched calls count in no skew.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pandas as pd

from muon_repro.analysis.breakdown import TraceBreakdown

IntOrArray = TypeVar("IntOrArray", int, np.ndarray)  # a rank, or an array of ranks

WAIT_COLUMNS = ("wait_us", "transfer_us", "matched")
"""What :meth:`MatchedCalls.wait_transfer` returns per call: wait and transfer (us), and whether the
call was matched across its group."""

SKEW_COLUMNS = ("rank", "step", "start_skew_ms", "late_ms", "straggler_rank")
"""What :meth:`MatchedCalls.start_skew` returns per rank and step."""

# Group kinds: a call runs on its rank's DP group, its TP group, the whole world, or an unknown one.
_DP, _TP, _WORLD, _UNKNOWN = 0, 1, 2, -1


@dataclass(frozen=True)
class MatchedCalls:
    """One run's collective calls, every rank's on one clock, each with the collective it is part of: the one
    matching (module docstring) that both the wait/transfer split and the start skew read.

    Arrays, one entry per call of the ranks that can be compared: ``item`` and ``row`` locate it (its breakdown,
    its position in that breakdown's ``collectives``), ``rank``, ``step``, ``issue_us`` (its ``c10d::`` caller)
    and ``arrival_us`` (module docstring) on the clock of the earliest base time, ``collective`` (an id the calls
    of one collective share) and ``matched`` (its group complete). Empty when fewer than two ranks can be compared.
    """

    breakdowns: tuple[TraceBreakdown, ...]
    item: np.ndarray
    row: np.ndarray
    rank: np.ndarray
    step: np.ndarray
    issue_us: np.ndarray
    arrival_us: np.ndarray
    collective: np.ndarray
    matched: np.ndarray

    def wait_transfer(self) -> list[pd.DataFrame]:
        """Per breakdown, a frame with its ``collectives``' index and the columns :data:`WAIT_COLUMNS`: a matched
        call waits from its own arrival to the last of its group's (at most its duration), an unmatched one not at all."""
        # the events' own durations, the ones the comm_<kind>_ms sums add, so wait + transfer equals them exactly
        durations = [b.collectives["dur"].to_numpy(dtype=float) for b in self.breakdowns]
        waits = [np.zeros(len(d)) for d in durations]
        matched = [np.zeros(len(d), bool) for d in durations]
        ok = self.matched
        arrival = self.arrival_us[ok]
        last_arrival = pd.Series(arrival).groupby(self.collective[ok]).transform("max").to_numpy()
        item, row = self.item[ok], self.row[ok]
        for i in np.unique(item).tolist():  # one pass per rank, not per call
            mine = item == i
            limit = np.maximum(durations[i][row[mine]], 0.0)
            waits[i][row[mine]] = np.clip(last_arrival[mine] - arrival[mine], 0.0, limit)
            matched[i][row[mine]] = True
        return [
            pd.DataFrame({"wait_us": w, "transfer_us": d - w, "matched": m}, index=b.collectives.index)
            for b, d, w, m in zip(self.breakdowns, durations, waits, matched)
        ]

    def start_skew(self) -> pd.DataFrame | None:
        """Per rank and step (:data:`SKEW_COLUMNS`): ``late_ms``, the rank's mean delay issuing the step's matched
        calls after the earliest rank of each call's group; ``start_skew_ms``, the step's largest such delay;
        ``straggler_rank``, the rank latest on average. A group's ranks are compared with each other only: two DP
        groups running side by side are no skew, since no rank waits for a rank outside its group. ``None`` when
        no call is matched."""
        ok = self.matched
        if not ok.any():
            return None
        calls = pd.DataFrame({"rank": self.rank[ok], "step": self.step[ok], "collective": self.collective[ok]})
        issue_us = pd.Series(self.issue_us[ok])
        calls["late_ms"] = (issue_us - issue_us.groupby(calls["collective"]).transform("min")) / 1000.0
        spread = calls.groupby("step")["late_ms"].max().rename("start_skew_ms")
        late = calls.groupby(["rank", "step"])["late_ms"].mean().reset_index()
        latest = late.loc[late.groupby("step")["late_ms"].idxmax(), ["step", "rank"]]
        out = late.merge(spread.reset_index(), on="step", how="left")
        out = out.merge(latest.rename(columns={"rank": "straggler_rank"}), on="step", how="left")
        return out[list(SKEW_COLUMNS)]


def match_calls(
    breakdowns: Sequence[TraceBreakdown], *, dp: int | None = None, tp: int | None = None, pp: int | None = 1
) -> MatchedCalls:
    """Match every collective call of one run across its ranks (module docstring).

    ``breakdowns`` are the run's ranks (one trace each); ``dp`` and ``tp`` are the run's sizes
    (config.json), which our ``dp_*`` / ``tp_*`` phases need to find their group, and ``pp`` its pipeline stages
    (a DP or TP group lies within one stage; point-to-point ``pp_*`` calls are not matched).
    """
    breakdowns = tuple(breakdowns)
    calls = _calls_on_one_clock(breakdowns) if len(breakdowns) > 1 else None  # one rank: nothing to match
    if calls is None:
        ids, times = np.zeros(0, np.int64), np.zeros(0)
        return MatchedCalls(breakdowns, ids, ids, ids, ids, times, times, collective=ids, matched=np.zeros(0, bool))
    world = _world_size(breakdowns, dp, tp, pp or 1)
    kind, index = _groups(calls["scope"], calls["rank"], dp, tp, world)
    collective, sequence = _collective_ids(calls, kind, index)
    ok = _complete(sequence, collective, calls["rank"], _group_sizes(kind, dp, tp, world))
    ok &= ~_world_steps_that_differ(kind, ok, calls["step"])
    fields = ("item", "row", "rank", "step", "issue_us", "arrival_us")
    return MatchedCalls(breakdowns, *(calls[name] for name in fields), collective=collective, matched=ok)


def split_wait_transfer(
    breakdowns: Sequence[TraceBreakdown], *, dp: int | None = None, tp: int | None = None, pp: int | None = 1
) -> list[pd.DataFrame]:
    """Wait and transfer of every collective call of one run: :func:`match_calls`, then
    :meth:`MatchedCalls.wait_transfer`."""
    return match_calls(breakdowns, dp=dp, tp=tp, pp=pp).wait_transfer()


def _calls_on_one_clock(breakdowns: Sequence[TraceBreakdown]) -> dict[str, np.ndarray] | None:
    """Every rank's calls as one set of arrays, times in us on the clock of the earliest base time.

    ``item`` and ``row`` locate a call (breakdown, position in its ``collectives``); ``phase`` and
    ``op`` are integer codes, ``scope`` the group the phase names (:func:`_phase_scopes`). Ranks without
    ``baseTimeNanoseconds`` are left out (their groups then stay incomplete); ``None`` when fewer
    than two ranks remain, or when two traces claim the same rank.
    """
    ranks = [b.meta.rank for b in breakdowns]
    timed = [(i, b) for i, b in enumerate(breakdowns) if b.meta.base_time_ns is not None and len(b.collectives)]
    if len(set(ranks)) != len(ranks) or len(timed) < 2:
        return None
    reference_ns = min(b.meta.base_time_ns for _, b in timed)
    parts: dict[str, list[np.ndarray]] = {}
    for item, b in timed:
        c = b.collectives
        shift_us = (b.meta.base_time_ns - reference_ns) / 1000.0
        start, issue = c["start"].to_numpy(dtype=float), c["issue_ts"].to_numpy(dtype=float)
        columns = {
            "item": np.full(len(c), item),
            "row": np.arange(len(c)),
            "rank": np.full(len(c), b.meta.rank, np.int64),
            "step": c["step"].to_numpy(np.int64),
            "phase": c["phase"].to_numpy(dtype=object),
            "op": c["op"].to_numpy(dtype=object),
            "issue_us": issue + shift_us,
            "arrival_us": np.fmax(issue, start) + shift_us,
        }
        for name, values in columns.items():
            parts.setdefault(name, []).append(values)
    calls = {name: np.concatenate(values) for name, values in parts.items()}
    calls["phase"], phase_names = pd.factorize(calls["phase"])
    calls["op"] = pd.factorize(calls["op"])[0]
    calls["scope"] = _phase_scopes(phase_names)[calls["phase"]]
    return calls


def _phase_scopes(names: Sequence[str]) -> np.ndarray:
    """Per phase name, the group it runs on: ``dp_*`` the DP group, ``tp_*`` the TP group, ``pp_*`` a point-to-point
    transfer (no group to wait for: all transfer), else the world."""
    scopes = {"dp_": _DP, "tp_": _TP, "pp_": _UNKNOWN}
    return np.array([scopes.get(str(n)[:3], _WORLD) for n in names], np.int64)


def _world_size(breakdowns: Sequence[TraceBreakdown], dp: int | None, tp: int | None, pp: int = 1) -> int:
    """Ranks in the run: dp * tp * pp, else the traces' own world size when they agree, else the traces."""
    if dp and tp:
        return dp * tp * pp
    sizes = {b.meta.world_size for b in breakdowns}
    if len(sizes) == 1 and (size := sizes.pop()):
        return int(size)
    return len(breakdowns)


def _groups(scope: np.ndarray, rank: np.ndarray, dp: int | None, tp: int | None, world: int) -> tuple[np.ndarray, np.ndarray]:
    """Per call, its group's kind and index: a DP group is named by its stage and ``tp_rank``, a TP group
    by its stage and ``dp_rank`` (rank = pp_rank * dp * tp + dp_rank * tp + tp_rank); a ``dp_`` / ``tp_`` phase
    without both sizes has no known group."""
    if dp and tp:
        kind = scope
        index = np.where(scope == _DP, dp_group_index(rank, dp, tp), np.where(scope == _TP, tp_group_index(rank, tp), 0))
    else:
        kind = np.where(scope == _WORLD, _WORLD, _UNKNOWN)
        index = np.zeros(len(rank), np.int64)
    kind = np.where((rank < 0) | (rank >= world), _UNKNOWN, kind)
    return kind, index


def dp_group_index(rank: IntOrArray, dp: int, tp: int) -> IntOrArray:
    """Which DP group ``rank`` (an int or an array) is in: one per stage and TP rank (rank = pp_rank * dp * tp +
    dp_rank * tp + tp_rank, muon_repro.parallel.grid3d; without stages, its TP rank)."""
    return (rank // (dp * tp)) * tp + rank % tp


def tp_group_index(rank: IntOrArray, tp: int) -> IntOrArray:
    """Which TP group ``rank`` is in: one per stage and DP rank."""
    return rank // tp


def _group_sizes(kind: np.ndarray, dp: int | None, tp: int | None, world: int) -> np.ndarray:
    sizes = np.array([dp or 0, tp or 0, world, 0])  # indexed by _DP, _TP, _WORLD, _UNKNOWN (-1)
    return sizes[kind]


def _collective_ids(calls: dict[str, np.ndarray], kind: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(collective, sequence)`` ids per call.

    ``sequence``: the calls of one (step, group, phase, op), whose k-th call on each rank of
    the group is one collective. ``collective``: that k-th call, numbered in issue order. World
    calls ignore the phase (foreign labels may differ between ranks) and are numbered by their
    position among all of the step's world calls, so that equal sequences of ops line up.
    """
    world = kind == _WORLD
    phase = np.where(world, -1, calls["phase"])
    op, step, rank = calls["op"], calls["step"], calls["rank"]
    sequence = _dense_ids(step, kind, index, phase, op)
    numbered_within = _dense_ids(rank, step, kind, index, phase, np.where(world, -1, op))
    ordinal = _rank_within(numbered_within, calls["issue_us"])
    return _dense_ids(sequence, ordinal), sequence


def _dense_ids(*columns: np.ndarray) -> np.ndarray:
    """One integer id per distinct row of the integer ``columns``, 0..n-1 (hashing, not sorting:
    ``np.unique(axis=0)`` took seconds on 200k calls)."""
    ids = np.zeros(len(columns[0]), np.int64)
    for column in columns:
        codes, uniques = pd.factorize(np.asarray(column, np.int64))
        ids = pd.factorize(ids * len(uniques) + codes)[0]  # dense again, so the product never overflows
    return ids


def _rank_within(group: np.ndarray, order_by: np.ndarray) -> np.ndarray:
    """Each element's position within its ``group``, in ``order_by`` order (0 for the first)."""
    order = np.lexsort((order_by, group))
    sorted_group = group[order]
    first = np.r_[True, sorted_group[1:] != sorted_group[:-1]]
    position = np.arange(len(group))
    group_start = np.maximum.accumulate(np.where(first, position, 0))
    out = np.empty(len(group), np.int64)
    out[order] = position - group_start
    return out


def _complete(sequence: np.ndarray, collective: np.ndarray, rank: np.ndarray, group_size: np.ndarray) -> np.ndarray:
    """Calls whose sequence every rank of the group has, the same number of times on each, and
    whose collective (k-th call) is seen once on every rank of the group. A group of one has no peer to match (as
    in the timed steps, :mod:`muon_repro.analysis.timed_steps`): its calls are all transfer, unmatched."""
    per_rank = pd.DataFrame({"sequence": sequence, "rank": rank}).groupby(["sequence", "rank"]).size()
    agreement = per_rank.groupby(level="sequence").agg(["size", "min", "max"]).to_numpy()[sequence]
    calls_per_collective = np.bincount(collective)[collective]
    return (
        (group_size > 1)
        & (agreement[:, 0] == group_size)
        & (agreement[:, 1] == agreement[:, 2])
        & (calls_per_collective == group_size)
    )


def _world_steps_that_differ(kind: np.ndarray, ok: np.ndarray, step: np.ndarray) -> np.ndarray:
    """World calls in a step where the ranks' sequences of ops differ: none of them is matched."""
    world = kind == _WORLD
    differing_steps = np.unique(step[world & ~ok])
    return world & np.isin(step, differing_steps)
