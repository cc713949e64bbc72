"""One tiny recorded sweep per test run, shared by every test file that reads a freshly recorded run.

Recorded once (gloo, 4 ranks, one trial each) under the session's shared temporary folder, behind a file
lock so that pytest-xdist's workers wait for the first one instead of recording their own. Tests read it
through :func:`copy_of`, so that no test can change what another one reads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from run_once import build_once, shared_root

# bucketed: every phase occurs (dp_gather included); the comparison pair: AdamW against Muon on equal work
CONFIGS = ("layout_ablation/muon_dp2_tp2_bucketed", "comparison/adamw_dp2_tp2", "comparison/muon_dp2_tp2")


def record_once(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Config key -> its trial folder in the shared sweep, recording the sweep if no worker has yet."""
    root = shared_root(tmp_path_factory) / "tiny_sweep"

    def record(folder: Path) -> str:
        from muon_repro.bench.configs import resolve
        from muon_repro.bench.sweep import record_local

        results = record_local([resolve(k, "tiny") for k in CONFIGS], folder / "traces", "gloo", trials=1, progress=False)
        return json.dumps({r.key: str(Path(r.run_dir).relative_to(folder)) for r in results})

    trials = json.loads(build_once(root, record, done="trials.json"))
    return {key: root / rel for key, rel in trials.items()}


def copy_of(trial: Path, out: Path) -> Path:
    """A copy of a shared trial folder at the same place below ``out`` (``<profile>/<group>/<name>/trial0``)."""
    target = out / trial.relative_to(trial.parents[3])
    shutil.copytree(trial, target)
    return target
