"""The cost model's limits: implausible profile figures are refused on load, every figure in range prices a
finite step, ``predict`` never loops, and size curves say which figures they make unused (``calibrate`` on
Ctrl-C and ``predict --validate``'s trial sets: tests/test_costmodel_limits_cli.py)."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from support.costmodel_profiles import two_core_profile, write_profile_json

from muon_repro.bench.configs import resolve
from muon_repro.cli import main
from muon_repro.costmodel import profile_ranges as ranges
from muon_repro.costmodel.machine import named_profiles, profile_from_dict, read_profile
from muon_repro.costmodel.machine_profile import (
    COLLECTIVE_OPS,
    EFFICIENCY_KINDS,
    SCOPES,
    SIZE_CURVE_KINDS,
    ProfileError,
    interpolate_samples,
)
from muon_repro.costmodel.predict import SHARING_PASSES_PER_JOB, format_prediction, predict, processor_sharing

REPO = Path(__file__).resolve().parents[1]
COMMITTED_PROFILES = sorted(REPO.glob("traces/*/costmodel/machine.json")) + sorted(named_profiles().values())
CPU_MACHINE = REPO / "traces" / "cpu-2c-gloo" / "costmodel" / "machine.json"
HANG_BOUND_S = 10  # a bounded simulation of a 4-rank step takes milliseconds; a loop that never ends is stopped here
SHAPE = ["--optimizer", "muon", "--dp", "2", "--tp", "2", "--preset", "small", "--tokens-per-step", "4096", "--seq-len", "128"]


@pytest.fixture
def bounded():
    """Fail a test that runs longer than HANG_BOUND_S instead of hanging the suite."""

    def stop(signum, frame):
        raise TimeoutError(f"ran past {HANG_BOUND_S} s: the simulation loops")

    before = signal.signal(signal.SIGALRM, stop)
    signal.alarm(HANG_BOUND_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, before)


# ---------------------------------------------------------------- 1. ranges, on load


@pytest.mark.parametrize("path", COMMITTED_PROFILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_committed_profile_is_inside_the_ranges(path):
    profile = read_profile(path)
    assert profile.name and profile.matmul_tflops


def _set(path: str) -> Callable[[dict, object], None]:
    """A setter of the field at ``path`` (``a.b.0.c``: keys and list indices) of a raw profile."""

    def setter(raw: dict, value: object) -> None:
        *parents, last = path.split(".")
        node: object = raw
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return setter


def _get(path: str) -> Callable[[dict], object]:
    """A getter of the field at ``path`` (as :func:`_set`'s) of a profile's dict."""

    def getter(raw: dict) -> object:
        node: object = raw
        for key in path.split("."):
            node = node[int(key)] if isinstance(node, (list, tuple)) else node[key]
        return node

    return getter


# (where the value goes, the name the error gives it, its range)
FIGURES = [
    ("matmul_tflops.fp32", "matmul_tflops.fp32", ranges.TFLOPS),
    ("newton_schulz_tflops.fp32", "newton_schulz_tflops.fp32", ranges.TFLOPS),
    ("attention_tflops.fp32", "attention_tflops.fp32", ranges.TFLOPS),
    ("elementwise_gbps", "elementwise_gbps", ranges.KERNEL_GBPS),
    ("cross_entropy_gbps", "cross_entropy_gbps", ranges.KERNEL_GBPS),
    ("gelu_gbps", "gelu_gbps", ranges.KERNEL_GBPS),
    ("op_overhead_us", "op_overhead_us", ranges.OP_OVERHEAD_US),
    ("profiled_op_overhead_us", "profiled_op_overhead_us", ranges.OP_OVERHEAD_US),
    ("collectives.0.alpha_us", "collectives[0]: alpha_us", ranges.ALPHA_US),
    ("collectives.0.beta_gbps", "collectives[0]: beta_gbps", ranges.LINK_GBPS),
    ("collectives.0.samples.0.0", "samples[0] bytes", ranges.SAMPLE_BYTES),
    ("collectives.0.samples.0.1", "samples[0] seconds", ranges.SAMPLE_SECONDS),
    ("compute_share.4", "compute_share[4]", ranges.SHARE),
    ("bandwidth_share.2", "bandwidth_share[2]", ranges.SHARE),
    ("size_curves.gelu.1024", "size_curves.gelu[1024]", ranges.KERNEL_GBPS),
    ("arrival_jitter_us.2", "arrival_jitter_us[2]", ranges.JITTER_US),
    ("arrival_jitter_curve_us.2.4000", "arrival_jitter_curve_us[2][4000]", ranges.JITTER_US),
    ("efficiency.matmul", "efficiency.matmul", ranges.EFFICIENCY),
]
SUBNORMAL = 5e-324


def _implausible(rng: ranges.Range) -> list[float]:
    """Values outside ``rng``: not numbers, infinite, beyond either end, and 0 / subnormal / negative where the
    range starts above 0."""
    values = [math.nan, math.inf, -math.inf, -1.0, rng.high * 10, 1e308]
    return values + ([0.0, SUBNORMAL, rng.low / 10] if rng.low > 0 else [])


@pytest.mark.parametrize(
    ("where", "named", "rng", "value"),
    [(where, named, rng, value) for where, named, rng in FIGURES for value in _implausible(rng)],
)
def test_a_value_outside_its_range_is_refused_naming_file_field_value_and_range(tmp_path, where, named, rng, value):
    raw = two_core_profile(every_figure=True)
    _set(where)(raw, value)
    path = write_profile_json(tmp_path, raw)
    with pytest.raises(ValueError) as err:
        read_profile(path)
    message = str(err.value)
    assert str(path) in message and named in message and repr(value) in message
    assert f"[{rng.low:g}, {rng.high:g}] {rng.unit}" in message


@pytest.mark.parametrize(("where", "named", "rng"), FIGURES)
def test_both_ends_of_each_range_load(tmp_path, where, named, rng):
    for value in (rng.low, rng.high):
        raw = two_core_profile(every_figure=True)
        _set(where)(raw, value)
        profile = read_profile(write_profile_json(tmp_path, raw))
        assert _get(where)(profile.to_dict()) == pytest.approx(value)  # read as given, not clipped or dropped


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"ranks_per_node": 0}, "ranks_per_node must be an integer from 1"),
        ({"ranks_per_node": ranges.MAX_RANKS + 1}, "ranks_per_node must be an integer from 1"),
        ({"compute_share": {"0": 1.0}}, "compute_share key must be an integer from 1"),
        ({"size_curves": {"gelu": {"0": 4.0}}}, "size_curves.gelu key must be a number in [1, 1e+12]"),
        ({"arrival_jitter_curve_us": {"2": {"0": 5.0}}}, "arrival_jitter_curve_us[2] key must be a number in [1, 1e+09]"),
    ],
)
def test_counts_and_keys_outside_their_ranges_are_refused(tmp_path, change, named):
    path = write_profile_json(tmp_path, two_core_profile(every_figure=True, **change))
    with pytest.raises(ProfileError) as err:
        read_profile(path)
    assert str(path) in str(err.value) and named in str(err.value)


@pytest.mark.parametrize("speed", [math.nan, 0.0, SUBNORMAL, ranges.DAY_SPEED.high * 2])
def test_a_days_speed_outside_its_range_is_refused(tmp_path, speed):
    profile = read_profile(write_profile_json(tmp_path, two_core_profile(every_figure=True)))
    with pytest.raises(ProfileError, match="day_speed must be a number in"):
        replace(profile, day_speed=speed)


def test_the_method_doc_lists_every_figure_and_its_range():
    doc = (REPO / "docs" / "method.md").read_text(encoding="utf-8")
    section = doc.split("### Machine profile ranges", 1)[1].split("\n### ", 1)[0]
    fields = {where.split(".")[0] for where, _, _ in FIGURES} | {"alpha_us", "beta_gbps", "samples", "ranks_per_node"}
    assert not [name for name in fields - {"collectives"} if f"`{name}" not in section and f".{name}`" not in section]


# ---------------------------------------------------------------- 3. never loops


@pytest.mark.slow
def test_the_reported_hang_now_ends_with_an_error_naming_the_field(tmp_path):
    """elementwise_gbps 5e-324 once priced work at infinity and processor_sharing never ended: a subprocess with a
    timeout, so that a regression fails instead of hanging."""
    raw = json.loads(CPU_MACHINE.read_text())
    path = write_profile_json(tmp_path, {**raw, "elementwise_gbps": SUBNORMAL})
    done = subprocess.run(
        [sys.executable, "-m", "muon_repro", "predict", "--machine", str(path), *SHAPE],
        capture_output=True,
        text=True,
        timeout=120,  # the interpreter and torch start in seconds; a hang is stopped
        cwd=REPO,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{path}: elementwise_gbps must be a number in" in done.stderr and "5e-324" in done.stderr


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_processor_sharing_refuses_work_that_never_ends(bounded, bad):
    with pytest.raises(ValueError, match="work time is"):
        processor_sharing([0.0, 0.0], [bad, bad], 1.0)  # what elementwise_gbps 5e-324 gave: it looped forever
    with pytest.raises(ValueError, match="work time is"):
        processor_sharing([0.0, 0.0], [1.0, bad], 1.0)
    with pytest.raises(ValueError, match="start time is"):
        processor_sharing([bad, 0.0], [1.0, 1.0], 1.0)
    with pytest.raises(ValueError, match="cores"):
        processor_sharing([0.0], [1.0], bad)


def test_processor_sharing_prices_what_it_did_and_ends_within_its_bound(bounded, monkeypatch):
    # two jobs on one core: each at half speed until the shorter ends at 2 s, then the other alone: 3 s
    assert processor_sharing([0.0, 0.0], [1.0, 2.0], 1.0) == pytest.approx([2.0, 3.0])
    # a late job joins: 0-1 s alone (1 s done of 3), 1-5 s two at half speed (the late one ends), then 0 left
    assert processor_sharing([0.0, 1.0], [3.0, 2.0], 1.0) == pytest.approx([5.0, 5.0])
    starts = [i * 1e-3 for i in range(64)]
    works = [1e-6 * (1 + (i * 7919) % 97) for i in range(64)]
    ends = processor_sharing(starts, works, 64.0)  # a core each: every job runs alone at full speed
    assert ends == pytest.approx([s + w for s, w in zip(starts, works)])
    shared = processor_sharing(starts, [w * 1e6 for w in works], 3.0)
    assert all(e > s for e, s in zip(shared, starts)) and all(map(math.isfinite, shared))
    monkeypatch.setattr("muon_repro.costmodel.predict.SHARING_PASSES_PER_JOB", 0)  # a bound too small is an error
    with pytest.raises(RuntimeError, match="did not end within"):
        processor_sharing([0.0, 0.0], [1.0, 2.0], 1.0)
    assert SHARING_PASSES_PER_JOB == 3


def test_a_big_call_is_never_priced_below_the_largest_sample():
    falling = [(1024.0, 2e-3), (1 << 20, 1e-3)]  # a noisy pair whose time falls with the bytes
    assert interpolate_samples(falling, 1 << 30) == pytest.approx(1e-3)
    rising = [(1024.0, 1e-3), (2048.0, 2e-3)]
    assert interpolate_samples(rising, 4096.0) == pytest.approx(4e-3)  # along the slope, as before


# ---------------------------------------------------------------- 4. the extremes of every range


def extreme_profile(device: str, rates: str, waits: str, shares: str) -> dict:
    """Every figure at one end of its range: ``rates`` (compute and bandwidth, and efficiency), ``waits``
    (overheads, latencies, jitter, samples) and ``shares``, each "low" or "high"."""

    def end(rng: ranges.Range, which: str) -> float:
        return rng.low if which == "low" else rng.high

    other = {"low": "high", "high": "low"}
    tflops, gbps = end(ranges.TFLOPS, rates), end(ranges.KERNEL_GBPS, rates)
    wait_us = end(ranges.JITTER_US, waits)
    byte_ends = (ranges.SAMPLE_BYTES.low, ranges.SAMPLE_BYTES.high)
    seconds = (end(ranges.SAMPLE_SECONDS, waits), end(ranges.SAMPLE_SECONDS, other[waits]))  # rising, or falling
    collectives = [
        {
            "op": op,
            "alpha_us": end(ranges.ALPHA_US, waits),
            "beta_gbps": end(ranges.LINK_GBPS, rates),
            "scope": scope,
            **({"group_size": 2, "world_size": 4, "samples": [list(p) for p in zip(byte_ends, seconds)]} if sampled else {}),
        }
        for op in COLLECTIVE_OPS
        for scope in SCOPES
        for sampled in (False, True)
    ]
    curve_ends = (int(ranges.CURVE_ELEMENTS.low), int(ranges.CURVE_ELEMENTS.high))
    return {
        "name": f"extreme-{device}-{rates}-{waits}-{shares}",
        "device": device,
        "backend": "gloo" if device == "cpu" else "nccl",
        "matmul_tflops": {"fp32": tflops, "bf16": tflops},
        "newton_schulz_tflops": {"fp32": tflops, "bf16": tflops},
        "attention_tflops": {"fp32": tflops, "bf16": tflops},
        "elementwise_gbps": gbps,
        "cross_entropy_gbps": gbps,
        "gelu_gbps": gbps,
        "op_overhead_us": end(ranges.OP_OVERHEAD_US, waits),
        "profiled_op_overhead_us": end(ranges.OP_OVERHEAD_US, waits),
        "ranks_per_node": 2,
        "compute_share": {"1": 1.0, "2": end(ranges.SHARE, shares)},
        "bandwidth_share": {"1": 1.0, "2": end(ranges.SHARE, shares)},
        "size_curves": {
            kind: {str(curve_ends[0]): ranges.CURVE_RATES[kind].low, str(curve_ends[1]): ranges.CURVE_RATES[kind].high}
            for kind in SIZE_CURVE_KINDS
        },
        "arrival_jitter_us": {"2": wait_us},
        "arrival_jitter_curve_us": {"2": {str(int(ranges.JITTER_COMPUTE_US.low)): wait_us, "1000000000": wait_us}},
        "efficiency": dict.fromkeys(EFFICIENCY_KINDS, end(ranges.EFFICIENCY, rates)),
        "collectives": collectives,
    }


EXTREME_RUNS = [
    (resolve("comparison/muon_dp2_tp2", "cpu"), None),
    (replace(resolve("layout_ablation/muon_dp2_tp2_bucketed", "cpu"), overlap="pipelined", bucket_elems=200_000), None),
    (resolve("distributed_muon/adamw_dp4", "cpu"), None),
    (resolve("comparison/muon_dp2_tp2", "gpu"), "bf16"),
]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("rates", ["low", "high"])
@pytest.mark.parametrize("waits", ["low", "high"])
@pytest.mark.parametrize("shares", ["low", "high"])
def test_every_figure_at_either_end_of_its_range_prices_a_finite_step(bounded, device, rates, waits, shares):
    profile = profile_from_dict(extreme_profile(device, rates, waits, shares))
    for machine in (profile, replace(profile, day_speed=ranges.DAY_SPEED.low), replace(profile, day_speed=ranges.DAY_SPEED.high)):
        for cfg, model_dtype in EXTREME_RUNS:
            for profiled in (True, False):
                p = predict(cfg, machine, profiled=profiled, model_dtype=model_dtype)
                out = p.to_dict()
                json.dumps(out, allow_nan=False)  # every number finite
                assert 0 < p.step_ms < math.inf and p.comm_ms >= 0 and out["compute_ms"] > 0
                assert all(r["step_ms"] >= 0 and r["comm_wait_ms"] >= 0 for r in out["ranks"])
                format_prediction(p)


def test_the_reported_overflow_is_now_a_range_error(tmp_path, capsys):
    raw = json.loads(named_profiles()["h100-8x-nvlink"].read_text())
    path = write_profile_json(tmp_path, {**raw, "profiled_op_overhead_us": 1e308})
    assert main(["predict", "--machine", str(path), *SHAPE]) == 2
    err = capsys.readouterr().err
    assert f"{path}: profiled_op_overhead_us must be a number in [0, 10000] us" in err and "1e+308" in err


# ---------------------------------------------------------------- 2. figures a size curve makes unused


@pytest.mark.parametrize("rate", [ranges.TFLOPS.low, ranges.TFLOPS.high])
def test_a_size_curve_says_the_flat_figure_it_replaces_changes_nothing(tmp_path, capsys, rate):
    curved = two_core_profile(every_figure=True, size_curves={"matmul": {"65536": 0.05, "1048576": 0.04}})
    cfg = resolve("comparison/muon_dp2_tp2", "cpu")
    as_given = predict(cfg, profile_from_dict(curved))
    changed = predict(cfg, profile_from_dict({**curved, "matmul_tflops": {"fp32": rate}}))
    assert changed.step_ms == as_given.step_ms  # the note's claim
    assert any(n.startswith("matmul_tflops.fp32") and "size_curves.matmul" in n for n in as_given.notes)
    assert main(["predict", "--machine", str(write_profile_json(tmp_path, curved)), *SHAPE]) == 0
    assert "note: matmul_tflops.fp32 (0.04 TFLOP/s) is not used by this profile's predictions" in capsys.readouterr().out
    assert main(["predict", "--machine", str(write_profile_json(tmp_path, curved)), *SHAPE, "--json"]) == 0
    assert any("size_curves.matmul" in n for n in json.loads(capsys.readouterr().out)["notes"])


def test_without_a_curve_the_flat_figure_is_used_and_no_note_says_otherwise():
    flat = two_core_profile(every_figure=True, size_curves={})
    cfg = resolve("comparison/muon_dp2_tp2", "cpu")
    slower = predict(cfg, profile_from_dict({**flat, "matmul_tflops": {"fp32": 0.02}}))
    p = predict(cfg, profile_from_dict(flat))
    assert slower.step_ms > p.step_ms and p.notes == ()


def test_the_committed_cpu_calibration_notes_its_unused_figures():
    notes = read_profile(CPU_MACHINE).unused_figures()
    assert {n.split(" ", 1)[0] for n in notes} == {
        "matmul_tflops.fp32",
        "attention_tflops.fp32",
        "cross_entropy_gbps",
        "gelu_gbps",
    }


def test_each_range_constant_is_its_row_of_the_range_table():
    assert len(ranges.RANGES) == len(ranges.RANGE_TABLE)  # no name twice
    for name, low, high, unit, why in ranges.RANGE_TABLE:
        assert getattr(ranges, name) == ranges.Range(low, high, unit, why), name
