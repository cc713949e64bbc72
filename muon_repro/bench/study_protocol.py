"""The original study's protocol, replayed: its experiment as its ``muon_vs_adam.py`` describes it, recorded by us.

Two protocols (:data:`PROTOCOLS`):

* ``study``: as the study ran it. Five random-gradient fp32 parameters (:data:`STUDY_SHAPES`), a warm-up step, then
  5 profiled steps inside the study's ``record_function`` scopes. AdamW all-reduces every full gradient over every
  rank (DDP, no sharding) and steps locally (``torch.optim.AdamW``). Muon at DP=2, TP=2 holds its parameters
  TP-sharded by the study's ``tp_dims`` and ZeRO-sharded (a contiguous flat buffer split over DP), reduces no
  gradient, and per step: momentum on its shard -> bf16 DP all-gather of the TP-local buffer -> per matrix it
  holds, bf16 TP all-gather -> Newton-Schulz on the full matrix -> TP shard -> DP shard -> update.
* ``study-equal-work``: the same shapes, grid and schedule with the two optimizers doing the same job. Both hold
  the parameters TP-sharded and ZeRO-1 sharded over DP the same way, both reduce-scatter their fp32 gradients over
  their DP group and all-gather the updated fp32 parameters over it; Muon adds its bf16 DP and TP gathers of the
  momentum. The differences from ``study``: AdamW runs at DP=2, TP=2 instead of on 4 unsharded replicas, reduces with
  a reduce-scatter instead of an all-reduce, and keeps state for its shard only (a ZeRO-1 AdamW written here, the
  update of ``torch.optim.AdamW``); Muon reduce-scatters its gradients and all-gathers its parameters.

Each has an optimizer-only and a full-step variant (the study's simulated forward-backward: ``FWD_BWD``, a square
``randn`` and chained matmuls, synchronised), and the full step an ``async_op=True`` variant (every collective issued
asynchronously and waited for where its result is used: a correct port of the study's "naive async", whose trace
shows its DP gather waited for by nothing, docs/recording.md). On CUDA the sizes are the
study's; on CPU they are divided by :data:`CPU_SCALE` (rounded up to what the TP split needs), so that a run takes
seconds, and the config records what was scaled.

The study's protocol also runs on one rank (DP1·TP1): every group then holds one rank and no collective is issued, so
that on a GPU the study's optimizer scope can be set against its kernels alone (docs/recording.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
from torch.profiler import record_function

from muon_repro.optim.newton_schulz import NS_COEFFICIENTS
from muon_repro.optim.update_rules import adamw_update_, apply_decoupled_update_, muon_momentum_, muon_update_scale
from muon_repro.rundir import STUDY_PROTOCOLS as PROTOCOLS

STUDY_SHAPES = ((4096, 4096), (1024, 324), (456, 1024), (676, 876), (128, 128))
STUDY_TP_DIMS = (0, 1, -1, 1, 0)  # the dimension TP splits each matrix along; -1: not split
FWD_BWD_SIZE, FWD_BWD_MATMULS = 2048, 20
CPU_SCALE = 8  # CPU runs divide every size by this
STEPS, WARMUP = 5, 1
STUDY_WORLD = 4  # the study's ranks: DP2 x TP2, one GPU each
WORLD_SIZES = (STUDY_WORLD, 1)  # its grid, or one device alone (what the optimizer scope holds without collectives)
# The study's Muon settings (its muon_args), and torch's AdamW defaults it used.
MUON_LR, MUON_MOMENTUM, MUON_WD, NS_STEPS = 0.1, 0.9, 0.1, 5  # update scale: Moonlight's 0.2 sqrt(max(A, B))
ADAMW_LR = 1e-3
ADAMW_BETAS, ADAMW_EPS, ADAMW_WD = (0.9, 0.999), 1e-8, 0.01


@dataclass(frozen=True)
class ProtocolRun:
    """One run of a protocol: which optimizer, which variant."""

    optimizer: str  # adamw | muon
    full_step: bool
    async_op: bool = False

    @property
    def name(self) -> str:
        """The study's run name (its grid, DP2·TP2): adamw, muon_dp2_tp2, adamw_FULLSTEP, muon_FULLSTEP_dp2_tp2_async, ..."""
        return self.name_at(2, 2)

    def name_at(self, dp: int, tp: int) -> str:
        """The run's name on a DP x TP grid, the study's way: Muon's names carry the grid, AdamW's do not."""
        parts = [self.optimizer]
        if self.full_step:
            parts.append("FULLSTEP")
        if self.optimizer == "muon":
            parts.append(f"dp{dp}_tp{tp}")
        if self.async_op:
            parts.append("async")
        return "_".join(parts)

    @property
    def prefix(self) -> str:
        return "Muon" if self.optimizer == "muon" else "AdamW"


