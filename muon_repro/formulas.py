"""The counts the runtime, the analysis and the cost model share, each stated once: ring bytes, the 1F1B order and
Newton-Schulz FLOPs (docs/method.md). Plain integers in, plain integers out: no torch, no numpy, no pandas.

* :func:`ring_bytes`: what one rank sends in a collective under the ring model of nccl-tests
  (docs/method.md#communication-model). The byte ledger (:mod:`muon_repro.parallel.comm`), the trace analysis and
  the cost model all price a collective with it.
* :func:`one_f_one_b_order`: a pipeline stage's forwards and backwards in 1F1B order (PipeDream-Flush, Megatron's
  non-interleaved schedule; docs/method.md#pipeline-parallelism). The runtime's schedule
  (:mod:`muon_repro.parallel.schedule`) and the cost model's playback (:mod:`muon_repro.costmodel.pipeline`) run it.
* :func:`newton_schulz_flops`: the matmul FLOPs of the quintic Newton-Schulz iteration
  (:func:`muon_repro.optim.newton_schulz.zeropower_via_newtonschulz5`), and :func:`newton_schulz_flops_total`, the
  same over every matrix Muon orthogonalizes in a model (:func:`muon_matrix_shapes`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from muon_repro.values import is_count, is_index

if TYPE_CHECKING:
    from muon_repro.model_config import GPTConfig

# ---------------------------------------------------------------- ring bytes

RING_CHUNK_OPS = ("all_gather", "reduce_scatter", "all_to_all")  # (n-1) chunks
WHOLE_ARRAY_OPS = ("broadcast", "send_recv", "reduce", "gather", "scatter")  # the array once


def ring_bytes(op: str, elements: int, element_size: int, group_size: int) -> int | None:
    """Bytes one rank sends for collective ``op`` over an array of ``elements`` (the full, un-sharded array) of
    ``element_size`` bytes each, in a group of ``group_size`` ranks, by the ring model of nccl-tests.

    With ``n`` ranks and the array cut into ``n`` chunks of ``ceil(elements / n)`` elements (``S`` the array's bytes;
    ``≈`` because the last chunk is padded to the others' size when ``n`` does not divide ``elements``)::

        all_gather, reduce_scatter, all_to_all   (n-1) * chunk      ≈ (n-1)/n * S
        all_reduce                               2 * (n-1) * chunk  ≈ 2(n-1)/n * S   (a reduce-scatter, then an all-gather)
        broadcast, send_recv, reduce, gather, scatter   the array once, S
        barrier                                  0

    A group of one rank sends nothing (0, whatever ``op``). ``None`` where the model has no count: an op it does not
    know, fewer than one rank, or a negative size.
    """
    n = group_size
    if n < 1 or elements < 0:
        return None
    if n == 1:
        return 0
    chunk = math.ceil(elements / n)
    if op in RING_CHUNK_OPS:
        return (n - 1) * chunk * element_size
    if op == "all_reduce":
        return 2 * (n - 1) * chunk * element_size
    if op in WHOLE_ARRAY_OPS:
        return elements * element_size
    if op == "barrier":
        return 0
    return None


# ---------------------------------------------------------------- the 1F1B order


def check_stage(stage: int, pp: int, micro_batches: int) -> None:
    """``ValueError`` unless ``pp`` and ``micro_batches`` are positive integers and ``stage`` is in ``[0, pp)``."""
    for name, value in (("pp", pp), ("micro_batches", micro_batches)):
        if not is_count(value):
            raise ValueError(f"1F1B schedule: {name} must be a positive integer, got {value!r}")
    if not (is_index(stage) and stage < pp):
        raise ValueError(f"1F1B schedule: stage must be an integer in [0, pp={pp}), got {stage!r}")


def warmup_forwards(stage: int, pp: int, micro_batches: int) -> int:
    """Forwards stage ``stage`` of ``pp`` runs before its first backward, less one: ``min(pp - stage - 1, M)``."""
    check_stage(stage, pp, micro_batches)
    return min(pp - stage - 1, micro_batches)


def one_f_one_b_order(stage: int, pp: int, micro_batches: int) -> list[tuple[str, int]]:
    """Stage ``stage``'s forwards and backwards in one training step of ``M = micro_batches`` micro-batches, 1F1B:
    ``[("F", 0), ..., ("B", M - 1)]``.

    * warm-up: ``w = min(pp - stage - 1, M)`` forwards, so that the stage has work when the first gradient comes
      back from the last stage;
    * steady: ``M - w`` rounds of one forward (micro-batch ``w + i``) then one backward (micro-batch ``i``);
    * cool-down: the ``w`` backwards left.

    Every micro-batch is forwarded and backwarded in order ``0 .. M-1``; at most ``min(pp - stage, M)`` are in flight
    (forwarded, not yet backwarded).
    """
    warmup = warmup_forwards(stage, pp, micro_batches)
    order = [("F", i) for i in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(micro_batches - warmup, micro_batches)]


# ---------------------------------------------------------------- Newton-Schulz FLOPs

NS_STEPS = 5  # Newton-Schulz iterations of Muon's update (DistributedMuon's default)


def newton_schulz_flops(shape: Sequence[int], steps: int = NS_STEPS) -> int:
    """Matmul FLOPs (2 per multiply-add) of ``steps`` quintic Newton-Schulz iterations on a matrix of ``shape``
    (``[..., rows, cols]``, a batch over the leading dims), as
    :func:`~muon_repro.optim.newton_schulz.zeropower_via_newtonschulz5` runs them.

    Per iteration, with ``m <= n`` the matrix dims (a tall matrix is transposed first): ``X X^T`` costs ``2 m^2 n``,
    ``A A`` ``2 m^3``, ``B X`` ``2 m^2 n``: ``4 m^2 n + 2 m^3`` in all, ``20 m^2 n + 10 m^3`` for 5 iterations
    (docs/method.md#newton-schulz). Element-wise work (the norm, the scalings) is not counted.
    """
    *batch, rows, cols = shape
    m, n = min(rows, cols), max(rows, cols)
    count = 1
    for d in batch:
        count *= d
    return count * steps * (4 * m * m * n + 2 * m**3)


def gram_newton_schulz_flops(shape: Sequence[int], steps: int = NS_STEPS, restarts: Sequence[int] = (2,)) -> int:
    """Matmul FLOPs of ``steps`` steps of the Gram form of the iteration (``ns_method="gram"``, as
    :func:`~muon_repro.optim.newton_schulz.orthogonalize` runs it) on a matrix of ``shape``, with ``m <= n``.

    ``R = X X^T`` once (``2 m^2 n``); per step ``H = a I + b R + c R^2`` (``2 m^3``), ``Q <- H Q`` (``2 m^3``, none on
    the first step after a start), ``R <- H R H`` (``4 m^3``, none on the last step); each restart ``X <- Q X`` and
    ``R = X X^T`` again (``4 m^2 n``); ``X = Q X`` at the end (``2 m^2 n``). 5 steps restarting at step 2:
    ``8 m^2 n + 32 m^3``, against the quintic's ``20 m^2 n + 10 m^3``: fewer when ``n > 1.83 m``.
    """
    *batch, rows, cols = shape
    m, n = min(rows, cols), max(rows, cols)
    count = 1
    for d in batch:
        count *= d
    flops, fresh = 2 * m * m * n, True
    for k in range(steps):
        if k in restarts and not fresh:
            flops, fresh = flops + 4 * m * m * n, True
        flops += 2 * m**3 + (0 if fresh else 2 * m**3) + (4 * m**3 if k + 1 < steps else 0)
        fresh = False
    return count * (flops + (0 if fresh else 2 * m * m * n))


def ns_method_flops(shape: Sequence[int], steps: int = NS_STEPS, method: str = "quintic") -> int:
    """Matmul FLOPs of one call of Newton-Schulz variant ``method`` (``gram``: the Gram form; the quintic and Polar
    Express run the same matmuls)."""
    return gram_newton_schulz_flops(shape, steps) if method == "gram" else newton_schulz_flops(shape, steps)


def muon_matrix_shapes(model: GPTConfig) -> list[tuple[int, int]]:
    """Full (un-sharded) ``[out, in]`` shapes of the matrices Muon orthogonalizes: every block's attention (a fused
    ``[3h, h]`` QKV, or three ``[h, h]``) and projection, and its MLP weights. The embedding, the LM head and the
    norms go to AdamW."""
    h, f = model.hidden, model.ffn_hidden
    attention = [(h, h)] * 4 if model.qkv == "split" else [(3 * h, h), (h, h)]
    return [*attention, (f, h), (h, f)] * model.n_layers


def newton_schulz_flops_total(model: GPTConfig, steps: int = NS_STEPS) -> int:
    """``F_ns``: Newton-Schulz FLOPs over every matrix Muon orthogonalizes in ``model``, each once at its full shape."""
    return sum(newton_schulz_flops(shape, steps) for shape in muon_matrix_shapes(model))
