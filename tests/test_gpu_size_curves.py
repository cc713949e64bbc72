"""Size curves on a GPU (issue 46, item 2): the model's training step timed by each operator's self device
time under bf16 autocast, at the gpu scale's runs' pass sizes and preset, and the precision rule that keeps
bf16 curves off fp32 runs. The CPU path and every profile calibrated before stay as they were."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from support.costmodel_profiles import two_core_profile

from muon_repro.bench.configs import CONFIGS, SCALE_SPECS, resolve
from muon_repro.costmodel.compute_bench import (
    CURVE_LAYERS,
    _classify,
    bench_model_step,
    curve_model,
    curve_operands,
    model_step_work,
)
from muon_repro.costmodel.machine import profile_from_dict, read_profile
from muon_repro.costmodel.machine_profile import SIZE_CURVE_KINDS, ProfileError
from muon_repro.costmodel.measurement import Plan
from muon_repro.costmodel.predict import predict
from muon_repro.costmodel.workload import model_stages
from muon_repro.model_config import PRESETS

REPO = Path(__file__).resolve().parents[1]
CPU_MACHINE = REPO / "traces" / "cpu-2c-gloo" / "costmodel" / "machine.json"
GPU_MACHINE = REPO / "traces" / "1xH200-nccl" / "costmodel" / "machine.json"
SINGLE_DEVICE_RUNS = [resolve(key, "gpu") for key in CONFIGS if key.startswith("single_device/")]


# ---------------------------------------------------------------- classification by device time


@dataclass
class Event:
    """What ``_classify`` reads of a profiler's averaged event (torch.autograd.profiler_util.FunctionEventAvg)."""

    key: str
    count: int
    self_cpu_time_total: float  # us
    self_device_time_total: float  # us


@dataclass
class OlderEvent:
    """An event of a torch that names the device time ``self_cuda_time_total``."""

    key: str
    count: int
    self_cpu_time_total: float
    self_cuda_time_total: float


STEP_EVENTS = [
    Event("aten::mm", 40, self_cpu_time_total=400.0, self_device_time_total=9000.0),
    Event("aten::addmm", 2, self_cpu_time_total=20.0, self_device_time_total=1000.0),
    Event("aten::_scaled_dot_product_flash_attention", 2, self_cpu_time_total=30.0, self_device_time_total=2000.0),
    Event("aten::_flash_attention_backward", 2, self_cpu_time_total=30.0, self_device_time_total=3000.0),
    Event("aten::_log_softmax", 1, self_cpu_time_total=10.0, self_device_time_total=500.0),
    Event("aten::nll_loss_backward", 1, self_cpu_time_total=10.0, self_device_time_total=250.0),
    Event("aten::gelu", 2, self_cpu_time_total=5.0, self_device_time_total=700.0),
    Event("aten::gelu_backward", 2, self_cpu_time_total=5.0, self_device_time_total=1100.0),
    Event("aten::add", 30, self_cpu_time_total=300.0, self_device_time_total=600.0),
    Event("aten::_to_copy", 20, self_cpu_time_total=200.0, self_device_time_total=0.0),  # a launch: no kernel of its own
    Event("aten::copy_", 20, self_cpu_time_total=100.0, self_device_time_total=400.0),
    # the kernels themselves, and the profiler's own scopes: their time is already their aten operator's
    Event("sm90_xmma_gemm_bf16bf16_bf16f32", 40, self_cpu_time_total=0.0, self_device_time_total=9000.0),
    Event("cudaLaunchKernel", 200, self_cpu_time_total=900.0, self_device_time_total=0.0),
    Event("forward", 1, self_cpu_time_total=50.0, self_device_time_total=0.0),
]


def test_a_gpu_step_is_classified_by_its_operators_self_device_time():
    seconds, rest_calls = _classify(STEP_EVENTS, device_time=True)
    assert seconds["matmul"] == pytest.approx(10_000e-6)
    assert seconds["attention"] == pytest.approx(5_000e-6)  # the fused kernels, by a fragment of their names
    assert seconds["cross_entropy"] == pytest.approx(750e-6)
    assert seconds["gelu"] == pytest.approx(1_800e-6)
    assert seconds["elementwise"] == pytest.approx(1_000e-6)  # add and copy_: the casts' kernels, not their launches
    assert rest_calls == 70  # aten::add, _to_copy and copy_ calls