RUNS = (
    ProtocolRun("adamw", False),
    ProtocolRun("muon", False),
    ProtocolRun("adamw", True),
    ProtocolRun("muon", True),
    ProtocolRun("adamw", True, True),
    ProtocolRun("muon", True, True),
)


@dataclass(frozen=True)
class ProtocolConfig:
    """What a protocol run did; validated on construction, written into its config.json."""

    protocol: str
    device: str  # cpu | cuda
    shapes: tuple[tuple[int, int], ...]
    tp_dims: tuple[int, ...] = STUDY_TP_DIMS
    fwd_bwd_size: int = FWD_BWD_SIZE
    fwd_bwd_matmuls: int = FWD_BWD_MATMULS
    dp: int = 2
    tp: int = 2
    steps: int = STEPS
    warmup: int = WARMUP
    seed: int = 0
    scaled: str = ""  # what differs from the study's sizes, and why
    differences: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol {self.protocol!r}: choose one of {', '.join(PROTOCOLS)}")
        if len(self.shapes) != len(self.tp_dims):
            raise ValueError(f"{len(self.shapes)} shapes but {len(self.tp_dims)} tp_dims")
        for shape, dim in zip(self.shapes, self.tp_dims):
            if dim != -1 and shape[dim] % self.tp:
                raise ValueError(f"shape {shape} does not split {self.tp} ways along dimension {dim}")
        if self.steps < 1 or self.warmup < 0:
            raise ValueError(f"steps {self.steps} and warmup {self.warmup}: need at least 1 step and no negative warm-up")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp

    @classmethod
    def for_device(cls, protocol: str, device: str, world_size: int = STUDY_WORLD) -> ProtocolConfig:
        """The study's sizes on CUDA; on CPU, each divided by :data:`CPU_SCALE` (rounded up to split evenly). On
        :data:`STUDY_WORLD` ranks the study's DP2·TP2; on one, DP1·TP1 (:data:`WORLD_SIZES`)."""
        if world_size not in WORLD_SIZES:
            raise ValueError(
                f"world size {world_size}: the study's protocol runs on {STUDY_WORLD} ranks (its DP2·TP2) or on 1 "
                "(one device, no collectives)"
            )
        if world_size == 1 and protocol == "study-equal-work":
            raise ValueError(
                "on one rank the study's protocol and its equal-work variant do the same work (no collective): "
                "record --protocol study"
            )
        grid = 2 if world_size == STUDY_WORLD else 1
        differences = EQUAL_WORK_DIFFERENCES if protocol == "study-equal-work" else ()
        if world_size == 1:
            differences = ONE_RANK_DIFFERENCES
        if device == "cuda":
            return cls(protocol, device, STUDY_SHAPES, dp=grid, tp=grid, differences=differences)
        shapes = tuple(_scaled(shape, dim) for shape, dim in zip(STUDY_SHAPES, STUDY_TP_DIMS))
        scaled = (
            f"CPU: every size divided by {CPU_SCALE} (rounded up to split 2 ways along tp_dims): parameters "
            f"{', '.join(f'{a}x{b}' for a, b in shapes)} for the study's {', '.join(f'{a}x{b}' for a, b in STUDY_SHAPES)}; "
            f"FWD_BWD {FWD_BWD_SIZE // CPU_SCALE}x{FWD_BWD_SIZE // CPU_SCALE} for {FWD_BWD_SIZE}x{FWD_BWD_SIZE}"
        )
        return cls(
            protocol,
            device,
            shapes,
            fwd_bwd_size=FWD_BWD_SIZE // CPU_SCALE,
            dp=grid,
            tp=grid,
            scaled=scaled,
            differences=differences,
        )

    def to_dict(self) -> dict:
        return asdict(self)


