"""The threshold's order of magnitude by hand: where Newton-Schulz costs ``level`` of forward+backward.

Beside the simulation (:mod:`muon_repro.costmodel.predict`), which plays every collective and wait,
a closed form that a reader can check with a pencil (docs/method.md#closed-form):

* Newton-Schulz on an ``m x n`` matrix (``m <= n``) costs ``4 m^2 n + 2 m^3`` FLOPs per iteration,
  ``20 m^2 n + 10 m^3`` for the 5 iterations; summed over every hidden matrix of the model, ``F_ns``.
  ZeRO-1 shares the matrices among the DP ranks, so the busiest rank does about ``F_ns / dp``.
* forward+backward does ``6 N`` FLOPs per token (plus attention: :meth:`GPTConfig.flops_per_token`),
  ``T`` tokens per step over ``dp * tp`` ranks.
* With Newton-Schulz at rate ``R_ns`` and the model's matmuls at ``R_mm``, Muon's extra over AdamW,
  communication aside, is ``(F_ns / dp / R_ns) / (flops_per_token T / (dp tp) / R_mm)``; it falls to
  ``level`` at

      T* = F_ns * tp * R_mm / (flops_per_token * level * R_ns)

It leaves out everything the simulation adds: the Muon gathers' traffic, the model's TP collectives
(which lengthen both steps and so lower the threshold), element-wise work and launch costs. Where
communication does not dominate, the two agree to within a factor of 2 (tests/test_closed_form.py).
"""

from __future__ import annotations

from muon_repro.model_config import GPTConfig

NS_STEPS = 5


def newton_schulz_flops_by_hand(rows: int, cols: int, steps: int = NS_STEPS) -> int:
    """``steps * (4 m^2 n + 2 m^3)`` with ``m <= n``: ``20 m^2 n + 10 m^3`` for 5 iterations."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m**3)


def hidden_matrix_shapes(model: GPTConfig) -> list[tuple[int, int]]:
    """The matrices Muon orthogonalizes (every block's attention and MLP weights, full size; the embedding,
    the LM head and the norms go to AdamW), as the model holds them (fused QKV as one ``[3h, h]`` matrix)."""
    h, f = model.hidden, model.ffn_hidden
    attention = [(3 * h, h)] if model.qkv == "fused" else [(h, h)] * 3
    return (attention + [(h, h), (f, h), (h, f)]) * model.n_layers


def newton_schulz_flops_total(model: GPTConfig) -> int:
    """``F_ns``: Newton-Schulz FLOPs over every hidden matrix of the model, once each."""
    return sum(newton_schulz_flops_by_hand(rows, cols) for rows, cols in hidden_matrix_shapes(model))


def closed_form_threshold(model: GPTConfig, seq_len: int, tp: int, level: float, matmul_rate: float, ns_rate: float) -> float:
    """``T*``, the tokens per step at which Newton-Schulz on the busiest rank costs ``level`` of its
    forward+backward (rates in FLOP/s, any common unit)."""
    if level <= 0 or matmul_rate <= 0 or ns_rate <= 0:
        raise ValueError(f"level and rates must be positive, got level={level}, matmul_rate={matmul_rate}, ns_rate={ns_rate}")
    return newton_schulz_flops_total(model) * tp * matmul_rate / (model.flops_per_token(seq_len) * level * ns_rate)
