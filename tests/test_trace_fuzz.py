"""Mutated real traces never hang the reader and never give a silently wrong number.

Every case (tests/trace_mutations.py: a source trace, a seed, one to three mutations) must end
in one of two ways, in time proportional to the file's size (trace_mutations.time_limit): a
clean analysis whose numbers hold together (trace_mutations.check_outcome: finite times,
fractions in [0, 1], every part of a step within it, the window identity, distinct steps,
warnings naming the file), or a ``TraceError`` naming the file.

Sources: the small real traces under tests/data/, a trace recorded here with the PyTorch
profiler (a gloo group of one, so that it holds c10d collectives), and a synthetic GPU trace
with NCCL kernels. ``python -m tools.fuzz_traces --cases N`` runs many more.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import trace_mutations as tm

CASES_PER_SOURCE = 100


def _record_gloo_trace(out: Path) -> Path:
    """Three profiled steps of a tiny model on a gloo group of one, with our phase labels."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = torch.nn.Linear(32, 32)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        path = out / "rank0.json"
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=1, active=3),
            record_shapes=True,
            profile_memory=True,
            on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
        ) as prof:
            for _ in range(4):
                with record_function("## forward ##"):
                    loss = model(torch.randn(8, 32)).square().mean()
                with record_function("## backward ##"):
                    loss.backward()
                with record_function("dp_all_reduce"):
                    dist.all_reduce(model.weight.grad)
                with record_function("## optimizer ##"):
                    opt.step()
                    opt.zero_grad()
                prof.step()
    finally:
        if created:
            dist.destroy_process_group()
    return path


@pytest.fixture(scope="module")
def light_sources() -> dict[str, dict | list]:
    """The sources that need no profiling run: tests/data's traces and the synthetic one."""
    found = {p.name: tm.load_document(p) for p in tm.DATA_TRACES}
    found["synthetic_gpu"] = tm.synthetic_trace()
    return found


@pytest.fixture(scope="module")
def sources(light_sources, tmp_path_factory) -> dict[str, dict | list]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the profiler's notes on its own cycles
        recorded = _record_gloo_trace(tmp_path_factory.mktemp("sources"))
    return {**light_sources, "recorded_gloo": tm.load_document(recorded)}


@pytest.mark.slow
def test_every_source_is_analyzed_cleanly_as_it_is(sources, tmp_path):
    assert len(sources) >= 3, sorted(sources)
    for name, doc in sources.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        outcome = tm.check_outcome(path, name)
        assert (outcome.kind, outcome.message) == ("analyzed", ""), (name, outcome)
        assert outcome.steps >= 1


@pytest.mark.slow
def test_the_recorded_trace_has_steps_phases_and_collectives(sources, tmp_path):
    from muon_repro.analysis.breakdown import analyze_file

    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(sources["recorded_gloo"]))
    b = analyze_file(str(path))
    assert len(b.steps) == 3 and (b.steps["forward_ms"] > 0).all() and (b.steps["comm_calls"] > 0).all()


@pytest.mark.slow
def test_mutated_traces_are_analyzed_or_refused_in_bounded_time(sources, tmp_path):
    warm_up = tmp_path / "warm_up.json"  # imports and first-call costs are no part of any case
    warm_up.write_text(json.dumps(tm.synthetic_trace()))
    tm.check_outcome(warm_up)
    outcomes = []
    for case in tm.cases(sources, CASES_PER_SOURCE * len(sources)):
        path = tmp_path / f"{case.source}.{case.seed}{case.suffix}"
        path.write_bytes(case.data)
        outcomes.append(tm.check_outcome(path, case.describe()))
        path.unlink()
    kinds = [o.kind for o in outcomes]
    longest = max(o.seconds for o in outcomes)
    print(f"{len(outcomes)} cases: {kinds.count('analyzed')} analyzed, {kinds.count('refused')} refused; longest {longest:.3f} s")
    # the mutations are neither all harmless nor all fatal: both outcomes are exercised
    assert kinds.count("analyzed") > len(kinds) // 5 and kinds.count("refused") > len(kinds) // 20
    assert any(o.message for o in outcomes if o.kind == "analyzed")  # some repairs were warned about


def test_cases_are_reproducible_from_their_seed(light_sources):
    a, b = tm.cases(light_sources, 3, first_seed=40), tm.cases(light_sources, 3, first_seed=40)
    assert [c.data for c in a] == [c.data for c in b]
    assert len({c.data for c in a}) == 3


@pytest.mark.parametrize(("column", "value"), [("comm_frac", 1.5), ("idle_ms", np.nan), ("forward_ms", 1e9), ("step", 1)])
def test_the_checker_rejects_numbers_that_do_not_hold_together(tmp_path, column, value):
    from muon_repro.analysis.breakdown import analyze_file

    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(tm.synthetic_trace()))
    steps = analyze_file(str(path)).steps
    tm.check_steps(steps, "as analyzed")
    steps.loc[1, column] = value
    with pytest.raises(AssertionError, match="tampered"):
        tm.check_steps(steps, "tampered")
