"""The single-device path a GPU session records (issue 31), checked on the CPU: bf16 autocast and gradient
accumulation in the bench's step, the ``single_device`` registry group, runs timed in every round, a
calibration of one device alone, the cost model's micro-batches, and torch versions whose launcher lacks
``shutdown_timeout``. The CUDA-only check at the end skips without a GPU."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from muon_repro.bench.configs import CONFIGS, REFERENCE_CONFIGS, BenchConfig, expand_config_names, resolve
from muon_repro.bench.training import build_optimizer, train_step
from muon_repro.costmodel.machine_profile import MachineProfile, ProfileError
from muon_repro.costmodel.workload import build_workload
from muon_repro.model import GPT
from muon_repro.parallel import ParallelDims
from muon_repro.parallel.launch import CHATTY_LOGGERS, SHUTDOWN_TIMEOUT_S, _quiet_elastic_shutdown, _shutdown_timeout

TINY = BenchConfig(
    group="custom", name="t", optimizer="muon", dp=1, tp=1, scale="tiny", preset="tiny", tokens_per_step=64, seq_len=16
)


# ---------------------------------------------------------------- the config


def test_precision_and_micro_batches_are_validated_naming_the_field():
    with pytest.raises(ValueError, match="precision must be one of"):
        replace(TINY, precision="fp16")
    with pytest.raises(ValueError, match="micro_batches must be >= 1"):
        replace(TINY, micro_batches=0)
    with pytest.raises(ValueError, match="micro_batches=3 does not divide the 4 sequences"):
        replace(TINY, micro_batches=3)
    assert replace(TINY, micro_batches=4).batch_per_dp == 4


def test_the_single_device_group_spans_8k_to_256k_tokens_in_both_optimizers_and_stays_out_of_the_reference():
    keys = expand_config_names(["single_device"])
    resolved = [resolve(k, "gpu") for k in keys]
    assert {(c.optimizer, c.tokens_per_step) for c in resolved} == {
        (opt, t) for opt in ("muon", "adamw") for t in (8192, 32768, 131072, 262144)
    }
    for c in resolved:
        assert (c.dp, c.tp, c.precision, c.preset, c.seq_len) == (1, 1, "bf16", "large", 1024)
        assert c.tokens_per_step // c.micro_batches <= 16384  # a pass fits one 80 GB GPU
        assert c.timed_only == (c.tokens_per_step > 32768)  # the largest steps keep no trace
    assert not any(CONFIGS[k].group == "single_device" for k in REFERENCE_CONFIGS)
    # the scale's timed steps still apply to the other groups
    assert resolve("comparison/muon_dp2_tp2", "cpu").timed_steps == 8


# ---------------------------------------------------------------- the step


def _grads_after_one_step(micro_batches: int, precision: str = "fp32") -> tuple[float, dict[str, torch.Tensor]]:
    cfg = replace(TINY, micro_batches=micro_batches, precision=precision)
    dims = ParallelDims(1, 1)
    torch.manual_seed(0)
    model = GPT(cfg.model_config(), dims.tp_group)
    opt = build_optimizer(cfg, model, dims)
    tokens = torch.randint(
        cfg.model_config().vocab_size, (cfg.batch_per_dp, cfg.seq_len), generator=torch.Generator().manual_seed(1)
    )
    targets = tokens.roll(-1, dims=1)
    opt.step = lambda: None  # keep the gradients: the step is what is compared
    opt.zero_grad = lambda set_to_none=True: None
    _, _, _, loss = train_step(model, opt, tokens, targets, torch.device("cpu"), precision=precision, micro_batches=micro_batches)
    return float(loss), {name: p.grad.clone() for name, p in model.named_parameters()}


def test_micro_batches_give_the_whole_batchs_loss_and_gradient():
    loss_whole, grads_whole = _grads_after_one_step(1)
    loss_micro, grads_micro = _grads_after_one_step(4)
    assert loss_micro == pytest.approx(loss_whole, rel=1e-6)
    for name, grad in grads_whole.items():
        torch.testing.assert_close(grads_micro[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_a_batch_that_does_not_split_evenly_is_refused_not_misweighted():
    """4 sequences in 3 micro-batches: chunk() gives 2 slices of 2, and each loss over 3 would make the step's loss and
    gradient 2/3 of the batch's mean."""
    dims = ParallelDims(1, 1)
    model = GPT(TINY.model_config(), dims.tp_group)
    opt = build_optimizer(TINY, model, dims)
    tokens = torch.zeros((4, TINY.seq_len), dtype=torch.long)
    with pytest.raises(ValueError, match="does not split into 3 equal micro-batches"):
        train_step(model, opt, tokens, tokens, torch.device("cpu"), micro_batches=3)