ONE_RANK_DIFFERENCES = (
    "one rank (DP1·TP1; the study: 4 ranks at DP2·TP2): every group holds one rank, so no collective is issued; "
    "each optimizer's data flow and the study's scopes are kept",
)
EQUAL_WORK_DIFFERENCES = (
    "AdamW runs at DP=2, TP=2 (the study: 4 unsharded replicas), its parameters TP-sharded by tp_dims as Muon's are",
    "both optimizers reduce-scatter their fp32 gradients over their DP group (the study: AdamW all-reduces over all 4 "
    "ranks, Muon reduces none)",
    "both keep state for their ZeRO-1 shard only and all-gather the updated fp32 parameters over DP (the study: "
    "AdamW keeps full state, Muon gathers no parameters)",
    "AdamW's update is torch.optim.AdamW's, applied to the shard by this module",
)


def _scaled(shape: tuple[int, int], tp_dim: int, tp: int = 2) -> tuple[int, int]:
    out = [math.ceil(s / CPU_SCALE) for s in shape]
    if tp_dim != -1:
        out[tp_dim] = math.ceil(out[tp_dim] / tp) * tp
    return (out[0], out[1])


# ---------------------------------------------------------------- process groups and the sharded layout


@dataclass
class Grid:
    """This rank's groups: TP ranks adjacent ([0,1], [2,3]), DP ranks strided ([0,2], [1,3]), as the study's."""

    rank: int
    world: int
    dp: int
    tp: int
    dp_group: dist.ProcessGroup | None
    tp_group: dist.ProcessGroup | None

    @property
    def dp_rank(self) -> int:
        return self.rank // self.tp

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp

    @classmethod
    def build(cls, dp: int, tp: int) -> Grid:
        rank, world = dist.get_rank(), dist.get_world_size()
        if dp * tp != world:
            raise ValueError(f"DP={dp} x TP={tp} needs {dp * tp} ranks, the world has {world}")
        dp_group = tp_group = None
        for i in range(tp):  # every rank creates every group, in the same order
            group = dist.new_group(list(range(i, world, tp)))
            if rank % tp == i:
                dp_group = group
        for i in range(dp):
            group = dist.new_group(list(range(i * tp, (i + 1) * tp)))
            if rank // tp == i:
                tp_group = group
        return cls(rank, world, dp, tp, dp_group, tp_group)


def tp_local(full: torch.Tensor, tp_dim: int, grid: Grid) -> torch.Tensor:
    """This rank's TP shard of a full matrix (the whole matrix when ``tp_dim`` is -1)."""
    return full if tp_dim == -1 else full.chunk(grid.tp, dim=tp_dim)[grid.tp_rank].contiguous()


