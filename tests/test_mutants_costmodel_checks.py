"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of the cost model's
validation against recorded runs (muon_repro.costmodel.validate: the folders it reads, the config it refuses, which
runs it prices and which trials it pools, the measured medians, the columns of a ``predictions`` row and the printed
summary), of the ranges a machine profile's figures are checked against (muon_repro.costmodel.profile_ranges: each
end as docs/method.md#machine-profile-ranges states it, booleans that are no numbers, empty objects) and of the
multi-rank calibration (muon_repro.costmodel.world_bench: the collective samples' sizes and repetitions, the groups
each rank measures on, what rank 0 returns), the last with torch.distributed faked in-process.

Every expected value is derived by hand from the documented definitions: the modules' docstrings and comments,
docs/method.md ("Machine profile ranges", "Validation") and the ``predictions`` table's schema."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.costmodel_profiles import two_core_profile, write_profile_json
from test_analysis_inputs import _rewrite_json
from test_costmodel_limits_cli import CPU_MACHINE, RUN, _two_trials

from muon_repro.costmodel import profile_ranges as ranges
from muon_repro.costmodel import world_bench
from muon_repro.costmodel.machine import read_profile
from muon_repro.costmodel.machine_profile import ProfileError
from muon_repro.costmodel.measurement import Plan
from muon_repro.costmodel.predict import predict
from muon_repro.costmodel.validate import bench_config, format_validation, measured, run_folders, trial_sets, validate
from muon_repro.phases import BACKWARD, FORWARD
from muon_repro.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
REGIMES = REPO / "traces" / "cpu-2c-gloo" / "regimes"
KEY = "cpu-2c-gloo/comparison/muon_dp2_tp2"


def _trials(tmp_path: Path, *names: str, source: Path = RUN) -> Path:
    """The trials ``names`` of a committed run copied under ``tmp_path/traces`` (traces left out): the run folder."""
    run = tmp_path / "traces" / source.relative_to(source.parents[1])
    for name in names:
        shutil.copytree(source / name, run / name, ignore=shutil.ignore_patterns("*.gz", "log.txt"))
    return run


def _set_steps(trial: Path, **lists) -> None:
    """Every rank of ``trial``'s metrics.json given ``lists`` (``timed_step_ms=[]``: no steps timed without the profiler)."""
    path = trial / "metrics.json"
    metrics = json.loads(path.read_text())
    for rank in metrics["ranks"]:
        rank.update(lists)
    path.write_text(json.dumps(metrics))


NO_STEPS = {"timed_step_ms": [], "timed_optimizer_ms": [], "step_ms": [], "optimizer_ms": []}


# ---------------------------------------------------------------- validate: the folders and configs it reads