def test_bf16_autocast_trains_fp32_weights_on_gradients_close_to_fp32s():
    loss32, grads32 = _grads_after_one_step(2)
    loss16, grads16 = _grads_after_one_step(2, "bf16")
    assert loss16 == pytest.approx(loss32, rel=2e-2)
    for name, grad in grads16.items():
        assert grad.dtype == torch.float32, name
        cosine = torch.nn.functional.cosine_similarity(grad.flatten(), grads32[name].flatten(), dim=0)
        assert cosine > 0.98, name


# ---------------------------------------------------------------- the cost model


def test_the_workload_prices_micro_batches_as_more_operator_calls_and_the_same_work():
    cfg = replace(TINY, tp=2, tokens_per_step=64)
    whole, micro = (build_workload(replace(cfg, micro_batches=m)) for m in (1, 4))
    for a, b in zip(whole.programs[0], micro.programs[0]):
        if a.compute is not None:
            assert b.compute.matmul_flops == a.compute.matmul_flops
            if a.part in ("forward", "backward"):
                assert b.compute.ops == 4 * a.compute.ops
        if a.comm is not None and a.part != "optimizer":  # the model's TP collectives: 4x the calls, the same elements
            assert len(b.comm.calls) == 4 * len(a.comm.calls)
            assert sum(b.comm.calls) == sum(a.comm.calls)


def test_a_run_is_priced_in_its_own_precision():
    from muon_repro.costmodel.machine import resolve_profile
    from muon_repro.costmodel.predict import predict

    machine = resolve_profile("h100-8x-nvlink")
    cfg = resolve("single_device/muon_t8k", "gpu")
    assert predict(cfg, machine, profiled=False).workload.precision == "bf16"
    assert predict(replace(cfg, precision="fp32"), machine, profiled=False).workload.precision == "fp32"


# ---------------------------------------------------------------- one device calibrated alone


@pytest.mark.slow  # times the device's kernels for ~5 s: a measurement, not a unit
def test_a_calibration_of_one_device_has_kernels_and_no_collectives(monkeypatch, tmp_path):
    from muon_repro.costmodel import compute_bench, measurement
    from muon_repro.costmodel.calibrate import calibrate
    from muon_repro.model_config import PRESETS

    monkeypatch.setitem(compute_bench.TARGET_MODELS, "small", PRESETS["small"])
    quick = measurement.Plan.for_device("cpu", True)
    monkeypatch.setattr(
        measurement.Plan, "for_device", classmethod(lambda cls, d, q: replace(quick, ns_target_models=("small",)))
    )
    profile, rows = calibrate("one", ranks=(1,), quick=True, log=lambda _: None)
    assert profile.collectives == () and profile.calibration["ranks"] == [1]
    assert set(profile.calibration["speed_probe"]) == {"1"}
    target = profile.calibration["ns_against_matmul"]["small"]
    assert target["fraction"] == pytest.approx(target["ns_tflops"] / target["matmul_tflops"])
    assert any(r["kernel"] == "newton_schulz" and r["shape"].startswith("small [") for r in rows)
    with pytest.raises(ProfileError, match="calibrated on one device alone"):
        profile.collective("all_gather", 2)
    # a profile of several ranks without fits is still refused
    with pytest.raises(ProfileError, match="collectives must list at least one fit"):
        MachineProfile(**{**dataclasses.asdict(profile), "collectives": (), "calibration": {}, "sources": ()})


def test_ranks_1_stands_alone():
    from muon_repro.costmodel.calibrate import _check_ranks

    assert _check_ranks([1]) == (1,)
    with pytest.raises(ValueError, match="or be 1 alone"):
        _check_ranks([1, 2])


# ---------------------------------------------------------------- the launcher on another torch


