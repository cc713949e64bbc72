"""Collectives with profiler labels and a byte ledger.

Every collective the model and the optimizers issue goes through a function here. Each one

* opens a ``torch.profiler.record_function`` scope named after its *phase* (``dp_gather``,
  ``tp_all_reduce``, ...), so traces attribute the transfer to the step of the algorithm, and
* appends a :class:`CommRecord` to the group's :class:`CommLedger`: the bytes this rank sends
  under the ring model of nccl-tests (:func:`muon_repro.formulas.ring_bytes`,
  ``docs/method.md#communication-model``), and
* while the ledger's :class:`CommTimer` is on (the benchmark's timed steps, run without the
  profiler), appends the call's entry and exit ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on
  Linux: one clock for every process of a host) to the timer's columns of ints.

A group of one rank communicates nothing and records nothing.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from time import perf_counter_ns

import torch
import torch.distributed as dist
from torch.profiler import record_function

from muon_repro.formulas import ring_bytes

OPS = ("all_gather", "reduce_scatter", "all_reduce")

# torch >= 2.13 renamed the single-tensor collectives (the old names warn); same c10d ops underneath.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass(frozen=True)
class CommRecord:
    """One collective as this rank saw it. ``elements`` is the full (un-sharded) array size."""

    step: int
    phase: str
    op: str
    group: str
    group_size: int
    elements: int
    dtype: str
    bytes: int


@dataclass
class CommTimer:
    """Entry and exit times of the collective calls issued while :attr:`on` is set, as columns.

    One call appends six ints and creates no object: phase and group names are coded by their order of
    first appearance (:attr:`phase_codes`, :attr:`group_codes`), the op by its index in :data:`OPS`.
    ``start_ns``/``end_ns`` are ``time.perf_counter_ns()`` around the c10d call: the host's view, so for
    NCCL (asynchronous on the GPU stream) they time the launch, not the transfer. An all-gather issued
    with ``async_op=True`` ends when its :meth:`PendingGather.wait` returns. A group of one rank
    communicates nothing and is not timed (as it is not ledgered).
    """

    on: bool = False
    step: list[int] = field(default_factory=list)
    phase: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    group: list[int] = field(default_factory=list)
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    phase_codes: dict[str, int] = field(default_factory=dict)
    group_codes: dict[str, int] = field(default_factory=dict)

    def add(self, step: int, phase: str, kind: int, group: str, start_ns: int, end_ns: int) -> None:
        self.phase.append(self.phase_codes.setdefault(phase, len(self.phase_codes)))
        self.group.append(self.group_codes.setdefault(group, len(self.group_codes)))
        self.step.append(step)
        self.kind.append(kind)
        self.start_ns.append(start_ns)
        self.end_ns.append(end_ns)

    def columns(self) -> dict[str, list]:
        """The calls as a columnar dict (``metrics.json``'s ``timed_comm``): the vocabularies ``phases``,
        ``kinds`` and ``groups``, then one list per column, a code into its vocabulary for the named ones."""
        return {
            "phases": list(self.phase_codes),
            "kinds": list(OPS),
            "groups": list(self.group_codes),
            "step": list(self.step),
            "phase": list(self.phase),
            "kind": list(self.kind),
            "group": list(self.group),
            "start_ns": list(self.start_ns),
            "end_ns": list(self.end_ns),
        }

    def clear(self) -> None:
        for column in (self.step, self.phase, self.kind, self.group, self.start_ns, self.end_ns):
            column.clear()
        self.phase_codes.clear()
        self.group_codes.clear()


_ALL_GATHER, _REDUCE_SCATTER, _ALL_REDUCE = (OPS.index(op) for op in ("all_gather", "reduce_scatter", "all_reduce"))


def _timed(group: Group, phase: str, kind: int, call, /, *args, **kwargs):
    """``call(*args, **kwargs)``, its entry and exit appended to ``group``'s timer while the timer is on
    (positional-only, so ``call``'s own ``group=`` keyword passes through)."""
    timer = group.ledger.timer
    if not timer.on:
        return call(*args, **kwargs)
    start_ns = perf_counter_ns()
    out = call(*args, **kwargs)
    timer.add(group.ledger.step, phase, kind, group.name, start_ns, perf_counter_ns())
    return out


@dataclass
class CommLedger:
    """Append-only log of collectives. ``step`` is set by whoever drives the training loop."""

    step: int = 0
    records: list[CommRecord] = field(default_factory=list)
    enabled: bool = True
    timer: CommTimer = field(default_factory=CommTimer)

    def record(self, phase: str, op: str, group: Group, elements: int, dtype: torch.dtype) -> None:
        if not self.enabled or group.size == 1:
            return
        if op not in OPS:
            raise ValueError(f"unknown collective {op!r}; expected one of {OPS}")
        element_size = torch.empty((), dtype=dtype).element_size()
        self.records.append(
            CommRecord(
                step=self.step,
                phase=phase,
                op=op,
                group=group.name,
                group_size=group.size,
                elements=elements,
                dtype=str(dtype).removeprefix("torch."),
                bytes=ring_bytes(op, elements, element_size, group.size),
            )
        )

    def bytes_by_phase(self, step: int | None = None) -> dict[str, int]:
        """Total bytes per phase, for one step or (``step=None``) for all of them."""
        totals: dict[str, int] = defaultdict(int)
        for r in self.records:
            if step is None or r.step == step:
                totals[r.phase] += r.bytes
        return dict(totals)

    def as_dicts(self) -> list[dict]:
        return [asdict(r) for r in self.records]

    def clear(self) -> None:
        self.records.clear()


@dataclass
class Group:
    """One process group as seen from this rank: its name (``dp``/``tp``), members and ledger."""

    name: str
    ranks: tuple[int, ...]
    rank: int
    process_group: dist.ProcessGroup | None
    ledger: CommLedger

    @property
    def size(self) -> int:
        return len(self.ranks)

    @classmethod
    def single(cls, name: str, ledger: CommLedger | None = None) -> Group:
        """A group of this process alone (no ``torch.distributed`` needed)."""
        return cls(name=name, ranks=(0,), rank=0, process_group=None, ledger=ledger or CommLedger())


# ---------------------------------------------------------------- gather <-> scatter pair


def all_gather_into(full: torch.Tensor, shard: torch.Tensor, group: Group, *, phase: str) -> torch.Tensor:
    """Fill ``full`` (flat, ``size * shard.numel()``) with every rank's ``shard``, in rank order."""
    if full.numel() != shard.numel() * group.size:
        raise ValueError(
            f"all_gather_into: output has {full.numel()} elements, expected "
            f"{group.size} x {shard.numel()} for group {group.name!r}"
        )
    with record_function(phase):
        if group.size == 1:
            full.view(-1).copy_(shard.view(-1))
        else:
            _timed(group, phase, _ALL_GATHER, _all_gather_single, full, shard, group=group.process_group)
    group.ledger.record(phase, "all_gather", group, full.numel(), full.dtype)
    return full


@dataclass
class PendingGather:
    """An all-gather in flight (:func:`start_all_gather_into`); :meth:`wait` returns its output."""

    full: torch.Tensor
    shard: torch.Tensor
    phase: str
    work: dist.Work | None  # None: nothing to wait for (a group of one rank)
    group: Group | None = None  # whose ledger's timer gets the call when wait() returns (issued_ns set)
    issued_ns: int = 0  # perf_counter_ns() at the issue, while the timer was on; 0: not timed

    @property
    def nbytes(self) -> int:
        """Buffers the gather holds while in flight (send and receive)."""
        return self.full.numel() * self.full.element_size() + self.shard.numel() * self.shard.element_size()

    def wait(self) -> torch.Tensor:
        if self.work is not None:
            with record_function(self.phase):  # the wait belongs to the phase, wherever it is placed
                self.work.wait()
                if self.issued_ns and self.group is not None:
                    ledger = self.group.ledger
                    ledger.timer.add(ledger.step, self.phase, _ALL_GATHER, self.group.name, self.issued_ns, perf_counter_ns())
            self.work = None
        return self.full


def start_all_gather_into(full: torch.Tensor, shard: torch.Tensor, group: Group, *, phase: str) -> PendingGather:
    """:func:`all_gather_into` issued with ``async_op=True``: the caller decides where to wait."""
    if full.numel() != shard.numel() * group.size:
        raise ValueError(
            f"start_all_gather_into: output has {full.numel()} elements, expected "
            f"{group.size} x {shard.numel()} for group {group.name!r}"
        )
    work, issued_ns = None, 0
    with record_function(phase):
        if group.size == 1:
            full.view(-1).copy_(shard.view(-1))
        else:
            issued_ns = perf_counter_ns() if group.ledger.timer.on else 0
            work = _all_gather_single(full, shard, group=group.process_group, async_op=True)
    group.ledger.record(phase, "all_gather", group, full.numel(), full.dtype)
    return PendingGather(full, shard, phase, work, group, issued_ns)


def reduce_scatter_into(shard: torch.Tensor, full: torch.Tensor, group: Group, *, phase: str) -> torch.Tensor:
    """Sum ``full`` over the group and keep this rank's chunk in ``shard`` (inverse of the gather)."""
    if full.numel() != shard.numel() * group.size:
        raise ValueError(
            f"reduce_scatter_into: input has {full.numel()} elements, expected "
            f"{group.size} x {shard.numel()} for group {group.name!r}"
        )
    with record_function(phase):
        if group.size == 1:
            shard.view(-1).copy_(full.view(-1))
        else:
            _timed(
                group,
                phase,
                _REDUCE_SCATTER,
                _reduce_scatter_single,
                shard,
                full,
                op=dist.ReduceOp.SUM,
                group=group.process_group,
            )
    group.ledger.record(phase, "reduce_scatter", group, full.numel(), full.dtype)
    return shard


# ---------------------------------------------------------------- all-reduce


# Reduction operators all_reduce_ accepts, by the name callers pass.
REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


def all_reduce_(tensor: torch.Tensor, group: Group, *, phase: str, op: str = "sum") -> torch.Tensor:
    """Reduce ``tensor`` over the group with ``op`` (``"sum"`` or ``"max"``), in place.

    Every operator is ledgered and timed as an ``all_reduce``: a ring all-reduce sends the same
    bytes whatever it combines the chunks with.
    """
    if op not in REDUCE_OPS:
        raise ValueError(f"all_reduce_: unknown op {op!r}; choose one of {', '.join(REDUCE_OPS)}")
    with record_function(phase):
        if group.size > 1:
            _timed(group, phase, _ALL_REDUCE, dist.all_reduce, tensor, op=REDUCE_OPS[op], group=group.process_group)
    group.ledger.record(phase, "all_reduce", group, tensor.numel(), tensor.dtype)
    return tensor


def group_agrees(value: int, group: Group, device: torch.device | str = "cpu") -> bool:
    """Whether every rank of ``group`` passed the same ``value`` (an integer in [0, 2**62)): one all-reduce of two
    int64s, taking the minimum of ``value`` and of ``-value``. A setup check, not a step's traffic: neither ledgered
    nor timed, so call it outside the steps (every rank of the group must call it, as any collective)."""
    if not 0 <= value < 2**62:
        raise ValueError(f"group_agrees takes an integer in [0, 2**62), got {value}")
    if group.size == 1 or group.process_group is None:
        return True
    both = torch.tensor([value, -value], dtype=torch.int64, device=device)
    dist.all_reduce(both, op=dist.ReduceOp.MIN, group=group.process_group)
    return int(both[0]) == value and -int(both[1]) == value
