"""Development tools, run from a checkout (``python -m tools.<name>``); not part of the wheel.

analysis_benchmark  ``muon-repro analyze`` against HolisticTraceAnalysis on one large trace
download_benchmark  the Hub downloads of ``review`` and ``contribute``, 1 worker against 8
contrib_fuzz        hostile pull requests and runs folders: review and contribute refuse them cleanly
cli_fuzz            the whole command line at hostile folders, hardware descriptions, ranks, names, links, tables
fuzz_traces         mutated traces: the analysis ends cleanly or with a clear refusal
study_hta_check     the original study's traces: our per-step NCCL time against HolisticTraceAnalysis's (2%)
paired_versions     two versions of the package on the same benchmark runs, in paired rounds: is the new one slower?
gram_ns_bench       Gram Newton-Schulz (its PyPI package) beside ours at the 369M and 7B shapes, on one GPU
                    (``python tools/gram_ns_bench.py``; a stage of gpu_session.sh)
gpu_session.sh      one GPU session's stages, packed for the trip back (``bash tools/gpu_session.sh OUT [--dry-run]
                    [--only STAGES]``)
gpu_wheels.sh       Gram Newton-Schulz's wheels for the device's Python, fetched into .whl/ for a device call to carry
device_tree         the dataset's artifacts held beside the checkout while a device call sends it (at most 64 MiB)
gpu_ingest          a GPU session's results (one call's or several's) into traces/ and docs/gpu.md, checked whole first

Their shared parts, not run alone: bench_process and bench_trace (the benchmarks' child processes and large
trace), cli_cases and contrib_cases (the fuzzers' cases), forked (one command per forked child, under limits).
"""