@dataclass
class FlatShard:
    """A contiguous ZeRO layout: the TP-local matrices laid end to end, padded to ``dp`` equal chunks."""

    shapes: list[torch.Size]  # TP-local shapes
    offsets: list[int]
    dp: int
    dp_rank: int

    @classmethod
    def of(cls, tp_locals: list[torch.Tensor], dp: int, dp_rank: int) -> FlatShard:
        offsets = [0]
        for t in tp_locals[:-1]:
            offsets.append(offsets[-1] + t.numel())
        return cls([t.shape for t in tp_locals], offsets, dp, dp_rank)

    @property
    def chunk(self) -> int:
        return math.ceil((self.offsets[-1] + math.prod(self.shapes[-1])) / self.dp)

    @property
    def lo(self) -> int:
        return self.dp_rank * self.chunk

    def overlap(self, i: int) -> tuple[int, int]:
        """The part of matrix ``i`` inside this rank's chunk, in the matrix's flat coordinates (maybe empty)."""
        start, end = self.offsets[i], self.offsets[i] + math.prod(self.shapes[i])
        lo, hi = max(start, self.lo), min(end, self.lo + self.chunk)
        return (lo - start, hi - start) if lo < hi else (0, 0)

    def flat(self, tp_locals: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        """The full padded flat buffer of the TP-local matrices."""
        out = torch.zeros(self.chunk * self.dp, dtype=dtype, device=tp_locals[0].device)
        for i, t in enumerate(tp_locals):
            out[self.offsets[i] : self.offsets[i] + t.numel()].copy_(t.reshape(-1))
        return out

    def shard(self, full: torch.Tensor) -> torch.Tensor:
        """This rank's chunk of a full flat buffer: what an all-gather of the chunks puts back."""
        return full[self.lo : self.lo + self.chunk]

    def matrix(self, full: torch.Tensor, i: int) -> torch.Tensor:
        """Matrix ``i`` out of a full flat buffer."""
        return full[self.offsets[i] : self.offsets[i] + math.prod(self.shapes[i])].view(self.shapes[i])


# ---------------------------------------------------------------- collectives, labelled with their group

# The label each collective runs under names its group (for gloo traces, whose events do not say), and no
# collective: the study's method counts every event whose name holds one.
GROUP_LABELS = {"dp": "dp_collective", "tp": "tp_collective", "world": "world_collective"}


# A group of one rank (the protocol on one device) issues no collective: each becomes the copy it amounts to, so
# that the trace holds the optimizer's own work alone.


def _alone(group) -> bool:
    return dist.get_world_size(group) == 1


def _gather(out: torch.Tensor, shard: torch.Tensor, group, label: str, async_op: bool):
    if _alone(group):
        out.copy_(shard)
        return None
    with record_function(GROUP_LABELS[label]):
        return dist.all_gather_into_tensor(out, shard, group=group, async_op=async_op)


def _reduce_scatter(shard: torch.Tensor, full: torch.Tensor, group, async_op: bool):
    if _alone(group):
        shard.copy_(full)
        return None
    with record_function(GROUP_LABELS["dp"]):
        return dist.reduce_scatter_tensor(shard, full, group=group, async_op=async_op)


def _all_reduce(t: torch.Tensor, async_op: bool):
    if _alone(None):
        return None
    with record_function(GROUP_LABELS["world"]):
        return dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=async_op)


def _wait(work) -> None:
    if work is not None:
        work.wait()


# ---------------------------------------------------------------- the study's Newton-Schulz and step scope

STUDY_NS_EPS = 1e-7  # the study's Frobenius-norm guard (the project's own Newton-Schulz uses NS_EPS)


def study_newton_schulz(G: torch.Tensor, steps: int = NS_STEPS) -> torch.Tensor:
    """Newton-Schulz as the study's optimizer computes it: in ``G``'s dtype (bf16, the gathered momentum), on the
    short side's Gram matrix, each scalar product and sum its own operator (``A = X X^T``, ``B = b A + (c A) A``,
    ``X = a X + B X``). The arithmetic is the quintic of :mod:`muon_repro.optim.newton_schulz`; the operators are the
    study's, so that its optimizer scope issues the launches the study's did (the project's fuses them into three)."""
    a, b, c = NS_COEFFICIENTS
    tall = G.size(0) > G.size(1)
    X = G.T if tall else G
    X = X / (X.norm() + STUDY_NS_EPS)
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * A @ A  # (c A) A, evaluated left to right as the study's line is
        X = a * X + B @ X
    return X.T if tall else X


def optimizer_step_scope(optimizer: str):
    """The scope torch's profiler opens around a ``torch.optim.Optimizer``'s step (``Optimizer.step#<class>.step``):
    the study's Muon and AdamW were Optimizers, so their kernels ran under it; ours, written here, open it by hand so
    that a GPU trace puts their kernels under the same innermost scope as the study's."""
    return record_function(f"Optimizer.step#{optimizer}.step")


# ---------------------------------------------------------------- the optimizers, as each protocol runs them


