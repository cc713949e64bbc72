"""Convergence on real text: Muon vs AdamW learning curves over a learning-rate sweep.

``corpus`` (text, torch-free), ``tokenize`` (byte-level BPE), ``config`` (the run's plain data and
its schedule, torch-free), ``train`` (one run on one rank: torch), ``sweep`` (plan, resume, pick
the best learning rates, launch), ``cli`` (``muon-repro converge``). What a run writes is
:mod:`muon_repro.rundir`'s ``convergence.json``; the analysis reads only that.
"""
