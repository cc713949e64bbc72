"""The closed form of the threshold (docs/method.md#closed-form) against the simulation, where communication does not dominate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from muon_repro.costmodel.closed_form import (
    closed_form_threshold,
    hidden_matrix_shapes,
    newton_schulz_flops_by_hand,
    newton_schulz_flops_total,
)
from muon_repro.costmodel.machine import resolve_profile
from muon_repro.costmodel.machine_profile import CollectiveFit
from muon_repro.costmodel.predict import predict
from muon_repro.costmodel.profile_ranges import LINK_GBPS
from muon_repro.costmodel.records import MODEL_7B, STUDY_MACHINE, STUDY_MODEL, Setting, crossing, run_config
from muon_repro.costmodel.workload import build_workload
from muon_repro.optim.newton_schulz import newton_schulz_flops


def test_newton_schulz_by_hand_is_20_m2n_plus_10_m3_and_equals_the_implementations_count():
    assert newton_schulz_flops_by_hand(1024, 4096) == 20 * 1024**2 * 4096 + 10 * 1024**3
    assert newton_schulz_flops_by_hand(4096, 1024) == newton_schulz_flops((4096, 1024), 5)


@pytest.mark.parametrize("model", [STUDY_MODEL, MODEL_7B], ids=lambda m: m.name)
def test_by_hand_flops_are_what_the_dp_ranks_of_the_workload_share(model):
    """F_ns by hand equals the workload's Newton-Schulz FLOPs summed over the DP ranks (each matrix once)."""
    setting = Setting(STUDY_MACHINE, model, 2, 2)
    cfg = run_config(setting, "muon", 8192)
    workload = build_workload(cfg, "cuda", "bf16")
    per_dp_rank = workload.ns_flops[:: cfg.tp]
    assert sum(per_dp_rank) == newton_schulz_flops_total(cfg.model_config())
    assert len(hidden_matrix_shapes(cfg.model_config())) == 4 * cfg.model_config().n_layers


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
