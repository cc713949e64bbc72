"""ZeRO-1 Muon and AdamW over data parallel, with tensor parallel (arXiv 2502.16982, Algorithm 1).

Each rank keeps the full TP-local parameters (as views into one flat buffer, laid out by a
:class:`~muon_repro.optim.layout.ShardPlan`) but optimizer state only for its DP shard of it.
Gathers and shards come in inverse pairs:

=============  =============  ======================================================
gather         shard          what moves
=============  =============  ======================================================
dp_gather      dp_shard       a matrix's DP pieces <-> this rank's piece (flat slice)
tp_gather      tp_shard       TP-local matrices <-> the full matrix along its TP dim
dp_all_gather  (update)       parameter shards -> every DP rank's full parameters
=============  =============  ======================================================

``dp_reduce_scatter`` turns every rank's full gradients into this rank's averaged shard.

The ZeRO-1 base (flat buffers, the reduce-scatter / all-gather pair, AdamW on the shard) is
:class:`~muon_repro.optim.zero1.ZeroOneOptimizer`; this module holds the two optimizers' ``step()``
and Muon's gathers and shards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
from torch.profiler import record_function

from muon_repro.formulas import ns_method_flops
from muon_repro.optim.adamw import adamw_defaults
from muon_repro.optim.hyperparameters import MOONLIGHT_ADAMW_KEYS
from muon_repro.optim.layout import NsUnit
from muon_repro.optim.muon import evaluate_closure, muon_defaults
from muon_repro.optim.newton_schulz import default_ns_dtype, orthogonalize_many
from muon_repro.optim.update_rules import (
    MomentumForm,
    UpdateScale,
    apply_decoupled_updates_,
    muon_momentum_many_,
    muon_update_scale,
)
from muon_repro.optim.zero1 import StepStats, ZeroOneOptimizer
from muon_repro.parallel import comm
from muon_repro.parallel.mesh import ParallelDims
from muon_repro.phases import (
    DP_GATHER,
    DP_SHARD,
    MOMENTUM,
    NEWTON_SCHULZ,
    OVERLAPS,
    TP_GATHER,
    TP_SHARD,
    UPDATE,
)


class DistributedAdamW(ZeroOneOptimizer):
    """ZeRO-1 AdamW: torch's AdamW arithmetic on this rank's DP shard of every parameter.

    Data flow of ``step()``::

        grads (full, every rank) --dp_reduce_scatter--> grad shard --update--> param shard
                                 --dp_all_gather--> params (full, every rank)

    Accepts :func:`~muon_repro.optim.muon_param_groups` groups (``use_muon`` ignored); groups take torch's keys
    (``betas``, ``eps``), as :class:`~muon_repro.optim.AdamW`'s do.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        dims: ParallelDims,
        *,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        layout: str = "contiguous",
        bucket_elems: int | None = None,
        reduce_dtype: torch.dtype = torch.float32,
    ) -> None:
        defaults = adamw_defaults(lr, weight_decay, betas, eps)
        if isinstance(params, torch.Tensor):  # list() would split it into rows; torch's own words
            raise TypeError(
                f"params argument given to the optimizer should be an iterable of Tensors or dicts, but got {params.type()}"
            )
        groups = list(params)
        if groups and isinstance(groups[0], dict):
            groups = [{**g, "use_muon": False} for g in groups]
        super().__init__(groups, dims, defaults, layout, bucket_elems, reduce_dtype)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = evaluate_closure(closure)
        self._check_params()
        self.stats = StepStats()
        self._dp_reduce_scatter_grads()
        with record_function(UPDATE):
            self._adamw_update()
        self._dp_all_gather_params()
        return loss