def test_a_path_that_is_no_folder_and_a_folder_without_runs_are_refused_by_what_is_wrong(tmp_path):
    (tmp_path / "afile").write_text("x")
    for path in (tmp_path / "missing", tmp_path / "afile"):
        with pytest.raises(ValueError, match="is not a folder of recorded runs"):
            run_folders(path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no recorded run \(no config\.json\) under it"):
        run_folders(tmp_path / "empty")


def test_a_config_the_analysis_refuses_is_refused_naming_the_field_though_the_bench_ignores_it(tmp_path):
    """``trials`` is no BenchConfig field (a trial key), but the records' rules refuse 0 trials: the refusal names it."""
    run = _trials(tmp_path, "trial1")
    _rewrite_json(run / "trial1" / "config.json", trials=0)
    with pytest.raises(ValueError, match=r"config\.json: trials is 0.*record the run again, or move it out"):
        bench_config(RunDir(run / "trial1"))


# ---------------------------------------------------------------- validate: the measured medians


def test_a_run_is_profiled_when_any_of_its_trials_had_only_profiled_steps(tmp_path):
    """trial0 recorded no steps without the profiler (an older trial): its profiled steps are measured, so the run's
    steps are ``profiled``, though trial1 after it timed its own without the profiler. 5 + 8 steps over 2 trials."""
    run = _trials(tmp_path, "trial0", "trial1")
    _set_steps(run / "trial0", timed_step_ms=[], timed_optimizer_ms=[])
    times = measured([RunDir(run / "trial0"), RunDir(run / "trial1")])
    assert (times.profiled, times.trials, times.steps) == (True, 2, 13)


def test_a_trial_without_steps_is_not_counted_and_a_run_without_any_gives_no_row(tmp_path):
    run = _trials(tmp_path, "trial1", "trial2")
    _set_steps(run / "trial2", **NO_STEPS)
    (row,) = validate(tmp_path / "traces", read_profile(CPU_MACHINE))
    assert (row["trials"], row["steps"]) == (1, 8)  # trial1's 8 steps timed without the profiler
    _set_steps(run / "trial1", **NO_STEPS)
    assert validate(tmp_path / "traces", read_profile(CPU_MACHINE)) == []


def test_steps_of_a_trial_recorded_without_the_profiler_are_priced_without_it(tmp_path):
    """A trial whose config says profile false ran no step under the profiler, timed steps or not: priced without
    it. Its steps after the warm-up (config warmup 1): 100, 120, 110 ms -> 110; optimizer 10, 12, 11 -> 11."""
    run = _trials(tmp_path, "trial1")
    _set_steps(run / "trial1", timed_step_ms=[], timed_optimizer_ms=[])
    _set_steps(run / "trial1", step_ms=[999, 100, 120, 110], optimizer_ms=[99, 10, 12, 11])
    (row,) = validate(tmp_path / "traces", read_profile(CPU_MACHINE))
    assert (row["measured_step_ms"], row["measured_optimizer_ms"], row["steps"]) == (110.0, 11.0, 3)
    assert row["profiled"] is False


def test_a_measured_optimizer_time_of_zero_has_no_relative_error(tmp_path):
    """(predicted - measured) / measured has no value when the measured optimizer step is 0."""
    run = _trials(tmp_path, "trial1")
    _set_steps(run / "trial1", timed_optimizer_ms=[0.0] * 8)
    (row,) = validate(tmp_path / "traces", read_profile(CPU_MACHINE))
    assert row["measured_optimizer_ms"] == 0.0 and row["predicted_optimizer_ms"] > 0
    assert row["optimizer_rel_error"] is None and row["profile_optimizer_rel_error"] is None
    assert row["step_rel_error"] is not None


# ---------------------------------------------------------------- validate: which runs, which trials together


def test_only_runs_of_the_profile_asked_for_are_priced(tmp_path):
    traces = _two_trials(tmp_path, {})
    machine = read_profile(CPU_MACHINE)
    assert [r["run"] for r in validate(traces, machine, profile="cpu-2c-gloo")] == [KEY]
    assert validate(traces, machine, profile="1xH200-nccl") == []


def test_a_run_that_names_no_device_is_priced_and_one_on_another_device_is_left_out(tmp_path):
    """Runs on another kind of device than the machine's are left out; one whose config.json names no device (recorded
    before it did) is not known to be on another, and is priced."""
    traces = _two_trials(tmp_path, {})
    machine = read_profile(CPU_MACHINE)
    for trial in ("trial1", "trial2"):
        path = traces / "comparison" / "muon_dp2_tp2" / trial / "config.json"
        config = json.loads(path.read_text())
        del config["device"]
        path.write_text(json.dumps(config))
    assert [r["run"] for r in validate(traces, machine)] == [KEY]
    for trial in ("trial1", "trial2"):
        _rewrite_json(traces / "comparison" / "muon_dp2_tp2" / trial / "config.json", device="cuda")
    assert validate(traces, machine) == []


def test_sets_of_several_trials_are_named_by_their_trials_and_every_differing_field_is_told(tmp_path):
    """trial1 and trial3 agree; trial2 gathers in fp32, trial4 takes 2048 tokens a step: three sets, each named by its
    trials joined with '+', and the warning gives both fields for every set (each field differs in one set only)."""
    run = _trials(tmp_path, "trial1", "trial2", "trial3", "trial4")
    _rewrite_json(run / "trial2" / "config.json", gather_dtype="fp32")
    _rewrite_json(run / "trial4" / "config.json", tokens_per_step=2048)
    warned: list[str] = []
    sets = trial_sets("g/run", [RunDir(run / f"trial{t}") for t in (1, 2, 3, 4)], warned.append)
    assert [(key, [t.path.name for t in members]) for key, members in sets] == [
        ("g/run@trial1+trial3", ["trial1", "trial3"]),
        ("g/run@trial2", ["trial2"]),
        ("g/run@trial4", ["trial4"]),
    ]
    (warning,) = warned
    assert "trial1, trial3: gather_dtype='bf16', tokens_per_step=1024" in warning
    assert "trial2: gather_dtype='fp32', tokens_per_step=1024" in warning
    assert "trial4: gather_dtype='bf16', tokens_per_step=2048" in warning


def test_trials_that_ran_on_another_backend_are_not_pooled(tmp_path):
    """Where a trial ran (config.json backend, device) changes its times, though no BenchConfig field holds it."""
    run = _trials(tmp_path, "trial1", "trial2")
    _rewrite_json(run / "trial2" / "config.json", backend="nccl")
    warned: list[str] = []
    sets = trial_sets("g/run", [RunDir(run / "trial1"), RunDir(run / "trial2")], warned.append)
    assert [key for key, _ in sets] == ["g/run@trial1", "g/run@trial2"]
    assert "backend='gloo'" in warned[0] and "backend='nccl'" in warned[0]


# ---------------------------------------------------------------- validate: the columns of a row


@pytest.fixture(scope="module")
def own_day_row(tmp_path_factory) -> tuple[dict, object, object]:
    """A two-trial run priced by its own calibration: its row, the prediction on its day and as calibrated."""
    from muon_repro.costmodel.validate import run_probes

    traces = _two_trials(tmp_path_factory.mktemp("own_day"), {})
    machine = read_profile(CPU_MACHINE)
    (row,) = validate(traces, machine)
    trials = [RunDir(traces / "comparison" / "muon_dp2_tp2" / t) for t in ("trial1", "trial2")]
    cfg = bench_config(trials[0])
    on_day = predict(cfg, machine.on_day(*run_probes(trials)), profiled=row["profiled"])
    return row, on_day, predict(cfg, machine, profiled=row["profiled"])


def test_the_profile_columns_are_the_profile_as_calibrated_for_the_optimizer_too(own_day_row):
    row, on_day, as_calibrated = own_day_row
    assert row["priced_by"] == "own_calibration" and on_day.optimizer_ms != pytest.approx(as_calibrated.optimizer_ms)
    assert row["profile_predicted_optimizer_ms"] == pytest.approx(as_calibrated.optimizer_ms)
    want = (as_calibrated.optimizer_ms - row["measured_optimizer_ms"]) / row["measured_optimizer_ms"]
    assert row["profile_optimizer_rel_error"] == pytest.approx(want)


def test_the_predicted_phase_columns_are_means_over_ranks_of_the_days_prediction(own_day_row):
    row, on_day, _ = own_day_row
    ranks = on_day.ranks
    assert row["predicted_forward_ms"] == pytest.approx(statistics.fmean(r.parts[FORWARD] for r in ranks))
    assert row["predicted_backward_ms"] == pytest.approx(statistics.fmean(r.parts[BACKWARD] for r in ranks))
    assert row["predicted_wait_ms"] == pytest.approx(statistics.fmean(r.wait_ms for r in ranks))
    assert row["predicted_comm_ms"] == pytest.approx(statistics.fmean(r.transfer_ms + r.wait_ms for r in ranks))
    assert row["predicted_forward_ms"] != pytest.approx(row["predicted_backward_ms"])
    assert 0 < row["predicted_wait_ms"] < row["predicted_comm_ms"]  # a transfer besides the wait: the two differ


def test_only_the_held_out_set_is_held_out(tmp_path):
    """adamw d576 t4096 dp2 tp2 is a point of HELD_OUT, d192 t3072 one of FIRST_HELD_OUT (seen by the model's last
    change: not held out), d128 t1024 the sweep's own."""
    for name in ("adamw_d576_t4096_dp2_tp2", "adamw_d192_t3072_dp2_tp2", "adamw_d128_t1024_dp2_tp2"):
        _trials(tmp_path, "trial1", source=REGIMES / name)
    rows = {r["run"].rsplit("/", 1)[1]: r for r in validate(tmp_path / "traces", read_profile(CPU_MACHINE))}
    got = {name: (row["held_out"], row["validation_set"]) for name, row in rows.items()}
    assert got == {
        "adamw_d576_t4096_dp2_tp2": (True, "held_out"),
        "adamw_d192_t3072_dp2_tp2": (False, "first_held_out"),
        "adamw_d128_t1024_dp2_tp2": (False, None),
    }


def test_the_path_is_the_run_folder_in_either_layout(tmp_path):
    """Trial folders: their run folder; a run recorded without trial folders (config.json in the run folder): itself."""
    traces = _two_trials(tmp_path, {})
    (row,) = validate(traces, read_profile(CPU_MACHINE))
    assert row["path"] == str(traces / "comparison" / "muon_dp2_tp2")
    flat = tmp_path / "flat" / "comparison" / "muon_dp2_tp2"
    shutil.copytree(RUN / "trial1", flat, ignore=shutil.ignore_patterns("*.gz", "log.txt"))
    (row,) = validate(tmp_path / "flat", read_profile(CPU_MACHINE))
    assert row["path"] == str(flat) and row["run"] == KEY


# ---------------------------------------------------------------- validate: the printed summary


def _rows(*errors: tuple[str, float, float, float | None, bool]) -> list[dict]:
    """Rows of (run, step error, as-calibrated step error, optimizer error, within calibration)."""
    return [
        {"run": run, "measured_step_ms": 100.0, "predicted_step_ms": 100.0 * (1 + step), "step_rel_error": step}
        | {"profile_step_rel_error": calibrated, "day_compute": None, "within_calibration": within}
        | {"measured_optimizer_ms": 10.0, "predicted_optimizer_ms": 10.0, "optimizer_rel_error": optimizer}
        for run, step, calibrated, optimizer, within in errors
    ]


def test_the_summary_names_the_largest_error_whatever_its_sign_and_medians_the_optimizer():
    """Step errors +10%, -50%, +20%: the worst is -50% (b), not the largest signed +20%. As calibrated 5%, -40%, 30%:
    worst 40.0% (the largest |error|). Optimizer errors 1%, 2%, 30%: median 2.0% (the mean would be 11.0%)."""
    rows = _rows(("a", 0.1, 0.05, 0.01, True), ("b", -0.5, -0.4, 0.02, True), ("c", 0.2, 0.3, -0.3, True))
    summary = format_validation(rows).splitlines()[-1]
    assert summary == (
        "step time: median |error| 20.0%, worst -50.0% (b); as calibrated: median |error| 30.0%, worst 40.0%; "
        "optimizer: median |error| 2.0%, worst 30.0%"
    )


def test_the_summary_sets_runs_priced_beyond_the_profile_apart():
    """Four runs, two priced beyond the profile (|errors| 30% and 50%: median 40%), two within (10%, 20%: 15%)."""
    rows = _rows(
        ("a", 0.3, 0.3, None, False), ("b", -0.1, -0.1, 0.1, True), ("c", 0.5, 0.5, 0.1, False), ("d", 0.2, 0.2, 0.1, True)
    )
    last = format_validation(rows).splitlines()[-1]
    assert last.startswith(
        "priced beyond the profile's measurements: 2 of 4 runs, median |error| 40.0%; within them: median |error| 15.0%"
    )
    every = format_validation(_rows(("a", 0.3, 0.3, 0.1, False), ("b", -0.1, -0.1, 0.1, False))).splitlines()[-1]
    assert every.startswith("priced beyond the profile's measurements: 2 of 2 runs, median |error| 20.0% (")
    assert "priced beyond" not in format_validation(_rows(("a", 0.3, 0.3, 0.1, True)))


# ---------------------------------------------------------------- profile_ranges: the ends docs/method.md states

# docs/method.md#machine-profile-ranges, row by row: (range, low, high)
DOC_ENDS = [
    ("TFLOPS", 1e-4, 1e4),  # matmul_tflops, newton_schulz_tflops, attention_tflops
    ("KERNEL_GBPS", 1e-3, 1e5),  # elementwise_gbps, cross_entropy_gbps, gelu_gbps
    ("OP_OVERHEAD_US", 0, 1e4),
    ("ALPHA_US", 0, 1e5),
    ("LINK_GBPS", 1e-3, 1e5),  # beta_gbps
    ("SAMPLE_BYTES", 1, 1e13),
    ("SAMPLE_SECONDS", 1e-9, 1e3),
    ("SHARE", 1e-3, 1),
    ("CURVE_ELEMENTS", 1, 1e12),
    ("JITTER_US", 0, 1e6),
    ("JITTER_COMPUTE_US", 1, 1e9),
    ("EFFICIENCY", 1e-2, 1),
    ("DAY_SPEED", 1e-2, 1e2),
]


@pytest.mark.parametrize(("name", "low", "high"), DOC_ENDS, ids=[n for n, _, _ in DOC_ENDS])
def test_each_range_has_the_ends_the_method_doc_states(name, low, high):
    rng = getattr(ranges, name)
    assert (rng.low, rng.high) == (low, high)


def test_rank_counts_reach_two_to_the_twentieth_and_size_curves_rate_in_their_kinds_unit():
    """Rank counts up to 2^20; size curves in TFLOP/s for matmul and attention, GB/s for the memory-bound kinds."""
    assert ranges.MAX_RANKS == 2**20
    ranges.check_count("world_size", 2**20, 2)
    with pytest.raises(ProfileError, match="world_size must be an integer from 2 to 1048576"):
        ranges.check_count("world_size", 2**20 + 1, 2)
    units = {kind: rng.unit for kind, rng in ranges.CURVE_RATES.items()}
    assert units == {"matmul": "TFLOP/s", "attention": "TFLOP/s", "cross_entropy": "GB/s", "gelu": "GB/s", "elementwise": "GB/s"}
    with pytest.raises(ProfileError, match=r"size_curves\.attention\[1024\] must be a number in \[0\.0001, 10000\] TFLOP/s"):
        ranges.check_size_curve("attention", {1024: 5e4})  # a rate only a bandwidth reaches


def test_a_sample_of_no_bytes_is_refused(tmp_path):
    raw = two_core_profile(every_figure=True)
    raw["collectives"][0]["samples"][0][0] = 0
    with pytest.raises(ProfileError, match=r"samples\[0\] bytes must be a number in \[1, 1e\+13\] bytes .*, got 0;"):
        read_profile(write_profile_json(tmp_path, raw))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"op_overhead_us": True}, "op_overhead_us must be a number in [0, 10000] us (0, an ideal host"),
        ({"efficiency": {"matmul": True}}, "efficiency.matmul must be a number in [0.01, 1]"),
        ({"ranks_per_node": True}, "ranks_per_node must be an integer from 1"),
    ],
)
def test_a_boolean_is_no_figure_and_no_count(tmp_path, change, named):
    """JSON true reads as Python's True, which is 1 as an int: refused all the same, as no number."""
    path = write_profile_json(tmp_path, two_core_profile(every_figure=True, **change))
    with pytest.raises(ProfileError) as err:
        read_profile(path)
    assert named in str(err.value) and "got True" in str(err.value)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"matmul_tflops": {}}, "matmul_tflops must be an object {dtype: TFLOP/s} with at least one of fp32, bf16"),
        ({"size_curves": {"gelu": {}}}, "size_curves.gelu must be a non-empty object"),
        ({"arrival_jitter_curve_us": {"2": {}}}, "arrival_jitter_curve_us: keys are group sizes (integers >= 2) of non-empty"),
        ({"arrival_jitter_us": {"1": 10.0}}, "arrival_jitter_us key must be an integer from 2"),
    ],
)
def test_empty_objects_and_a_group_of_one_are_refused(tmp_path, change, named):
    """A required rate with no dtype, a size curve or late-arrival curve with no point, and a late-arrival wait for a
    group of one rank (no group to wait for: group sizes start at 2)."""
    path = write_profile_json(tmp_path, two_core_profile(every_figure=True, **change))
    with pytest.raises(ProfileError) as err:
        read_profile(path)
    assert named in str(err.value)


