"""The columns more than one family of tables declares alike (:mod:`muon_repro.tables.schemas` and the modules it
gathers): the hardware profile a row was recorded on, and the keys that name a run, a trial of it and a rank."""

from __future__ import annotations

PROFILE_MEANING = (
    "hardware profile the row was recorded on (muon_repro.hardware): environment.json's 'profile', else derived "
    "from its accelerators, nodes, interconnect and backend (cpu-2c-gloo, 8xH100-nvlink-nccl); 'unknown' without one"
)
PROFILE = ("profile", "string", "", PROFILE_MEANING)

RUN_ID = (
    ("run", "string", "", "run id: '<profile>/<group>/<name>' (the run directory under traces/)"),
    PROFILE,
    ("group", "string", "", "run group (config.json 'group', else the parent directory's name)"),
    ("name", "string", "", "run name (config.json 'name', else the directory's name)"),
)
TRIAL = ("trial", "Int64", "", "which recording of the configuration (runs are recorded in interleaved trials), from 0")
TRIAL_ID = (*RUN_ID, TRIAL)
RANK_ID = (*TRIAL_ID, ("rank", "Int64", "rank", "global rank"))
