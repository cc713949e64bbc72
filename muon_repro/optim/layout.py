"""ZeRO-1 shard plans: where every parameter lives in the flat buffer, and who holds which piece.

A plan is a pure function of the TP-local parameter shapes (in model order), the DP size and the
layout, so the optimizer and the analytic communication model
(:mod:`muon_repro.optim.comm_model`) build the very same one. The flat buffer is a sequence of
*buckets*; each bucket is padded to a multiple of ``dp`` and split into ``dp`` equal shards, DP
rank ``r`` holding shard ``r`` of every bucket.

Buffer order
------------
Megatron fills its flat grad/param buffers in the *reverse* of ``model.parameters()`` order, to
follow backprop roughly (``param_and_grad_buffer.py``), and so does every plan here: the specs
are given in model order and laid out last parameter first. For a GPT that puts the LM head
and the final norm at the start of the buffer (DP rank 0), the blocks from the last to the first,
and the embedding at the end (the last DP rank): the AdamW-routed tensors are spread over the
ranks instead of piling up on one. (All parameters here are fp32, so there is one buffer; Megatron
keeps one per dtype.) :attr:`ShardPlan.order` is the buffer order as spec indices.

Layouts
-------
``contiguous`` (Megatron's original distributed optimizer): one bucket holding every parameter
in buffer order. A matrix lying wholly inside one rank's shard is orthogonalized by that rank
alone with no DP gather; only the few matrices that straddle a shard boundary are gathered, in
one all-gather, and orthogonalized by each rank that holds a piece of them.

``bucketed`` (Megatron's current layout): parameters in buffer order are packed into buckets of
about ``bucket_elems`` elements (a parameter never spans two buckets), each bucket split across
DP. Every matrix is therefore cut across ranks; each bucket's matrices are gathered in one
all-gather and orthogonalized on every DP rank.

``whole_matrix`` (layer-wise, as in KellerJordan's and Dion's implementations): whole parameters
are assigned to DP owners, largest first, each to the least loaded owner: Muon matrices balanced by
Newton-Schulz FLOPs (then elements), the rest by size; equal parameters are placed in buffer order, and
of owners equally loaded the lowest DP rank is taken. The buffer is laid out owner by owner, each owner's
segment padded to the largest, and inside a segment the owner's parameters keep buffer order
(reverse model order). Every matrix is orthogonalized once, by its owner, with no DP gather; the
price is padding in the reduce-scatter and the all-gather.

Newton-Schulz units
-------------------
Each layout hands Newton-Schulz its matrices in *units* (:attr:`ShardPlan.ns_units`), each gathered in one
DP all-gather (where the layout DP-gathers it) and one TP all-gather, so that all of a unit's full matrices
are alive at once. The layouts' own units are large: every matrix a rank holds whole (``contiguous``,
``whole_matrix``) or a whole bucket (``bucketed``). ``ns_unit_elems`` caps them: a unit then holds at most
that many elements of full matrices per rank (a larger matrix is a unit of its own), trading one gather per
unit for transient memory bounded by the cap instead of by TP times the rank's share of the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from muon_repro.formulas import newton_schulz_flops
from muon_repro.phases import LAYOUTS
from muon_repro.values import is_count

__all__ = ["BUFFER_ORDER", "DEFAULT_BUCKET_ELEMS", "LAYOUTS", "NsUnit", "ParamSpec", "ShardPlan"]

DEFAULT_BUCKET_ELEMS = 40_000_000  # Megatron's default DDP bucket size


@dataclass(frozen=True)
class ParamSpec:
    """What a plan needs to know of one parameter, on one TP rank."""

    name: str
    local_shape: tuple[int, ...]
    tp_dim: int | None  # dim along which TP shards it; None when replicated
    tp: int
    use_muon: bool

    @property
    def numel(self) -> int:
        return math.prod(self.local_shape)

    @property
    def full_shape(self) -> tuple[int, ...]:
        shape = list(self.local_shape)
        if self.tp_dim is not None:
            shape[self.tp_dim] *= self.tp
        return tuple(shape)


@dataclass(frozen=True)
class Piece:
    """The part of one parameter held by one DP rank: ``length`` elements from ``param_start``."""

    dp_rank: int
    param_start: int  # offset in the parameter, flattened
    flat_start: int  # offset in the flat buffer
    length: int


@dataclass(frozen=True)
class Slot:
    """One parameter's place in the flat buffer and its pieces, in DP-rank order."""

    index: int
    spec: ParamSpec
    bucket: int
    flat_start: int
    pieces: tuple[Piece, ...]

    @property
    def holders(self) -> tuple[int, ...]:
        return tuple(p.dp_rank for p in self.pieces)

    def piece_of(self, dp_rank: int) -> Piece | None:
        return next((p for p in self.pieces if p.dp_rank == dp_rank), None)


@dataclass(frozen=True)
class Bucket:
    start: int
    size: int  # a multiple of dp
    dp: int

    @property
    def shard_size(self) -> int:
        return self.size // self.dp

    def shard_start(self, dp_rank: int) -> int:
        return self.start + dp_rank * self.shard_size