def test_a_count_is_null_only_where_nullable():
    ranges.check_count("ranks_per_node", None, 1, nullable=True)
    with pytest.raises(ProfileError, match="compute_share key must be an integer from 1 to 1048576 .a rank count., got None"):
        ranges.check_count("compute_share key", None, 1)


# ---------------------------------------------------------------- world_bench: shares, shapes, waits


def _plan(**changes) -> Plan:
    fields = {"presets": ("small", "tiny"), "tokens": 64, "tps": (1,), "reps": 1, "sizes": (1 << 20,)}
    fields |= {"collective_reps": 2, "share_windows": 5, "share_window_s": 0.01, "dtypes": ("fp32",)}
    return Plan(**(fields | changes))


def test_the_compute_share_takes_the_high_quartile_of_the_windows_totals():
    """Two ranks, five windows: totals 2, 4, 6, 8, 10; their upper quartile 8 (the median would be 6) over a reference
    of 10, shared by 2 ranks: 0.4."""
    rates = [[1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0]]
    assert world_bench.compute_share(rates, reference=10.0) == pytest.approx(0.4)


def test_the_share_matmul_takes_the_first_presets_width_and_half_its_mlp():
    assert world_bench.share_shape(_plan()) == (64, 256, 512)  # small: hidden 256, MLP 1024


