"""Where a prediction prices a run beyond what its machine profile measured.

A calibration measures each rate over a range: a size curve at a few operand sizes, a collective at a few
message sizes on groups of one size with a given number of ranks running, the compute share at a few counts
of ranks per node. Past those the model carries the nearest measurement on (a curve's end rate, the samples'
last slope, the nearest group or world size, the largest count's share): a guess, not a measurement. And a
kernel the profile has no size curve for is priced at its flat figure whatever its size.

:func:`logging_prices` records every figure a prediction looks up, at the size it asks for (the profile's
pricing methods report to it: nothing here repeats how a rate is chosen), and :meth:`PriceLog.beyond` says,
one note per figure, what was priced outside its measured range. The predictions table carries the notes
(``beyond_calibration``), so that a run's error can be read against them. The optimizer's flat buffers are
priced at the flat figures by design (their size is not the model's operands'): they are not noted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PriceLog:
    """What one prediction looked up: the sizes asked of each curve or flat figure, the message sizes asked of
    each collective fit, the group and world sizes each fit stood in for, the ranks per node asked of the share."""

    curve_sizes: dict[str, list[int]] = field(default_factory=dict)  # kind: [smallest, largest] elements asked
    curves: dict[str, Mapping[int, float]] = field(default_factory=dict)  # kind: the curve that priced it
    flat: dict[str, str] = field(default_factory=dict)  # kind priced at its flat figure at a known size: the precision
    fit_bytes: dict[Any, list[float]] = field(default_factory=dict)  # CollectiveFit: [smallest, largest] ring bytes
    stand_ins: dict[tuple[str, int, int | None], Any] = field(default_factory=dict)  # (op, group, world): its fit
    ranks_per_node: dict[int, tuple[int, ...]] = field(default_factory=dict)  # local ranks asked: the share's keys

    def beyond(self) -> tuple[str, ...]:
        """One note per figure priced beyond what was measured (figures alike in one note); empty when every price
        lies within."""
        return tuple(dict.fromkeys(self._curve_notes() + self._fit_notes() + self._share_notes()))

    def _curve_notes(self) -> list[str]:
        past: dict[str, list[str]] = {}  # kinds past the same measured sizes by as much: one note
        for kind, (low, high) in sorted(self.curve_sizes.items()):
            for where in _outside(low, high, sorted(self.curves[kind]), "elements per rank"):
                past.setdefault(where, []).append(kind)
        flat: dict[str, list[str]] = {}
        for kind, precision in sorted(self.flat.items()):
            flat.setdefault(precision, []).append(kind)
        return [f"size_curves.{'/'.join(kinds)}: {where}" for where, kinds in past.items()] + [
            f"{', '.join(kinds)}: flat figures at every size (no {precision} size curve)" for precision, kinds in flat.items()
        ]

    def _fit_notes(self) -> list[str]:
        stood_in: dict[str, list[str]] = {}  # ops a fit of another group or world size priced alike: one note
        for (op, group, world), fit in sorted(self.stand_ins.items(), key=lambda item: (item[0][1], item[0][2] or 0, item[0][0])):
            if fit.group_size is not None and fit.group_size != group:
                stood_in.setdefault(f"on {group} ranks: priced by the {fit.group_size}-rank fits", []).append(op)
            if world is not None and fit.world_size is not None and fit.world_size != world:
                running = f"on {group} ranks: measured with {fit.world_size} ranks running, priced with {world}"
                stood_in.setdefault(running, []).append(op)
        notes = [f"{', '.join(dict.fromkeys(ops))} {what}" for what, ops in stood_in.items()]
        for fit, (_, high) in sorted(self.fit_bytes.items(), key=lambda item: (item[0].op, item[0].group_size or 0)):
            label = f"{fit.op} on {fit.group_size} ranks" if fit.group_size else fit.op
            if len(fit.samples) < 2:
                notes.append(f"{label}: an alpha-beta fit at every size (no measured samples)")
            else:  # below the smallest sample a call is priced at that sample's time, which bounds it from above
                measured = sorted(b for b, _ in fit.samples)
                notes += [f"{label}: {where}" for where in _outside(measured[0], high, measured, "bytes per rank")]
        return notes

    def _share_notes(self) -> list[str]:
        notes = []
        for local, keys in sorted(self.ranks_per_node.items()):
            if local > max(keys):
                notes.append(f"compute_share: {local} ranks per node, measured up to {max(keys)}")
            elif local < min(keys):
                notes.append(f"compute_share: {local} ranks per node, measured from {min(keys)}")
        return notes


def _outside(low: float, high: float, measured: list[float], unit: str) -> list[str]:
    """What of ``[low, high]`` (the sizes asked) lies past the ends of ``measured``."""
    span = f"measured ({measured[0]:,.0f} to {measured[-1]:,.0f})"
    notes = []
    if high > measured[-1]:
        notes.append(f"{high:,.0f} {unit}, {high / measured[-1]:.3g}x the largest {span}")
    if low < measured[0]:
        notes.append(f"{low:,.0f} {unit}, below the smallest {span}")
    return notes


_ACTIVE: ContextVar[PriceLog | None] = ContextVar("muon_repro_price_log", default=None)


@contextmanager
def logging_prices() -> Iterator[PriceLog]:
    """Every figure the profile's pricing methods look up inside the block is recorded in the log it yields."""
    log = PriceLog()
    token = _ACTIVE.set(log)
    try:
        yield log
    finally:
        _ACTIVE.reset(token)


# ---------------------------------------------------------------- what the pricing methods report


def priced_at_size(kind: str, elems: int, curve: Mapping[int, float] | None, precision: str) -> None:
    """``kind`` priced on operands of ``elems`` per rank, by ``curve`` (None: by its flat figure)."""
    log = _ACTIVE.get()
    if log is None or elems <= 0:
        return
    if curve is None:
        log.flat.setdefault(kind, precision)
        return
    log.curves[kind] = curve
    sizes = log.curve_sizes.setdefault(kind, [elems, elems])
    sizes[0], sizes[1] = min(sizes[0], elems), max(sizes[1], elems)


def priced_call(fit: Any, ring_bytes: float) -> None:
    """A call of ``fit`` (a CollectiveFit) sending ``ring_bytes`` per rank."""
    log = _ACTIVE.get()
    if log is None:
        return
    sizes = log.fit_bytes.setdefault(fit, [ring_bytes, ring_bytes])
    sizes[0], sizes[1] = min(sizes[0], ring_bytes), max(sizes[1], ring_bytes)


def chose_fit(op: str, group_size: int, world_size: int | None, fit: Any) -> None:
    """``fit`` stands for ``op`` on groups of ``group_size`` with ``world_size`` ranks running."""
    log = _ACTIVE.get()
    if log is not None:
        log.stand_ins[(op, group_size, world_size)] = fit


def shared_cores(local_ranks: int, measured: Mapping[int, float]) -> None:
    """The compute share asked for ``local_ranks`` ranks per node, of a profile that measured ``measured``'s keys."""
    log = _ACTIVE.get()
    if log is not None and measured:
        log.ranks_per_node[local_ranks] = tuple(measured)
