"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of the coverage
study, the phase intervals of a trace and the decoding of a trace's pieces.

* muon_repro.analysis.coverage: the truths the simulated studies are judged against (0.57, +5%, 10%, the pipeline
  claim's ratio with a drift shared by the stages' idle times), ratio_unshared's noise, jitter on the log scale, the
  disturbed study's slowed round, the slowest rank the grid claims read, the fraction of studies counted, the
  table's columns and seed, the Markdown block's layout and the command line (its default of 1,000 studies, its
  refusal of 0, --seed, --write);
* muon_repro.analysis.timeline: a scope starting at its step's start or ending at its end, one before the first step,
  steps in any order, a step numbered below 0, a trace with fine phases only, the transfer lane (gloo:* calls, NCCL
  kernels of any case, never a CPU annotation; phase ``transfer``), the GPU lane (memcpy work, GPU work without a
  launch, phases listed out of order, the launch's step), empty spans' types, and align_ranks' clocks (aligned from
  the earliest rank's step start, end times too; unaligned, each rank's step from 0);
* muon_repro.analysis.decode: the fast and plain paths' defaults (no ``dur`` is 0, no ``ts`` is dropped and
  counted, ``I`` instants like ``i``), the plain path for unusual phases, the tolerant path's coercions (bools,
  floats and huge integers, missing fields, non-string names, UTF-8 and raw control characters), its notes (objects
  only, non-objects counted) and refusals (a top-level object, nesting too deep), and a file range read short.

