"""The regime sweep and the cost model's records: the sweep's points, runs timed without the profiler,
the crossing of a level, programs that line up at any DP size, the records turned into tables, and
`muon-repro regimes --quick` end to end."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.costmodel_profiles import two_core_profile

from muon_repro.analysis.costmodel_tables import costmodel_tables, sweep_runs
from muon_repro.bench.configs import BenchConfig, from_dict
from muon_repro.bench.regimes import REGIMES_GROUP, SHAPE_WIDTH, regime_point, regime_points
from muon_repro.cli import main
from muon_repro.costmodel.machine import profile_from_dict
from muon_repro.costmodel.predict import predict
from muon_repro.costmodel.records import STUDY_MODEL, Setting, crossing, line_row
from muon_repro.rundir import COSTMODEL_DIR, PREDICTIONS_FILE, expected_files, is_trace_file, trial_folders
from muon_repro.tables.schemas import SCHEMAS

REPO = Path(__file__).resolve().parents[1]

PROFILE = "test-box"  # the hardware profile the quick sweep is filed under (--profile)


# ---------------------------------------------------------------- the sweep's points


def test_the_sweep_spans_what_the_regimes_need():
    points = regime_points()
    assert len({p.key for p in points}) == len(points)
    assert all(p.group == REGIMES_GROUP and not p.profile and p.tokens_per_step % (p.dp * p.seq_len) == 0 for p in points)
    tokens = sorted({p.tokens_per_step for p in points})
    assert len(tokens) >= 5 and tokens[0] <= 512 and tokens[-1] >= 16384
    assert len({p.hidden for p in points}) >= 3
    assert {(p.dp, p.tp) for p in points} >= {(2, 2), (4, 1), (1, 4)}
    assert {p.layout for p in points} == {"contiguous", "bucketed", "whole_matrix"}
    # every Muon point of the main axis and of the shapes has its AdamW twin
    keys = {(p.optimizer, p.hidden, p.tokens_per_step, p.dp, p.tp, p.layout) for p in points}
    for p in points:
        if p.optimizer == "muon":
            assert ("adamw", p.hidden, p.tokens_per_step, p.dp, p.tp, "contiguous") in keys, p.key


def test_a_timed_only_run_expects_no_traces_and_its_config_round_trips():
    cfg = regime_point("muon", SHAPE_WIDTH, 1024)
    assert not any(name.startswith("rank") for name in expected_files(cfg.world_size, profiled=cfg.profile))
    assert from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["profile"] is False
    assert from_dict(
        {k: v for k, v in cfg.to_dict().items() if k != "profile"}
    ).profile  # runs recorded before the field: profiled
    assert not is_trace_file("machine.json") and is_trace_file("rank0.json.gz")


# ---------------------------------------------------------------- the crossing of a level


def test_crossing_interpolates_log_log_between_the_points_around_the_level():
    # y = 100 / x on a log-log grid: y = 0.5 at x = 200 exactly
    points = [(x, 100 / x) for x in (64, 128, 256, 512)]
    assert crossing(points, 0.5) == pytest.approx(200)
    assert crossing(points, 2.0) == 64  # already at or below the level at the first point
    assert crossing(points, 0.01) is None  # never reached
    assert crossing(list(reversed(points)), 0.5) == pytest.approx(200)  # order does not matter


def test_a_level_reached_exactly_at_a_grid_point_is_crossed_there():
    """Falling to the level counts as reaching it: at the grid's last point (not "never within the grid"), and at the
    first point that reaches it when the metric rises again after."""
    assert crossing([(64, 2.0), (128, 1.0)], 1.0) == pytest.approx(128)
    assert crossing([(64, 2.0), (128, 1.0), (256, 1.5), (512, 0.5)], 1.0) == pytest.approx(128)


def test_a_model_line_point_states_the_share_the_extra_and_the_flop_ratio_per_rank():
    """Muon's step 120 ms of which 30 optimizer, AdamW's 100 ms, on DP2·TP2 (4 GPUs): the optimizer's share is
    30 / 120 = 0.25, Muon's extra 120 / 100 - 1 = 0.2 (over AdamW's step), and the flop ratio the busiest rank's
    Newton-Schulz FLOPs over one rank's training FLOPs, 500 / (8000 / 4) = 0.25."""
    from types import SimpleNamespace

    workload = SimpleNamespace(model=SimpleNamespace(num_params=lambda: 1000), ns_flops=(300, 500, 200, 400), train_flops=8000)
    muon = SimpleNamespace(workload=workload, step_ms=120.0, optimizer_ms=30.0, comm_ms=10.0)
    adamw = SimpleNamespace(step_ms=100.0, optimizer_ms=10.0, comm_ms=5.0)
    row = line_row(Setting("m", STUDY_MODEL, 2, 2), 4096, "profile", muon, adamw)
    assert (row["gpus"], row["optimizer_share"], row["muon_extra"]) == (4, 0.25, pytest.approx(0.2))
    assert row["flop_ratio"] == pytest.approx(0.25)