def test_the_loops_count_two_flops_a_multiply_add_and_twelve_bytes_an_element(monkeypatch):
    """The share matmul (64 x 256) @ (256 x 512): 2 * 64 * 256 * 512 FLOPs a call; ``c = a + b`` on fp32: reads 4 + 4
    bytes and writes 4 an element. Each rate over the plan's windows is their upper quartile: windows 1..5 -> 4."""
    work = []
    rates = iter([1.0, 2.0, 3.0, 4.0, 5.0] * 2)

    def loop_rate(step, work_per_call, device, seconds, check_every=1):
        work.append(work_per_call)
        return next(rates)

    monkeypatch.setattr(world_bench, "loop_rate", loop_rate)
    assert world_bench.standalone_matmul_rate(_plan(), "cpu") == 4.0
    assert world_bench.standalone_stream_rate(_plan(), "cpu") == 4.0
    assert work == [2.0 * 64 * 256 * 512] * 5 + [12.0 * world_bench.STREAM_ELEMENTS] * 5


def test_the_arrival_wait_is_each_ranks_wait_for_the_last_of_a_group_of_three():
    """Ranks 0 and 1 arrive at 0 ms, rank 2 at 3 ms: waits 3, 3 and 0 ms, mean 2 ms."""
    arrivals = [{3: [[0.0]]}, {3: [[0.0]]}, {3: [[0.003]]}]
    assert world_bench.arrival_jitter(arrivals) == {3: [pytest.approx(0.002)]}


