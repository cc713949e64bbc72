"""Development tools, run from a checkout (``python -m tools.<name>``); not part of the wheel.

analysis_benchmark  ``muon-repro analyze`` against HolisticTraceAnalysis on one large trace
download_benchmark  the Hub downloads of ``review`` and ``contribute``, 1 worker against 8
contrib_fuzz        hostile pull requests and runs folders: review and contribute refuse them cleanly
cli_fuzz            the whole command line at hostile folders, hardware descriptions, ranks, names, links, tables
fuzz_traces         mutated traces: the analysis ends cleanly or with a clear refusal
study_hta_check     the original study's traces: our per-step NCCL time against HolisticTraceAnalysis's (2%)
"""