Every expected value is derived by hand from the documented definitions (the modules' docstrings, docs/method.md's
"Coverage through the claims code", "Clock alignment across ranks" and the ``timeline`` table's schema)."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis import coverage as cov
from muon_repro.analysis.decode import (
    decode_file_range,
    decode_items_tolerant,
    decode_piece,
    decode_piece_fast,
    decode_piece_tolerant,
)
from muon_repro.analysis.piece_columns import (
    MEMORY_TS_DROPPED,
    NON_OBJECT_EVENTS,
    TOO_DEEP,
    TS_MISSING,
    TS_OUT_OF_RANGE,
)
from muon_repro.analysis.timeline import SPAN_COLUMNS, align_ranks, phase_spans
from muon_repro.phases import BACKWARD, FORWARD, NEWTON_SCHULZ, OPTIMIZER, UPDATE

# ---------------------------------------------------------------- coverage: the simulated studies

# a drift per round (shared by both runs, or by all stages) and almost no other noise: every round's ratio is the
# truth itself, however far the rounds drift apart
DRIFT_ONLY = cov.Noise(round_sd=0.3, jitter_sd=1e-6, step_sd=1e-6)


@pytest.mark.parametrize(("kind", "truth"), [("ratio", 0.57), ("change", 0.05), ("share", 0.10)])
def test_a_study_with_a_shared_drift_only_lands_on_its_documented_truth(kind, truth):
    """The module docstring's truths: the ratio 0.57 (Muon's time over AdamW's, not the inverse), the change +5%
    (Muon's step over AdamW's minus one) and the share 10% (the optimizer's time within each step, whatever the
    round's step time)."""
    (value, low, high), got_truth = cov.SIMULATE[kind](np.random.default_rng(0), DRIFT_ONLY, 5)
    assert got_truth == pytest.approx(truth)
    # every round is the truth: the estimate is it and the interval closes around it
    assert value == pytest.approx(truth, abs=1e-4) and low <= truth <= high and high - low < 1e-4


@pytest.mark.parametrize(("kind", "truth"), [("stages", 112.0 / 117.5), ("stages_tied", 1.0)])
def test_the_stages_idle_times_share_the_rounds_drift(kind, truth):
    """Each stage's optimizer step and its idle time after its last backward drift together per round ("a drift per
    round shared by all stages"): stage 1 pays 140 x (1 - 0.2) = 112 of the stages' mean 117.5 in every round; tied,
    stage 0 pays its whole 100 of the mean 100."""
    (value, _, _), got_truth = cov.SIMULATE[kind](np.random.default_rng(0), DRIFT_ONLY, 5)
    assert got_truth == pytest.approx(truth) and value == pytest.approx(truth, rel=1e-3)


def test_the_jitter_per_run_and_round_is_on_the_log_scale():
    """``Noise``: "on the log scale". A jitter sd of 1 with no step noise: every time is positive and the logs of
    the times over their level scatter with an sd of about 1 (400 rounds: within 0.85 to 1.15, over 4 sds)."""
    noise = cov.Noise(jitter_sd=1.0, step_sd=1e-9, steps=1, ranks=1)
    times = cov._times(np.random.default_rng(3), noise, 400, np.full(400, 50.0))
    assert (times > 0).all()
    assert 0.85 <= float(np.std(np.log(times / 50.0))) <= 1.15


def test_ratio_unshared_drops_the_shared_drift_and_scatters_each_run_ten_percent(monkeypatch):
    seen = []
    monkeypatch.setattr(cov, "_ratio", lambda rng, noise, n, disturbed=False: seen.append((noise, disturbed)))
    base = cov.Noise(round_sd=0.2, jitter_sd=0.03, step_sd=0.04, steps=4, ranks=3)
    cov.SIMULATE["ratio_unshared"](np.random.default_rng(0), base, 3)
    # no drift shared, 10% per run and round; the rest of the study (steps, ranks, step noise) as given
    assert seen == [(cov.Noise(round_sd=0.0, jitter_sd=0.10, step_sd=0.04, steps=4, ranks=3), False)]


def test_only_the_disturbed_study_slows_a_round(monkeypatch):
    seen = []
    pair = cov._pair

    def spy(rng, noise, n, truth, slow_round=False):
        seen.append(slow_round)
        return pair(rng, noise, n, truth, slow_round)

    monkeypatch.setattr(cov, "_pair", spy)
    cov.SIMULATE["disturbed"](np.random.default_rng(0), cov.Noise(), 5)
    cov.SIMULATE["ratio"](np.random.default_rng(0), cov.Noise(), 5)
    assert seen == [True, False]


def test_the_grid_study_reads_each_steps_slowest_rank(monkeypatch):
    """``_rivals``: "each round's median of the step's slowest rank". With rank 1 always twice rank 0, DP2·TP2's
    round is 2 x 90 = 180 ms and the rivals' 200 and 260 ms."""
    import muon_repro.analysis.rounds as rounds

    def times(rng, noise, n, level):
        return level[:, None, None] * np.ones((n, noise.steps, 1)) * np.array([1.0, 2.0])

    seen = []

    def closest_rival_ratio(mine, rivals):
        seen.append((mine, rivals))
        return (1.0, 0.5, 2.0), 0

    monkeypatch.setattr(cov, "_times", times)
    monkeypatch.setattr(rounds, "closest_rival_ratio", closest_rival_ratio)
    _, truth = cov.SIMULATE["rivals"](np.random.default_rng(0), replace(cov.Noise(), round_sd=0.0), 3)
    ((mine, rivals),) = seen
    assert list(mine) == pytest.approx([180.0] * 3)
    assert [list(r) for r in rivals] == [pytest.approx([200.0] * 3), pytest.approx([260.0] * 3)]
    assert truth == pytest.approx(0.9)


def test_coverage_is_the_fraction_of_studies_whose_interval_holds_the_truth(monkeypatch):
    # four studies: the truth inside, at the low end, outside above, inside: 3 of 4
    studies = iter([((1.0, 0.5, 2.0), 1.0), ((1.0, 1.0, 2.0), 1.0), ((1.0, 0.5, 2.0), 3.0), ((1.0, 0.5, 2.0), 0.6)])
    monkeypatch.setitem(cov.SIMULATE, "ratio", lambda rng, noise, n: next(studies))
    assert cov.coverage("ratio", 3, studies=4) == pytest.approx(0.75)


def test_the_table_has_a_column_per_round_count_and_passes_its_seed(monkeypatch):
    calls = []
    monkeypatch.setattr(cov, "coverage", lambda kind, n, studies, seed=0: calls.append((kind, n, studies, seed)) or 0.5)
    table = cov.coverage_table(12, seed=7)
    assert list(table.columns) == ["n=2", "n=3", "n=5", "n=10"] and list(table.index) == list(cov.KINDS)
    assert {(n, studies, seed) for _, n, studies, seed in calls} == {(n, 12, 7) for n in (2, 3, 5, 10)}


def test_the_block_is_a_markdown_table_as_docs_method_shows_it():
    table = pd.DataFrame({"n=2": [0.948, 1.0], "n=3": [0.5, 0.9]}, index=pd.Index(["ratio", "share"], name="kind"))
    lines = cov.coverage_block(table, 1000, 3).splitlines()
    assert lines[0].startswith("Coverage of the nominal 95% intervals, 1,000 simulated studies per cell (seed 3)")
    assert lines[2:] == [
        "| estimator | n=2 | n=3 |",
        "|---|---:|---:|",
        "| ratio | 94.8% | 50.0% |",
        "| share | 100.0% | 90.0% |",
    ]


def test_the_command_writes_the_block_with_a_thousand_studies_by_default(monkeypatch, tmp_path, capsys):
    """docs/method.md's block says it is written by ``--write docs/method.md`` alone and holds 1,000 studies per
    cell: the default."""
    calls = []
    monkeypatch.setattr(cov, "coverage", lambda kind, n, studies, seed=0: calls.append((studies, seed)) or 0.95)
    doc = tmp_path / "method.md"
    begin, end = cov.MARKERS
    doc.write_text(f"before\n{begin}\nold table\n{end}\nafter\n", encoding="utf-8")
    assert cov.main(["--write", str(doc)]) == 0
    assert set(calls) == {(1000, 0)}
    text = doc.read_text(encoding="utf-8")
    inside = text.split(begin)[1].split(end)[0]
    assert "old table" not in inside and "| ratio | 95.0% |" in inside and "1,000 simulated studies" in inside
    assert text.startswith("before\n") and text.endswith("after\n")
    assert "| ratio | 95.0% |" in capsys.readouterr().out
    calls.clear()
    assert cov.main(["--studies", "3", "--seed", "4"]) == 0 and set(calls) == {(3, 4)}


def test_the_command_refuses_zero_studies(monkeypatch, capsys):
    monkeypatch.setattr(cov, "coverage", lambda kind, n, studies, seed=0: 0.95)
    with pytest.raises(SystemExit) as stop:
        cov.main(["--studies", "0"])
    assert stop.value.code == 2 and "--studies must be at least 1" in capsys.readouterr().err


# ---------------------------------------------------------------- timeline: phase_spans


def _events(*rows: tuple[str, str, float, float]) -> pd.DataFrame:
    """(name, cat, ts, end) per event, as the trace's events table holds them."""
    return pd.DataFrame(rows, columns=["name", "cat", "ts", "end"])


def _steps(*rows: tuple[int, float, float]) -> pd.DataFrame:
    """(step, start_us, step_ms) per step."""
    return pd.DataFrame(rows, columns=["step", "start_us", "step_ms"])


def _rows(spans: pd.DataFrame, lanes: tuple[str, ...] = ("coarse", "fine", "transfer", "gpu")) -> set[tuple]:
    kept = spans[spans["lane"].isin(lanes)]
    return {(int(s), lane, p, float(a), float(b)) for s, lane, p, a, b in kept[list(SPAN_COLUMNS)].itertuples(index=False)}


def test_a_scope_is_in_the_window_it_starts_in_up_to_the_windows_end():
    """Windows [1000, 2000) and [3000, 4000) us: a scope starting at the window's start, or ending at its end, is of
    that step; one before the first window, or running past its window's end, is of none."""
    events = _events(
        (FORWARD, "user_annotation", 1000.0, 1500.0),
        (NEWTON_SCHULZ, "user_annotation", 1500.0, 2000.0),
        (BACKWARD, "user_annotation", 500.0, 900.0),
        (OPTIMIZER, "user_annotation", 2500.0, 2600.0),
        (UPDATE, "user_annotation", 3000.0, 3100.0),
    )
    spans = phase_spans(events, _steps((0, 1000.0, 1.0), (1, 3000.0, 1.0)))
    assert _rows(spans) == {
        (0, "coarse", FORWARD, 1000.0, 1500.0),
        (0, "fine", NEWTON_SCHULZ, 1500.0, 2000.0),
        (1, "fine", UPDATE, 3000.0, 3100.0),
    }
    windows = spans[spans["lane"] == "step"]
    assert sorted(zip(windows["step"], windows["start_us"], windows["end_us"])) == [(0, 1000.0, 2000.0), (1, 3000.0, 4000.0)]
    assert str(spans["step"].dtype) == "int64"


def test_steps_may_come_in_any_order_and_a_step_below_zero_empties_nothing():
    events = _events((FORWARD, "cpu_op", 1100.0, 1200.0), (UPDATE, "cpu_op", 3100.0, 3200.0))
    expected = {(0, "coarse", FORWARD, 1100.0, 1200.0), (1, "fine", UPDATE, 3100.0, 3200.0)}
    assert _rows(phase_spans(events, _steps((1, 3000.0, 1.0), (0, 1000.0, 1.0)))) == expected
    with_warmup = phase_spans(events, _steps((-1, 0.0, 0.5), (0, 1000.0, 1.0), (1, 3000.0, 1.0)))
    assert _rows(with_warmup) == expected


def test_a_trace_with_fine_phases_only_has_its_spans():
    spans = phase_spans(_events((NEWTON_SCHULZ, "cpu_op", 1100.0, 1200.0)), _steps((0, 1000.0, 1.0)))
    assert _rows(spans) == {(0, "fine", NEWTON_SCHULZ, 1100.0, 1200.0)}


def test_empty_spans_have_the_columns_and_types_of_spans():
    spans = phase_spans(_events(("aten::mm", "cpu_op", 1.0, 2.0)), _steps((0, 0.0, 1.0)))
    assert spans.empty and tuple(spans.columns) == SPAN_COLUMNS
    assert str(spans["step"].dtype) == "int64" and str(spans["start_us"].dtype) == "float64"


def test_transfers_are_gloo_calls_and_nccl_kernels_never_a_cpu_annotation():
    """The transfer lane holds ``gloo:*`` and NCCL kernels (the name's case aside), each as phase ``transfer``; an
    ``nccl:*`` CPU annotation is the call, not the transfer, and a name that merely starts with ``gloo`` is none."""
    events = _events(
        (NEWTON_SCHULZ, "user_annotation", 1050.0, 1900.0),
        ("gloo:all_reduce", "cpu_op", 1100.0, 1200.0),
        ("NCCLDevKernel_AllGather_RING", "kernel", 1300.0, 1400.0),
        ("nccl:all_gather", "user_annotation", 1250.0, 1450.0),
        ("gloo_buffer_copy", "cpu_op", 1500.0, 1600.0),
    )
    spans = phase_spans(events, _steps((0, 1000.0, 1.0)))
    assert _rows(spans, ("transfer",)) == {
        (0, "transfer", "transfer", 1100.0, 1200.0),
        (0, "transfer", "transfer", 1300.0, 1400.0),
    }
    assert len(spans) == 1 + 1 + 2  # the window, newton_schulz and the two transfers


def test_the_gpu_lane_holds_the_work_each_phase_launched():
    """Window [1000, 2000): the optimizer [1100, 1900] holds newton_schulz [1200, 1500] and update [1850, 1890],
    listed out of time order. A kernel launched at 1300 counts under optimizer and newton_schulz, a memcpy launched at
    1860 under optimizer and update, each at its own GPU times; a kernel with no launch counts nowhere."""
    events = _events(
        (OPTIMIZER, "user_annotation", 1100.0, 1900.0),  # 0
        (UPDATE, "user_annotation", 1850.0, 1890.0),  # 1
        (NEWTON_SCHULZ, "user_annotation", 1200.0, 1500.0),  # 2
        ("cudaLaunchKernel", "cuda_runtime", 1300.0, 1305.0),  # 3
        ("gemm", "kernel", 2100.0, 2300.0),  # 4, launched by 3
        ("cudaMemcpyAsync", "cuda_runtime", 1860.0, 1862.0),  # 5
        ("Memcpy DtoD", "gpu_memcpy", 2400.0, 2450.0),  # 6, launched by 5
        ("orphan", "kernel", 1400.0, 1450.0),  # 7, no launch
        ("cudaLaunchKernel", "cuda_runtime", 1350.0, 1352.0),  # 8, launched nothing here
    )
    launch_rows = np.array([-1, -1, -1, -1, 3, -1, 5, -1, -1])
    spans = phase_spans(events, _steps((0, 1000.0, 1.0)), launch_rows)
    assert _rows(spans, ("gpu",)) == {
        (0, "gpu", OPTIMIZER, 2100.0, 2300.0),
        (0, "gpu", NEWTON_SCHULZ, 2100.0, 2300.0),
        (0, "gpu", OPTIMIZER, 2400.0, 2450.0),
        (0, "gpu", UPDATE, 2400.0, 2450.0),
    }


def test_gpu_work_counts_in_the_step_of_its_launch():
    """Steps 5 [0, 1000) and 6 [1000, 2000) us, two coarse scopes in step 5: a kernel launched at 1200 in step 6's
    forward is step 6's, whatever it runs at."""
    events = _events(
        (FORWARD, "user_annotation", 100.0, 400.0),
        (BACKWARD, "user_annotation", 500.0, 900.0),
        (FORWARD, "user_annotation", 1100.0, 1400.0),
        (NEWTON_SCHULZ, "user_annotation", 1500.0, 1600.0),
        ("cudaLaunchKernel", "cuda_runtime", 1200.0, 1201.0),
        ("gemm", "kernel", 1250.0, 1300.0),
    )
    spans = phase_spans(events, _steps((5, 0.0, 1.0), (6, 1000.0, 1.0)), np.array([-1, -1, -1, -1, -1, 4]))
    assert _rows(spans, ("gpu",)) == {(6, "gpu", FORWARD, 1250.0, 1300.0)}


# ---------------------------------------------------------------- timeline: align_ranks


def _span(start_us: float, end_us: float) -> pd.DataFrame:
    return pd.DataFrame({"step": [0], "lane": ["coarse"], "phase": [FORWARD], "start_us": [start_us], "end_us": [end_us]})


def test_aligned_ranks_count_from_the_earliest_ranks_step_start():
    """Same base time: rank 0's step starts at 1000 us, rank 1's at 1500 us. The clock's 0 is 1000 us, so rank 0's
    [1100, 1600] is [0.1, 0.6] ms and rank 1's [1600, 1900] is [0.6, 0.9] ms."""
    out = align_ranks(
        [
            (0, 5_000_000, _span(1100.0, 1600.0), pd.DataFrame({"step": [0], "start_us": [1000.0]})),
            (1, 5_000_000, _span(1600.0, 1900.0), pd.DataFrame({"step": [0], "start_us": [1500.0]})),
        ]
    ).set_index("rank")
    assert out.loc[0, ["start_ms", "end_ms"]].tolist() == pytest.approx([0.1, 0.6])
    assert out.loc[1, ["start_ms", "end_ms"]].tolist() == pytest.approx([0.6, 0.9]) and out["aligned"].all()


def test_without_every_base_time_each_rank_starts_its_step_at_zero():
    """Rank 1 has no baseTimeNanoseconds: the ranks cannot be compared, each rank's step starts at 0 ms."""
    out = align_ranks(
        [
            (0, 5_000_000, _span(1100.0, 1600.0), pd.DataFrame({"step": [0], "start_us": [1000.0]})),
            (1, None, _span(3200.0, 3500.0), pd.DataFrame({"step": [0], "start_us": [3000.0]})),
        ]
    ).set_index("rank")
    assert out.loc[0, ["start_ms", "end_ms"]].tolist() == pytest.approx([0.1, 0.6])
    assert out.loc[1, ["start_ms", "end_ms"]].tolist() == pytest.approx([0.2, 0.5]) and not out["aligned"].any()


# ---------------------------------------------------------------- decode: the typed paths


def _piece(*events: str) -> bytes:
    return ("[" + ",".join(events) + "]").encode()


X_NO_DUR = '{"ph": "X", "name": "a", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10}'
X_NO_TS = '{"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 5}'
MEM_UPPER = '{"ph": "I", "name": "[memory]", "pid": 1, "tid": 1, "ts": 20, "args": {"Bytes": 64}}'
MEM_NO_TS = '{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "args": {"Bytes": 64}}'
UNUSUAL = '{"ph": "Z", "name": "odd"}'  # a phase outside the Chrome format: the plain path


@pytest.mark.parametrize("path", ["fast", "plain"])
def test_typed_paths_default_a_missing_dur_to_zero_and_drop_a_missing_ts(path):
    events = [X_NO_DUR, X_NO_TS, MEM_UPPER, MEM_NO_TS] + ([UNUSUAL] if path == "plain" else [])
    cols = decode_piece_fast(_piece(*events))  # the plain path too: no msgspec error gets out, no tolerant note
    assert cols.ts.tolist() == [10.0] and cols.dur.tolist() == [0.0]
    assert cols.notes == {TS_MISSING: 1, MEMORY_TS_DROPPED: 1}  # no BAD_DURATION: a missing dur is no bad one
    assert cols.mem_ts.tolist() == [20.0]  # "I" is an instant as "i" is


def test_the_tolerant_path_reads_an_upper_case_instant_too():
    cols = decode_items_tolerant([{"ph": "I", "name": "[memory]", "ts": 20, "args": {"Bytes": 64}}])
    assert cols.mem_ts.tolist() == [20.0]


def test_nesting_too_deep_for_every_decoder_is_a_value_error():
    deep = b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": ' + b"[" * 5000 + b"]" * 5000 + b"}]"
    with pytest.raises(ValueError, match=re.escape(TOO_DEEP)):
        decode_piece(deep)


