"""A calibrated cost model of one training step: ``calibrate`` (this machine's rates, ``muon-repro
calibrate``), ``predict`` (a run's per-rank step from FLOPs, bytes and rates, waits from the critical path;
``muon-repro predict``), the shipped machine profiles, and the records ``muon-repro regimes`` writes
(``records``); the regime sweep's points are :mod:`muon_repro.bench.regimes`.

Modules, one job each::

    machine_profile  the machine profile: rates per rank, alpha-beta fits per collective, validated as built
    profile_ranges   the plausible range of every profile figure, and the checks that refuse a value outside it
    machine          profiles as JSON files: decoded and validated, read, written, shipped ones found by name
    calibrate        one calibration of this machine -> a profile and the ``calibration`` table's rows, its summary
    measurement      what a calibration measures (its plan) and the timing statistics its benchmarks share
    compute_bench    the one-process kernel benchmarks: matmul, Newton-Schulz, attention, ..., the size curves
    world_bench      the multi-rank benchmarks: compute and bandwidth shares, arrival jitter, collective timings
    collective_fit   collective timings -> alpha-beta fits per collective and group size
    workload         a run's shape -> every rank's program for one step (FLOPs, bytes, calls, collectives)
    predict          a workload on a profile -> per-rank step time, its parts, transfer and wait
    pipeline_workload  a pipeline stage's workload (pp > 1): its blocks, embedding or head, its optimizer's plan
    pipeline         pp > 1: every stage simulated, the 1F1B schedule played over them, bubbles, the step
    pipeline_scale_out  the 7B model as TP8 x PP4 x DP on 32-1024 H100s (muon-repro predict --pipeline-scale-out)
    validate         every recorded run under a traces folder -> the ``predictions`` table
    records          what ``muon-repro regimes`` writes beside the runs (CSV records), and reads back
    cli              ``register(subparsers)`` for the two commands

The original study's own runs are priced on its machine's profile by :mod:`muon_repro.study.costmodel_check`.

Its two tables, ``calibration`` and ``predictions``, are declared with every other table in
:mod:`muon_repro.tables.schemas` and written through :func:`muon_repro.tables.io.write_table`.
Shipped profiles (``profiles/*.json``) price hardware we do not have, from published figures.
Importing this package is cheap (no torch).
"""
