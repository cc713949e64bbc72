"""Each figure says which step it draws, sets each number by what
it measures, writes bytes and percentages as the report does (one formatting module), quotes checks from the checks
table in the report's words, lists them in the bars' order, draws the intervals the tables have (and no whisker where
they have none), says what it leaves out, and keeps Muon's vermillion and AdamW's blue for the optimizers alone."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import drawn_figures as artists

from muon_repro.report import (
    bytes_figures,
    derive,
    figures,
    gpu_section,
    pipeline_section,
    profile_figures,
    regime_figures,
    study_section,
    style,
)
from muon_repro.report.checks_section import check_number
from muon_repro.report.formatting import mb, ms, percent
from muon_repro.report.selection import representative_runs, sort_runs, study_runs

REPO = Path(__file__).resolve().parents[1]
METRICS = REPO / "metrics"
GPU_PROFILE = "1xH200-nccl"


def _svg_text(png: Path) -> str:
    """The SVG's text (svg.fonttype none keeps it as text), lines joined as the figure wraps them."""
    return " ".join(html.unescape(Path(png).with_suffix(".svg").read_text()).split())


# ---------------------------------------------------------------- step_breakdown: which step it draws


def test_step_breakdown_says_it_draws_one_profiled_step_of_the_traced_trial(figure_data, tmp_path, kept):
    """Its takeaway's +220 ms is of the profiled step (trial 0, the only traced one), not the timed steps' +246 ms of the
    grid comparison; it said "the median step of all trials" and never "profiled"."""
    assert set(study_runs(figure_data.runs)["trials"].astype(int)) == {1}, "the committed runs trace one trial each"
    figures.step_breakdown(figure_data.runs, figure_data.steps, tmp_path / "step_breakdown")
    svg = artists.words(kept[-1])
    assert "all trials" not in svg
    assert "median profiled step (runs.typical_step) in its single traced trial" in svg
    assert "Muon's profiled step is" in svg and "not its steps timed without the profiler" in svg


@pytest.mark.parametrize(
    ("trials", "said"), [([1, 1], "in its single traced trial"), ([3, 3], "over its 3 traced trials"), ([1, 3], "(runs.trials)")]
)
def test_the_breakdown_names_the_traced_trials_it_takes_the_median_over(trials, said):
    assert said in figures.typical_step_said(pd.DataFrame({"trials": trials}))


def test_a_signed_time_is_written_as_every_time():
    assert ms(220.4, signed=True) == "+220 ms" and ms(-5.123, signed=True) == "-5.12 ms" and ms(12.34) == "12.3 ms"


# ---------------------------------------------------------------- state_memory: placement, units, the state check


def test_state_memory_sets_each_number_at_what_it_measures_in_the_reports_mb(figure_data, tmp_path, kept_and_written):
    """DP4 Muon's mean (5.00 MiB) was written above its largest rank's line (6.00 MiB), reading as the line's value;
    the figure wrote MiB (13.5) where the report writes MB (14.16)."""
    png = bytes_figures.state_memory(figure_data.runs, figure_data.ranks, figure_data.checks, tmp_path / "state_memory")
    steady, transient = kept_and_written[-1].axes[:2]
    numbers = [t for ax in (steady, transient) for t in ax.texts if t.get_text().replace(".", "", 1).isdigit()]
    assert len(numbers) >= 9  # six bars and three buffers
    for text in numbers:
        assert abs(text.get_position()[1] - float(text.get_text())) <= 0.005 + 1e-9, text.get_text()
    reps = representative_runs(figure_data.runs)
    st = derive.state_by_run(figure_data.ranks, reps["run"]).set_index("run")
    said = {t.get_text() for t in numbers}
    uneven = 0
    for run, row in st.iterrows():
        mean, largest = mb(row["muon"] + row["adamw"]), mb(row["largest"])
        assert {mean.removesuffix(" MB"), largest.removesuffix(" MB")} <= said, run
        uneven += mean != largest
    assert uneven, "the committed tables have a run whose largest rank holds more than the mean (DP4 Muon)"
    muon = reps[reps["optimizer"] == "muon"]["run"]
    assert [t.get_text() for t in transient.texts] == [mb(st.loc[r, "transient"]).removesuffix(" MB") for r in muon]
    assert artists.words(kept_and_written[-1]).count("MiB") == 0
    svg = _svg_text(png)
    assert "MiB" not in svg and "(MB)" in svg


