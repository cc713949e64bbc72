"""A run's side file that is there but unreadable is not read as absent (a foreign folder's are): its trial is left out
of the analysis, named with the file and why, and the other runs are analyzed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from muon_repro.analysis.batch_read import analyze_paths
from muon_repro.analysis.discover import run_info_for, timed_only_trials
from muon_repro.analysis.errors import TraceWarning
from muon_repro.rundir import SideFileError

COMPARISON = Path(__file__).resolve().parents[1] / "traces" / "cpu-2c-gloo" / "comparison"


def _trial(root, *, traced: bool):
    folder = root / "cpu-2c-gloo" / "comparison" / "muon_dp2_tp2" / "trial0"
    folder.mkdir(parents=True)
    if traced:
        (folder / "rank0.json").write_text(json.dumps({"traceEvents": []}))
    return folder


@pytest.mark.parametrize("name", ["config.json", "environment.json", "metrics.json"])
def test_an_unreadable_side_file_is_refused_by_name(tmp_path, name):
    folder = _trial(tmp_path, traced=True)
    (folder / name).write_text('{"dp": 2,')
    with pytest.raises(SideFileError, match=rf"{name}: not valid JSON"):
        run_info_for(folder)


@pytest.mark.parametrize(
    ("present", "named"),
    [(["environment.json"], "environment.json"), (["environment.json", "metrics.json"], "environment.json and metrics.json")],
)
def test_a_recorded_trial_without_its_config_is_refused_not_read_as_a_foreign_folder(tmp_path, present, named):
    """A foreign folder has no side file; one with environment.json or metrics.json was recorded here, and without
    its config.json its run's optimizer and grid would be unknown under a recorded run's name."""
    folder = _trial(tmp_path, traced=True)
    for name in present:
        (folder / name).write_text("{}")
    with pytest.raises(SideFileError, match=rf"config.json: missing beside its {named} \(a recorded trial holds"):
        run_info_for(folder)


def test_a_readable_or_absent_side_file_says_nothing(tmp_path, recwarn):
    folder = _trial(tmp_path, traced=True)
    (folder / "config.json").write_text(json.dumps({"optimizer": "muon", "dp": 2, "tp": 2}))
    info = run_info_for(folder)
    assert info.config.optimizer == "muon"
    assert not [w for w in recwarn if issubclass(w.category, TraceWarning)]


def test_an_untraced_trial_with_an_unreadable_config_is_found_to_be_refused(tmp_path):
    """Its config cannot say it was a timed-only round, so it is found by being untraced, and refused where read."""
    folder = _trial(tmp_path, traced=False)
    (folder / "config.json").write_text('{"profile": false, "timed_steps": 8')
    assert [trial.path for trial in timed_only_trials([tmp_path])] == [folder]


def test_analyze_leaves_out_the_trials_it_cannot_read_and_analyzes_the_rest(tmp_path, recwarn):
    shutil.copytree(COMPARISON, tmp_path / "comparison")
    muon, adamw = tmp_path / "comparison" / "muon_dp2_tp2", tmp_path / "comparison" / "adamw_dp2_tp2"
    for path in (adamw / "trial0" / "metrics.json", muon / "trial3" / "environment.json"):
        path.write_text(path.read_text()[:100])  # truncated: a traced trial's metrics, a timed-only trial's environment

    analysis = analyze_paths([tmp_path], workers=1)
    left_out = {str(Path(p.path).relative_to(tmp_path)): p.message for p in analysis.failures}  # errors, traced or not
    assert sorted(left_out) == ["comparison/adamw_dp2_tp2/trial0", "comparison/muon_dp2_tp2/trial3"]
    assert left_out["comparison/adamw_dp2_tp2/trial0"].startswith(f"{adamw / 'trial0' / 'metrics.json'}: not valid JSON")
    assert "environment.json: not valid JSON" in left_out["comparison/muon_dp2_tp2/trial3"]
    assert all("the trial is left out" in message for message in left_out.values())
    said = {Path(p.path).name: p.message for p in analysis.incomplete}
    # AdamW's timed-only rounds have no traced trial left: one line says why, naming it
    assert "9 trials of run cpu-2c-gloo/comparison/adamw_dp2_tp2" in said["adamw_dp2_tp2"]
    assert "its traced trial trial0 was left out" in said["adamw_dp2_tp2"]
    # Muon's run is analyzed from its readable trials: its traced round and 8 of its 9 timed-only rounds
    assert [info.name for info, _ in analysis.runs] == ["muon_dp2_tp2"] * len(analysis.runs) and analysis.runs
    assert sorted(info.trial for info in analysis.timed_only) == [1, 2, 4, 5, 6, 7, 8, 9]
    assert not [w for w in recwarn if issubclass(w.category, TraceWarning) and "not valid JSON" in str(w.message)]


def test_each_side_file_is_parsed_once_until_the_folder_is_written(tmp_path, monkeypatch):
    import muon_repro.rundir as rundir

    folder = _trial(tmp_path, traced=True)
    (folder / "config.json").write_text(json.dumps({"optimizer": "muon", "dp": 2, "tp": 2}))
    (folder / "environment.json").write_text("[1, 2]")
    parsed = []
    real_load = rundir.load_json
    monkeypatch.setattr(rundir, "load_json", lambda path: parsed.append(path.name) or real_load(path))
    run_dir = rundir.RunDir(folder)
    for _ in range(3):
        assert run_dir.config.optimizer == "muon" and run_dir.environment == {} and run_dir.ranks == []
    assert sorted(parsed) == ["config.json", "environment.json", "metrics.json"]
    assert set(run_dir.unreadable_side_files()) == {"environment.json"}  # metrics.json is absent, not unreadable
    assert len(parsed) == 3
    run_dir.write({"optimizer": "adamw"}, {}, [], "")
    assert run_dir.config.optimizer == "adamw" and run_dir.unreadable_side_files() == {}