class DistributedMuon(ZeroOneOptimizer):
    """ZeRO-1 Muon with tensor parallelism: MoonshotAI's Distributed Muon (Algorithm 1).

    Data flow of ``step()`` for the Muon matrices, one :class:`NsUnit` at a time::

        grads --dp_reduce_scatter--> grad shard --momentum--> NS input shard
          --dp_gather--> TP-local matrix --tp_gather--> full matrix --newton_schulz--> full update
          --tp_shard--> TP-local update --dp_shard--> update shard --update--> param shard
          --dp_all_gather--> params

    Parameters in ``use_muon=False`` groups (embeddings, LM head, norms) skip the middle and take
    AdamW's element-wise step on their shard. The update is Moonlight's (see
    :class:`~muon_repro.optim.Muon`, same hyperparameters), scaled by the FULL matrix shape.
    ``gather_dtype`` is the dtype matrices travel in for Newton-Schulz (bf16 as in the paper):
    the momentum-updated NS input shards are rounded to it in ``dp_gather`` (also the matrices the
    layout does not DP-gather, so the update never depends on the layout), the TP gather moves
    the rounded values, and NS runs on them. The single-device :class:`~muon_repro.optim.Muon` with the same
    ``gather_dtype`` rounds at the same point, and the two agree bit for bit; fp32 rounds nothing.
    With ``ns_dtype=bf16`` a bf16 gather loses nothing, since NS rounds its input to bf16 anyway.
    ``layout`` is one of :data:`~muon_repro.optim.layout.LAYOUTS` (see that module).
    ``ns_unit_elems`` caps the full-matrix elements of one Newton-Schulz unit on a rank (None: the layout's own
    units, see :mod:`~muon_repro.optim.layout`): all of a unit's full matrices are alive at once, so the cap bounds
    the step's transient memory at the price of one DP and one TP gather per unit; the bits do not change.
    ``overlap`` (:data:`~muon_repro.phases.OVERLAPS`) schedules the DP and TP gathers: ``none``
    blocks on each; ``naive_async`` issues each with ``async_op=True`` and waits where its result
    is first used, as a direct port would, so nothing overlaps; ``pipelined`` runs Newton-Schulz on
    unit k while unit k+1's TP gather and unit k+2's DP gather are in flight. All three compute
    the same bits: only when the bytes move changes.
    """

    ADAMW_KEYS = MOONLIGHT_ADAMW_KEYS

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        dims: ParallelDims,
        *,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        ns_dtype: torch.dtype | None = None,
        ns_method: str = "quintic",
        update_scale: UpdateScale = "moonlight",
        momentum_form: MomentumForm = "sum",
        adamw_betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-8,
        layout: str = "contiguous",
        bucket_elems: int | None = None,
        gather_dtype: torch.dtype = torch.bfloat16,
        reduce_dtype: torch.dtype = torch.float32,
        overlap: str = "none",
        ns_unit_elems: int | None = None,
    ) -> None:
        if gather_dtype not in (torch.float32, torch.bfloat16):  # what the layouts' gathers move
            raise ValueError(f"gather_dtype must be torch.float32 or torch.bfloat16, got {gather_dtype}")
        if overlap not in OVERLAPS:
            raise ValueError(f"unknown overlap {overlap!r}; choose one of {', '.join(OVERLAPS)}")
        self.overlap = overlap
        defaults = muon_defaults(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=nesterov,
            ns_steps=ns_steps,
            ns_dtype=ns_dtype,
            ns_method=ns_method,
            update_scale=update_scale,
            momentum_form=momentum_form,
            adamw_betas=adamw_betas,
            adamw_eps=adamw_eps,
        )
        self.gather_dtype = gather_dtype
        super().__init__(params, dims, defaults, layout, bucket_elems, reduce_dtype, ns_unit_elems)

    def _check_added_group(self, group: dict, where: str) -> None:
        """The hyperparameters checked as every optimizer's are, and a group's own ``gather_dtype`` (:class:`Muon`
        reads one per group) refused unless it is the constructor's: every group's matrices travel in one buffer of
        one dtype, so another value would be shown in ``param_groups`` and never used."""
        super()._check_added_group(group, where)
        own = group.get("gather_dtype", self.gather_dtype)
        if own != self.gather_dtype:
            raise ValueError(
                f"{where}: gather_dtype {own} differs from DistributedMuon's gather_dtype={self.gather_dtype}: its "
                "gathers move every group in one dtype; give the dtype to the constructor, or drop the group's key"
            )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = evaluate_closure(closure)
        self._check_params()
        self.stats = StepStats()

        self._dp_reduce_scatter_grads()
        with record_function(MOMENTUM):
            ns_input_pieces = self._momentum()
        update_pieces: dict[int, torch.Tensor] = {}
        for unit, ns_input_local, ns_input_full, in_flight_bytes in self._gathered_units(ns_input_pieces):
            with record_function(NEWTON_SCHULZ):
                update_full = self._newton_schulz(ns_input_full)
            with record_function(TP_SHARD):
                update_local = self._tp_shard(update_full)
            with record_function(DP_SHARD):
                update_pieces.update(self._dp_shard(update_local))
            held = _nbytes(ns_input_local, ns_input_full, update_full, update_local)
            live = held + self._dp_gather_bytes(unit) + in_flight_bytes
            self.stats.transient_bytes = max(self.stats.transient_bytes, live)
        with record_function(UPDATE):
            self._muon_update(update_pieces)
            self._adamw_update()
        self._dp_all_gather_params()
        return loss

    # ---------------------------------------------------------------- phases

    def _momentum(self) -> dict[int, torch.Tensor]:
        """Momentum on this rank's pieces of every Muon matrix, each param group's at once; returns the Nesterov NS
        inputs."""
        by_group: dict[int, tuple[dict, list[int], list[torch.Tensor], list[torch.Tensor]]] = {}
        for slot, piece, _, grad_offset in self._my_pieces:
            if slot.spec.use_muon:
                group = self._groups[slot.index]
                state = self.state[self._params[slot.index]]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros(piece.length, dtype=torch.float32, device=self.param_flat.device)
                _, slots, bufs, grads = by_group.setdefault(id(group), (group, [], [], []))
                slots.append(slot.index)
                bufs.append(state["momentum_buffer"])
                grads.append(self._grad_view(grad_offset, piece.length))
        ns_input = {}
        for group, slots, bufs, grads in by_group.values():
            inputs = muon_momentum_many_(bufs, grads, group["momentum"], group["nesterov"], group["momentum_form"])
            ns_input.update(zip(slots, inputs))
        return ns_input

    def _gathered_units(self, pieces: dict[int, torch.Tensor]) -> Iterator[tuple[NsUnit, dict, dict, int]]:
        """Per NS unit, in plan order: (unit, TP-local matrices, full matrices, bytes of gathers
        still in flight), the gathers scheduled by ``self.overlap`` (:data:`OVERLAPS`)."""
        units = self.plan.ns_units
        if self.overlap != "pipelined":  # each gather waited for before the next step uses it
            for unit in units:
                local = self._dp_gather_finish(self._dp_gather_start(unit, pieces))
                yield unit, local, self._tp_gather_finish(self._tp_gather_start(local)), 0
            return
        # Pipelined: while the caller runs Newton-Schulz on unit k, unit k+1's TP gather and
        # unit k+2's DP gather are in flight (two units at most, so buffers stay bounded).
        if not units:
            return
        local = self._dp_gather_finish(self._dp_gather_start(units[0], pieces))
        tp_next = self._tp_gather_start(local)
        dp_next = self._dp_gather_start(units[1], pieces) if len(units) > 1 else None
        for k, unit in enumerate(units):
            local_k, full_k = local, self._tp_gather_finish(tp_next)
            if dp_next is not None:
                local = self._dp_gather_finish(dp_next)
                tp_next = self._tp_gather_start(local)
                dp_next = self._dp_gather_start(units[k + 2], pieces) if k + 2 < len(units) else None
            in_flight = [g for g in (tp_next, dp_next) if g is not None and k + 1 < len(units)]
            yield unit, local_k, full_k, sum(g.nbytes for g in in_flight)

    def _gather(self, full: torch.Tensor, shard: torch.Tensor, group: comm.Group, phase: str) -> comm.PendingGather:
        """One all-gather as ``self.overlap`` issues it: blocking for ``none``, else ``async_op=True``."""
        if self.overlap == "none":
            comm.all_gather_into(full, shard, group, phase=phase)
            return comm.PendingGather(full, shard, phase, work=None)
        return comm.start_all_gather_into(full, shard, group, phase=phase)

    def _dp_gather_start(self, unit: NsUnit, pieces: dict[int, torch.Tensor]) -> _Gathering:
        """Issue the DP gather of ``unit``: this rank's pieces of its matrices, packed."""
        dp_rank = self.dims.dp_rank
        mine = self.plan.ns_slots(unit, dp_rank)
        if not unit.dp_gathered:  # each matrix is wholly held here: its one piece is the matrix
            # Rounded to gather_dtype although it does not travel, so that every matrix enters
            # Newton-Schulz in the same precision whichever matrices the layout gathers.
            ready = {i: pieces[i].to(self.gather_dtype).view(self.plan.slots[i].spec.local_shape) for i in mine}
            return _Gathering(mine, ready=ready)
        send_elems = unit.send_elems
        send = torch.zeros(send_elems, dtype=self.gather_dtype, device=self.param_flat.device)
        for i in unit.slots:
            if i in pieces:
                offset = unit.send_offsets[i][dp_rank]
                send[offset : offset + pieces[i].numel()].copy_(pieces[i])
        recv = torch.empty(self.dims.dp * send_elems, dtype=self.gather_dtype, device=send.device)
        return _Gathering(mine, pending=self._gather(recv, send, self.dims.dp_group, DP_GATHER), unit=unit)

    def _dp_gather_finish(self, gathering: _Gathering) -> dict[int, torch.Tensor]:
        """DP pieces -> TP-local matrices, for the matrices of the unit this rank orthogonalizes."""
        if gathering.ready is not None:
            return gathering.ready
        recv, unit = gathering.pending.wait(), gathering.unit
        send_elems = unit.send_elems
        local = {}
        for i in gathering.slots:
            slot = self.plan.slots[i]
            parts = [recv[p.dp_rank * send_elems + unit.send_offsets[i][p.dp_rank] :][: p.length] for p in slot.pieces]
            local[i] = torch.cat(parts).view(slot.spec.local_shape)
        return local

    def _dp_shard(self, update_local: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """TP-local updates -> this rank's piece of each: the inverse of the DP gather (:meth:`_dp_gather_start`, then
        :meth:`_dp_gather_finish`)."""
        pieces = {}
        for i, update in update_local.items():
            piece = self.plan.slots[i].piece_of(self.dims.dp_rank)
            if piece is not None:
                pieces[i] = update.reshape(-1)[piece.param_start : piece.param_start + piece.length]
        return pieces

    def _tp_gather_start(self, local: dict[int, torch.Tensor]) -> _Gathering:
        """Issue the TP gather of the TP-sharded matrices of ``local``, packed."""
        sharded = tuple(i for i in local if self.plan.slots[i].spec.tp_dim is not None)
        if self.dims.tp == 1 or not sharded:
            return _Gathering(sharded, ready=dict(local))
        send = torch.cat([local[i].reshape(-1).to(self.gather_dtype) for i in sharded])
        recv = torch.empty(self.dims.tp * send.numel(), dtype=self.gather_dtype, device=send.device)
        return _Gathering(sharded, pending=self._gather(recv, send, self.dims.tp_group, TP_GATHER), local=local)

    def _tp_gather_finish(self, gathering: _Gathering) -> dict[int, torch.Tensor]:
        """TP-local matrices -> full matrices, concatenated along each one's TP partition dim."""
        if gathering.ready is not None:
            return gathering.ready
        recv = gathering.pending.wait()
        per_rank = recv.view(self.dims.tp, -1)
        full = dict(gathering.local)
        offset = 0
        for i in gathering.slots:
            spec = self.plan.slots[i].spec
            chunks = [per_rank[r, offset : offset + spec.numel].view(spec.local_shape) for r in range(self.dims.tp)]
            full[i] = torch.cat(chunks, dim=spec.tp_dim)
            offset += spec.numel
        return full

    def _tp_shard(self, update_full: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Full updates -> this TP rank's block of each: the inverse of the TP gather (:meth:`_tp_gather_start`, then
        :meth:`_tp_gather_finish`)."""
        local = {}
        for i, update in update_full.items():
            tp_dim = self.plan.slots[i].spec.tp_dim
            whole = tp_dim is None or self.dims.tp == 1
            local[i] = update if whole else update.chunk(self.dims.tp, dim=tp_dim)[self.dims.tp_rank]
        return local

    def _newton_schulz(self, full: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Orthogonalize the full matrices (fp32 out), those of one shape and param group at once; count calls and
        FLOPs; record each one's update RMS."""
        by_group: dict[int, tuple[dict, list[int]]] = {}
        for i in full:
            group = self._groups[i]
            by_group.setdefault(id(group), (group, []))[1].append(i)
        updates = {}
        for group, slots in by_group.values():
            matrices = [full[i].float() for i in slots]
            ns_dtype = group["ns_dtype"] or default_ns_dtype(matrices[0].device)
            scales = [muon_update_scale(self.plan.slots[i].spec.full_shape, group["update_scale"]) for i in slots]
            method = group.get("ns_method", "quintic")
            outs, update_rms = orthogonalize_many(matrices, group["ns_steps"], ns_dtype, scales=scales, method=method)
            for i, update, rms in zip(slots, outs, update_rms):
                spec = self.plan.slots[i].spec
                self.stats.update_rms[spec.name] = rms
                self.stats.ns_calls += 1
                self.stats.ns_flops += ns_method_flops(spec.full_shape, group["ns_steps"], method)
                updates[i] = update
        return updates

    def _muon_update(self, update_pieces: dict[int, torch.Tensor]) -> None:
        """Moonlight's update on this rank's pieces of the Muon matrices, each param group's at once."""
        by_group: dict[int, tuple[dict, list[torch.Tensor], list[torch.Tensor], list[float]]] = {}
        for slot, _piece, param_view, _grad_offset in self._my_pieces:
            if slot.spec.use_muon:
                group = self._groups[slot.index]
                _, params, updates, scales = by_group.setdefault(id(group), (group, [], [], []))
                params.append(param_view)
                updates.append(update_pieces[slot.index])
                scales.append(muon_update_scale(slot.spec.full_shape, group["update_scale"]))
        for group, params, updates, scales in by_group.values():
            apply_decoupled_updates_(params, updates, group["lr"], group["weight_decay"], scales)

    def _dp_gather_bytes(self, unit: NsUnit) -> int:
        if not unit.dp_gathered:
            return 0
        size = torch.empty((), dtype=self.gather_dtype).element_size()
        return (1 + self.dims.dp) * unit.send_elems * size  # send + receive buffers


@dataclass
class _Gathering:
    """A DP or TP gather between its start and its finish: the result is ``ready`` (nothing
    travels), or ``pending`` on the wire; ``slots`` are the matrices it delivers."""

    slots: tuple[int, ...]
    ready: dict[int, torch.Tensor] | None = None
    pending: comm.PendingGather | None = None
    unit: NsUnit | None = None  # DP gathers: where each piece sits in the packed buffer
    local: dict[int, torch.Tensor] | None = None  # TP gathers: the matrices TP does not shard

    @property
    def nbytes(self) -> int:
        return self.pending.nbytes if self.pending is not None else 0


def _nbytes(*dicts: dict[int, torch.Tensor]) -> int:
    """Bytes of the distinct tensors in ``dicts`` (views of one another counted once)."""
    seen, total = set(), 0
    for d in dicts:
        for t in d.values():
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.numel())
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
    return total
