"""A run's side file that is there but unreadable reads as absent, and the analysis says so by name."""

from __future__ import annotations

import json

import pytest

from muon_repro.analysis.discover import run_info_for, timed_only_folders
from muon_repro.analysis.errors import TraceWarning


def _trial(root, *, traced: bool):
    folder = root / "cpu-2c-gloo" / "comparison" / "muon_dp2_tp2" / "trial0"
    folder.mkdir(parents=True)
    if traced:
        (folder / "rank0.json").write_text(json.dumps({"traceEvents": []}))
    return folder


@pytest.mark.parametrize("name", ["config.json", "environment.json", "metrics.json"])
def test_an_unreadable_side_file_is_warned_about_by_name(tmp_path, name):
    folder = _trial(tmp_path, traced=True)
    (folder / name).write_text('{"dp": 2,')
    with pytest.warns(TraceWarning, match=rf"{name}: not valid JSON.*read as if it had no {name}"):
        run_info_for(folder)


def test_a_readable_or_absent_side_file_says_nothing(tmp_path, recwarn):
    folder = _trial(tmp_path, traced=True)
    (folder / "config.json").write_text(json.dumps({"optimizer": "muon", "dp": 2, "tp": 2}))
    info = run_info_for(folder)
    assert info.config.optimizer == "muon"
    assert not [w for w in recwarn if issubclass(w.category, TraceWarning)]


def test_a_timed_only_trial_with_an_unreadable_config_is_warned_about(tmp_path):
    folder = _trial(tmp_path, traced=False)
    (folder / "config.json").write_text('{"profile": false, "timed_steps": 8')
    with pytest.warns(TraceWarning, match="config.json: not valid JSON"):
        assert timed_only_folders([tmp_path]) == []


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
