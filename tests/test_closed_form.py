"""The closed form of the threshold (docs/method.md#closed-form) against the simulation, where communication does not
dominate: the threshold's order of magnitude by hand, beside the simulation (:mod:`muon_repro.costmodel.predict`),
which plays every collective and wait.

* Newton-Schulz on an ``m x n`` matrix (``m <= n``) costs ``4 m^2 n + 2 m^3`` FLOPs per iteration,
  ``20 m^2 n + 10 m^3`` for the 5 iterations (:func:`muon_repro.formulas.newton_schulz_flops`); summed over every
  matrix Muon orthogonalizes, ``F_ns`` (:func:`muon_repro.formulas.newton_schulz_flops_total`). ZeRO-1 shares the
  matrices among the DP ranks, so the busiest rank does about ``F_ns / dp``.
* forward+backward does ``6 N`` FLOPs per token (plus attention: :meth:`GPTConfig.flops_per_token`),
  ``T`` tokens per step over ``dp * tp`` ranks.
* With Newton-Schulz at rate ``R_ns`` and the model's matmuls at ``R_mm``, Muon's extra over AdamW,
  communication aside, is ``(F_ns / dp / R_ns) / (flops_per_token T / (dp tp) / R_mm)``; it falls to
  ``level`` at

      T* = F_ns * tp * R_mm / (flops_per_token * level * R_ns)

It leaves out everything the simulation adds: the Muon gathers' traffic, the model's TP collectives
(which lengthen both steps and so lower the threshold), element-wise work and launch costs. Where
communication does not dominate, the two agree to within a factor of 2.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from muon_repro.costmodel.machine import resolve_profile
from muon_repro.costmodel.machine_profile import CollectiveFit
from muon_repro.costmodel.predict import predict
from muon_repro.costmodel.profile_ranges import LINK_GBPS
from muon_repro.costmodel.records import MODEL_7B, STUDY_MACHINE, STUDY_MODEL, Setting, crossing, run_config
from muon_repro.costmodel.workload import build_workload
from muon_repro.formulas import muon_matrix_shapes, newton_schulz_flops, newton_schulz_flops_total
from muon_repro.model_config import GPTConfig


def closed_form_threshold(model: GPTConfig, seq_len: int, tp: int, level: float, matmul_rate: float, ns_rate: float) -> float:
    """``T*``, the tokens per step at which Newton-Schulz on the busiest rank costs ``level`` of its
    forward+backward (rates in FLOP/s, any common unit)."""
    if level <= 0 or matmul_rate <= 0 or ns_rate <= 0:
        raise ValueError(f"level and rates must be positive, got level={level}, matmul_rate={matmul_rate}, ns_rate={ns_rate}")
    return newton_schulz_flops_total(model) * tp * matmul_rate / (model.flops_per_token(seq_len) * level * ns_rate)


def test_newton_schulz_by_hand_is_20_m2n_plus_10_m3_either_way_round():
    assert newton_schulz_flops((1024, 4096), 5) == 20 * 1024**2 * 4096 + 10 * 1024**3
    assert newton_schulz_flops((4096, 1024), 5) == newton_schulz_flops((1024, 4096), 5)


@pytest.mark.parametrize("model", [STUDY_MODEL, MODEL_7B], ids=lambda m: m.name)
def test_by_hand_flops_are_what_the_dp_ranks_of_the_workload_share(model):
    """F_ns by hand equals the workload's Newton-Schulz FLOPs summed over the DP ranks (each matrix once)."""
    setting = Setting(STUDY_MACHINE, model, 2, 2)
    cfg = run_config(setting, "muon", 8192)
    workload = build_workload(cfg, "cuda", "bf16")
    per_dp_rank = workload.ns_flops[:: cfg.tp]
    assert sum(per_dp_rank) == newton_schulz_flops_total(cfg.model_config())
    assert len(muon_matrix_shapes(cfg.model_config())) == 4 * cfg.model_config().n_layers


def _communication_free(name: str):
    """A shipped GPU profile whose collectives cost next to nothing: what the closed form leaves out."""
    machine = resolve_profile(name)
    fastest = LINK_GBPS.high  # the fastest link a profile may hold: every collective's bytes next to free
    free = tuple(replace(fit, alpha_us=0.0, beta_gbps=fastest, samples=()) for fit in machine.collectives)
    return replace(machine, collectives=free or (CollectiveFit("all_reduce", 0.0, fastest),))


@pytest.mark.parametrize("level", [0.011, 0.03])
def test_the_simulated_threshold_is_within_2x_of_the_closed_form_where_communication_does_not_dominate(level):
    machine = _communication_free(STUDY_MACHINE)
    setting = Setting(machine.name, STUDY_MODEL, 2, 2)
    points = []
    for tokens in (2**k * setting.model.seq_len * setting.dp for k in range(4, 12)):
        muon, adamw = (
            predict(run_config(setting, opt, tokens), machine, profiled=False, model_dtype="bf16") for opt in ("muon", "adamw")
        )
        assert muon.comm_ms < 0.05 * muon.step_ms  # communication does not dominate: the closed form's premise
        points.append((tokens, muon.step_ms / adamw.step_ms - 1))
    simulated = crossing(points, level)
    model = run_config(setting, "muon", 8192).model_config()
    by_hand = closed_form_threshold(
        model,
        setting.model.seq_len,
        setting.tp,
        level,
        machine.matmul_flops_per_s("bf16"),
        machine.newton_schulz_flops_per_s("bf16"),
    )
    assert simulated is not None and by_hand / 2 <= simulated <= 2 * by_hand, (simulated, by_hand)


def test_closed_form_refuses_a_level_or_rate_that_is_not_positive():
    model = run_config(Setting(STUDY_MACHINE, STUDY_MODEL, 2, 2), "muon", 8192).model_config()
    with pytest.raises(ValueError, match="level"):
        closed_form_threshold(model, 1024, 2, 0.0, 1.0, 1.0)