# ---------------------------------------------------------------- world_bench: the world, torch.distributed faked


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def fake_world(monkeypatch):
    """torch.distributed and the clock replaced in world_bench: every collective is recorded with its tensors' sizes
    and takes the next of ``durations`` seconds on the fake clock."""
    clock, calls = _Clock(), []
    world = SimpleNamespace(size=4, rank=0, durations=[], calls=calls)

    def collective(op):
        def call(*tensors, group=None):
            calls.append((op, tuple(t.numel() for t in tensors), group))
            clock.now += world.durations.pop(0) if world.durations else 0.0

        return call

    dist = SimpleNamespace(
        barrier=lambda: None,
        all_reduce=collective("all_reduce"),
        get_world_size=lambda: world.size,
        get_rank=lambda: world.rank,
        new_group=tuple,
        all_gather_object=lambda out, obj: out.__setitem__(slice(None), [obj] * len(out)),
    )
    monkeypatch.setattr(world_bench, "dist", dist)
    monkeypatch.setattr(world_bench, "time", clock)
    monkeypatch.setattr(world_bench, "_all_gather_single", collective("all_gather"))
    monkeypatch.setattr(world_bench, "_reduce_scatter_single", collective("reduce_scatter"))
    return world


def _job(**changes) -> world_bench.WorldJob:
    return world_bench.WorldJob(plan=_plan(**changes), device="cpu")