def test_state_memory_quotes_the_state_check_from_the_checks_table(figure_data):
    """ "claim 0.5×" was written by the plotting code; the report calls it a check, with a claimed region."""
    row = figure_data.checks[figure_data.checks["check_id"] == "state_accounting"].iloc[0]
    said = bytes_figures.state_memory_stated(figure_data.runs, figure_data.ranks, figure_data.checks)
    value = check_number(row["measured_value"], str(row["unit_kind"]), "t")
    assert said.values == {
        "checks.state_accounting.measured_value": value,
        "checks.state_accounting.claimed_region": str(row["claimed_region"]),
    }
    assert f"the state check, on the elements Muon manages: {value}, holds; claimed {row['claimed_region']}" in said.text
    assert "claim 0.5" not in said.text
    other = figure_data.checks.copy()
    mine = other["check_id"] == "state_accounting"
    other.loc[mine, ["measured_value", "claimed_region", "holds", "in_claimed_region"]] = [0.55, "[0.4, 0.6]", False, True]
    said = bytes_figures.state_memory_stated(figure_data.runs, figure_data.ranks, other)
    assert "0.550×, fails; claimed [0.4, 0.6] (inside)" in said.text


def test_state_memory_prints_the_state_check_it_states(figure_data, tmp_path, kept):
    bytes_figures.state_memory(figure_data.runs, figure_data.ranks, figure_data.checks, tmp_path / "state_memory")
    words = artists.words(kept[-1])
    for value in bytes_figures.state_memory_stated(figure_data.runs, figure_data.ranks, figure_data.checks).values.values():
        assert value in words


# ---------------------------------------------------------------- bytes_by_layout: MB and order


def test_bytes_by_layout_writes_mb_as_the_report_and_lists_in_the_bars_order(figure_data, tmp_path, svg_only):
    """It printed 10.5 MB / 8.4 MB where the report prints 10.49 / 8.40 MB, and listed the checks bucketed,
    contiguous, whole-matrix beside bars drawn contiguous, whole-matrix, bucketed."""
    said = bytes_figures.bytes_by_layout_stated(
        figure_data.runs, figure_data.phases, figure_data.checks, figure_data.stated_numbers
    )
    n = figure_data.stated_numbers
    for key, printed in said.values.items():
        if key.startswith("stated_numbers."):
            _, cid, name = key.split(".")
            value = n[
                (n["table"] == "checks") & (n["row_id"] == cid) & (n["name"] == name) & (n["profile"] == figure_data.profile)
            ]
            assert printed == mb(float(value["value"].iloc[0])), key
    _, rs = bytes_figures._layout_runs(figure_data.runs)
    bars = [str(layout).replace("_", "-") for layout in rs.loc[rs["optimizer"] == "muon", "layout"]]
    assert len(bars) == 3
    checked = said.text.split("(the bytes checks' quantity): ")[1].split(" (paper")[0]
    totals = said.text.split("(the bar totals): ")[1].split(";")[0]
    for listed in (checked, totals):
        assert [item.split(" ")[0] for item in listed.split(", ")] == bars, listed
    svg = _svg_text(
        bytes_figures.bytes_by_layout(
            figure_data.runs, figure_data.phases, figure_data.checks, figure_data.stated_numbers, tmp_path / "b"
        )
    )
    for _, r in rs.iterrows():
        assert mb(derive.total_bytes(derive.phase_bytes(figure_data.phases, str(r["run"])))) in svg


# ---------------------------------------------------------------- regime_map: percentages


def test_regime_map_writes_the_share_as_the_report(figure_data, tmp_path, svg_only):
    """Its subtitle wrote 11.4% where the report writes 11% (formatting.percent)."""
    svg = _svg_text(regime_figures.regime_map(figure_data.regimes, figure_data.regime_model, tmp_path / "regime_map"))
    sweep = regime_figures.main_axis(figure_data.regimes)
    largest = sweep[sweep["tokens_per_step"] == sweep["tokens_per_step"].max()]
    assert len(largest) > 1
    for _, r in largest.iterrows():
        assert f"{percent(r['optimizer_share'])} at d {int(r['d_model'])}" in svg


def test_closed_form_draws_the_measured_ratio_of_the_regimes_table(figure_data, tmp_path, kept):
    """It computed its measured points from four columns of two rows; it draws the table's ns_time_ratio."""
    regimes = figure_data.regimes.copy()
    muon = (regimes["optimizer"] == "muon") & regimes["adamw_run"].notna()
    assert muon.sum() > 1
    regimes.loc[muon, "ns_time_ratio"] = np.linspace(0.01, 0.02, int(muon.sum()))  # none of them a recomputed value
    regime_figures.closed_form(regimes, tmp_path / "closed_form")
    ax = kept[-1].axes[0]
    drawn = np.concatenate(
        [c.get_offsets()[:, 1] for c in ax.collections if len(c.get_offsets()) and c.get_label().startswith("measured")]
    )
    assert np.allclose(np.sort(drawn), np.sort(regimes.loc[muon, "ns_time_ratio"].to_numpy(float)))


# ---------------------------------------------------------------- single_device: the extra's interval