def test_a_file_range_read_short_is_refused(tmp_path):
    path = tmp_path / "trace.json"
    path.write_bytes(b'{"traceEvents": [' + X_NO_DUR.encode() + b"]}")
    size = path.stat().st_size
    for start, stop in ((size, size + 10), (size - 5, size + 5)):
        with pytest.raises(ValueError, match="file changed while reading"):
            decode_file_range(str(path), start, stop)


# ---------------------------------------------------------------- decode: the tolerant path


def test_tolerant_ids_bools_floats_and_missing_fields():
    """A bool pid is no id (-1), an integral float is that integer, any other float a string; a missing or
    non-string cat and name are "" and their text."""
    cols = decode_items_tolerant(
        [
            {"ph": "X", "name": "a", "cat": "c", "pid": True, "tid": 3.0, "ts": 1, "dur": 1},
            {"ph": "X", "name": 12, "pid": 1.5, "tid": 2, "ts": 2, "dur": 1},
        ]
    )
    assert cols.keys == [("a", "c", -1, 3), ("12", "", "1.5", 2)]
    assert isinstance(cols.keys[0][3], int)


def test_a_huge_negative_integer_time_is_minus_infinity_and_dropped():
    cols = decode_items_tolerant([{"ph": "X", "name": "a", "ts": -(10**400), "dur": 1}, {"ph": "X", "name": "b", "ts": 5}])
    assert cols.ts.tolist() == [5.0] and cols.notes[TS_OUT_OF_RANGE] == 1
    assert [(kind, name, value) for kind, name, _, value in cols.problems] == [(TS_OUT_OF_RANGE, "a", -math.inf)]


def test_only_events_that_are_no_objects_are_counted_as_such():
    cols = decode_items_tolerant([1, {}, "x", None, {"ph": "X", "name": "a", "ts": 1, "dur": 1}])
    assert cols.notes[NON_OBJECT_EVENTS] == 3 and cols.n_events == 5 and cols.ts.tolist() == [1.0]  # {} is an object


def test_the_tolerant_piece_reads_utf8_and_raw_control_characters():
    raw = '[{"ph": "X", "name": "é\tx", "ts": 1, "dur": 2}]'.encode()
    assert decode_piece_tolerant(raw).keys[0][0] == "é\tx"


def test_the_tolerant_piece_refuses_an_object():
    with pytest.raises(ValueError, match="expected a JSON array of events"):
        decode_piece_tolerant(b'{"ph": "X", "name": "a", "ts": 1}')
