"""The overlap variants of Distributed Muon's gathers (none, naive_async, pipelined) compute the
same bits on a 2x2 gloo grid, for every layout; only when the bytes move differs."""

from __future__ import annotations

import optim_workers
import pytest
import torch

from muon_repro.parallel.launch import launch
from muon_repro.phases import OVERLAPS

LAYOUT_CASES = [("contiguous", None), ("whole_matrix", None), ("bucketed", 2048)]  # bucketed: several NS units to pipeline


@pytest.fixture(scope="module", params=LAYOUT_CASES, ids=[c[0] for c in LAYOUT_CASES])
def runs(request) -> list[dict]:
    runs = launch(optim_workers.train_every_overlap, 4, *request.param)
    if request.param[0] == "bucketed":  # the pipelined schedule reaches its steady state (k+1 TP, k+2 DP in flight)
        assert runs[0]["units"] >= 3, runs[0]["units"]
    return runs


@pytest.mark.slow
def test_every_overlap_gives_bit_identical_parameters(runs):
    for rank, run in enumerate(runs):
        reference = run["params"]["none"]
        for overlap in OVERLAPS[1:]:
            for name, value in run["params"][overlap].items():
                assert torch.equal(value, reference[name]), (rank, overlap, name)


@pytest.mark.slow
def test_every_overlap_moves_the_same_gathers(runs):
    for run in runs:
        assert run["gathers"]["none"], "the grid gathers something"
        for overlap in OVERLAPS[1:]:
            assert run["gathers"][overlap] == run["gathers"]["none"], overlap


def test_unknown_overlap_is_rejected():
    from muon_repro.optim.distributed import DistributedMuon

    with pytest.raises(ValueError, match="unknown overlap 'async'; choose one of none, naive_async, pipelined"):
        DistributedMuon([torch.nn.Parameter(torch.zeros(2, 2))], dims=None, overlap="async")  # type: ignore[arg-type]