@pytest.mark.parametrize(
    ("op", "ring_bytes", "tensors"),
    [
        ("all_reduce", 1048560, (4 * 43690,)),  # the full array, reduced in place (a clone)
        ("all_gather", 1048572, (4 * 87381, 87381)),  # out: the full array; in: the shard
        ("reduce_scatter", 1048572, (87381, 4 * 87381)),  # out: the shard; in: the full array
    ],
)
def test_a_collective_sample_sends_the_target_bytes_in_whole_chunks_and_times_the_calls_after_the_warm_up(
    fake_world, op, ring_bytes, tensors
):
    """Group of 4, 1 MiB per rank by the ring model: an all-reduce sends 2 x 3 chunks, so 1048576 // 24 = 43690
    elements a chunk, 6 x 43690 x 4 = 1048560 bytes; a gather or a scatter 3 chunks of 87381: 1048572 bytes. Two
    repetitions after the warm-up: the first call (5 s) is not timed."""
    fake_world.durations[:] = [5.0, 1.0, 2.0]
    sample = world_bench._time_collective(op, 4, 1 << 20, "g", _job())
    assert sample == {"op": op, "group_size": 4, "bytes": ring_bytes, "times": [1.0, 2.0]}
    assert fake_world.calls == [(op, tensors, "g")] * 3