def test_single_device_draws_the_claims_interval_of_the_extra(report_data, tmp_path, kept):
    """Its legend said the extra step time has no interval while the claims table has one at 262k tokens."""
    d = report_data.of_profile(GPU_PROFILE)
    gpu_section.single_device(d.runs, d.regime_model, tmp_path / "single_device", d.claims)
    fig = kept[-1]
    claims = d.claims
    row = claims[(claims["claim_id"] == "latency_overhead") & claims["conditions"].str.contains("muon_t256k", regex=False)]
    low, high = (100 * float(row[c].iloc[0]) for c in ("measured_low", "measured_high"))
    segments = artists.segments(fig.axes[1])
    assert len(segments) == 1  # the claim's run's point only: the other points have no interval in the tables
    assert np.allclose(segments[0], [[262144, low], [262144, high]])
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert "95% interval (the extra: at 262k only)" in labels and not any("the extra: none" in label for label in labels)


def test_single_device_without_claims_says_the_extra_has_no_interval(report_data, tmp_path, kept):
    d = report_data.of_profile(GPU_PROFILE)
    gpu_section.single_device(d.runs, d.regime_model, tmp_path / "single_device")
    fig = kept[-1]
    assert artists.segments(fig.axes[1]) == []
    assert "share's 95% interval (the extra: none)" in [t.get_text() for legend in fig.legends for t in legend.get_texts()]


# ---------------------------------------------------------------- colours and labels


def test_no_other_category_wears_an_optimizers_colour():
    """Every regime_map point is Muon's, yet widths were drawn in AdamW blue and Muon vermillion; the study figure's
    event categories too, beside bars labelled by optimizer."""
    reserved = {c.upper() for c in style.OPTIMIZER_COLORS.values()}
    assert not reserved & {c.upper() for c in regime_figures.WIDTH_COLORS}
    assert not reserved & {c.upper() for c in study_section.CATEGORY_COLORS.values()}
    # the phases (step_breakdown, timeline: the backward was AdamW's blue) and the verdicts (Muon's vermillion)
    assert not reserved & {c.upper() for c in style.PHASE_COLORS.values()}
    assert not reserved & {c.upper() for c in profile_figures.VERDICT_COLORS.values()}


def test_no_phase_or_machine_wears_an_optimizers_colour(figure_data, tmp_path, kept):
    """bytes_by_layout drew the DP gather in Muon's vermillion, beside bars labelled Muon and AdamW; profiles drew the
    study's machine in vermillion and the H100 node in AdamW's blue, every line of its left panel being Muon's extra."""
    from matplotlib.colors import to_hex

    reserved = {c.lower() for c in style.OPTIMIZER_COLORS.values()}
    bytes_figures.bytes_by_layout(
        figure_data.runs, figure_data.phases, figure_data.checks, figure_data.stated_numbers, tmp_path / "bytes_by_layout"
    )
    (ax,) = kept[-1].axes
    patches = [*ax.patches, *(h for legend in (ax.get_legend(), *kept[-1].legends) if legend for h in legend.get_patches())]
    drawn = {to_hex(p.get_facecolor()) for p in patches}
    assert to_hex(style.PHASE_COLORS["dp_gather"]) in drawn
    assert not reserved & drawn
    regime_figures.profiles(figure_data.regime_model, figure_data.regime_thresholds, tmp_path / "profiles")
    lines = kept[-1].axes[0].get_lines()  # one per machine and model (the right panel: Muon's own extra, in its colour)
    for _, label in regime_figures.MACHINE_STYLES.values():
        assert any(line.get_label().startswith(label) for line in lines), label
    assert not reserved & {to_hex(line.get_color()) for line in lines}


def test_study_numbers_names_the_optimizers_as_every_figure(report_data, tmp_path, kept):
    study_section.study_numbers(report_data.study_method, report_data.study_method_parts, tmp_path / "study_numbers")
    names = [label.get_text().split("\n")[-1] for ax in kept[-1].axes for label in ax.get_yticklabels()]
    assert names and set(names) <= set(style.OPTIMIZER_LABELS.values()), names


# ---------------------------------------------------------------- text size on the page, numbers as the report's


def test_the_pipeline_figure_is_legible_at_the_pdfs_width(figure_data, tmp_path):
    """Its one-line headline ran past the figure's width, widening the PNG the PDF draws at the text width: its 8 pt
    labels came to 6.99 pt on the page, under the 7 pt every other figure keeps (style.SMALL_PT)."""
    import re

    from PIL import Image

    png = pipeline_section.pipeline(figure_data.runs, figure_data.stages, figure_data.claims, tmp_path / "pipeline")
    smallest = min(float(s) for s in re.findall(r"font-size: ([0-9.]+)px", png.with_suffix(".svg").read_text()))
    assert smallest == style.SMALL_PT
    with Image.open(png) as image:
        width_pt = image.size[0] / style.DPI * 72
    assert smallest * style.PAGE_TEXT_WIDTH_PT / width_pt >= 7.0, width_pt