def test_a_cpu_step_is_still_classified_by_self_cpu_time():
    seconds, rest_calls = _classify(STEP_EVENTS)
    assert seconds["matmul"] == pytest.approx(420e-6) and seconds["attention"] == pytest.approx(60e-6)
    assert seconds["elementwise"] == pytest.approx(600e-6) and rest_calls == 70


def test_the_device_time_falls_back_to_the_older_cuda_name():
    older = [OlderEvent("aten::mm", 1, 5.0, 800.0), OlderEvent("aten::mul", 3, 6.0, 90.0)]
    seconds, _ = _classify(older, device_time=True)
    assert seconds["matmul"] == pytest.approx(800e-6) and seconds["elementwise"] == pytest.approx(90e-6)
    assert seconds["gelu"] == 1e-9  # nothing measured: the floor that keeps a rate finite


def test_this_torch_names_the_self_device_time_as_the_classification_reads_it():
    from torch.autograd.profiler_util import FunctionEvent, FunctionEventAvg

    assert hasattr(FunctionEvent, "self_device_time_total")
    assert FunctionEventAvg().self_device_time_total == 0


# ---------------------------------------------------------------- the plans


@pytest.mark.parametrize("quick", [True, False])
def test_the_gpu_plan_times_the_runs_preset_in_bf16_at_their_pass_sizes(quick):
    plan = Plan.for_device("cuda", quick)
    gpu = SCALE_SPECS["gpu"]
    assert plan.curve_tokens == ((4096, 16384) if quick else (4096, 8192, 16384, 32768))
    assert plan.curve_model_preset == gpu.preset == "large" and plan.curve_precision == gpu.precision == "bf16"
    assert plan.presets[0] != plan.curve_model_preset  # the kernels' presets are untouched; the curves have their own
    assert curve_model(plan) == replace(PRESETS["large"], n_layers=CURVE_LAYERS)
    assert gpu.micro_tokens in plan.curve_tokens
    for cfg in SINGLE_DEVICE_RUNS:  # every committed GPU run's pass lies within the curves, none past their ends
        assert cfg.preset == plan.curve_model_preset and cfg.precision == plan.curve_precision
        assert min(plan.curve_tokens) <= cfg.tokens_per_step // cfg.micro_batches <= max(plan.curve_tokens)


def test_the_cpu_plans_are_unchanged():
    quick, full = Plan.for_device("cpu", True), Plan.for_device("cpu", False)
    assert quick.curve_tokens == (256, 1024) and full.curve_tokens == (256, 1024, 4096, 8192)
    for plan in (quick, full):
        assert plan.presets == ("small",) and plan.curve_preset == "" and plan.curve_model_preset == "small"
        assert plan.curve_precision == "fp32" and plan.dtypes == ("fp32",)
        assert curve_model(plan) == replace(PRESETS["small"], n_layers=CURVE_LAYERS)
    m = curve_model(full)
    work = model_step_work(full, 1024)  # fp32 bytes, as before the GPU curves
    assert work["gelu"] == 4 * 1024 * m.ffn_hidden * m.n_layers and work["cross_entropy"] == 4 * 1024 * m.vocab_size


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"curve_preset": "huge"}, "curve_preset 'huge' is not a model preset"),
        ({"curve_precision": "fp16"}, "curve_precision must be one of fp32, bf16, got 'fp16'"),
    ],
)
def test_a_plan_refuses_a_curve_model_it_cannot_build(change, message):
    with pytest.raises(ValueError, match=message):
        replace(Plan.for_device("cpu", True), **change)


def test_a_cpu_refuses_bf16_curves():
    plan = replace(Plan.for_device("cpu", True), curve_precision="bf16")
    with pytest.raises(ValueError, match="size curves on a CPU are timed in fp32"):
        bench_model_step(plan, "cpu", op_us=1.0)