@dataclass(frozen=True)
class NsUnit:
    """Muon matrices handled together: one DP all-gather (if ``dp_gathered``), one TP all-gather.

    ``send_offsets[slot][dp_rank]`` is where that rank's piece of the matrix sits in the rank's
    DP send buffer of ``send_elems`` elements (the largest of the ranks' totals; the rest pads).
    """

    slots: tuple[int, ...]
    dp_gathered: bool
    everyone_orthogonalizes: bool  # bucketed: every DP rank runs NS on every matrix of the unit
    send_elems: int = 0
    send_offsets: dict[int, dict[int, int]] = field(default_factory=dict)


BUFFER_ORDER = "reverse_model"  # recorded in checkpoint fingerprints: a plan of another order cannot load


class ShardPlan:
    """The flat-buffer layout of one TP rank's parameters over ``dp`` DP ranks.

    ``specs`` are in model order (``model.named_parameters()``); ``slots[i]`` is ``specs[i]``'s
    place, and the buffer holds them in reverse (:attr:`order`), as Megatron does.
    """

    def __init__(
        self,
        specs: list[ParamSpec],
        dp: int,
        layout: str = "contiguous",
        bucket_elems: int | None = None,
        ns_unit_elems: int | None = None,
    ) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"unknown ZeRO-1 layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
        for name, value in (("bucket_elems", bucket_elems), ("ns_unit_elems", ns_unit_elems)):
            if value is not None and not is_count(value):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if layout != "bucketed" and bucket_elems is not None:
            raise ValueError(f"bucket_elems applies to the 'bucketed' layout only, not {layout!r}")
        if not is_count(dp):
            raise ValueError(f"dp must be a positive integer, got {dp!r}")
        if not specs:
            raise ValueError("a shard plan needs at least one parameter")
        self.specs = list(specs)
        self.dp = dp
        self.layout = layout
        self.bucket_elems = (bucket_elems or DEFAULT_BUCKET_ELEMS) if layout == "bucketed" else None
        self.ns_unit_elems = ns_unit_elems  # None: the layout's own units (see "Newton-Schulz units" above)
        # Megatron's order: last parameter of the model first (roughly the order backprop produces grads).
        self.order: list[int] = list(reversed(range(len(self.specs))))
        self._position = {i: k for k, i in enumerate(self.order)}

        bucket_of, segment_of = self._arrange()
        self.buckets: list[Bucket] = []
        self.slots: list[Slot] = [None] * len(specs)  # type: ignore[list-item]
        cursor = 0
        for b, members in enumerate(bucket_of):
            if segment_of is None:
                offsets, used = [], 0
                for i in members:
                    offsets.append(used)
                    used += specs[i].numel
                size = math.ceil(used / dp) * dp
            else:  # whole_matrix: owner r's params packed in segment r, segments equal-sized
                seg_len = max(sum(specs[i].numel for i in seg) for seg in segment_of)
                size = seg_len * dp
                offsets, members = [], []
                for r, seg in enumerate(segment_of):
                    used = r * seg_len
                    for i in seg:
                        members.append(i)
                        offsets.append(used)
                        used += specs[i].numel
            bucket = Bucket(start=cursor, size=max(size, dp), dp=dp)
            self.buckets.append(bucket)
            for i, off in zip(members, offsets):
                self.slots[i] = Slot(i, specs[i], b, cursor + off, self._pieces(specs[i], cursor + off, bucket))
            cursor += bucket.size
        self.total = cursor

    # ---------------------------------------------------------------- arrangement

    def _arrange(self) -> tuple[list[list[int]], list[list[int]] | None]:
        """Buckets of parameter indices in buffer order; for whole_matrix also the per-owner segments."""
        order, position = self.order, self._position
        if self.layout == "contiguous":
            return [list(order)], None
        if self.layout == "bucketed":
            buckets, current, size = [], [], 0
            for i in order:
                current.append(i)
                size += self.specs[i].numel
                if size >= self.bucket_elems:
                    buckets.append(current)
                    current, size = [], 0
            if current:
                buckets.append(current)
            return buckets, None
        # whole_matrix: longest-processing-time-first, Muon matrices by NS FLOPs, the rest by size.
        segments: list[list[int]] = [[] for _ in range(self.dp)]
        flops, elems = [0] * self.dp, [0] * self.dp
        muon = sorted(
            (i for i in order if self.specs[i].use_muon),
            key=lambda i: (-newton_schulz_flops(self.specs[i].full_shape), position[i]),
        )
        for i in muon:
            owner = min(range(self.dp), key=lambda r: (flops[r], elems[r], r))
            segments[owner].append(i)
            flops[owner] += newton_schulz_flops(self.specs[i].full_shape)
            elems[owner] += self.specs[i].numel
        rest = sorted((i for i in order if not self.specs[i].use_muon), key=lambda i: (-self.specs[i].numel, position[i]))
        for i in rest:
            owner = min(range(self.dp), key=lambda r: (elems[r], r))
            segments[owner].append(i)
            elems[owner] += self.specs[i].numel
        for seg in segments:
            seg.sort(key=position.__getitem__)  # buffer order (reverse model order) inside an owner's segment
        return [list(order)], segments

    def _pieces(self, spec: ParamSpec, flat_start: int, bucket: Bucket) -> tuple[Piece, ...]:
        pieces = []
        end = flat_start + spec.numel
        for r in range(self.dp):
            lo = max(flat_start, bucket.shard_start(r))
            hi = min(end, bucket.shard_start(r) + bucket.shard_size)
            if hi > lo:
                pieces.append(Piece(r, lo - flat_start, lo, hi - lo))
        return tuple(pieces)

    # ---------------------------------------------------------------- queries

    def muon_slots(self) -> list[Slot]:
        """The Muon matrices' slots, in buffer order."""
        return [self.slots[i] for i in self.order if self.specs[i].use_muon]

    def pieces_of(self, dp_rank: int) -> list[tuple[Slot, Piece]]:
        """This rank's pieces, in flat-buffer order."""
        held = [(s, s.piece_of(dp_rank)) for s in self.slots]
        return sorted(((s, p) for s, p in held if p is not None), key=lambda sp: sp[1].flat_start)

    @cached_property
    def ns_units(self) -> list[NsUnit]:
        """The units of Newton-Schulz work, identical on every rank (collectives must match): the layout's own,
        each cut to at most ``ns_unit_elems`` elements of full matrices per rank when a cap is set."""
        muon = self.muon_slots()
        if self.layout == "whole_matrix":
            return self._held_units(tuple(s.index for s in muon))
        if self.layout == "contiguous":
            local = tuple(s.index for s in muon if len(s.pieces) == 1)
            straddling = tuple(s.index for s in muon if len(s.pieces) > 1)
            units = self._held_units(local)
            for chunk in self._capped(straddling):
                units.append(self._gathered_unit(chunk, everyone=False))
            return units
        return [
            self._gathered_unit(chunk, everyone=True)
            for b in range(len(self.buckets))
            for chunk in self._capped(tuple(s.index for s in muon if s.bucket == b))
        ]

    def _capped(self, slots: tuple[int, ...]) -> list[tuple[int, ...]]:
        """``slots`` (in buffer order) cut into consecutive runs of at most ``ns_unit_elems`` full-matrix
        elements, a larger matrix alone; one run without a cap; none for no slots."""
        if not slots:
            return []
        if self.ns_unit_elems is None:
            return [slots]
        chunks: list[list[int]] = [[]]
        used = 0
        for i in slots:
            size = math.prod(self.specs[i].full_shape)
            if chunks[-1] and used + size > self.ns_unit_elems:
                chunks.append([])
                used = 0
            chunks[-1].append(i)
            used += size
        return [tuple(chunk) for chunk in chunks]

    def _held_units(self, slots: tuple[int, ...]) -> list[NsUnit]:
        """Units of matrices each held whole by one DP rank (no DP gather): every rank's own matrices capped
        apart, unit k holding each rank's k-th run, so that the units are the same on every rank and a rank
        gathers no more units over TP than its own matrices need. One unit, maybe empty, without a cap."""
        if self.ns_unit_elems is None:
            return [NsUnit(slots, dp_gathered=False, everyone_orthogonalizes=False)]
        runs = [self._capped(tuple(i for i in slots if self.slots[i].holders == (r,))) for r in range(self.dp)]
        merged = [tuple(i for r in range(self.dp) if k < len(runs[r]) for i in runs[r][k]) for k in range(max(map(len, runs)))]
        return [NsUnit(tuple(sorted(unit, key=self._position.__getitem__)), False, False) for unit in merged]

    def _gathered_unit(self, slots: tuple[int, ...], everyone: bool) -> NsUnit:
        used = [0] * self.dp
        offsets: dict[int, dict[int, int]] = {}
        for i in slots:
            offsets[i] = {}
            for piece in self.slots[i].pieces:
                offsets[i][piece.dp_rank] = used[piece.dp_rank]
                used[piece.dp_rank] += piece.length
        return NsUnit(slots, dp_gathered=True, everyone_orthogonalizes=everyone, send_elems=max(used), send_offsets=offsets)

    def ns_slots(self, unit: NsUnit, dp_rank: int) -> tuple[int, ...]:
        """The matrices of ``unit`` that DP rank ``dp_rank`` orthogonalizes."""
        if unit.everyone_orthogonalizes:
            return unit.slots
        return tuple(i for i in unit.slots if dp_rank in self.slots[i].holders)

    def fingerprint(self) -> dict:
        """What a checkpoint must agree with to be loaded into this plan (``params`` in model order)."""
        return {
            "buffer_order": BUFFER_ORDER,
            "layout": self.layout,
            "dp": self.dp,
            "bucket_elems": self.bucket_elems,
            "params": [[s.name, list(s.local_shape), s.use_muon] for s in self.specs],
        }