# ---------------------------------------------------------------- programs line up at any DP size


def test_predict_lines_up_every_ranks_program_when_some_dp_ranks_orthogonalize_nothing():
    """With 8 DP ranks and 2 TP ranks, some DP ranks own no TP-sharded matrix of a unit: their programs
    still hold the unit's (empty) TP gather stages, so the simulation pairs every rank's stages."""
    machine = profile_from_dict(two_core_profile())
    cfg = BenchConfig(
        group="t",
        name="wide",
        optimizer="muon",
        dp=8,
        tp=2,
        scale="tiny",
        preset="tiny",
        tokens_per_step=8 * 16,
        seq_len=16,
        profile=False,
    )
    p = predict(cfg, machine, profiled=False)
    lengths = {len(program) for program in p.workload.programs}
    assert len(lengths) == 1 and p.step_ms > 0
    assert sum(p.workload.ns_flops) > 0 and min(p.workload.ns_flops) < max(p.workload.ns_flops)  # uneven on purpose


def test_bf16_training_is_priced_at_the_bf16_rate():
    raw = two_core_profile() | {"matmul_tflops": {"fp32": 0.04, "bf16": 0.4}}
    machine = profile_from_dict(raw)
    cfg = regime_point("adamw", 128, 4096)
    fp32, bf16 = (predict(cfg, machine, profiled=False, model_dtype=d) for d in ("fp32", "bf16"))
    assert bf16.step_ms < fp32.step_ms


# ---------------------------------------------------------------- records -> tables


def test_a_record_with_an_unknown_column_is_refused_naming_the_file(tmp_path):
    folder = tmp_path / COSTMODEL_DIR
    folder.mkdir()
    (folder / PREDICTIONS_FILE).write_text("run,machine,surprise\nx,y,1\n")
    with pytest.raises(ValueError, match=r"predictions\.csv.*surprise"):
        costmodel_tables([tmp_path])


def test_records_naming_a_renamed_shipped_profile_are_read_under_its_new_name(tmp_path):
    from muon_repro.rundir import THRESHOLDS_FILE

    folder = tmp_path / "cpu-2c-gloo" / COSTMODEL_DIR
    folder.mkdir(parents=True)
    (folder / THRESHOLDS_FILE).write_text(
        "profile,machine,model,d_model,metric,level,tokens_per_step\n"
        "cpu-2c-gloo,seed-4x-pcie4-x4,gpu-scale-369m,1024,optimizer_share,0.011,366478.0\n"
        "cpu-2c-gloo,h100-8x-nvlink,gpu-scale-369m,1024,optimizer_share,0.011,1000000.0\n"
    )
    thresholds = costmodel_tables([tmp_path])["regime_thresholds"]
    assert list(thresholds["machine"]) == ["4xRTXA4000-pcie-nccl", "h100-8x-nvlink"]


def test_the_report_names_a_renamed_profile_by_its_new_name_in_older_tables():
    from muon_repro.report.regime_figures import machine_style
    from muon_repro.report.regimes_section import machine_name

    study = "4xRTXA4000-pcie-nccl"
    for old in ("seed-4x-pcie4-x4", "wei-4x-pcie4-x4"):
        assert machine_name(old) == machine_name(study) == "Wei's study: 4x RTX A4000, PCIe Gen4 x4"
        assert machine_style(old) == machine_style(study)
    assert machine_name("my-box") == "my-box" and machine_style("my-box")[1] == "my-box"


