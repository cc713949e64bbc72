"""What the report says of the pipeline runs' communication and of their optimizer time, from the committed tables.

A pipeline's point-to-point sends and receives are never matched across ranks (analysis/waits.py: a ``pp_`` call is
all transfer, wait 0), so their "transfer" holds the time a stage sits blocked on its neighbour and, summed over
overlapping calls, exceeds the step: the report must not call it a transfer time with the waiting left out, nor print
a waiting of 0 for those runs. Appendix A2's optimizer share is formed on other steps (timed without the profiler)
than its ms columns (profiled), and A3's optimizer ratio (profiled) can be an order of magnitude from the unprofiled
one for PP4: the headers and notes say which steps. Every byte count is in MB, A2's state too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from muon_repro.report import derive, style
from muon_repro.report.caveats_section import limitations, regimes
from muon_repro.report.data import ReportData
from muon_repro.report.formatting import ms, pct, ratio
from muon_repro.report.results_section import (
    PP_NO_WAIT,
    bytes_rows,
    comparison_header,
    optimizer_ratio_note,
    pipeline_wait_note,
    runs_header,
    runs_rows,
    share_note,
)
from muon_repro.report.selection import pipeline_runs, pp_of, run_labels, sort_runs

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data(figure_data) -> ReportData:
    return figure_data


def _pipeline_bullet(data: ReportData) -> str:
    said = regimes(data, derive.state_by_run(data.ranks, data.runs["run"]), bytes_rows(data)[1])
    (bullet,) = [line for line in said if line.startswith("The pipeline group's runs")]
    return bullet


def _staged_pairs(data: ReportData) -> pd.DataFrame:
    comp = pipeline_runs(data.comparisons)
    together = comp["recorded_together"].astype(bool) & comp["comm_transfer_ms_ratio"].notna()
    return comp[together & (comp["pp"].astype(int) > 1)]


def test_the_pipeline_bullet_does_not_call_point_to_point_time_a_transfer_time_without_waiting(data):
    bullet = _pipeline_bullet(data)
    staged = _staged_pairs(data)
    assert len(staged) == 4  # DP2·TP2·PP2, PP2·DP2, PP2·TP2, PP4 in the committed tables
    # the old label, which claimed the blocked time was left out of the stages' ratios
    assert "Muon spends less communication transfer time (waiting for other ranks left out) than AdamW" not in bullet
    with_stages = bullet.split("With pipeline stages", 1)[1]
    assert "not matched across ranks" in with_stages and "blocked on its neighbour" in with_stages
    assert "summed though they overlap" in with_stages and "not comparable to a step" in with_stages
    below = [style.grid_label(int(c["dp"]), int(c["tp"]), int(c["pp"])) for _, c in staged.iterrows()]
    below = [g for g, (_, c) in zip(below, staged.iterrows()) if c["comm_transfer_ms_ratio"] < 1]
    assert below == ["DP2·TP2·PP2", "PP4"]
    assert f"the ratios below 1 ({', '.join(below)}) cannot be read as less traffic" in with_stages
    assert "the bytes ratio beside each measures the traffic" in with_stages
    # every staged ratio keeps its bytes ratio beside it
    for _, c in staged.iterrows():
        grid = style.grid_label(int(c["dp"]), int(c["tp"]), int(c["pp"]))
        assert f"{grid} {c['comm_transfer_ms_ratio']:.2f}× (bytes {ratio(c['comm_bytes_ratio'])})" in bullet
    # the grids without stages keep the transfer-time reading, which their matched collectives support
    assert "Without pipeline stages (DP2·TP2, DP4, TP4) that is communication transfer time" in bullet


def test_the_pipeline_bullet_shows_the_summed_transfer_beside_the_step_from_the_runs_table(data):
    staged = _staged_pairs(data)
    names = set(staged["muon_run"]) | set(staged["adamw_run"])
    runs = data.runs[data.runs["run"].isin(names)]
    worst = runs.loc[(runs["comm_transfer_ms"] / runs["step_ms"]).idxmax()]
    assert worst["run"] == "cpu-2c-gloo/pipeline/adamw_pp4" and worst["comm_transfer_ms"] > 5 * worst["step_ms"]
    expected = f"AdamW PP4: {ms(worst['comm_transfer_ms'])} of such time against its {ms(worst['step_ms'])} profiled step"
    assert expected in _pipeline_bullet(data)


def test_without_stages_the_pipeline_bullet_keeps_the_transfer_label_and_says_nothing_of_point_to_point(data):
    flat = data.comparisons[data.comparisons["pp"].astype(int) <= 1]
    bullet = _pipeline_bullet(replace(data, comparisons=flat))
    assert "communication time by communication transfer time (waiting for other ranks left out)" in bullet
    assert "With pipeline stages" not in bullet and "point-to-point" not in bullet


def test_a2_prints_no_waiting_of_zero_for_the_runs_with_point_to_point_calls(data):
    ordered = sort_runs(data.runs)
    comm_col = runs_header(data).index("comm ms (waiting)")
    rows = runs_rows(data)
    staged_seen = 0
    for (_, r), row in zip(ordered.iterrows(), rows):
        cell = row[comm_col]
        wait = ms(r["comm_wait_ms"]).removesuffix(" ms")
        if pp_of(r) <= 1:
            assert cell.endswith(f"({wait})"), (r["run"], cell)  # unchanged
            continue
        staged_seen += 1
        assert not cell.endswith("(0.00)"), (r["run"], cell)
        expected = f"(≥ {wait})" if r["comm_wait_ms"] > 0 else f"({PP_NO_WAIT})"
        assert cell.endswith(expected), (r["run"], cell)
    assert staged_seen == 9  # every Muon and AdamW run with stages of the committed tables
    note = pipeline_wait_note(data)
    none = [label for label, (_, r) in zip(run_labels(ordered), ordered.iterrows()) if pp_of(r) > 1 and r["comm_wait_ms"] == 0]
    assert none == ["Muon PP4 [pipeline]", "Muon PP4 [pipeline_bubble]", "AdamW PP4"]
    assert "not matched across ranks" in note and "blocked on its neighbour" in note and "lower bound (≥)" in note
    assert f"{PP_NO_WAIT} where none matched ({', '.join(none)})" in note
    assert pipeline_wait_note(replace(data, runs=data.runs[data.runs["pp"].astype(int) <= 1])) == ""


def test_a2_headers_say_which_steps_the_optimizer_ms_and_the_share_come_from(data):
    header = runs_header(data)
    assert "profiled optimizer ms" in header and "profiled step ms (p10–p90)" in header
    assert "optimizer share (no profiler)" in header and "optimizer share" not in header
    note = share_note(data)
    adamw_pp4 = data.runs.set_index("run").loc["cpu-2c-gloo/pipeline/adamw_pp4"]
    # the committed run where the profiled optimizer ms / step ms and the share disagree most: 32.2 / 302 against 1.3%
    assert (
        f"AdamW PP4 (cpu-2c-gloo/pipeline/adamw_pp4), {ms(adamw_pp4['optimizer_ms'])} of a {ms(adamw_pp4['step_ms'])} "
        f"profiled step, {pct(adamw_pp4['optimizer_share'])} without the profiler" in note
    )
    assert "the share is not one over the other" in note


def test_a3_says_its_optimizer_ratio_is_of_profiled_steps_and_how_far_pp4_is_from_the_timed_one(data):
    header = comparison_header(data)
    assert "optimizer time (profiled)" in header
    assert "comm transfer (PP: point-to-point calls whole)" in header
    runs = data.runs.set_index("run")
    muon, adamw = runs.loc["cpu-2c-gloo/pipeline/muon_pp4"], runs.loc["cpu-2c-gloo/pipeline/adamw_pp4"]
    pair = data.comparisons[data.comparisons["muon_run"] == "cpu-2c-gloo/pipeline/muon_pp4"].iloc[0]
    profiled = float(pair["optimizer_ms_ratio"])
    timed = float(muon["timed_optimizer_ms"] / adamw["timed_optimizer_ms"])
    assert timed / profiled > 10  # the committed tables: 2.47× profiled, 80.6 / 3.20 without the profiler
    note = optimizer_ratio_note(data)
    assert "by an order of magnitude" in note and "of the profiled steps" in note
    assert (
        f"PP4: {ratio(profiled)} profiled (Muon {ms(muon['optimizer_ms'])}, AdamW {ms(adamw['optimizer_ms'])}, "
        f"runs.optimizer_ms), against Muon {ms(muon['timed_optimizer_ms'])}, AdamW {ms(adamw['timed_optimizer_ms'])} "
        "timed without the profiler" in note
    )
    assert note not in limitations(data)  # said once, beside the table it is about


def test_the_committed_report_prints_each_note_beside_its_table(data):
    """A2's notes in its preamble, A3's in its own: the notes above are the report's only where it prints them."""
    report = (REPO / "report" / "report.md").read_text()
    a2, a3 = report.index("Per run: trials"), report.rindex("Ratios Muon / AdamW at the same process grid")
    for note, where in ((pipeline_wait_note(data), a2), (share_note(data), a2), (optimizer_ratio_note(data), a3)):
        assert note and _plain(note) in _plain(report[where : where + 4000]), note


