"""map_in_processes: results in input order, from worker processes, errors as values."""

from __future__ import annotations

import os

import pytest
from pool_jobs import square_and_pid, unpicklable

from muon_repro.analysis.batch_read import map_in_processes


@pytest.mark.slow
def test_results_come_back_in_order_from_other_processes():
    out = map_in_processes(square_and_pid, [(x,) for x in range(5)], 2, on_error=lambda job, exc: None)
    assert [square for square, _ in out] == [0, 1, 4, 9, 16]
    assert all(pid != os.getpid() for _, pid in out)


def test_one_worker_runs_here():
    out = map_in_processes(square_and_pid, [(3,), (4,)], 1, on_error=lambda job, exc: None)
    assert out == [(9, os.getpid()), (16, os.getpid())]


@pytest.mark.slow
def test_a_result_that_cannot_come_back_is_reported_and_the_others_kept():
    def on_error(job, exc):
        return f"job {job}: {type(exc).__name__}"

    out = map_in_processes(unpicklable, [(1,), (2,)], 2, on_error=on_error)
    assert out[0].startswith("job (1,)") and out[1].startswith("job (2,)")