def test_without_records_every_costmodel_table_is_empty_with_its_columns(tmp_path):
    tables = costmodel_tables([tmp_path])
    assert set(tables) == {"calibration", "predictions", "regimes", "regime_model", "regime_thresholds", "pipeline_scale_out"}
    for name, table in tables.items():
        assert table.empty and list(table.columns) == SCHEMAS[name].names


# ---------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def quick_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("regimes") / "traces"
    machine = out.parent / "machine.json"
    machine.write_text(json.dumps(two_core_profile()))
    code = main(
        [
            "regimes",
            "--out",
            str(out),
            "--quick",
            "--trials",
            "2",
            "--machine",
            str(machine),
            "--no-progress",
            "--profile",
            PROFILE,
        ]
    )
    assert code == 0
    return out


@pytest.mark.slow
def test_regimes_quick_records_timed_runs_and_their_tables(quick_sweep, tmp_path):
    runs = sorted(quick_sweep.glob(f"{PROFILE}/{REGIMES_GROUP}/*/trial*"))  # traces/<profile>/regimes/
    assert len(runs) == 2 * len(regime_points(quick=True))
    assert all(not list(run.glob("rank*.json*")) and (run / "metrics.json").is_file() for run in runs)
    # a folder of the sweep alone has no trace, and still makes its tables (the trace tables empty)
    assert main(["analyze", str(quick_sweep), "--out", str(tmp_path / "metrics")]) == 0
    written = pd.read_parquet(tmp_path / "metrics" / "regimes.parquet")
    assert len(written) == len(regime_points(quick=True)) and pd.read_parquet(tmp_path / "metrics" / "runs.parquet").empty
    tables = costmodel_tables([quick_sweep])
    regimes = tables["regimes"].set_index("run")
    assert len(regimes) == len(regime_points(quick=True))
    muon = regimes[regimes["optimizer"] == "muon"]
    assert muon["adamw_run"].notna().all() and muon["predicted_muon_extra"].notna().all()
    for _, row in regimes.iterrows():
        assert row["steps"] == 2 * 2 and row["trials"] == 2
        assert row["optimizer_share_lo"] <= row["optimizer_share"] <= row["optimizer_share_hi"]
        assert 0 < row["optimizer_share"] < 1 and row["predicted_step_ms"] > 0
    for run, row in muon.iterrows():
        # paired by round: the geometric mean of the per-round ratios of median step times, minus 1
        sweep = sweep_runs([quick_sweep])
        # by hand from the trial folders, not through the estimators: each trial's median step (slowest rank)
        muon_rounds = np.array([np.median([s for s, _ in trial.recorded_steps()]) for trial in sweep[run]])
        adamw_rounds = np.array([np.median([s for s, _ in trial.recorded_steps()]) for trial in sweep[row["adamw_run"]]])
        expected = float(np.exp(np.mean(np.log(muon_rounds / adamw_rounds)))) - 1.0
        assert row["muon_extra"] == pytest.approx(expected) and len(muon_rounds) == 2
        assert row["muon_extra_lo"] <= row["muon_extra"] <= row["muon_extra_hi"]
        assert math.isclose(row["closed_form_ratio"], 10 / 3 * row["d_model"] / row["tokens_per_step"] * row["tp"])
        # the closed form's measured counterpart, from the two rows' own columns (what its figure draws)
        twin = regimes.loc[row["adamw_run"]]
        added = row["optimizer_ms"] - twin["optimizer_ms"]
        assert row["ns_time_ratio"] == pytest.approx(added / (twin["step_ms"] - twin["optimizer_ms"]))
    predictions = tables["predictions"]
    assert set(predictions["run"]) == set(f"{PROFILE}/{REGIMES_GROUP}/{p.name}" for p in regime_points(quick=True))
    assert all(set(tables[name]["profile"]) == {PROFILE} for name in ("predictions", "regimes", "regime_model"))
    assert not predictions["profiled"].any()  # timed without the profiler: priced without its cost
    assert (tables["regime_model"]["kind"] == "this_machine").all() and len(tables["regime_model"]) > 0