def _plain(text: str) -> str:
    """Markdown's escapes and line breaks left out, to find a sentence in the rendered text."""
    return " ".join(text.replace("\\", "").split())


def test_the_optimizer_ratio_note_follows_the_tables(data):
    """Not canned: with the unprofiled optimizer times equal to the profiled ones, nothing is far apart to warn of."""
    agreeing = replace(data, runs=data.runs.assign(timed_optimizer_ms=data.runs["optimizer_ms"]))
    assert optimizer_ratio_note(agreeing) == ""


def test_a2_writes_the_state_in_mb_like_the_rest_of_the_report(data):
    header = runs_header(data)
    assert "state MB (largest rank)" in header and not any("MiB" in h for h in header)
    col = header.index("state MB (largest rank)")
    for (_, r), row in zip(sort_runs(data.runs).iterrows(), runs_rows(data)):
        assert row[col] == f"{r['state_bytes'] / 1e6:.2f}"
        assert np.isclose(float(row[col]), r["state_bytes"] / 1e6, atol=0.005)


def test_wire_lines_write_loopback_over_ring_from_the_runs_table(data):
    """Pins each wire line's ratio as loopback_bytes_per_step / ring_bytes_per_step (not its inverse), 3 decimals."""
    from muon_repro.report.results_section import wire_lines

    lines = wire_lines(data)
    rows = [r for _, r in sort_runs(data.runs).iterrows() if derive.has_value(r, "loopback_bytes_per_step")]
    rows = [r for r in rows if derive.has_value(r, "ring_bytes_per_step") and float(r["ring_bytes_per_step"]) > 0]
    assert lines and rows
    for r in rows:
        want = f"({float(r['loopback_bytes_per_step']) / float(r['ring_bytes_per_step']):.3f}× the ring model)"
        assert any(f"({r['run']})" in line and want in line for line in lines), (r["run"], want)