def test_study_numbers_writes_the_rebuilt_numbers_as_the_reports_table(report_data, tmp_path, kept):
    """It wrote them with its own ``:.2f`` (a missing one stopped it); the report's table writes them through the
    formatting module (``–`` where there is none): the figure writes each as the table, less the unit its axis names."""
    method = report_data.study_method
    table = study_section.study_section(report_data)["method_rows"]
    rebuilt = {number_id: row[3] for number_id, row in zip(method["number_id"], table)}
    study_section.study_numbers(method, report_data.study_method_parts, tmp_path / "study_numbers")
    for ax, (_, ids) in zip(kept[-1].axes, study_section.PANELS):
        assert [t.get_text().strip() for t in ax.texts] == [rebuilt[i].removesuffix(" ms") for i in ids]
    unknown = method.assign(rebuilt=method["rebuilt"].where(method["number_id"] != "comm_ms_muon"))
    study_section.study_numbers(unknown, report_data.study_method_parts, tmp_path / "unknown")
    assert kept[-1].axes[0].texts[0].get_text().strip() == "–" == study_section.study_number(np.nan, "ms")


def test_study_numbers_draws_our_measure_over_the_five_steps_and_says_only_thin_parts_are_too_thin(report_data, tmp_path, kept):
    """The black bar sets our per-step measure beside sums over the study's 5-step traces, so it is that measure
    times 5; a legend entry says "too thin to see" only of a category whose every part is under 0.5% of its axis."""
    from matplotlib.colors import to_hex

    method = report_data.study_method.set_index("number_id")
    study_section.study_numbers(report_data.study_method, report_data.study_method_parts, tmp_path / "study_numbers")
    fig = kept[-1]
    widest: dict[str, float] = {}
    for ax, (_, ids) in zip(fig.axes, study_section.PANELS):
        ours = [i for i in ids if i in method.index and pd.notna(method.loc[i, "measured_per_step"])]
        black = [p.get_width() for p in ax.patches if to_hex(p.get_facecolor()) == "#000000"]
        assert black == pytest.approx([study_section.STEPS * float(method.loc[i, "measured_per_step"]) for i in ours])
        span = ax.get_xlim()[1]
        for p in ax.patches:
            color = to_hex(p.get_facecolor())
            widest[color] = max(widest.get(color, 0.0), p.get_width() / span)
    for text in (t.get_text() for legend in fig.legends for t in legend.get_texts()):
        category = text.split(": at most", 1)[0]
        if category in study_section.CATEGORY_COLORS:
            thin = widest[study_section.CATEGORY_COLORS[category].lower()] < 0.005
            assert text.endswith("too thin to see") == thin, text


# ---------------------------------------------------------------- what a figure leaves out, and intervals it lacks


def test_grid_comparison_says_which_runs_it_leaves_out(figure_data, tmp_path, kept):
    """It kept the most common world size and dropped the others without a word."""
    runs = figure_data.runs
    figures.grid_comparison(runs, tmp_path / "all")
    assert "not drawn" not in artists.words(kept[-1])
    dp4 = runs[(runs["group"] == "distributed_muon") & (runs["optimizer"] == "muon") & (runs["dp"] == 4)].iloc[[0]]
    dp8 = dp4.assign(run=dp4["run"].str.replace("muon_dp4", "muon_dp8"), name="muon_dp8", dp=8, world_size=8)
    figures.grid_comparison(pd.concat([runs, dp8], ignore_index=True), tmp_path / "dp8")
    assert "not drawn: 1 run at 8 ranks (this figure compares 4 ranks)" in artists.words(kept[-1])


def test_an_unknown_share_interval_draws_no_whisker(figure_data, tmp_path, kept):
    """A NaN interval was drawn as a zero-length whisker, its caps on the bar's end: as if the share were exact."""
    runs = figure_data.runs.copy()
    rs = sort_runs(study_runs(runs))
    runs.loc[runs["run"] == rs["run"].iloc[0], ["optimizer_share_low", "optimizer_share_high"]] = np.nan
    figures.optimizer_overhead(runs, figure_data.claims, tmp_path / "optimizer_overhead")
    whiskers = artists.segments(kept[-1].axes[0])
    assert len(whiskers) == len(rs) - 1
    assert all(abs(s[1, 0] - s[0, 0]) > 0 for s in whiskers)


# ---------------------------------------------------------------- README


def test_the_readme_describes_the_timeline_as_it_is_drawn():
    """The timeline shows a whole training step with a zoom on the optimizer, not one optimizer step."""
    line = next(line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `figures/*.png`"))
    assert "one optimizer step of every rank" not in line and "one training step of every rank" in line