def test_a_target_below_one_element_a_hop_still_sends_one(fake_world):
    """1 byte in a group of 2: one fp32 element a chunk, the all-reduce's 2 x 1 chunks 8 bytes (a sample of 0 bytes
    would be outside the profile's range, 1 byte and up)."""
    assert world_bench._time_collective("all_reduce", 2, 1, "g", _job())["bytes"] == 8


def test_every_rank_measures_on_its_own_group_of_every_size_and_rank_0_returns_every_ranks_rates(fake_world, monkeypatch):
    """World of 4: group sizes 2 and 4 (those dividing the world); rank 1's groups (0, 1) and (0, 1, 2, 3), every
    collective at every planned size on each. Rank 0 returns each rank's compute-share and bandwidth windows."""
    measured_on = []
    monkeypatch.setattr(world_bench, "measure_speed", lambda device: SimpleNamespace(to_dict=lambda: {"probe": device}))
    monkeypatch.setattr(world_bench, "_matmulloop_rate", lambda plan, device, seconds: 1.0)
    monkeypatch.setattr(world_bench, "_streamloop_rate", lambda device, seconds: 2.0)
    monkeypatch.setattr(world_bench, "_arrivals", lambda group, job, calls: measured_on.append(("arrivals", group)) or [0.0])
    monkeypatch.setattr(
        world_bench, "_time_collective", lambda op, size, target, group, job: measured_on.append((op, group)) or {"op": op}
    )
    job = _job(sizes=(1024, 4096), share_windows=3)
    fake_world.rank = 1
    assert world_bench.world_worker(job) is None
    kinds = ("arrivals", *(op for op in world_bench.COLLECTIVE_OPS for _ in job.plan.sizes))
    assert measured_on == [(kind, (0, 1)) for kind in kinds] + [(kind, (0, 1, 2, 3)) for kind in kinds]
    fake_world.rank = 0
    out = world_bench.world_worker(job)
    assert (out["world_size"], out["speed_probe"]) == (4, {"probe": "cpu"})
    assert out["share_rates"] == [[1.0] * 3] * 4 and out["stream_rates"] == [[2.0] * 3] * 4
    assert set(out["arrivals"][0]) == {2, 4}


def test_the_arrivals_leave_out_the_first_meeting_after_the_barrier(fake_world, monkeypatch):
    """Three windows: four meetings, 1 s of compute (the fake clock's matmul) before each; the first, reached from the
    barrier, is left out, so the three arrivals are the 2nd to 4th, at 2, 3 and 4 s."""
    monkeypatch.setattr(world_bench, "sync_device", lambda device: setattr(world_bench.time, "now", world_bench.time.now + 1.0))
    arrivals = world_bench._arrivals("g", _job(share_windows=3), calls=1)
    assert arrivals == [2.0, 3.0, 4.0]
    assert [op for op, _, _ in fake_world.calls] == ["all_reduce"] * 4
