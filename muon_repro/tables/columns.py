"""The columns more than one family of tables declares alike (:mod:`muon_repro.tables.schemas` and the modules it
gathers): the hardware profile a row was recorded on."""

from __future__ import annotations

PROFILE_MEANING = (
    "hardware profile the row was recorded on (muon_repro.hardware): environment.json's 'profile', else derived "
    "from its accelerators, nodes, interconnect and backend (cpu-2c-gloo, 8xH100-nvlink-nccl); 'unknown' without one"
)
PROFILE = ("profile", "string", "", PROFILE_MEANING)
