"""One tiny recorded sweep per test run, shared by every test file that reads a freshly recorded run.

Recorded once (gloo, 4 ranks, one trial each) under the session's shared temporary folder, behind a file
lock so that pytest-xdist's workers wait for the first one instead of recording their own. Tests read it
through :func:`copy_of`, so that no test can change what another one reads.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from filelock import FileLock

# bucketed: every phase occurs (dp_gather included); the comparison pair: AdamW against Muon on equal work
CONFIGS = ("layout_ablation/muon_dp2_tp2_bucketed", "comparison/adamw_dp2_tp2", "comparison/muon_dp2_tp2")


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every xdist worker of this run sees (the base temp folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def record_once(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Config key -> its trial folder in the shared sweep, recording the sweep if no worker has yet."""
    root = shared_root(tmp_path_factory) / "tiny_sweep"
    done = root / "trials.json"
    with FileLock(str(root) + ".lock"):
        if not done.is_file():
            from muon_repro.bench.configs import resolve
            from muon_repro.bench.sweep import record_local

            shutil.rmtree(root, ignore_errors=True)
            results = record_local([resolve(k, "tiny") for k in CONFIGS], root / "traces", "gloo", trials=1, progress=False)
            trials = {r.key: str(Path(r.run_dir).relative_to(root)) for r in results}
            done.write_text(json.dumps(trials))
    return {key: root / rel for key, rel in json.loads(done.read_text()).items()}


def copy_of(trial: Path, out: Path) -> Path:
    """A copy of a shared trial folder at the same place below ``out`` (``<profile>/<group>/<name>/trial0``)."""
    target = out / trial.relative_to(trial.parents[3])
    shutil.copytree(trial, target)
    return target