@pytest.mark.slow
def test_the_sweep_beside_traced_runs_lands_in_the_same_table_set(quick_sweep, tmp_path):
    """A traces folder with profiled runs and the sweep: analyze writes the trace tables and the regime tables as one set."""
    import shutil

    from muon_repro.stages import analyze

    traces = tmp_path / "traces"
    shutil.copytree(quick_sweep, traces)
    committed = trial_folders(REPO / "traces")["cpu-2c-gloo/comparison/adamw_dp2_tp2"][0]  # either layout
    shutil.copytree(committed, traces / "comparison" / "adamw_dp2_tp2" / "trial0")
    tables = analyze([traces], tmp_path / "metrics")
    assert list(tables["runs"]["run"]) == ["cpu-2c-gloo/comparison/adamw_dp2_tp2"]  # the sweep is no trace run
    assert len(tables["regimes"]) == len(regime_points(quick=True))
    written = pd.read_parquet(tmp_path / "metrics" / "regimes.parquet")
    assert len(written) == len(tables["regimes"])


def test_analyze_leaves_a_damaged_record_out_names_it_and_writes_the_rest(tmp_path, capsys):
    """A damaged cost-model record stopped the whole analysis (exit 2, nothing written); its help promises every
    unreadable file is reported without stopping."""
    import shutil

    from muon_repro.cli import main
    from muon_repro.tables.io import read_table

    committed = Path(__file__).resolve().parents[1] / "traces" / "cpu-2c-gloo"
    root = tmp_path / "traces" / "cpu-2c-gloo"
    shutil.copytree(committed / "comparison" / "adamw_dp2_tp2" / "trial1", root / "comparison" / "adamw_dp2_tp2" / "trial1")
    shutil.copytree(committed / COSTMODEL_DIR, root / COSTMODEL_DIR)
    damaged = root / COSTMODEL_DIR / PREDICTIONS_FILE
    damaged.write_bytes(b"\xff\xfe not a CSV \x00")
    assert main(["analyze", str(tmp_path / "traces"), "--out", str(tmp_path / "metrics"), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"error: {damaged}: not a readable predictions record" in err, err
    assert "left out of the predictions table" in err
    assert len(read_table(tmp_path / "metrics" / "predictions.parquet", check_set=False)) == 0
    assert len(read_table(tmp_path / "metrics" / "regime_thresholds.parquet", check_set=False)) > 0  # the rest written
    assert len(read_table(tmp_path / "metrics" / "runs.parquet", check_set=False)) == 1


# ---------------------------------------------------------------- the measured points' rounds

POINT = "regimes/{}_d128_t16384_dp2_tp2"


def copied_point(tmp_path: Path) -> tuple[Path, Path]:
    """The committed Muon point of 16,384 tokens at d128 and its AdamW twin (3 rounds each), copied."""
    folders = []
    for optimizer in ("muon", "adamw"):
        folder = tmp_path / "traces" / "cpu-2c-gloo" / POINT.format(optimizer)
        shutil.copytree(REPO / "traces" / "cpu-2c-gloo" / POINT.format(optimizer), folder)
        folders.append(folder)
    return folders[0], folders[1]


def muon_row(tmp_path: Path) -> pd.Series:
    regimes = costmodel_tables([tmp_path / "traces"])["regimes"].set_index("run")
    return regimes.loc[f"cpu-2c-gloo/{POINT.format('muon')}"]


def set_config(trial: Path, **fields) -> None:
    config = json.loads((trial / "config.json").read_text())
    (trial / "config.json").write_text(json.dumps(config | fields))


def test_a_muon_point_pairs_its_twins_rounds_by_number_not_by_position(tmp_path):
    """With AdamW's round 1 gone, Muon's round 1 has no pair: paired by position it met AdamW's round 2."""
    muon, adamw = copied_point(tmp_path / "a")
    shutil.rmtree(adamw / "trial1")
    gap = muon_row(tmp_path / "a")
    muon, adamw = copied_point(tmp_path / "b")
    shutil.rmtree(adamw / "trial1")
    shutil.rmtree(muon / "trial1")
    both_without = muon_row(tmp_path / "b")
    assert gap["muon_extra"] == pytest.approx(both_without["muon_extra"], rel=1e-12)
    assert gap["muon_extra_lo"] == pytest.approx(both_without["muon_extra_lo"], rel=1e-12)


def test_a_round_recorded_by_another_sweep_is_no_pair(tmp_path):
    muon, adamw = copied_point(tmp_path / "a")
    for trial in range(3):
        set_config(muon / f"trial{trial}", sweep="s1")
        set_config(adamw / f"trial{trial}", sweep="s1" if trial != 1 else "s2")  # round 1 re-recorded alone
    apart = muon_row(tmp_path / "a")
    muon, adamw = copied_point(tmp_path / "b")
    for folder in (muon, adamw):
        shutil.rmtree(folder / "trial1")
    assert apart["muon_extra"] == pytest.approx(muon_row(tmp_path / "b")["muon_extra"], rel=1e-12)


def test_a_round_recorded_with_another_configuration_is_left_out_of_the_point(tmp_path):
    muon, _ = copied_point(tmp_path)
    set_config(muon / "trial2", tokens_per_step=8192)  # another point's round, filed under this one
    row = muon_row(tmp_path)
    assert row["trials"] == 2


def test_the_share_summary_judges_the_model_on_muons_points_only():
    """An AdamW point's share is no point of the regime map: with it, the worst error was an AdamW run's 70%."""
    from muon_repro.report.regimes_section import share_summary

    regimes = pd.DataFrame(
        {
            "run": ["p/regimes/muon_a", "p/regimes/adamw_a"],
            "optimizer": ["muon", "adamw"],
            "optimizer_share": [0.10, 0.02],
            "predicted_optimizer_share": [0.11, 0.034],
        }
    )
    assert share_summary(regimes) == (
        " Muon's optimizer share of the step, the regime map's quantity: median |error| 10.0% over the 1 Muon sweep "
        "point (worst 10%, p/regimes/muon_a)."
    )


# ---------------------------------------------------------------- the records, written


def test_records_on_another_kind_of_device_are_refused_and_the_old_ones_kept(tmp_path):
    """An H100 profile prices no CPU run: written, its empty predictions would replace the profile's, and its lines
    would be filed as this machine's."""
    from muon_repro.costmodel.machine import resolve_profile
    from muon_repro.costmodel.records import write_records

    copied_point(tmp_path)
    record = tmp_path / "traces" / "cpu-2c-gloo" / COSTMODEL_DIR / PREDICTIONS_FILE
    record.parent.mkdir(parents=True)
    record.write_text("profile,run\ncpu-2c-gloo,cpu-2c-gloo/regimes/x\n")
    with pytest.raises(ValueError, match=r"no run of profile cpu-2c-gloo .* machine 'h100-8x-nvlink' \(cuda\) prices"):
        write_records(tmp_path / "traces", resolve_profile("h100-8x-nvlink"), profile="cpu-2c-gloo", log=lambda line: None)
    assert record.read_text() == "profile,run\ncpu-2c-gloo,cpu-2c-gloo/regimes/x\n"
    assert sorted(p.name for p in record.parent.iterdir()) == [PREDICTIONS_FILE]


def test_quick_records_are_a_set_of_their_own(tmp_path):
    """A quick run prices no pipeline scale-out: an older one left beside its records would mix two runs' sets."""
    from muon_repro.costmodel.machine import resolve_profile
    from muon_repro.costmodel.records import write_records
    from muon_repro.rundir import PIPELINE_SCALE_OUT_FILE

    copied_point(tmp_path)
    folder = tmp_path / "traces" / "cpu-2c-gloo" / COSTMODEL_DIR
    folder.mkdir(parents=True)
    (folder / PIPELINE_SCALE_OUT_FILE).write_text("profile\ncpu-2c-gloo\n")
    machine = resolve_profile(str(REPO / "traces" / "cpu-2c-gloo" / COSTMODEL_DIR / "machine.json"))
    written = write_records(tmp_path / "traces", machine, profile="cpu-2c-gloo", quick=True, log=lambda line: None)
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in written)
    assert PIPELINE_SCALE_OUT_FILE not in {p.name for p in written}


def test_a_renamed_round_keeps_its_steps(tmp_path):
    """Renamed trial7, its config.json still saying trial 1: keyed by config.json it would overwrite round 1."""
    _, adamw = copied_point(tmp_path)
    shutil.copytree(adamw / "trial1", adamw / "trial7")
    regimes = costmodel_tables([tmp_path / "traces"])["regimes"].set_index("run")
    adamw_row, muon_row = (regimes.loc[f"cpu-2c-gloo/{POINT.format(opt)}"] for opt in ("adamw", "muon"))
    assert adamw_row["trials"] == 4 and adamw_row["steps"] == 4 * muon_row["steps"] / 3  # every round's steps kept
