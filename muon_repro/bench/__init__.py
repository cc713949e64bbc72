"""Benchmark driver: named configurations (the regime sweep's points among them), the launcher, and one
run per rank, recording its profiler traces plus what only the run knows (analytic bytes, Newton-Schulz
FLOPs, shard plan) into a run folder."""