def test_the_wire_paragraph_writes_muon_over_adamw_from_the_runs_it_names(data):
    """Pins the paragraph's "Muon/AdamW is X on gloo's wire and Y by the ring model": X and Y are the named Muon
    run's loopback (ring) bytes over the named AdamW run's, to 3 decimals, never the inverse; and each
    run's unexplained share (loopback - ring - reduce-scatter trace bytes) / ring beside its own name."""
    import re

    from muon_repro.report.formatting import percent
    from muon_repro.report.results_section import DP_REDUCE_SCATTER, wire_against_ring_paragraph

    text = wire_against_ring_paragraph(data)
    assert text
    adamw_run, muon_run = re.findall(r"`([^`]+)`", text)[:2]
    runs = data.runs.set_index("run")
    m, a = runs.loc[muon_run], runs.loc[adamw_run]
    wire = float(m["loopback_bytes_per_step"]) / float(a["loopback_bytes_per_step"])
    ring = float(m["ring_bytes_per_step"]) / float(a["ring_bytes_per_step"])
    assert f"Muon/AdamW is {wire:.3f} on gloo's wire and {ring:.3f} by the ring model." in text
    phases = data.phases[data.phases["phase"] == DP_REDUCE_SCATTER]

    def rest(r):
        twice = float(phases[phases["run"] == r.name]["trace_bytes"].sum())
        loopback, model = float(r["loopback_bytes_per_step"]), float(r["ring_bytes_per_step"])
        return (loopback - model - twice) / model

    assert f"all but {percent(rest(a))} (AdamW) and {percent(rest(m))} (Muon) of the ring" in text


@pytest.mark.parametrize(("muon_slowdown", "said"), [(5.0, "severalfold"), (20.0, "by an order of magnitude")])
def test_the_optimizer_ratio_note_words_how_far_apart_from_the_ratio_of_the_two_ratios(data, muon_slowdown, said):
    """Pins the note's wording threshold: profiled and unprofiled Muon/AdamW ratios 5× apart read "severalfold",
    20× apart "by an order of magnitude" (the cut is 10×)."""
    scale = data.runs["optimizer"].astype(str).str.lower().eq("muon").map({True: 1 / muon_slowdown, False: 1.0})
    apart = replace(data, runs=data.runs.assign(timed_optimizer_ms=data.runs["optimizer_ms"] * scale))
    assert f"they can differ {said} from those" in optimizer_ratio_note(apart)