def test_the_cpu_step_still_runs_and_prices_in_fp32():
    plan = replace(Plan.for_device("cpu", True), curve_tokens=(128,))
    curves, rows = bench_model_step(plan, "cpu", op_us=1.0, log=lambda _: None)
    assert set(curves) == set(SIZE_CURVE_KINDS) and all(len(c) == 1 and next(iter(c.values())) > 0 for c in curves.values())
    assert {r["dtype"] for r in rows} == {"fp32"} and rows[0]["shape"] == f"{CURVE_LAYERS}-block small step, 128 tokens"


# ---------------------------------------------------------------- the curves against the workload


@pytest.mark.parametrize("quick", [True, False])
def test_a_bf16_curve_counts_the_work_the_bf16_workload_prices(quick):
    """A curve's rate is the workload's count over the measured time: the count must be what the cost model
    prices for a bf16 run of the curve model, or the curve misprices the runs it was measured for."""
    plan = Plan.for_device("cuda", quick)
    m = curve_model(plan)
    for tokens in plan.curve_tokens:
        cfg = replace(SINGLE_DEVICE_RUNS[0], n_layers=CURVE_LAYERS, tokens_per_step=tokens, micro_batches=1)
        assert cfg.model_config() == m
        forward, backward = model_stages(cfg, m, "bf16")
        priced = [s.compute for s in (*forward, *backward) if s.compute is not None]
        work = model_step_work(plan, tokens)
        assert work["matmul"] == pytest.approx(sum(c.matmul_flops for c in priced))
        assert work["attention"] == pytest.approx(sum(c.attention_flops for c in priced))
        assert work["cross_entropy"] == pytest.approx(sum(c.cross_entropy_bytes for c in priced))
        assert work["gelu"] == pytest.approx(sum(c.gelu_bytes for c in priced))
        assert work["elementwise"] == pytest.approx(sum(c.vector_bytes for c in priced))


