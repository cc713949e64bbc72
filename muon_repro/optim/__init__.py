"""Muon and AdamW: ``zeropower_via_newtonschulz5``, the single-device references (``Muon``, Moonlight's
update, and ``AdamW``), ``muon_param_groups``, the distributed ``DistributedMuon`` / ``DistributedAdamW``
(ZeRO-1 over DP, with TP) and the analytic ``comm_model``.

The names below are imported on first use, so that ``muon_repro.optim.equivalence_cli`` (the
``muon-repro equivalence`` parser) can be imported by the CLI without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AdamW": "muon_repro.optim.adamw",
    "DistributedAdamW": "muon_repro.optim.distributed",
    "DistributedMuon": "muon_repro.optim.distributed",
    "LAYOUTS": "muon_repro.optim.layout",
    "ShardPlan": "muon_repro.optim.layout",
    "Muon": "muon_repro.optim.muon",
    "zeropower_via_newtonschulz5": "muon_repro.optim.newton_schulz",
    "muon_param_groups": "muon_repro.optim.param_groups",
    "split_muon_params": "muon_repro.optim.param_groups",
}

__all__ = sorted(_LAZY)  # noqa: PLE0605 - the lazily imported names


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
