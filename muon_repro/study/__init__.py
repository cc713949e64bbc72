"""The original study's own runs: its published 4-GPU traces brought into the dataset (``muon-repro
study import``), read per step, its numbers rebuilt by its own method, and its claims judged on the runs
they were made on; and its protocol replayed here (``muon-repro bench --protocol study``; torch).

    sources   the study's files: where each came from, its sha256 as published, the license; ``import_study``
    scopes    one trace of the study's ``record_function`` scopes -> per-step, per-scope rows and collectives
    method    the study's own method (``performance_comparison.py``), rebuilt from its description
    tables    the study tables (``study_runs``, ``study_steps``, ``study_collectives``, ``study_method``)
    claims    the claims table's rows on the study's profile, and each claimed number on every set of runs
    protocol  its experiment replayed here, and an equal-work twin (torch)
    record    recording those, locally or under torchrun (torch)

All but ``protocol`` and ``record`` are torch-free, like the rest of the analysis.
"""