class ReplicaAdamW:
    """The study's AdamW: every rank holds the full parameters, all-reduces every full gradient, steps locally."""

    def __init__(self, full_params: list[torch.Tensor], async_op: bool) -> None:
        self.params = [p.clone() for p in full_params]
        self.opt = torch.optim.AdamW(self.params, lr=ADAMW_LR)
        self.async_op = async_op
        self.world = dist.get_world_size()

    def prepare(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """One step's gradients as :meth:`attach` takes them: the full matrices, as the study's ranks held them."""
        return grads

    def attach(self, grads: list[torch.Tensor]) -> None:
        for p, g in zip(self.params, grads):  # references, as the study's (its all-reduce then sums in place)
            p.grad = g

    def reduce(self) -> None:
        works = [_all_reduce(p.grad, self.async_op) for p in self.params]
        for p, work in zip(self.params, works):
            _wait(work)
            p.grad /= self.world

    def step(self) -> None:
        self.opt.step()  # torch's profiler opens Optimizer.step#AdamW.step around it, as in the study's traces
        self.opt.zero_grad()


class _FlatZeroOne:
    """What both DP x TP optimizers hold: this rank's TP-local parameters as one fp32 buffer (``param_full``, every
    DP rank's chunk) and the chunk it owns under ZeRO-1 (``param_shard``), with gradient buffers of the same two
    sizes. :meth:`prepare` lays a step's full gradients out as ``grad_full`` is."""

    def __init__(self, full_params: list[torch.Tensor], cfg: ProtocolConfig, grid: Grid, async_op: bool) -> None:
        self.grid, self.cfg, self.async_op = grid, cfg, async_op
        tp_locals = [tp_local(p, d, grid) for p, d in zip(full_params, cfg.tp_dims)]
        self.layout = FlatShard.of(tp_locals, grid.dp, grid.dp_rank)
        self.param_full = self.layout.flat(tp_locals, torch.float32)
        self.param_shard = self.layout.shard(self.param_full).clone()
        self.grad_full = torch.zeros_like(self.param_full)
        self.grad_shard = torch.zeros_like(self.param_shard)

    def prepare(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """One step's gradients laid out as :meth:`attach` takes them (the TP-local flat buffer), built before the
        profiled steps as the study built its ranks' gradients before its own."""
        return self.layout.flat([tp_local(g, d, self.grid) for g, d in zip(grads, self.cfg.tp_dims)], torch.float32)


class ShardedAdamW(_FlatZeroOne):
    """AdamW with ZeRO-1 over DP at DP x TP (the equal-work protocol): reduce-scatter of the fp32 gradients,
    torch.optim.AdamW's update on the shard, all-gather of the fp32 parameters (the inverse of the scatter)."""

    def __init__(self, full_params: list[torch.Tensor], cfg: ProtocolConfig, grid: Grid, async_op: bool) -> None:
        super().__init__(full_params, cfg, grid, async_op)
        self.exp_avg = torch.zeros_like(self.param_shard)
        self.exp_avg_sq = torch.zeros_like(self.param_shard)
        self.steps = 0

    def attach(self, grad_full: torch.Tensor) -> None:
        self.grad_full = grad_full

    def reduce(self) -> None:
        _wait(_reduce_scatter(self.grad_shard, self.grad_full, self.grid.dp_group, self.async_op))
        self.grad_shard /= self.grid.dp

    def step(self) -> None:
        with optimizer_step_scope("AdamW"):
            self.steps += 1
            p = self.param_shard
            adamw_update_(
                p, self.grad_shard, self.exp_avg, self.exp_avg_sq, self.steps, ADAMW_LR, ADAMW_BETAS, ADAMW_EPS, ADAMW_WD
            )
            _wait(_gather(self.param_full, p, self.grid.dp_group, "dp", self.async_op))


class StudyMuon(_FlatZeroOne):
    """Muon at DP x TP as the study ran it (``equal_work`` False: no gradient reduction, no parameter gather) or
    with ZeRO-1's reduce-scatter and parameter all-gather (``equal_work`` True). The update is the study's: momentum
    0.9 with Nesterov, Newton-Schulz on the full matrix (:func:`study_newton_schulz`, bf16), decoupled weight decay,
    lr scaled by 0.2 sqrt(max(A, B)). Like the study's, it works matrix by matrix on the pieces of the matrices this
    rank's ZeRO chunk holds: momentum and the bf16 copy into the DP gather's buffer, then the update."""

    def __init__(self, full_params: list[torch.Tensor], cfg: ProtocolConfig, grid: Grid, async_op: bool) -> None:
        super().__init__(full_params, cfg, grid, async_op)
        self.equal_work = cfg.protocol == "study-equal-work"
        self.full_shapes = [tuple(p.shape) for p in full_params]
        self.momentum = torch.zeros_like(self.param_shard)
        # matrix -> (its part in this rank's chunk, in the matrix's flat coordinates; where that part lies in the chunk)
        self.pieces: dict[int, tuple[slice, slice]] = {}
        for i in range(len(full_params)):
            lo, hi = self.layout.overlap(i)
            if hi > lo:
                at = self.layout.offsets[i] + lo - self.layout.lo
                self.pieces[i] = (slice(lo, hi), slice(at, at + hi - lo))
        self.mine = list(self.pieces)

    def attach(self, grad_full: torch.Tensor) -> None:
        self.grad_full = grad_full
        if not self.equal_work:  # the study's ranks each take their shard of the same gradients: no reduction
            self.grad_shard = self.layout.shard(grad_full)

    def step(self) -> None:
        grid, layout = self.grid, self.layout
        device = self.param_shard.device
        with optimizer_step_scope("Muon"):
            if self.equal_work:  # ZeRO-1: sum the gradients over DP into this rank's shard
                _wait(_reduce_scatter(self.grad_shard, self.grad_full, grid.dp_group, self.async_op))
                self.grad_shard /= grid.dp
            ns_input_shard = torch.empty(layout.chunk, dtype=torch.bfloat16, device=device)
            ns_input_full = torch.empty(layout.chunk * grid.dp, dtype=torch.bfloat16, device=device)
            for i in self.mine:  # momentum, matrix by matrix, into the buffer the DP gather sends
                piece = self.pieces[i][1]
                ns_input = muon_momentum_(self.momentum[piece], self.grad_shard[piece], MUON_MOMENTUM, True, "sum")
                ns_input_shard[piece].copy_(ns_input.bfloat16())
            # DP gather: the TP-local buffer, whole, on every DP rank
            _wait(_gather(ns_input_full, ns_input_shard, grid.dp_group, "dp", self.async_op))
            # async_op=True issues every TP gather at once and waits for each where its matrix is used; else one by one
            pending = (
                {i: self._tp_gather(layout.matrix(ns_input_full, i), self.cfg.tp_dims[i]) for i in self.mine}
                if self.async_op
                else {}
            )
            for i in self.mine:
                tp_dim = self.cfg.tp_dims[i]
                shards, work = pending[i] if self.async_op else self._tp_gather(layout.matrix(ns_input_full, i), tp_dim)
                _wait(work)
                full = torch.cat(shards, dim=tp_dim) if tp_dim != -1 else shards[0]  # TP gather
                update = study_newton_schulz(full)
                update = update.chunk(grid.tp, dim=tp_dim)[grid.tp_rank] if tp_dim != -1 else update  # TP shard
                in_matrix, in_chunk = self.pieces[i]
                local = update.reshape(-1)[in_matrix]  # DP shard
                scale = muon_update_scale(self.full_shapes[i], "moonlight")
                apply_decoupled_update_(self.param_shard[in_chunk], local, MUON_LR, MUON_WD, scale)  # bf16 into fp32
            if self.equal_work:  # ZeRO-1: every DP rank gets the updated parameters
                _wait(_gather(self.param_full, self.param_shard, grid.dp_group, "dp", self.async_op))

    def _tp_gather(self, matrix: torch.Tensor, tp_dim: int):
        """Every TP rank's shard of a matrix (the study used the list form of all_gather; the one-tensor form moves
        the same bytes and names its size on gloo too)."""
        if tp_dim == -1:
            return [matrix], None
        gathered = torch.empty(self.grid.tp * matrix.numel(), dtype=matrix.dtype, device=matrix.device)
        work = _gather(gathered, matrix.reshape(-1), self.grid.tp_group, "tp", self.async_op)
        return list(gathered.view(self.grid.tp, *matrix.shape).unbind(0)), work
