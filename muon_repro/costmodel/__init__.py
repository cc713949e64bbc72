"""A calibrated cost model of one training step: ``muon-repro calibrate`` and ``muon-repro predict``.

Modules, one job each::

    machine     the machine profile: rates per rank, alpha-beta fits per collective; JSON in and out, validated
    calibrate   microbenchmarks of this machine -> a profile and the ``calibration`` table
    workload    a run's shape -> every rank's program for one step (FLOPs, bytes, calls, collectives)
    predict     a workload on a profile -> per-rank step time, its parts, transfer and wait
    validate    every recorded run under a traces folder -> the ``predictions`` table
    tables      the two tables' schemas and their writer
    cli         ``register(subparsers)`` for the two commands

Shipped profiles (``profiles/*.json``) price hardware we do not have, from published figures.
Importing this package is cheap (no torch).
"""