def test_a_micro_batched_run_is_priced_at_its_passes_size():
    """The curve's key is one pass's operand: a 128k-token step in 8 passes of 16k tokens is priced at the point
    measured at 16k tokens, not at 128k."""
    plan = Plan.for_device("cuda", False)
    cfg = next(c for c in SINGLE_DEVICE_RUNS if c.tokens_per_step == 131072)
    assert cfg.micro_batches == 8
    forward, backward = model_stages(cfg, cfg.model_config(), "bf16")
    keys = curve_operands(plan, cfg.tokens_per_step // cfg.micro_batches)
    for stage in (*forward, *backward):
        if stage.compute is not None:
            c = stage.compute
            assert (c.activation_elems, c.logits_elems, c.mlp_elems) == (keys["matmul"], keys["cross_entropy"], keys["gelu"])
    # and a prediction follows the curve's point at the pass, whatever the step's size
    curves = {"matmul": {keys["matmul"]: 500.0, 8 * keys["matmul"]: 5.0}}
    machine = profile_from_dict(_bf16_curved(size_curves=curves))
    flat = profile_from_dict(_bf16_curved(size_curves={}))
    assert predict(cfg, machine).step_ms < predict(cfg, flat).step_ms  # 500 TFLOP/s against the flat 80


# ---------------------------------------------------------------- the precision rule


def _bf16_curved(**changes) -> dict:
    """A profile with fp32 and bf16 matmul and attention figures and a curve of every kind measured under bf16
    autocast (``changes`` replace its fields)."""
    curves = {
        kind: {"1000": 2.0 * rate, "1000000": rate}
        for kind, rate in {
            "matmul": 400.0,
            "attention": 300.0,
            "cross_entropy": 900.0,
            "gelu": 800.0,
            "elementwise": 700.0,
        }.items()
    }
    raw = two_core_profile(
        matmul_tflops={"fp32": 40.0, "bf16": 80.0},
        newton_schulz_tflops={"fp32": 30.0, "bf16": 60.0},
        attention_tflops={"fp32": 30.0, "bf16": 60.0},
        size_curves=curves,
        size_curves_precision="bf16",
    )
    return raw | changes


def test_bf16_curves_price_bf16_runs_and_leave_fp32_runs_at_the_flat_figures():
    p = profile_from_dict(_bf16_curved())
    elems = 1_000_000
    assert p.matmul_flops_per_s("bf16", elems) == pytest.approx(400e12)
    assert p.matmul_flops_per_s("fp32", elems) == pytest.approx(40e12)
    assert p.attention_flops_per_s("bf16", elems) == pytest.approx(300e12)
    assert p.attention_flops_per_s("fp32", elems) == pytest.approx(30e12)
    assert p.elementwise_bytes_per_s(elems, "bf16") == pytest.approx(700e9)
    assert p.elementwise_bytes_per_s(elems, "fp32") == pytest.approx(20e9)
    assert p.cross_entropy_bytes_per_s(elems, "bf16") == pytest.approx(900e9)
    assert p.cross_entropy_bytes_per_s(elems, "fp32") == pytest.approx(20e9 / 8)  # as if the profile had no curve
    assert p.gelu_bytes_per_s(elems, "fp32") == pytest.approx(20e9 / 5)
    assert p.elementwise_bytes_per_s() == pytest.approx(20e9)  # the optimizer's flat buffers: the flat figure


def test_an_fp32_run_on_a_bf16_curved_profile_is_priced_as_without_curves():
    cfg = resolve("comparison/muon_dp2_tp2", "cpu")
    curved, flat = profile_from_dict(_bf16_curved()), profile_from_dict(_bf16_curved(size_curves={}))
    assert (
        predict(cfg, curved, model_dtype="fp32").to_dict()["ranks"] == predict(cfg, flat, model_dtype="fp32").to_dict()["ranks"]
    )
    assert predict(cfg, curved, model_dtype="bf16").step_ms != predict(cfg, flat, model_dtype="bf16").step_ms


def test_fp32_curves_keep_their_rule_matmuls_for_fp32_runs_memory_bound_kernels_for_every_run():
    p = profile_from_dict(_bf16_curved(size_curves_precision="fp32"))
    assert p.matmul_flops_per_s("fp32", 1_000_000) == pytest.approx(400e12)
    assert p.matmul_flops_per_s("bf16", 1_000_000) == pytest.approx(80e12)
    for precision in ("fp32", "bf16"):  # the flat memory-bound figures are fp32 kernels that price both
        assert p.elementwise_bytes_per_s(1_000_000, precision) == pytest.approx(700e9)
        assert p.cross_entropy_bytes_per_s(1_000_000, precision) == pytest.approx(900e9)


def test_the_notes_name_the_figures_bf16_curves_replace():
    notes = profile_from_dict(_bf16_curved()).unused_figures()
    assert [n.split(" ", 1)[0] for n in notes] == ["matmul_tflops.bf16", "attention_tflops.bf16"]
    assert "prices every bf16 matmul of forward and backward; matmul_tflops.fp32 still prices fp32 training" in notes[0]
    # cross_entropy_gbps and gelu_gbps still price fp32 runs: not noted as unused
    both = profile_from_dict(_bf16_curved(cross_entropy_gbps=3.0, gelu_gbps=4.0)).unused_figures()
    assert [n.split(" ", 1)[0] for n in both] == ["matmul_tflops.bf16", "attention_tflops.bf16"]


def test_the_curves_precision_is_validated_and_written():
    with pytest.raises(ProfileError, match="size_curves_precision must be one of fp32, bf16, got 'fp16'"):
        profile_from_dict(_bf16_curved(size_curves_precision="fp16"))
    p = profile_from_dict(_bf16_curved())
    assert p.to_dict()["size_curves_precision"] == "bf16"
    assert profile_from_dict(p.to_dict()) == p


@pytest.mark.parametrize("path", [CPU_MACHINE, GPU_MACHINE])
def test_the_committed_profiles_read_as_fp32_curves(path):
    """Profiles calibrated before the field hold no precision: their curves are fp32, priced as they were."""
    profile = read_profile(path)
    assert profile.size_curves_precision == "fp32"
    assert profile_from_dict(profile.to_dict()) == profile


def test_the_committed_cpu_curves_still_price_a_bf16_runs_memory_bound_kernels():
    profile = read_profile(CPU_MACHINE)
    elems = min(profile.size_curves["elementwise"])
    assert profile.elementwise_bytes_per_s(elems, "bf16") == profile.elementwise_bytes_per_s(elems, "fp32")
    assert profile.matmul_flops_per_s("fp32", elems) != profile.matmul_flops_per_s("fp32")  # the curve, not the flat


# ---------------------------------------------------------------- on a GPU


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times the model's step on a CUDA device")
def test_the_gpu_step_gives_curves_of_every_kind_by_device_time():
    plan = replace(Plan.for_device("cuda", True), curve_tokens=(1024, 4096))
    curves, rows = bench_model_step(plan, "cuda", op_us=0.0, log=lambda _: None)
    assert set(curves) == set(SIZE_CURVE_KINDS)
    assert {r["dtype"] for r in rows} == {"bf16"} and all(r["seconds"] > 1e-8 for r in rows)  # each kind had kernels
    keys = curve_operands(plan, 4096)
    assert all(keys[kind] in curve for kind, curve in curves.items())
    assert all(math.isfinite(rate) and rate > 0 for curve in curves.values() for rate in curve.values())
    profile = profile_from_dict(_bf16_curved(size_curves={k: {str(e): r for e, r in c.items()} for k, c in curves.items()}))
    assert profile.size_curves_precision == "bf16"  # every rate within the profile's ranges


def test_the_measured_compute_predictions_take_the_devices_curves():
    from muon_repro.costmodel.records import measured_compute_profile

    gpu = profile_from_dict(_bf16_curved())
    links = profile_from_dict(two_core_profile())
    carried = measured_compute_profile(links, gpu)
    assert carried.size_curves == gpu.size_curves and carried.size_curves_precision == "bf16"
    assert carried.collectives == links.collectives  # the links stay the other machine's
    assert carried.matmul_flops_per_s("bf16", 1_000_000) == pytest.approx(400e12)


def test_a_model_the_calibration_timed_is_priced_at_its_own_matrices_rates():
    """The committed H200 calibration timed bf16 Newton-Schulz at 147 TFLOP/s over the presets' small (launch-bound)
    matrices and at about 608 on the 7B model's: the 7B model's measured-compute lines take the 608, and with it a
    Newton-Schulz time about a quarter of what the flat figure gives; a model it did not time keeps the flat rates."""
    from muon_repro.costmodel.machine import resolve_profile
    from muon_repro.costmodel.predict import kernel_seconds
    from muon_repro.costmodel.records import MODEL_7B, STUDY_MODEL, Model, measured_compute_profile
    from muon_repro.costmodel.workload import Compute

    h200 = resolve_profile(str(REPO / "traces" / "1xH200-nccl" / "costmodel" / "machine.json"))
    links = resolve_profile("h100-8x-nvlink")
    timed = h200.calibration["ns_against_matmul"]
    for model, key in ((MODEL_7B, "7b"), (STUDY_MODEL, "369m")):
        hybrid = measured_compute_profile(links, h200, model)
        assert hybrid.newton_schulz_tflops["bf16"] == pytest.approx(timed[key]["ns_tflops"])
        assert hybrid.matmul_tflops["bf16"] == pytest.approx(timed[key]["matmul_tflops"])
        assert hybrid.newton_schulz_tflops["fp32"] == h200.newton_schulz_tflops["fp32"]  # only bf16 was timed there
    flat = measured_compute_profile(links, h200, Model("other", "large", 1024))
    assert flat.newton_schulz_tflops == h200.newton_schulz_tflops and flat.matmul_tflops == h200.matmul_tflops
    work = Compute(ns_flops=1e13)
    at_shapes, _ = kernel_seconds(work, measured_compute_profile(links, h200, MODEL_7B), "bf16")
    flat_s, _ = kernel_seconds(work, flat, "bf16")
    assert at_shapes < 0.3 * flat_s
