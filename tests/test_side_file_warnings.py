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
