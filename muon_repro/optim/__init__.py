"""Muon and AdamW: single-device references and ZeRO-1 x TP distributed versions."""

from muon_repro.optim.adamw import AdamW
from muon_repro.optim.distributed import DistributedAdamW, DistributedMuon
from muon_repro.optim.layout import LAYOUTS, ShardPlan
from muon_repro.optim.muon import Muon
from muon_repro.optim.newton_schulz import (
    newton_schulz_flops,
    zeropower_via_newtonschulz5,
)
from muon_repro.optim.param_groups import muon_param_groups, split_muon_params

__all__ = [
    "LAYOUTS",
    "AdamW",
    "DistributedAdamW",
    "DistributedMuon",
    "Muon",
    "ShardPlan",
    "muon_param_groups",
    "newton_schulz_flops",
    "split_muon_params",
    "zeropower_via_newtonschulz5",
]
