"""The cost model's commands at their limits: ``calibrate`` stops cleanly on Ctrl-C (one line, exit 130, the profile
it had kept), and ``predict --validate`` never pools trials of different configurations (tests/test_costmodel_limits.py
holds the profile ranges, the bounded simulation and the size-curve notes)."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from muon_repro.cli import main
from muon_repro.costmodel.machine import read_profile
from muon_repro.costmodel.machine_profile import ProfileError
from muon_repro.costmodel.validate import validate
from muon_repro.parallel.launch import LaunchInterrupted

REPO = Path(__file__).resolve().parents[1]
CPU_MACHINE = REPO / "traces" / "cpu-2c-gloo" / "costmodel" / "machine.json"
RUN = REPO / "traces" / "cpu-2c-gloo" / "comparison" / "muon_dp2_tp2"  # timed-only trials 1.. are small


# ---------------------------------------------------------------- 5. calibrate and Ctrl-C


@pytest.mark.parametrize(
    ("interrupt", "code"),
    [(LaunchInterrupted(signal.SIGINT), 130), (LaunchInterrupted(signal.SIGTERM), 143), (KeyboardInterrupt(), 130)],
)
def test_calibrate_interrupted_says_one_line_and_keeps_the_profile_it_had(tmp_path, monkeypatch, capsys, interrupt, code):
    def interrupted(*args, **kwargs):
        raise interrupt

    monkeypatch.setattr("muon_repro.costmodel.calibrate.calibrate", interrupted)
    monkeypatch.setattr("muon_repro.costmodel.cli._warn_if_busy", lambda out: None)  # a busy test machine's warning
    out = tmp_path / "machine.json"
    out.write_text("{}")
    assert main(["calibrate", "--out", str(out)]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("muon-repro calibrate: interrupted;") and f"{out} is left as it was" in err[0]
    assert out.read_text() == "{}"
    assert main(["calibrate", "--out", str(tmp_path / "new.json")]) == code
    assert "nothing was written" in capsys.readouterr().err and not (tmp_path / "new.json").exists()


def test_calibrate_interrupted_while_writing_keeps_the_profile_and_its_table_as_they_were(tmp_path, monkeypatch, capsys):
    """machine.json was written, then its calibration table: a Ctrl-C between the two left a new profile beside the
    old table. They are one set now."""
    from support.costmodel_profiles import two_core_profile

    from muon_repro.costmodel.machine import profile_from_dict

    row = {"machine": "new", "device": "cpu", "kind": "kernel", "kernel": "matmul", "dtype": "fp32", "seconds": 1.0}
    monkeypatch.setattr(
        "muon_repro.costmodel.calibrate.calibrate", lambda *a, **k: (profile_from_dict(two_core_profile()), [row])
    )
    monkeypatch.setattr("muon_repro.costmodel.cli._warn_if_busy", lambda out: None)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("muon_repro.tables.io._write_parquet", interrupted)
    out = tmp_path / "machine.json"
    out.write_text("{}")
    assert main(["calibrate", "--out", str(out)]) == 130
    assert f"{out} is left as it was" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["machine.json"] and out.read_text() == "{}"


def test_regimes_stops_when_its_calibration_is_interrupted(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise LaunchInterrupted(signal.SIGINT)

    monkeypatch.setattr("muon_repro.costmodel.calibrate.calibrate", interrupted)
    (tmp_path / "traces" / "cpu-test" / "regimes" / "point").mkdir(parents=True)  # a run to price
    assert main(["regimes", "--out", str(tmp_path / "traces"), "--records-only", "--profile", "cpu-test"]) == 130
    assert "muon-repro calibrate: interrupted" in capsys.readouterr().err


# ---------------------------------------------------------------- 6. --validate never pools unlike trials


def _two_trials(tmp_path: Path, change: dict) -> Path:
    """Trials 1 and 2 of a committed run under a fresh traces folder, ``change`` written into trial 2's config."""
    traces = tmp_path / "traces"
    for trial in ("trial1", "trial2"):
        shutil.copytree(RUN / trial, traces / "comparison" / "muon_dp2_tp2" / trial)
    config = traces / "comparison" / "muon_dp2_tp2" / "trial2" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **change}))
    return traces


def test_trials_of_different_configurations_are_split_and_named(tmp_path):
    traces = _two_trials(tmp_path, {"gather_dtype": "fp32"})
    warnings: list[str] = []
    rows = validate(traces, read_profile(CPU_MACHINE), warn=warnings.append)
    assert sorted(r["run"] for r in rows) == [
        "cpu-2c-gloo/comparison/muon_dp2_tp2@trial1",
        "cpu-2c-gloo/comparison/muon_dp2_tp2@trial2",
    ]
    assert all(r["trials"] == 1 for r in rows)
    assert len(warnings) == 1 and "trial1: gather_dtype='bf16'" in warnings[0] and "trial2: gather_dtype='fp32'" in warnings[0]


def test_trials_that_differ_only_where_times_do_not_pool(tmp_path):
    traces = _two_trials(tmp_path, {"lr": 0.02, "seed": 3, "profile": True, "active": 2})
    warnings: list[str] = []
    rows = validate(traces, read_profile(CPU_MACHINE), warn=warnings.append)
    assert [(r["run"], r["trials"]) for r in rows] == [("cpu-2c-gloo/comparison/muon_dp2_tp2", 2)] and not warnings


def test_predict_validate_warns_on_stderr_and_still_prints_every_row(tmp_path, capsys):
    traces = _two_trials(tmp_path, {"tokens_per_step": 2048})
    assert main(["predict", "--machine", str(CPU_MACHINE), "--validate", str(traces)]) == 0
    captured = capsys.readouterr()
    assert "warning: cpu-2c-gloo/comparison/muon_dp2_tp2: its trials were recorded with different configurations" in captured.err
    assert "tokens_per_step=1024" in captured.err and "tokens_per_step=2048" in captured.err
    assert "muon_dp2_tp2@trial1" in captured.out and "muon_dp2_tp2@trial2" in captured.out


def test_a_days_speed_outside_its_range_names_the_run(tmp_path):
    traces = _two_trials(tmp_path, {})
    environment = traces / "comparison" / "muon_dp2_tp2" / "trial1" / "environment.json"
    env = json.loads(environment.read_text())
    env["speed_probe"]["matmul_gflops"] *= 1e-6  # a probe a million times slower than the calibration's
    environment.write_text(json.dumps(env))
    more = traces / "comparison" / "muon_dp2_tp2" / "trial2" / "environment.json"
    more.write_text(json.dumps({**json.loads(more.read_text()), "speed_probe": env["speed_probe"]}))
    with pytest.raises(ProfileError, match=r"run cpu-2c-gloo/comparison/muon_dp2_tp2: .*day_speed must be a number in"):
        validate(traces, read_profile(CPU_MACHINE))
    assert validate(traces, read_profile(CPU_MACHINE), own_calibration=False)  # as calibrated, it still prices
