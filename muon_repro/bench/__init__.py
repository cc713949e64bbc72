"""Benchmark driver: named configurations -> profiler traces and metrics per run."""