def test_the_launcher_asks_for_a_shutdown_timeout_only_where_torch_has_one():
    @dataclasses.dataclass
    class Torch211LaunchConfig:  # torch 2.11's LaunchConfig has no shutdown_timeout
        nproc_per_node: int = 1

    @dataclasses.dataclass
    class Torch213LaunchConfig:
        nproc_per_node: int = 1
        shutdown_timeout: int = 30

    assert _shutdown_timeout(Torch211LaunchConfig) == {}
    assert _shutdown_timeout(Torch213LaunchConfig) == {"shutdown_timeout": SHUTDOWN_TIMEOUT_S}


def test_the_launcher_keeps_only_a_worker_killed_by_ctrl_c_off_the_terminal():
    """Torch elastic logs a worker's death by a signal with a traceback: one that SIGINT killed is Ctrl-C, which the
    launch reports as an interrupt; any other death and every other error still reach the terminal."""
    import logging
    import signal

    from torch.multiprocessing.spawn import ProcessExitedException

    def death(signum: int) -> ProcessExitedException:
        name = signal.Signals(signum).name
        return ProcessExitedException(f"process 0 terminated with signal {name}", 0, 1234, -signum, name)

    logger = logging.getLogger(CHATTY_LOGGERS[-1])  # the one that logs a worker's death
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())
    logger.addHandler(handler)
    try:

        def log_each() -> None:
            for exc in (death(signal.SIGINT), death(signal.SIGKILL), ValueError("a worker's own error")):
                try:
                    raise exc
                except Exception:
                    logger.exception("failed: %s", exc)
            logger.warning("Closing process 1234 via signal SIGINT")

        with _quiet_elastic_shutdown():
            log_each()
        assert logged == ["failed: process 0 terminated with signal SIGKILL", "failed: a worker's own error"]
        logged.clear()
        log_each()  # as it was once the launch is over
        assert len(logged) == 4 and logged[0] == "failed: process 0 terminated with signal SIGINT"
    finally:
        logger.removeHandler(handler)


# ---------------------------------------------------------------- runs timed in every round


@pytest.mark.slow
def test_a_run_timed_in_every_round_is_a_runs_row_with_its_timed_columns(tmp_path):
    from muon_repro.bench.sweep import record_local
    from muon_repro.table_set import build_tables

    cfg = replace(TINY, name="timed_only", profile=False, timed_steps=2, timed_warmup=1, micro_batches=2, precision="bf16")
    results = record_local([cfg], tmp_path, "gloo", trials=2, progress=False)
    assert all(not any(r.run_dir.glob("rank*.json*")) for r in results)  # no trace in any round
    tables = build_tables([tmp_path], workers=1)
    runs = tables["runs"]
    assert len(runs) == 1
    row = runs.iloc[0]
    assert (row["steps"], row["rounds"], row["trials"], row["optimizer"]) == (0, 2, 0, "muon")  # no traced trial
    assert row["timed_step_ms"] > 0 and 0 < row["timed_optimizer_ms"] < row["timed_step_ms"]
    assert pd_isna(row["step_ms"])  # only a trace gives it
    # the optimizer share needs no trace: the claims' estimator, on the timed steps
    assert 0 < row["optimizer_share"] < 1 and row["optimizer_share_low"] <= row["optimizer_share"] <= row["optimizer_share_high"]
    assert len(tables["timed_steps"]) == 2 * 2  # 2 rounds x 2 kept steps, one rank
    config = json.loads((results[0].run_dir / "config.json").read_text())
    assert (config["precision"], config["micro_batches"]) == ("bf16", 2)


def pd_isna(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


# ---------------------------------------------------------------- on a GPU


@pytest.mark.slow  # it launches a worker
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_bf16_step_with_micro_batches_runs_and_reports_its_own_peak(tmp_path):
    from muon_repro.bench.sweep import record_local

    cfg = replace(TINY, name="cuda", precision="bf16", micro_batches=2, timed_steps=2, timed_warmup=1)
    (result,) = record_local([cfg], tmp_path, "nccl", trials=1, progress=False)
    ranks = json.loads((Path(result.run_dir) / "metrics.json").read_text())["ranks"]
    assert ranks[0]["peak_memory_source"] == "cuda_max_allocated"
