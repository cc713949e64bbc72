"""Made-up ``convergence.json`` records, as ``muon-repro converge`` writes them, for the convergence analysis's tests."""

from __future__ import annotations

import json
from pathlib import Path

from muon_repro.converge.config import ConvergeConfig
from muon_repro.rundir import CONVERGENCE_FILE, CONVERGENCE_GROUP


def write_record(
    root: Path,
    opt: str,
    lr: float,
    seed: int,
    train: list[float],
    final_val: float,
    *,
    final_test: float | None = None,
    gflop: float = 1.0,
    step_ms: list[float] | None = None,
    group: str = CONVERGENCE_GROUP,
    params: int = 1000,
    **cfg_fields,
) -> None:
    """A run's record under ``root/group/<its name>/`` with the training-loss curve ``train`` (steps 1..len(train)),
    evaluations before training (step 0, loss 6) and at the last step (``final_val``; test loss ``final_test``, else
    0.1 above it), ``gflop`` per step (all of it above 1 GFLOP Newton-Schulz's) and ``step_ms`` (10 ms a step unless
    given). ``cfg_fields``: the run's other config fields."""
    from muon_repro.converge.sweep import FORMAT_VERSION

    steps = len(train)
    cfg = ConvergeConfig(opt, lr, seed=seed, steps=steps, eval_every=steps, **cfg_fields)
    folder = root / group / cfg.name
    folder.mkdir(parents=True)
    record = {
        "format": FORMAT_VERSION,
        "name": cfg.name,
        "config": cfg.to_dict(),
        "backend": "gloo",
        "wall_s": 1.0,
        "environment": {"cpu_count": 2},  # cpu-2c-gloo
        "model": {"params": params, "embedding_share": 0.25, "vocab_size": 64},
        "corpus": {"name": "test", "version": "1", "license": "none", "sha256": "0" * 64},
        "flops_per_step": {"total": round(gflop * 1e9), "orthogonalization": round((gflop - 1.0) * 1e9)},
        "curve": {
            "step": list(range(1, steps + 1)),
            "train_loss": train,
            "lr": [lr] * steps,
            "step_ms": [10.0] * steps if step_ms is None else step_ms,
            "eval_step": [0, steps],
            "val_loss": [6.0, final_val],
            "test_loss": [6.0, final_val + 0.1 if final_test is None else final_test],
            "update_rms": [None, 0.2],
        },
    }
    (folder / CONVERGENCE_FILE).write_text(json.dumps(record))
