"""Where `bench` records (issue 44): NCCL on a GPU machine for every configuration that fits its GPUs, the rest
refused by name with what would record them, never the CPU unasked; the gpu scale inside the claims' conditions."""

from __future__ import annotations

import os

import pytest

from muon_repro.bench.configs import expand_config_names, resolve
from muon_repro.bench.placement import place
from muon_repro.model_config import PRESETS


def _all(scale: str) -> list:
    return [resolve(key, scale) for key in expand_config_names(["all"])]


@pytest.mark.parametrize("gpus", [1, 4, 8])
def test_a_gpu_machine_records_on_its_gpus_and_refuses_what_does_not_fit(gpus):
    cfgs = _all("gpu")
    placement = place(cfgs, gpus)
    assert placement.backend == "nccl"
    assert {c.key for c in placement.runnable} == {c.key for c in cfgs if c.world_size <= gpus}
    assert {c.key for c, _ in placement.refused} == {c.key for c in cfgs if c.world_size > gpus}
    for cfg, reason in placement.refused:
        assert f"needs {cfg.world_size} GPUs" in reason and f"= {cfg.world_size}" in reason and "--backend gloo" in reason
        assert f"this machine has {gpus} GPU" in reason


def test_without_a_gpu_the_gpu_scale_is_refused_unless_the_cpu_is_asked_for():
    with pytest.raises(ValueError, match="no configuration can be recorded here") as refused:
        place(_all("gpu"), 0)
    assert "comparison/muon_dp2_tp2: the gpu scale" in str(refused.value) and "--scale cpu" in str(refused.value)
    asked = place(_all("gpu"), 0, "gloo")
    assert asked.backend == "gloo" and not asked.refused
    cpu = place(_all("cpu"), 0)
    assert cpu.backend == "gloo" and not cpu.refused


def test_nccl_asked_without_gpus_names_every_configuration():
    with pytest.raises(ValueError, match="no GPU is visible"):
        place(_all("cpu")[:3], 0, "nccl")
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        place(_all("cpu"), 0, "mpi")


def test_gloo_on_a_gpu_machine_only_when_asked():
    assert place(_all("cpu"), 4).backend == "nccl"
    assert place(_all("cpu"), 4, "gloo").backend == "gloo"


def test_bench_all_at_the_gpu_scale_on_4_gpus_never_selects_gloo(monkeypatch, tmp_path, capsys):
    from muon_repro.bench import placement, sweep
    from muon_repro.cli import main

    monkeypatch.setattr(placement, "visible_gpus", lambda: 4)
    monkeypatch.delitem(os.environ, "RANK", raising=False)
    monkeypatch.delitem(os.environ, "WORLD_SIZE", raising=False)
    calls = []
    monkeypatch.setattr(sweep, "record_local", lambda cfgs, out, backend, **kw: calls.append((cfgs, backend)) or [])
    monkeypatch.setattr(sweep, "format_results", lambda results: "")
    code = main(["bench", "all", "--scale", "gpu", "--out", str(tmp_path)])
    ((cfgs, backend),) = calls
    assert backend == "nccl" and cfgs and max(c.world_size for c in cfgs) == 4
    err = capsys.readouterr().err
    assert code == 1 and "not recorded here" in err and "needs 8 GPUs" in err


def test_the_gpu_scale_is_inside_the_claims_tokens_per_d_model_in_bf16_passes_of_16k_tokens():
    for cfg in _all("gpu"):
        if cfg.group in ("single_device", "pipeline", "pipeline_bubble"):
            continue
        hidden = PRESETS[cfg.preset].hidden
        assert cfg.tokens_per_step / hidden >= 256 and cfg.precision == "bf16", cfg.key
        assert cfg.batch_per_dp % cfg.micro_batches == 0
        assert cfg.batch_per_dp * cfg.seq_len // cfg.micro_batches <= 16_384, cfg.key
    assert resolve("comparison/muon_dp2_tp2", "cpu").precision == "fp32"  # the cpu scale is unchanged


def test_a_torchrun_world_that_does_not_fit_is_reported_with_the_grids_arithmetic(monkeypatch, tmp_path):
    from muon_repro.bench.sweep import record_under_torchrun

    monkeypatch.setenv("WORLD_SIZE", "2")
    cfg = next(c for c in _all("cpu") if c.pp > 1)
    with pytest.raises(
        ValueError, match=rf"dp\*tp\*pp = {cfg.dp}\*{cfg.tp}\*{cfg.pp} = {cfg.world_size} ranks, torchrun started 2"
    ):
        record_under_torchrun([cfg], tmp_path, "gloo")


def test_a_mistyped_config_is_answered_with_the_closest_names_not_all_of_them():
    with pytest.raises(ValueError) as typo:
        expand_config_names(["comparisn"])
    said = str(typo.value)
    assert "did you mean comparison, comparison/muon_dp2_tp2" in said and len(said) < 300 and "--list" in said
    with pytest.raises(ValueError, match="did you mean comparison/muon_dp2_tp2"):
        resolve("comparison/muon_dp2_tp3")


def test_the_cli_states_its_version(capsys):
    from muon_repro import __version__
    from muon_repro.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"muon-repro {__version__}"


@pytest.mark.parametrize(
    ("gpus", "local_ranks", "asked", "expected"),
    [
        (4, 4, None, "nccl"),
        (8, 4, None, "nccl"),
        (2, 4, None, "torchrun started 4 ranks on this node, which has 2 GPUs: .*--nproc-per-node 2 .*--backend gloo"),
        (0, 4, "nccl", "which has no GPU"),
        (2, 4, "gloo", "gloo"),  # asked for
        (0, 4, None, "gloo"),  # a CPU node, cpu scale
    ],
)
def test_torchrun_never_falls_back_to_the_cpu_unasked(gpus, local_ranks, asked, expected):
    from muon_repro.bench.placement import torchrun_backend

    cfgs = _all("cpu")[:2]
    if expected in ("nccl", "gloo"):
        assert torchrun_backend(cfgs, gpus, local_ranks, asked) == expected
    else:
        with pytest.raises(ValueError, match=expected):
            torchrun_backend(cfgs, gpus, local_ranks, asked)


def test_torchrun_on_a_cpu_node_refuses_the_gpu_scale_unless_asked():
    from muon_repro.bench.placement import torchrun_backend

    cfgs = _all("gpu")[:1]
    with pytest.raises(ValueError, match="no GPU is visible on this node, and .* is of the gpu scale"):
        torchrun_backend(cfgs, 0, 4)
    assert torchrun_backend(cfgs, 0, 4, "gloo") == "gloo"


def test_the_run_stage_places_like_bench(monkeypatch, tmp_path):
    """`muon-repro run` chose gloo from the largest world size; it now records the configurations that fit the GPUs
    over NCCL and names the rest."""
    from muon_repro import stages
    from muon_repro.bench import placement, sweep

    recorded = {}
    monkeypatch.setattr(placement, "visible_gpus", lambda: 4)
    monkeypatch.setattr(sweep, "record_local", lambda cfgs, out, backend, **kw: recorded.update(cfgs=cfgs, backend=backend) or [])
    stages.bench(["all"], tmp_path, scale="gpu", progress=False)
    assert recorded["backend"] == "nccl" and all(cfg.world_size <= 4 for cfg in recorded["cfgs"])
