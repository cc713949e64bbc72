"""What one training step asks of each rank, in program order: FLOPs, bytes, operator calls, collectives.

Everything follows from the run's shape (a :class:`~muon_repro.bench.configs.BenchConfig`), without
training anything:

* forward and backward: the model's FLOPs (:meth:`GPTConfig.flops_per_token`, split 1/3 forward,
  2/3 backward, divided over the TP ranks of a DP rank's tokens), the cross-entropy (``cfg.cross_entropy``:
  vocab-parallel over each rank's logits shard, as Megatron-Core computes it, or over the gathered full
  vocabulary on every TP rank, as runs recorded before it did), GELU, an estimate of the element-wise
  traffic, the operator calls (:mod:`~muon_repro.costmodel.op_counts`), and the model's own TP
  collectives (2 all-reduces of ``[tokens per DP rank, hidden]`` per layer and one for the embedding,
  each way; vocab-parallel: 3 all-reduces of ``[tokens]`` fp32 forward, the max, the target's logit and
  the sum of exponentials; gathered: the logits' all-gather forward);
* the optimizer: the :class:`~muon_repro.optim.layout.ShardPlan` the optimizer builds (from the
  TP-local parameters of the GPT built on the ``meta`` device), its buckets and Newton-Schulz
  units, who orthogonalizes what (every DP rank every matrix in the bucketed layout), and each
  collective it issues, in the order :class:`~muon_repro.optim.distributed.DistributedMuon` issues them.

The bytes of each collective are priced later by the ring model; :attr:`Workload.analytic_bytes`
holds :func:`~muon_repro.optim.comm_model.optimizer_bytes` for the same ranks, which they must equal.

``precision`` is the training's (:data:`PRECISIONS`): ``fp32`` is the bench's own model, every tensor
fp32; ``bf16`` prices bf16 mixed-precision training as Megatron-Core runs it (docs/method.md#bf16-workload):
activations, their element-wise traffic and their TP collectives in bf16; logits cast to fp32 for the
cross-entropy; gradients reduce-scattered in fp32 (``cfg.reduce_dtype``; Megatron accumulates and reduces
bf16 training's gradients in fp32 unless told ``--grad-reduce-in-bf16``); parameters all-gathered in bf16
(the model's weights); Newton-Schulz in bf16 on a GPU; matmuls at the profile's bf16 rate. The bench's own
bf16 runs autocast over fp32 parameters: priced as recorded, their parameters are gathered in fp32
(``param_dtype``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from muon_repro.bench.configs import BenchConfig
from muon_repro.costmodel.op_counts import CROSS_ENTROPY_REDUCTIONS, stage_op_counts
from muon_repro.formulas import NS_STEPS, newton_schulz_flops
from muon_repro.model_config import GPTConfig, StagePart
from muon_repro.phases import (
    BACKWARD,
    DP_ALL_GATHER,
    DP_GATHER,
    DP_REDUCE_SCATTER,
    FORWARD,
    MOMENTUM,
    NEWTON_SCHULZ,
    OPTIMIZER,
    TP_ALL_GATHER,
    TP_ALL_REDUCE,
    TP_GATHER,
    UPDATE,
)

if TYPE_CHECKING:  # imported where used: the cost model prices without importing torch
    from muon_repro.optim.layout import ShardPlan

ELEMENT_SIZE = {"fp32": 4, "bf16": 2}
FP32 = 4
PRECISIONS = ("fp32", "bf16")

# Bytes per element of the optimizer's element-wise work (fp32 reads + writes, from the code of
# muon_repro.optim.update_rules and .distributed): AdamW's step is 8 kernels (mul_, lerp_, mul_,
# addcmul_, sqrt, div, add_, addcdiv_); Muon's momentum 3 (mul_, add_, add), its update 2 (mul_, add_).
ADAMW_STEP_BYTES = 84
MUON_MOMENTUM_BYTES = 32
MUON_UPDATE_BYTES = 20
COPY_BYTES = 8  # read + write one fp32 element (gradients into the flat buffer, shard clones)
ROUND_BYTES = 6  # fp32 read, bf16 write (NS inputs rounded to gather_dtype)
NS_VECTOR_BYTES = 30  # per element of a full matrix: fp32 copy, norm, scale, update RMS
# Operator calls per item (from the same code): what each costs in dispatch (and profiler) time.
ADAMW_STEP_OPS = 9
MUON_MOMENTUM_OPS = 4
MUON_UPDATE_OPS = 3
NS_OPS_PER_MATRIX = 12 + 4 * NS_STEPS  # conversions, norm, 3 matmuls and a transpose per step, RMS, shards
GATHER_OPS_PER_MATRIX = 3
COLLECTIVE_OPS = 3  # buffer, the c10d call, a view


@dataclass(frozen=True)
class Compute:
    """Work one rank does between two collectives (or inside one phase)."""

    matmul_flops: float = 0.0
    attention_flops: float = 0.0
    ns_flops: float = 0.0
    vector_bytes: float = 0.0  # element-wise traffic
    cross_entropy_bytes: float = 0.0  # fp32 logits through cross-entropy (forward+backward share)
    gelu_bytes: float = 0.0  # fp32 inputs through GELU (forward+backward share)
    ops: float = 0.0  # operator calls
    # Elements of the operands the model's kernels run on, per rank and per forward+backward pass (a
    # micro-batch's tokens, not the step's: a kernel's rate follows the size it runs at, size_curves);
    # 0 for the optimizer's flat buffers, priced at the flat figures.
    activation_elems: int = 0  # [tokens, hidden]: matmuls, attention, element-wise
    logits_elems: int = 0  # [tokens, vocab]: cross-entropy
    mlp_elems: int = 0  # [tokens, ffn / tp]: GELU


@dataclass(frozen=True)
class Comm:
    """One or more calls of a collective on this rank's ``group`` ("dp" or "tp").

    ``calls`` holds the full-array elements of each call; empty when this rank's group issues
    none here (every rank's program has the same stages, so groups line up). ``mode``: blocking,
    or ``start``/``finish`` of an asynchronous gather paired by ``key`` (overlap=pipelined).
    """

    op: str
    group: str
    calls: tuple[int, ...]
    element_size: int
    mode: str = "blocking"
    key: str = ""
    interleaved: bool = False  # the calls are separated by compute (the model's layers), not back to back


@dataclass(frozen=True)
class Stage:
    part: str  # forward | backward | optimizer
    phase: str
    compute: Compute | None = None
    comm: Comm | None = None


@dataclass(frozen=True)
class Workload:
    """Every rank's program for one step, and the inputs the bench records for the same run."""

    cfg: BenchConfig
    model: GPTConfig
    programs: tuple[tuple[Stage, ...], ...]  # by global rank (dp_rank * tp + tp_rank)
    ns_flops: tuple[int, ...]  # by global rank: what RankMetrics.ns_flops records
    analytic_bytes: tuple[dict[str, int], ...]  # by global rank: what RankMetrics.analytic_bytes records
    train_flops: int  # what RankMetrics.train_flops records
    ns_dtype: str
    precision: str = "fp32"  # the training's (PRECISIONS): the model's matmul rate, activation and parameter dtypes
    stage: int = 0  # the pipeline stage these ranks run (pp > 1): their global ranks start at stage * dp * tp

    @property
    def world_size(self) -> int:
        """The ranks of these programs: one stage's DP x TP grid (the whole run when pp = 1)."""
        return self.cfg.dp * self.cfg.tp

    @property
    def first_rank(self) -> int:
        """The global rank of programs[0] (rank = pp_rank * dp * tp + dp_rank * tp + tp_rank)."""
        return self.stage * self.world_size


def build_workload(cfg: BenchConfig, device: str = "cpu", precision: str = "fp32", param_dtype: str | None = None) -> Workload:
    """Every rank's program for one step of ``cfg`` on ``device`` (``cpu`` or ``cuda``: the default NS dtype),
    trained in ``precision`` (see the module docstring), its updated parameters all-gathered in ``param_dtype``
    (default ``precision``; the bench's own bf16 runs autocast over fp32 parameters, so their gathers are fp32).
    ``analytic_bytes`` are the bench's (fp32 parameters)."""
    if not cfg.preset or not cfg.seq_len:
        raise ValueError(f"config {cfg.key}: give a model preset, tokens per step and a sequence length before predicting")
    if precision not in PRECISIONS:
        raise ValueError(f"config {cfg.key}: unknown training precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if param_dtype is not None and param_dtype not in PRECISIONS:
        raise ValueError(f"config {cfg.key}: unknown parameter dtype {param_dtype!r}; choose one of {', '.join(PRECISIONS)}")
    if cfg.ns_method != "quintic":
        raise ValueError(
            f"config {cfg.key}: the cost model prices the quintic Newton-Schulz only (its rates were calibrated on "
            f"the quintic's shapes), not ns_method={cfg.ns_method!r}; predict with --ns-method quintic"
        )
    if cfg.pp > 1:  # every stage's ranks, in global rank order (not for simulate: see build_pipeline_workload)
        from muon_repro.costmodel.pipeline_workload import build_pipeline_workload

        return build_pipeline_workload(cfg, device, precision)
    model = cfg.model_config()
    plan = shard_plan(model, cfg.tp, cfg.dp, cfg.optimizer, cfg.layout, cfg.bucket_elems, cfg.ns_unit_elems)
    ns_dtype = cfg.ns_dtype or ("bf16" if device == "cuda" else "fp32")
    forward, backward = model_stages(cfg, model, precision)
    return assemble_workload(cfg, model, plan, forward, backward, ns_dtype, precision, param_dtype=param_dtype)


def assemble_workload(
    cfg: BenchConfig,
    model: GPTConfig,
    plan: ShardPlan,
    forward: tuple[Stage, ...],
    backward: tuple[Stage, ...],
    ns_dtype: str,
    precision: str,
    stage: int = 0,
    param_dtype: str | None = None,
) -> Workload:
    """Every rank's program of a DP x TP grid (``forward``, ``backward``, its DP rank's optimizer step on ``plan``)."""
    from muon_repro.optim.comm_model import optimizer_bytes

    programs, ns_flops, analytic = [], [], []
    for dp_rank in range(cfg.dp):
        optimizer = optimizer_stages(cfg, plan, dp_rank, param_dtype or precision)
        sent = optimizer_bytes(  # the same for every TP rank of this DP rank
            plan.specs,
            dp=cfg.dp,
            tp=cfg.tp,
            dp_rank=dp_rank,
            optimizer=cfg.optimizer,
            layout=cfg.layout,
            bucket_elems=cfg.bucket_elems,
            reduce_dtype=_torch_dtype(cfg.reduce_dtype),
            gather_dtype=_torch_dtype(cfg.gather_dtype),
            ns_unit_elems=cfg.ns_unit_elems,
        )
        for _ in range(cfg.tp):
            programs.append((*forward, *backward, *optimizer))
            ns_flops.append(int(sum(s.compute.ns_flops for s in optimizer if s.compute is not None)))
            analytic.append(dict(sent))
    return Workload(
        cfg=cfg,
        model=model,
        programs=tuple(programs),
        ns_flops=tuple(ns_flops),
        analytic_bytes=tuple(analytic),
        train_flops=model.flops_per_token(cfg.seq_len) * cfg.tokens_per_step,
        ns_dtype=ns_dtype,
        precision=precision,
        stage=stage,
    )


# ---------------------------------------------------------------- forward and backward


def model_stages(
    cfg: BenchConfig, model: GPTConfig, precision: str = "fp32", part: StagePart | None = None
) -> tuple[tuple[Stage, ...], tuple[Stage, ...]]:
    """Forward and backward of one TP rank (every TP rank does the same) over ``part`` of the model (default: all of
    it): with ``cfg.micro_batches`` > 1 the same FLOPs and bytes in that many passes, each with its own operator calls
    and TP collectives."""
    part = part or StagePart(model.n_layers)
    tp, tokens, micro = cfg.tp, cfg.tokens_per_step // cfg.dp, cfg.micro_batches
    per_pass = tokens // micro  # tokens of one forward+backward pass
    h, layers, vocab = model.hidden, part.layers, model.vocab_size
    activation = ELEMENT_SIZE[precision]
    vocab_parallel = cfg.cross_entropy == "vocab_parallel" and tp > 1
    logits = tokens * (vocab // tp if vocab_parallel else vocab) if part.head else 0  # what each rank's cross-entropy reads
    attention = 12 * layers * h * cfg.seq_len  # per token, forward+backward (the attention term of flops_per_token)
    matmul = 6 * model.matmul_params(layers, part.head)  # flops_per_token's 6 N_matmul, over this part's weights
    vector = forward_vector_elems_per_token(model, tp, tp > 1 and not vocab_parallel, part) * activation
    fwd_ops, bwd_ops = stage_op_counts(layers, model.qkv, tp, vocab_parallel, part.embedding, part.head)
    whole = Compute(
        matmul_flops=matmul * tokens / tp,
        attention_flops=attention * tokens / tp,
        cross_entropy_bytes=FP32 * logits,  # logits in fp32 through the cross-entropy (Megatron casts them too)
        gelu_bytes=activation * tokens * (model.ffn_hidden // tp) * layers,
        activation_elems=per_pass * h,
        logits_elems=logits // micro,
        mlp_elems=per_pass * (model.ffn_hidden // tp),
    )
    forward = [Stage(FORWARD, FORWARD, _share(whole, 1 / 3, vector * tokens, fwd_ops * micro))]
    backward = [Stage(BACKWARD, BACKWARD, _share(whole, 2 / 3, 2 * vector * tokens, bwd_ops * micro))]
    if tp > 1:
        # per layer attention out and MLP out (+ the embedding's), in every pass
        forward_reduces = (per_pass * h,) * (2 * layers + part.embedding) * micro
        forward.append(
            Stage(FORWARD, TP_ALL_REDUCE, comm=Comm("all_reduce", "tp", forward_reduces, activation, interleaved=True))
        )
        if part.head and vocab_parallel:
            # little compute between the three: the group meets once, in step after the first
            reductions = (per_pass,) * CROSS_ENTROPY_REDUCTIONS * micro
            forward.append(Stage(FORWARD, TP_ALL_REDUCE, comm=Comm("all_reduce", "tp", reductions, FP32)))
        elif part.head:
            forward.append(Stage(FORWARD, TP_ALL_GATHER, comm=Comm("all_gather", "tp", (per_pass * vocab,) * micro, activation)))
        # per layer attention in, MLP in (+ the LM head's input gradient)
        backward_reduces = (per_pass * h,) * (2 * layers + part.head) * micro
        backward.append(
            Stage(BACKWARD, TP_ALL_REDUCE, comm=Comm("all_reduce", "tp", backward_reduces, activation, interleaved=True))
        )
    return tuple(forward), tuple(backward)


def _share(whole: Compute, fraction: float, vector_bytes: float, ops: float) -> Compute:
    return replace(
        whole,
        matmul_flops=whole.matmul_flops * fraction,
        attention_flops=whole.attention_flops * fraction,
        cross_entropy_bytes=whole.cross_entropy_bytes * fraction,
        gelu_bytes=whole.gelu_bytes * fraction,
        vector_bytes=vector_bytes,
        ops=ops,
    )


def forward_vector_elems_per_token(
    model: GPTConfig, tp: int, gathered_logits: bool | None = None, part: StagePart | None = None
) -> float:
    """Elements the forward's element-wise operators read and write per token (an estimate;
    the backward is taken as twice this): RMS norm as composed operators (pow, mean, add, rsqrt,
    two muls), RoPE on q and k (4 muls, sub, add on halves, cat), the heads' copy back, the two
    residual adds, the gathered logits' re-layout (``gathered_logits``; default: whenever tp > 1), the
    embedding; over ``part`` of the model (default: all of it). (The TP all-reduce's input clone is in the
    collective's time: calibrate times the call with it.)"""
    part = part or StagePart(model.n_layers)
    h, local, layers = model.hidden, model.hidden // tp, part.layers
    gathered_logits = tp > 1 if gathered_logits is None else gathered_logits
    norm = 7 * h
    rope = 2 * 11 * local
    per_layer = 2 * norm + rope + 2 * local + 2 * 3 * h
    head = norm + (2 * model.vocab_size if gathered_logits else 0) if part.head else 0
    embedding = 2 * h if part.embedding else 0
    return layers * per_layer + head + embedding


# ---------------------------------------------------------------- the optimizer


@functools.lru_cache(maxsize=32)
def shard_plan(
    model: GPTConfig, tp: int, dp: int, optimizer: str, layout: str, bucket_elems: int | None, ns_unit_elems: int | None = None
) -> ShardPlan:
    """The :class:`ShardPlan` ``optimizer`` builds on every TP rank (they hold the same shapes)."""
    import torch

    from muon_repro.model import GPT
    from muon_repro.optim.comm_model import param_specs
    from muon_repro.optim.layout import ShardPlan
    from muon_repro.parallel.comm import CommLedger, Group

    group = Group(name="tp", ranks=tuple(range(tp)), rank=0, process_group=None, ledger=CommLedger())  # building sends nothing
    with torch.device("meta"):
        gpt = GPT(model, group, device="meta")
    specs = param_specs(gpt.named_parameters(), tp, muon=optimizer == "muon")
    return ShardPlan(specs, dp, layout, bucket_elems, ns_unit_elems if optimizer == "muon" else None)


def optimizer_stages(cfg: BenchConfig, plan: ShardPlan, dp_rank: int, param_dtype: str = "fp32") -> tuple[Stage, ...]:
    """One DP rank's optimizer step (any TP rank of it), in the order the optimizer runs it; the updated
    parameters are all-gathered in ``param_dtype`` (the weights' dtype)."""
    reduce_size, gather_size = ELEMENT_SIZE[cfg.reduce_dtype], ELEMENT_SIZE[cfg.gather_dtype]
    param_size = ELEMENT_SIZE[param_dtype]
    pieces = plan.pieces_of(dp_rank)
    shard = sum(b.shard_size for b in plan.buckets)
    local_elems = sum(s.numel for s in plan.specs)
    buckets = tuple(b.size for b in plan.buckets) if cfg.dp > 1 else ()
    stages = [
        _compute(DP_REDUCE_SCATTER, vector_bytes=COPY_BYTES * local_elems, ops=2 * len(plan.specs)),
        Stage(OPTIMIZER, DP_REDUCE_SCATTER, comm=Comm("reduce_scatter", "dp", buckets, reduce_size)),
        _compute(DP_REDUCE_SCATTER, vector_bytes=COPY_BYTES * shard * (1 if cfg.dp > 1 else 2), ops=2 + len(plan.buckets)),
    ]
    muon = [(slot, piece) for slot, piece in pieces if slot.spec.use_muon]
    adamw = [(slot, piece) for slot, piece in pieces if not slot.spec.use_muon]
    if cfg.optimizer == "muon":
        stages.append(_compute(MOMENTUM, vector_bytes=MUON_MOMENTUM_BYTES * _elems(muon), ops=MUON_MOMENTUM_OPS * len(muon)))
        stages += muon_unit_stages(cfg, plan, dp_rank, gather_size)
    stages.append(
        _compute(
            UPDATE,
            vector_bytes=MUON_UPDATE_BYTES * _elems(muon) + ADAMW_STEP_BYTES * _elems(adamw),
            ops=MUON_UPDATE_OPS * len(muon) + ADAMW_STEP_OPS * len(adamw),
        )
    )
    stages += [
        _compute(
            DP_ALL_GATHER, vector_bytes=COPY_BYTES * shard * (1 if cfg.dp > 1 else 2), ops=COLLECTIVE_OPS * len(plan.buckets)
        ),
        Stage(OPTIMIZER, DP_ALL_GATHER, comm=Comm("all_gather", "dp", buckets, param_size)),
    ]
    return tuple(stages)


def muon_unit_stages(cfg: BenchConfig, plan: ShardPlan, dp_rank: int, gather_size: int) -> list[Stage]:
    """Per Newton-Schulz unit: the DP gather, the TP gather, Newton-Schulz, as ``cfg.overlap`` schedules them."""
    pipelined = cfg.overlap == "pipelined"
    units = plan.ns_units
    dp = [_dp_gather(cfg, plan, unit, dp_rank, gather_size, pipelined, f"dp{k}") for k, unit in enumerate(units)]
    tp = [_tp_gather(cfg, plan, unit, dp_rank, gather_size, pipelined, f"tp{k}") for k, unit in enumerate(units)]
    ns = [_newton_schulz(plan, unit, dp_rank) for unit in units]
    if not pipelined:  # none and naive_async both wait for each gather before anything else runs
        return [
            stage for k in range(len(units)) for stage in (*dp[k].issue, *dp[k].complete, *tp[k].issue, *tp[k].complete, ns[k])
        ]
    return _pipelined(dp, tp, ns)


@dataclass(frozen=True)
class _Gather:
    """A gather in two halves: what runs up to issuing it, and what runs from waiting for it on."""

    issue: tuple[Stage, ...]
    complete: tuple[Stage, ...] = ()


def _pipelined(dp: list[_Gather], tp: list[_Gather], ns: list[Stage]) -> list[Stage]:
    """DistributedMuon._gathered_units with overlap=pipelined: while unit k runs Newton-Schulz,
    unit k+1's TP gather and unit k+2's DP gather are in flight."""
    if not ns:
        return []
    out = [*dp[0].issue, *dp[0].complete, *tp[0].issue, *(dp[1].issue if len(ns) > 1 else ())]
    for k in range(len(ns)):
        out += tp[k].complete
        if k + 1 < len(ns):
            out += [*dp[k + 1].complete, *tp[k + 1].issue, *(dp[k + 2].issue if k + 2 < len(ns) else ())]
        out.append(ns[k])
    return out


def _dp_gather(cfg: BenchConfig, plan, unit, dp_rank: int, gather_size: int, pipelined: bool, key: str) -> _Gather:
    """Pack this rank's pieces, all-gather them over DP, unpack the matrices it orthogonalizes
    (pack and unpack happen around the collective, counted in its phase)."""
    mine = plan.ns_slots(unit, dp_rank)
    numel = sum(plan.slots[i].spec.numel for i in mine)
    if not unit.dp_gathered:  # each matrix is wholly here: rounded to gather_dtype, nothing travels
        return _Gather((_compute(DP_GATHER, vector_bytes=ROUND_BYTES * numel, ops=2 * len(mine)),))
    pack = _compute(DP_GATHER, vector_bytes=ROUND_BYTES * unit.send_elems, ops=2 + GATHER_OPS_PER_MATRIX * len(unit.slots))
    unpack = _compute(DP_GATHER, vector_bytes=2 * gather_size * numel, ops=GATHER_OPS_PER_MATRIX * len(mine))
    calls = (cfg.dp * unit.send_elems,) if cfg.dp > 1 else ()
    return _gather(DP_GATHER, Comm("all_gather", "dp", calls, gather_size), pipelined, key, pack, unpack)


def _tp_gather(cfg: BenchConfig, plan, unit, dp_rank: int, gather_size: int, pipelined: bool, key: str) -> _Gather:
    """Concatenate the TP-sharded matrices this rank orthogonalizes, all-gather them over TP, cut them into full matrices."""
    sharded = [i for i in plan.ns_slots(unit, dp_rank) if plan.slots[i].spec.tp_dim is not None]
    elems = sum(plan.slots[i].spec.numel for i in sharded)
    if cfg.tp == 1:  # nothing travels, but the stage stays so that every rank's program lines up
        return _gather(TP_GATHER, Comm("all_gather", "tp", (), gather_size), pipelined, key)
    # A DP rank that orthogonalizes none of the unit's sharded matrices still runs the same stages,
    # with no work and no call, so that every rank's program lines up stage by stage.
    pack = _compute(TP_GATHER, vector_bytes=ROUND_BYTES * elems, ops=(2 + GATHER_OPS_PER_MATRIX * len(sharded)) if sharded else 0)
    unpack = _compute(TP_GATHER, vector_bytes=2 * gather_size * cfg.tp * elems, ops=(cfg.tp + 1) * len(sharded))
    calls = (cfg.tp * elems,) if sharded else ()
    return _gather(TP_GATHER, Comm("all_gather", "tp", calls, gather_size), pipelined, key, pack, unpack)


def _gather(phase: str, comm: Comm, pipelined: bool, key: str, pack: Stage | None = None, unpack: Stage | None = None) -> _Gather:
    before, after = tuple(s for s in (pack,) if s), tuple(s for s in (unpack,) if s)
    if not pipelined:
        return _Gather((*before, Stage(OPTIMIZER, phase, comm=comm)), after)
    start = Stage(OPTIMIZER, phase, comm=replace(comm, mode="start", key=key))
    finish = Stage(OPTIMIZER, phase, comm=replace(comm, mode="finish", key=key))
    return _Gather((*before, start), (finish, *after))


def _newton_schulz(plan, unit, dp_rank: int) -> Stage:
    mine = plan.ns_slots(unit, dp_rank)
    shapes = [plan.slots[i].spec.full_shape for i in mine]
    return _compute(
        NEWTON_SCHULZ,
        ns_flops=sum(newton_schulz_flops(shape, NS_STEPS) for shape in shapes),
        vector_bytes=NS_VECTOR_BYTES * sum(math.prod(shape) for shape in shapes),
        ops=NS_OPS_PER_MATRIX * len(mine),
    )


def _compute(phase: str, **work: float) -> Stage:
    return Stage(OPTIMIZER, phase, compute=Compute(**work))


def _elems(pieces) -> int:
    return sum(piece.length for _, piece in pieces)


def _torch_dtype(name: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]
