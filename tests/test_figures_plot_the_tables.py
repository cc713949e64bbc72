"""Every figure plots the table's number: the right column of the right run, in the axis' unit, its interval's low end
below and its high end above, each label naming what it sits on. These tests read the drawn artists (bars, whiskers,
lines, texts) of figures drawn from the committed ``metrics/`` or from small tables, not the rendered files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support import drawn_figures as artists

from muon_repro.report import derive, figures, style
from muon_repro.report.formatting import ms
from muon_repro.report.selection import first_pair, representative_runs, sort_runs, study_runs

# ---------------------------------------------------------------- comm_time_by_kind


def test_comm_time_bars_are_the_mean_over_ranks_and_labels_the_union(figure_data, tmp_path, kept):
    """Each stack is the per-kind times averaged over ranks (median over steps), and the number above it is the
    run's runs.comm_ms (the union's line), not the stack's sum: kinds overlap in time, so the two differ."""
    runs, steps = figure_data.runs, figure_data.steps
    figures.comm_time_by_kind(runs, steps, figure_data.claims, figure_data.stated_numbers, tmp_path / "c")
    (ax, *_) = kept[-1].axes
    reps = representative_runs(runs)
    kinds = [k for k in style.KIND_COLORS if f"comm_{k}_ms" in steps.columns]
    stacks: dict[float, float] = {}
    for bar in artists.bars(ax):
        x = round(bar.get_x() + bar.get_width() / 2, 6)
        stacks[x] = stacks.get(x, 0.0) + bar.get_height()
    expected = []
    for _, r in reps.iterrows():
        s = steps[steps["run"] == r["run"]]
        per_step = s.groupby(["trial", "step"])[[f"comm_{k}_ms" for k in kinds]].mean().median()
        expected.append(float(per_step.sum()))
    assert sorted(stacks.values()) == pytest.approx(sorted(expected), rel=1e-9)
    labels = sorted(t.get_text() for t in ax.texts if t.get_text().isdigit())
    assert labels == sorted(f"{float(v):.0f}" for v in reps["comm_ms"])
    assert labels != sorted(f"{v:.0f}" for v in stacks.values()), "the committed stacks differ from their unions"


def test_comm_time_states_muon_over_adamw_for_the_bars(figure_data):
    """The takeaway's bar ratios are Muon's runs.comm_ms over AdamW's at each grid (above 1 where Muon sends more)."""
    from muon_repro.report.formatting import ratio
    from muon_repro.report.selection import grids, pair_at

    runs = figure_data.runs
    said = figures.comm_time_stated(runs, figure_data.claims, figure_data.stated_numbers).text
    reps = representative_runs(runs)
    checked = 0
    for dp, tp in grids(reps):
        pair = pair_at(reps, dp, tp)
        if pair:
            muon, adamw = (float(p["comm_ms"]) for p in pair)
            assert f"{style.grid_label(dp, tp)} {ratio(muon / adamw)}" in said
            checked += 1
    assert checked >= 2


# ---------------------------------------------------------------- step_breakdown


def test_step_breakdown_draws_each_phase_from_its_column_and_signs_muon_minus_adamw(figure_data, tmp_path, kept):
    """Each 'by phase' bar is its column of the run's typical step (forward, backward, optimizer, in that order), and
    the takeaway's difference is Muon's step minus AdamW's (positive where Muon is slower)."""
    runs, steps = figure_data.runs, figure_data.steps
    figures.step_breakdown(runs, steps, tmp_path / "s")
    by_phase = kept[-1].axes[0]
    rs = sort_runs(study_runs(runs))
    typical = [derive.typical_step(steps, r) for _, r in rs.iterrows()]
    widths = [b.get_width() for b in artists.bars(by_phase)]
    n = len(rs)
    for k, col in enumerate(("forward_ms", "backward_ms", "optimizer_ms")):
        assert widths[k * n : (k + 1) * n] == pytest.approx([float(t[col]) for t in typical], rel=1e-9), col
    m, a = (derive.typical_step(steps, p) for p in first_pair(representative_runs(runs)))
    assert float(m["step_ms"]) > float(a["step_ms"]), "the committed Muon step is the slower"
    assert f"Muon's profiled step is {ms(m['step_ms'] - a['step_ms'], signed=True)} against AdamW's" in artists.words(kept[-1])


# ---------------------------------------------------------------- optimizer_overhead


def test_optimizer_overhead_whiskers_span_the_interval_and_the_study_line_is_in_percent(figure_data, tmp_path, kept):
    """Each whisker runs from the run's optimizer_share_low to its optimizer_share_high (in %), asymmetric intervals
    included; the original study's dashed line stands at its share in % (1.1), on the same axis as the bars."""
    from muon_repro.report import stated

    runs = figure_data.runs.copy()
    # the estimator's intervals are symmetric; a table's may not be: low 1 point under the share, high 3 above
    runs["optimizer_share_low"] = runs["optimizer_share"] - 0.01
    runs["optimizer_share_high"] = runs["optimizer_share"] + 0.03
    figures.optimizer_overhead(runs, figure_data.claims, tmp_path / "o")
    (ax, *_) = kept[-1].axes
    rs = sort_runs(study_runs(runs))
    y = np.arange(len(rs))[::-1]
    whiskers = [s for s in artists.segments(ax) if s[0, 1] == s[1, 1]]
    spans = {round(float(s[0, 1]), 6): sorted((float(s[0, 0]), float(s[1, 0]))) for s in whiskers}
    assert len(spans) == len(rs)
    for yi, (_, r) in zip(y, rs.iterrows()):
        low, high = 100 * float(r["optimizer_share_low"]), 100 * float(r["optimizer_share_high"])
        assert spans[round(float(yi), 6)] == pytest.approx([low, high], rel=1e-9), r["run"]
    study = 100 * stated.study_share(figure_data.claims, stated.profile_of(runs))
    vertical = [line for line in ax.get_lines() if len(set(np.asarray(line.get_xdata(), float))) == 1]
    assert [float(line.get_xdata()[0]) for line in vertical] == pytest.approx([study])


# ---------------------------------------------------------------- grid_comparison


def _grid_bars(ax) -> dict[float, float]:
    return {round(b.get_x() + b.get_width() / 2, 6): b.get_height() for b in artists.bars(ax)}


def test_grid_comparison_draws_the_timed_steps_and_stars_the_fastest(figure_data, tmp_path, kept):
    """Where every run has steps timed without the profiler, the bars are runs.timed_step_ms (what the claims read,
    the axis says so); the star and the verdict name each optimizer's fastest grid, by how much it beats the next."""
    runs = figure_data.runs
    figures.grid_comparison(runs, tmp_path / "g")
    fig = kept[-1]
    (ax, *_) = fig.axes
    reps = representative_runs(runs, groups=("distributed_muon", "comparison", "layout_ablation"))
    assert reps["timed_step_ms"].notna().all()
    assert sorted(_grid_bars(ax).values()) == pytest.approx(sorted(reps["timed_step_ms"].astype(float)), rel=1e-9)
    words = artists.words(fig)
    for optimizer, rows in reps.groupby("optimizer"):
        times = rows.set_index(["dp", "tp"])["timed_step_ms"].astype(float).sort_values()
        (dp, tp), fastest, runner_up = times.index[0], times.iloc[0], times.iloc[1]
        assert f"{fastest:.0f} ★" in words
        said = f"{style.OPTIMIZER_LABELS[optimizer]}: {style.grid_label(dp, tp)} fastest, "
        assert f"{said}{100 * (1 - fastest / runner_up):.0f}% faster than the next" in words


def test_grid_comparison_without_timed_steps_draws_p10_below_and_p90_above(figure_data, tmp_path, kept):
    """A run without timed steps makes the figure draw the profiled medians (runs.step_ms) with whiskers from p10 up
    to p90: the low end below the bar's top, the high end above it."""
    runs = figure_data.runs.copy()
    runs["timed_step_ms"] = np.nan
    figures.grid_comparison(runs, tmp_path / "g")
    (ax, *_) = kept[-1].axes
    reps = representative_runs(runs, groups=("distributed_muon", "comparison", "layout_ablation"))
    assert sorted(_grid_bars(ax).values()) == pytest.approx(sorted(reps["step_ms"].astype(float)), rel=1e-9)
    drawn = sorted(tuple(sorted(float(v) for v in s[:, 1])) for s in artists.segments(ax) if s[0, 0] == s[1, 0])
    expected = sorted((float(r["step_ms_p10"]), float(r["step_ms_p90"])) for _, r in reps.iterrows())
    assert np.allclose(drawn, expected, rtol=1e-9)
    skewed = reps[~np.isclose(reps["step_ms"] - reps["step_ms_p10"], reps["step_ms_p90"] - reps["step_ms"], rtol=1e-3)]
    assert len(skewed), "the committed p10-p90 ranges include a skewed one"
    assert "whiskers p10–p90" in ax.get_ylabel()


# ---------------------------------------------------------------- loss


def test_loss_quotes_each_optimizers_last_step_and_colours_each_curve_by_its_optimizer(tmp_path, kept):
    """Two runs of small tables: the takeaway's final loss is each optimizer's loss at its last step (not its first),
    and AdamW's curve wears AdamW's colour."""
    runs = pd.DataFrame(
        {
            "run": ["p/g/muon_dp2_tp2", "p/g/adamw_dp2_tp2"],
            "group": ["comparison", "comparison"],
            "name": ["muon_dp2_tp2", "adamw_dp2_tp2"],
            "optimizer": ["muon", "adamw"],
            "layout": ["contiguous", np.nan],
            "overlap": ["none", np.nan],
            "dp": [2, 2],
            "tp": [2, 2],
            "pp": [1, 1],
            "world_size": [4, 4],
            "profile": ["p", "p"],
        }
    )
    curve = {"muon": [9.0, 6.0, 4.25], "adamw": [9.0, 7.0, 5.5]}
    losses = pd.DataFrame(
        [
            {"run": f"p/g/{o}_dp2_tp2", "trial": 0, "rank": rank, "step": step, "loss": v}
            for o, values in curve.items()
            for step, v in enumerate(values, 1)
            for rank in range(4)
        ]
    )
    figures.loss(losses, runs, tmp_path / "loss")
    fig = kept[-1]
    assert "final loss (mean over configurations): Muon 4.25, AdamW 5.50" in artists.words(fig)
    colours = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    assert len(colours) == 2
    for label, colour in colours.items():
        optimizer = "muon" if label.startswith("Muon") else "adamw"
        assert colour == style.OPTIMIZER_COLORS[optimizer], label


# ---------------------------------------------------------------- state_memory and bytes_by_layout


def test_state_memory_stacks_adamws_moments_on_muons_momentum_and_states_muon_over_adamw(figure_data, tmp_path, kept):
    """Each steady-state bar is Muon's momentum with AdamW's moments on top of it (their sum is the mean state), in
    MB; the takeaway's ratio per grid is Muon's run's mean state over AdamW's."""
    from muon_repro.report import bytes_figures
    from muon_repro.report.formatting import ratio
    from muon_repro.report.selection import pair_at

    runs, ranks = figure_data.runs, figure_data.ranks
    bytes_figures.state_memory(runs, ranks, figure_data.checks, tmp_path / "m")
    steady = kept[-1].axes[0]
    bars = artists.bars(steady)
    reps = representative_runs(runs)
    assert len(bars) == 2 * len(reps)
    st = derive.state_by_run(ranks, reps["run"]).set_index("run")
    for momentum, moments in zip(bars[::2], bars[1::2]):
        assert moments.get_y() == pytest.approx(momentum.get_y() + momentum.get_height(), rel=1e-12)
    tops = sorted(b.get_y() + b.get_height() for b in bars[1::2])
    assert tops == pytest.approx(sorted((st["muon"] + st["adamw"]) / style.MB), rel=1e-9)
    said = bytes_figures.state_memory_stated(runs, ranks, figure_data.checks).text
    pair = pair_at(reps, 2, 2)
    m, a = (float(st.loc[p["run"], "muon"] + st.loc[p["run"], "adamw"]) for p in pair)
    assert ratio(m / a) != ratio(a / m) and f"DP2·TP2 {ratio(m / a)}" in said


def test_bytes_by_layout_stacks_each_source_in_mb_and_states_muon_over_adamw(figure_data, tmp_path, kept):
    """Each source's bar stacks its phases one on the other in MB (the axis' unit) up to the run's bytes of that
    source; the takeaway's bar-total ratios are each Muon layout's total over AdamW's."""
    from muon_repro.report import bytes_figures
    from muon_repro.report.formatting import ratio

    runs, phases = figure_data.runs, figure_data.phases
    bytes_figures.bytes_by_layout(runs, phases, figure_data.checks, figure_data.stated_numbers, tmp_path / "b")
    (ax, *_) = kept[-1].axes
    columns: dict[float, list] = {}
    for bar in artists.bars(ax):
        columns.setdefault(round(bar.get_x(), 6), []).append(bar)
    _, rs = bytes_figures._layout_runs(runs)
    expected = []
    for _, r in rs.iterrows():
        table = derive.phase_bytes(phases, str(r["run"]))
        expected += [float(table[s].sum()) / style.MB for s in style.BYTE_SOURCE_HATCH if table[s].notna().any()]
    drawn = []
    for stack in columns.values():
        for below, above in zip(stack, stack[1:]):
            assert above.get_y() == pytest.approx(below.get_y() + below.get_height(), rel=1e-9)
        drawn.append(stack[-1].get_y() + stack[-1].get_height())
    assert sorted(drawn) == pytest.approx(sorted(expected), rel=1e-9)
    said = bytes_figures.bytes_by_layout_stated(runs, phases, figure_data.checks, figure_data.stated_numbers).text
    totals = {str(r["run"]): derive.total_bytes(derive.phase_bytes(phases, str(r["run"]))) for _, r in rs.iterrows()}
    adamw = totals[str(rs[rs["optimizer"] == "adamw"].iloc[0]["run"])]
    listed = said.split("(the bar totals): ")[1].split(";")[0]
    for _, r in rs[rs["optimizer"] == "muon"].iterrows():
        assert f"{str(r['layout']).replace('_', '-')} {ratio(totals[str(r['run'])] / adamw)}" in listed, listed


def test_bytes_by_layout_prints_above_each_group_its_own_optimizers_dp_bytes(figure_data, tmp_path, kept):
    """Above each bar group, the DP-group bytes are those of the group's optimizer (the bytes check's
    muon_dp_bytes over a Muon layout, adamw_dp_bytes over AdamW), never the other's."""
    from muon_repro.report import bytes_figures, stated
    from muon_repro.report.formatting import mb

    runs = figure_data.runs
    bytes_figures.bytes_by_layout(runs, figure_data.phases, figure_data.checks, figure_data.stated_numbers, tmp_path / "b")
    (ax, *_) = kept[-1].axes
    above = [t.get_text() for t in ax.texts if "DP group:" in t.get_text()]
    _, rs = bytes_figures._layout_runs(runs)
    profile = stated.profile_of(runs)
    assert len(above) == len(rs)
    for text, (_, r) in zip(above, rs.iterrows()):
        layout = r["layout"] if r["optimizer"] == "muon" else "contiguous"
        value = stated.dp_bytes(figure_data.checks, figure_data.stated_numbers, profile, layout, str(r["optimizer"]))
        assert text.endswith(f"DP group:\n{stated.dp_mb(value)}"), (r["run"], text)
    muon, adamw = (
        stated.dp_bytes(figure_data.checks, figure_data.stated_numbers, profile, "bucketed", o) for o in ("muon", "adamw")
    )
    assert mb(muon) != mb(adamw), "the committed bucketed check tells Muon's DP bytes from AdamW's"


# ---------------------------------------------------------------- regime figures


def test_regime_map_whiskers_span_each_points_interval_and_the_claimed_levels_are_in_percent(figure_data, tmp_path, kept):
    """Each measured point's whisker runs from its _lo to its _hi column (in %) on both panels, and the claimed levels
    are drawn in % too: the study's 1.1% on the share, the paper's 3% on the extra."""
    from muon_repro.claims import PAPER_LATENCY, STUDY_SHARE
    from muon_repro.report import regime_figures

    regimes = figure_data.regimes
    regime_figures.regime_map(regimes, figure_data.regime_model, tmp_path / "r")
    sweep = regime_figures.main_axis(regimes)
    for ax, col, level in zip(kept[-1].axes[:2], ("optimizer_share", "muon_extra"), (STUDY_SHARE, PAPER_LATENCY)):
        drawn = sorted((float(s[0, 0]), *sorted(float(v) for v in s[:, 1])) for s in artists.segments(ax) if s[0, 0] == s[1, 0])
        expected = sorted(
            (float(r["tokens_per_step"]), 100 * float(r[f"{col}_lo"]), 100 * float(r[f"{col}_hi"])) for _, r in sweep.iterrows()
        )
        assert np.allclose(drawn, expected, rtol=1e-9), col
        flat = [float(line.get_ydata()[0]) for line in ax.get_lines() if len(set(np.asarray(line.get_ydata(), float))) == 1]
        assert any(np.isclose(y, 100 * level.value) for y in flat), (col, flat)


@pytest.mark.parametrize(("share", "where"), [(0.005, "under"), (0.5, "above")])
def test_regime_map_says_under_or_above_the_studys_share_as_the_intervals_lie(figure_data, tmp_path, kept, share, where):
    """The takeaway says the largest step's shares are under the study's 1.1% only when every one's interval ends
    under it, above when none does."""
    from muon_repro.claims import STUDY_SHARE
    from muon_repro.report import regime_figures

    regimes = figure_data.regimes.copy()
    regimes[["optimizer_share", "optimizer_share_lo", "optimizer_share_hi"]] = [share, 0.8 * share, 1.2 * share]
    regime_figures.regime_map(regimes, figure_data.regime_model, tmp_path / "r")
    assert f"{where} the {STUDY_SHARE.percent} of Wei's study" in artists.words(kept[-1])


def test_closed_form_draws_the_exact_flop_ratio_of_the_table(figure_data, tmp_path, kept):
    """The hollow points ('exact FLOP ratio') are the regimes table's flop_ratio, not its closed-form estimate."""
    from muon_repro.report import regime_figures

    regimes = figure_data.regimes
    regime_figures.closed_form(regimes, tmp_path / "c")
    ax = kept[-1].axes[0]
    muon = regimes[(regimes["optimizer"] == "muon") & regimes["adamw_run"].notna()]
    hollow = [c for c in ax.collections if len(c.get_offsets()) and not c.get_label().startswith("measured")]
    drawn = np.sort(np.concatenate([c.get_offsets()[:, 1] for c in hollow]))
    assert np.allclose(drawn, np.sort(muon["flop_ratio"].to_numpy(float)))
    assert not np.allclose(drawn, np.sort(muon["closed_form_ratio"].to_numpy(float)))


def test_profiles_quotes_the_papers_level_crossings_and_muons_extra_at_scale(figure_data, tmp_path, kept):
    """The takeaway names, per machine and model, where Muon's extra falls to the paper's 3% (the thresholds at that
    level), and the scale-out's first and last values of Muon's extra (not of its optimizer share)."""
    from muon_repro.claims import PAPER_LATENCY
    from muon_repro.report import regime_figures
    from muon_repro.report.formatting import percent

    model, thresholds = figure_data.regime_model, figure_data.regime_thresholds
    regime_figures.profiles(model, thresholds, tmp_path / "p")
    words = artists.words(kept[-1])
    rows = thresholds[(thresholds["metric"] == "muon_extra") & np.isclose(thresholds["level"].astype(float), 0.03)]
    assert len(rows) and PAPER_LATENCY.value == 0.03
    for r in rows.itertuples():
        said = f"{regime_figures.machine_style(r.machine)[1]}, {r.model}: {regime_figures._crossing(r.tokens_per_step)}"
        assert said in words, said
    scale = model[model["kind"] == "scale_out"].sort_values("gpus")
    first, last = (float(scale["muon_extra"].iloc[k]) for k in (0, -1))
    assert f"Muon's extra goes from {percent(first)} on" in words and f"to {percent(last)} on" in words


# ---------------------------------------------------------------- claims_by_profile


def _claims(unit_kind: str, low: list[float], high: list[float]) -> pd.DataFrame:
    """One claim measured on two profiles, its value 0.5 on each, the interval ends given."""
    return pd.DataFrame(
        {
            "claim_id": ["optimizer_share", "optimizer_share"],
            "profile": ["cpu-a", "gpu-b"],
            "measured_value": [0.5, 0.5],
            "measured_low": low,
            "measured_high": high,
            "region_low": [0.0, 0.0],
            "region_high": [0.03, 0.03],
            "verdict": ["not reproduced", "not reproduced"],
            "unit_kind": [unit_kind, unit_kind],
        }
    )


def test_claims_by_profile_draws_each_interval_from_its_low_to_its_high_end(tmp_path, kept):
    """An asymmetric interval (0.45 to 0.7 around 0.5) is drawn from 0.45 to 0.7, not mirrored."""
    from muon_repro.report import profile_figures

    profile_figures.claims_by_profile(_claims("fraction", [0.45, 0.4], [0.7, 0.52]), tmp_path / "p")
    ax = kept[-1].axes[0]
    drawn = sorted((float(s[0, 1]), *sorted(float(v) for v in s[:, 0])) for s in artists.segments(ax) if s[0, 1] == s[1, 1])
    assert np.allclose(drawn, [(0.0, 0.45, 0.7), (1.0, 0.4, 0.52)])


@pytest.mark.parametrize(("unit_kind", "in_percent"), [("fraction", True), ("change", True), ("ratio", False)])
def test_claims_by_profile_writes_a_fraction_axis_in_percent_of_one(tmp_path, kept, unit_kind, in_percent):
    """The claims table's fractions and changes are of 1: 0.5 is written 50% on the axis, as the report writes it; a
    ratio's axis is no percentage."""
    from matplotlib.ticker import PercentFormatter

    from muon_repro.report import profile_figures

    profile_figures.claims_by_profile(_claims(unit_kind, [0.45, 0.4], [0.7, 0.52]), tmp_path / "p")
    formatter = kept[-1].axes[0].xaxis.get_major_formatter()
    assert isinstance(formatter, PercentFormatter) is in_percent
    if in_percent:
        assert formatter(0.5) == "50%"


# ---------------------------------------------------------------- timeline


def test_the_timeline_takeaway_quotes_the_longest_ranks_step(figure_data, tmp_path, kept):
    """A step lasts as long as its slowest rank: the takeaway's 'of a N ms step' is the longest rank window."""
    from muon_repro.report import timeline_figures
    from muon_repro.report.selection import timeline_run

    timeline_figures.timeline(figure_data.timeline, figure_data.runs, tmp_path / "t")
    row = timeline_run(figure_data.runs)
    trial, step = derive.typical(row)
    windows = derive.one_step(figure_data.timeline, str(row["run"]), step, trial).windows
    lengths = (windows["end_ms"] - windows["start_ms"]).astype(float)
    assert f"{lengths.max():.0f}" != f"{lengths.min():.0f}", "the committed ranks' steps differ in length"
    assert f"of a {lengths.max():.0f} ms step" in artists.words(kept[-1])


# ---------------------------------------------------------------- the shared toolkit


def test_log_ticks_write_tokens_with_k_and_other_numbers_plainly():
    """tokens=True writes 4096 tokens as 4.1k (k = 1,000); a plain axis writes 4096 as the number."""
    import matplotlib.pyplot as plt

    from muon_repro.report.formatting import count, plain
    from muon_repro.report.plotting import new_figure, plain_log_ticks

    fig, (ax,) = new_figure(2.0)
    plain_log_ticks(ax, "x", tokens=True)
    plain_log_ticks(ax, "y")
    assert ax.xaxis.get_major_formatter()(4096, 0) == count(4096, "tick") == "4.1k"
    assert ax.yaxis.get_major_formatter()(4096, 0) == plain(4096) != "4.1k"
    plt.close(fig)


def test_each_grids_label_is_centred_under_its_bars():
    """Two runs at DP2·TP2 and one at DP4: the bars stand at 0, 0.8 and 2.1 (a gap between grids), the grid labels at
    0.4 and 2.1."""
    from muon_repro.report.plotting import grouped_positions

    reps = pd.DataFrame({"run": ["m22", "a22", "m41"], "dp": [2, 2, 4], "tp": [2, 2, 1], "optimizer": ["muon", "adamw", "muon"]})
    pos, ordered, groups = grouped_positions(reps)
    assert pos == pytest.approx([0.0, 0.8, 2.1])
    assert list(ordered["run"]) == ["m22", "a22", "m41"]
    assert [label for _, label in groups] == [style.grid_label(2, 2), style.grid_label(4, 1)]
    assert [center for center, _ in groups] == pytest.approx([0.4, 2.1])


# ---------------------------------------------------------------- convergence_sweep and leading_steps


def _first_group(table: pd.DataFrame, convergence: pd.DataFrame) -> pd.DataFrame:
    """The rows of the configuration the convergence figures draw: the reference ``convergence`` group."""
    from muon_repro.report.convergence_section import CONVERGENCE_GROUP

    assert CONVERGENCE_GROUP in set(convergence["group"]) and convergence["group"].nunique() > 1
    return table[table["group"] == CONVERGENCE_GROUP]


def test_convergence_sweep_draws_each_rates_validation_loss_by_step_in_its_optimizers_panel(figure_data, tmp_path, kept):
    """Per optimizer's panel (Muon left, AdamW right), one line per learning rate of the reference configuration's
    sweep: validation loss against step in step order, in the optimizer's colour, the best rate's bold and labelled so;
    the takeaway quotes each best rate's last validation loss and the run's steps x tokens per step."""
    from muon_repro.report import convergence_section

    conv = figure_data.convergence
    convergence_section.convergence_sweep(conv, tmp_path / "sweep")
    fig = kept[-1]
    sweep = _first_group(conv, conv)
    sweep = sweep[sweep["sweep"].fillna(False).astype(bool)].dropna(subset=["val_loss"])
    assert set(sweep["seed"].astype(int)) == {0}
    words = artists.words(fig)
    for ax, opt in zip(fig.axes[:2], ("muon", "adamw")):
        assert ax.get_title() == style.OPTIMIZER_LABELS[opt]
        lines = {line.get_label(): line for line in ax.get_lines() if line.get_label().startswith("lr ")}
        sub = sweep[sweep["optimizer"] == opt]
        assert len(lines) == sub["lr"].nunique() >= 2
        for lr, g in sub.groupby(sub["lr"].astype(float)):
            g = g.sort_values("step")
            best = bool(g["best_lr"].fillna(False).all())
            line = lines[f"lr {lr:g}" + (" (best)" if best else "")]
            assert np.array_equal(np.asarray(line.get_xdata(), float), g["step"].to_numpy(float)), (opt, lr)
            assert np.allclose(np.asarray(line.get_ydata(), float), g["val_loss"].to_numpy(float), rtol=1e-12), (opt, lr)
            assert line.get_color() == style.OPTIMIZER_COLORS[opt]
            assert (line.get_linewidth() > 2) is best, (opt, lr)
            if best:
                said = f"{style.OPTIMIZER_LABELS[opt]} {float(g['val_loss'].iloc[-1]):.3f} at lr {lr:g}"
                assert said in words, said
    first = sweep.iloc[0]
    assert int(first["steps"]) != int(first["tokens_per_step"])
    assert f"{int(first['steps'])} steps x {int(first['tokens_per_step'])} tokens" in words


def test_leading_steps_draws_the_headline_smoothings_curves_per_seed_and_quotes_each_seeds_last_match(
    figure_data, tmp_path, kept
):
    """At the headline smoothing of the reference configuration, per seed against the Muon step: Muon's smoothed loss
    in Muon's colour and AdamW's in AdamW's (left), the leading steps (middle), the leading ratio (right); the takeaway
    gives each optimizer's learning rate and each seed's ratio at the last Muon step AdamW reaches."""
    from muon_repro.report import convergence_section
    from muon_repro.report.convergence_section import HEADLINE_ALPHA

    conv, leading = figure_data.convergence, figure_data.leading_steps
    convergence_section.leading_steps(conv, leading, tmp_path / "lead")
    fig = kept[-1]
    lead = _first_group(leading, conv)
    assert leading["alpha"].astype(float).nunique() > 1
    lead = lead[lead["alpha"].astype(float) == HEADLINE_ALPHA]
    seeds = sorted(lead["seed"].astype(int).unique())
    assert len(seeds) >= 2
    drawn = [{line.get_label(): line for line in ax.get_lines()} for ax in fig.axes[:3]]
    words = artists.words(fig)

    def same(line, x, y):
        assert np.array_equal(np.asarray(line.get_xdata(), float), x)
        assert np.allclose(np.asarray(line.get_ydata(), float), y, rtol=1e-12, equal_nan=True)

    for seed in seeds:
        g = lead[lead["seed"].astype(int) == seed].sort_values("muon_step")
        x = g["muon_step"].to_numpy(float)
        for opt in ("muon", "adamw"):
            line = drawn[0][f"{style.OPTIMIZER_LABELS[opt]}, seed {seed}"]
            same(line, x, g[f"{opt}_loss_ewm"].to_numpy(float))
            assert line.get_color() == style.OPTIMIZER_COLORS[opt]
        same(drawn[1][f"seed {seed}"], x, g["leading_steps"].to_numpy(float))
        same(drawn[2][f"seed {seed}"], x, g["leading_ratio"].to_numpy(float))
        matched = g.dropna(subset=["adamw_matching_step"])
        assert matched["muon_step"].max() < g["muon_step"].max(), "the committed AdamW never reaches Muon's last steps"
        last = matched.iloc[-1]
        assert f"seed {seed}: {float(last['leading_ratio']):+.2f} at Muon step {int(last['muon_step'])}" in words
    first = lead.iloc[0]
    assert float(first["muon_lr"]) != float(first["adamw_lr"])
    assert f"Muon lr {float(first['muon_lr']):g} vs AdamW lr {float(first['adamw_lr']):g}" in words


# ---------------------------------------------------------------- pipeline


def test_pipeline_steps_panel_draws_each_grids_timed_step_muon_above_adamw_in_the_grids_order(figure_data, tmp_path, kept):
    """Left panel, top to bottom in the grids' order: per grid, Muon's bar above AdamW's, each the runs table's
    timed_step_ms of the grid's pipeline-group run of that optimizer, in its colour, its value written at its end;
    the grid of more ranks faded, under a dashed line."""
    from matplotlib.colors import to_hex

    from muon_repro.report.pipeline_section import pipeline, pipeline_grids
    from muon_repro.report.selection import PIPELINE_GROUP, pipeline_runs

    runs = figure_data.runs
    pipeline(runs, figure_data.stages, figure_data.claims, tmp_path / "p")
    ax = kept[-1].axes[0]
    group = pipeline_runs(runs)
    grids = pipeline_grids(group)
    smallest = min(int(g["world_size"].iloc[0]) for _, g in grids)
    drawn = {round(b.get_y() + b.get_height() / 2, 6): b for b in artists.bars(ax)}
    texts = {round(t.get_position()[1], 6): t for t in ax.texts}
    assert len(drawn) == 2 * len(grids)
    ticks = {round(float(y), 6): t.get_text().split("\n")[0] for y, t in zip(ax.get_yticks(), ax.get_yticklabels())}
    for i, (grid, g) in enumerate(grids):
        top = len(grids) - 1 - i
        assert ticks[top] == style.grid_label(*grid)
        for opt, dy in (("muon", 0.2), ("adamw", -0.2)):
            rows = g[(g["optimizer"] == opt) & (g["group"] == PIPELINE_GROUP)]  # not the pipeline_bubble group's PP4
            value = float(rows["timed_step_ms"].iloc[0])
            bar = drawn[round(top + dy, 6)]
            assert bar.get_x() == 0 and bar.get_width() == pytest.approx(value, rel=1e-12), (grid, opt)
            assert to_hex(bar.get_facecolor()) == to_hex(style.OPTIMIZER_COLORS[opt]), (grid, opt)
            assert (bar.get_alpha() < 1) is (int(g["world_size"].iloc[0]) > smallest), (grid, opt)
            text = texts[round(top + dy, 6)]
            assert text.get_text().strip() == f"{value:.0f}" and text.get_position()[0] == pytest.approx(value)
    assert float(group["timed_step_ms"].iloc[0]) != float(group["step_ms"].iloc[0]), "timed and profiled steps differ"
    worlds = [int(g["world_size"].iloc[0]) for _, g in grids]
    assert worlds[-1] > smallest and worlds[-2] == smallest
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert [float(line.get_ydata()[0]) for line in dashed] == [0.5], "the 8-rank grid (bottom) below a dashed line"


def test_pipeline_stages_panel_stacks_compute_bubble_and_optimizer_of_each_muon_stage(figure_data, tmp_path, kept):
    """Right panel, top to bottom in the stages' order: per Muon stage, forward+backward less the bubble from 0, the
    bubble after it (the two making forward+backward), then the optimizer step; labelled with its grid and stage."""
    from matplotlib.colors import to_hex

    from muon_repro.report import pipeline_section
    from muon_repro.report.selection import pipeline_runs

    runs, stages = figure_data.runs, figure_data.stages
    pipeline_section.pipeline(runs, stages, figure_data.claims, tmp_path / "p")
    ax = kept[-1].axes[1]
    rows = pipeline_section.muon_stages(stages, pipeline_runs(runs))
    by_y: dict[float, list] = {}
    for bar in artists.bars(ax):
        by_y.setdefault(round(bar.get_y() + bar.get_height() / 2, 6), []).append(bar)
    labels = {round(float(y), 6): t.get_text() for y, t in zip(ax.get_yticks(), ax.get_yticklabels())}
    assert len(by_y) == len(rows) >= 4
    colours = (pipeline_section.COMPUTE_COLOR, pipeline_section.BUBBLE_COLOR, pipeline_section.OPTIMIZER_COLOR)
    for k, (_, s) in enumerate(rows.iterrows()):
        y = float(len(rows) - 1 - k)
        fwd_bwd, bubble, opt = (float(s[c]) for c in ("timed_fwd_bwd_ms", "timed_bubble_ms", "timed_optimizer_ms"))
        expected = [0.0, fwd_bwd - bubble, fwd_bwd - bubble, bubble, fwd_bwd, opt]  # (left, width) of each part
        drawn = by_y[y]
        assert [float(v) for b in drawn for v in (b.get_x(), b.get_width())] == pytest.approx(expected, rel=1e-12), s["run"]
        assert [to_hex(b.get_facecolor()) for b in drawn] == [to_hex(c) for c in colours]
        assert labels[y].endswith(f"stage {int(s['stage'])}"), (labels[y], s["run"], s["stage"])
    assert int(rows["stage"].min()) == 0


# ---------------------------------------------------------------- single_device


def test_single_device_draws_each_tokens_share_and_extra_in_percent_on_a_log_axis_with_this_devices_model(
    report_data, tmp_path, kept
):
    """Per tokens per step timed on one device: Muon's optimizer share (the runs table's, its whisker from its low to
    its high end) on the left, Muon's timed step over AdamW's less 1 on the right, each in % and labelled with its
    value; the cost model's line is this machine's (kind this_machine), by tokens; each panel's claimed level is its
    own quantity's; the takeaway quotes the largest tokens per step."""
    from muon_repro.claims import PAPER_LATENCY, STUDY_SHARE
    from muon_repro.report import gpu_section
    from muon_repro.report.formatting import count, percent

    d = report_data.of_profile("1xH200-nccl")
    model = d.regime_model
    mine = model[(model["kind"] == "this_machine") & (model["dp"] == 1) & (model["tp"] == 1)].sort_values("tokens_per_step")
    # another kind of model on one device, further off: the figure draws this machine's only
    other = mine.assign(kind="measured_compute", optimizer_share=3 * mine["optimizer_share"], muon_extra=3 * mine["muon_extra"])
    # the shares doubled, their intervals with them: the committed share and extra at the largest tokens both write 4.9%
    share_columns = ["optimizer_share", "optimizer_share_low", "optimizer_share_high"]
    all_runs = d.runs.assign(**{c: 2 * d.runs[c] for c in share_columns})
    gpu_section.single_device(all_runs, pd.concat([other, model]), tmp_path / "s", d.claims)
    fig = kept[-1]
    runs = all_runs[(all_runs["dp"] == 1) & (all_runs["tp"] == 1) & all_runs["timed_step_ms"].notna()]
    muon = runs[runs["optimizer"] == "muon"].set_index("tokens_per_step").sort_index()
    adamw = runs[runs["optimizer"] == "adamw"].set_index("tokens_per_step").sort_index()
    assert list(muon.index) == list(adamw.index) and len(muon) >= 3
    tokens = muon.index.to_numpy(float)
    share = muon["optimizer_share"].to_numpy(float)
    extra = (muon["timed_step_ms"] / adamw["timed_step_ms"] - 1).to_numpy(float)
    assert not np.allclose(share, extra)
    for ax, column, y, level, signed in (
        (fig.axes[0], "optimizer_share", share, STUDY_SHARE, False),
        (fig.axes[1], "muon_extra", extra, PAPER_LATENCY, True),
    ):
        assert ax.get_xscale() == "log"
        (points,) = [line for line in ax.get_lines() if line.get_marker() == "o"]
        assert np.array_equal(np.asarray(points.get_xdata(), float), tokens)
        assert np.allclose(np.asarray(points.get_ydata(), float), 100 * y, rtol=1e-9), column
        (curve,) = [line for line in ax.get_lines() if line.get_color() == "#444444"]
        assert np.array_equal(np.asarray(curve.get_xdata(), float), mine["tokens_per_step"].to_numpy(float))
        assert np.allclose(np.asarray(curve.get_ydata(), float), 100 * mine[column].to_numpy(float), rtol=1e-9), column
        flat = {round(float(line.get_ydata()[0]), 9) for line in ax.get_lines() if len(set(line.get_ydata())) == 1}
        assert round(100 * level.value, 9) in flat, column
        assert not {round(100 * v.value, 9) for v in (STUDY_SHARE, PAPER_LATENCY) if v is not level} & flat, column
        said = {(round(float(t.xy[0]), 6), round(float(t.xy[1]), 6)): t.get_text() for t in ax.texts if hasattr(t, "xy")}
        for x, v in zip(tokens, y):
            assert said[(round(x, 6), round(100 * v, 6))] == percent(v, signed=signed), (column, x)
    whiskers = sorted((float(s[0, 0]), *sorted(float(v) for v in s[:, 1])) for s in artists.segments(fig.axes[0]))
    expected = sorted(
        (float(t), 100 * float(r["optimizer_share_low"]), 100 * float(r["optimizer_share_high"])) for t, r in muon.iterrows()
    )
    assert np.allclose(whiskers, expected, rtol=1e-9)
    assert (muon["optimizer_share_high"] - muon["optimizer_share"]).round(9).tolist() != (
        muon["optimizer_share"] - muon["optimizer_share_low"]
    ).round(9).tolist(), "the committed intervals are not symmetric"
    largest = int(tokens.argmax())
    assert percent(share[largest]) != percent(extra[largest])
    words = artists.words(fig)
    assert f"At {count(tokens[largest])} tokens per step Muon's optimizer step is {percent(share[largest])} of its step" in words
    assert f"and its step {percent(extra[largest])} longer than AdamW's" in words


# ---------------------------------------------------------------- study_numbers


def test_study_numbers_stacks_each_numbers_parts_by_category_with_the_rebuilt_number_at_its_end(report_data, tmp_path, kept):
    """Per panel, top to bottom in the panel's order, every published number it names: its parts (study_method_parts,
    in ms) stacked from 0 one after the other in their category's colour, the rebuilt number written at the stack's
    end, our measure's black bar just under it, and the number's quantity and optimizer as its label; a thin
    category's legend entry gives its largest part."""
    from matplotlib.colors import to_hex

    from muon_repro.report import study_section
    from muon_repro.report.formatting import ms

    method, parts = report_data.study_method, report_data.study_method_parts
    # the last number drawn with a CPU-op part gets the smallest one: the legend's "at most" is the largest, not the last
    last_cpu = (parts["number_id"] == "async_comm_ms_adamw") & (parts["category"] == "cpu_op (collective)")
    assert last_cpu.sum() == 1 and float(parts.loc[last_cpu, "ms"].iloc[0]) > 0.1
    parts = parts.assign(ms=parts["ms"].astype(float).where(~last_cpu, 0.1))
    study_section.study_numbers(method, parts, tmp_path / "study_numbers")
    fig = kept[-1]
    by_id = method.set_index("number_id")
    largest: dict[str, float] = {}
    for ax, (_, ids) in zip(fig.axes, study_section.PANELS):
        ids = [i for i in ids if i in by_id.index]
        assert len(ids) >= 2
        rows: dict[float, list] = {}
        for bar in artists.bars(ax):
            rows.setdefault(round(bar.get_y() + bar.get_height() / 2, 6), []).append(bar)
        labels = {round(float(y), 6): t.get_text() for y, t in zip(ax.get_yticks(), ax.get_yticklabels())}
        texts = {round(t.get_position()[1], 6): t for t in ax.texts}
        assert len(labels) == len(ids)
        for k, number_id in enumerate(ids):
            y = float(len(ids) - 1 - k)
            mine = parts[parts["number_id"] == number_id]
            assert len(mine) >= 1, number_id
            stack = rows[round(y + 0.18, 6)]
            widths = mine["ms"].astype(float).to_numpy()
            assert [float(b.get_width()) for b in stack] == pytest.approx(list(widths), rel=1e-12), number_id
            assert [float(b.get_x()) for b in stack] == pytest.approx([0.0, *np.cumsum(widths)[:-1]], rel=1e-12, abs=1e-12)
            assert [to_hex(b.get_facecolor()) for b in stack] == [
                to_hex(study_section.CATEGORY_COLORS[c]) for c in mine["category"].astype(str)
            ]
            for c, v in zip(mine["category"].astype(str), widths):
                largest[c] = max(largest.get(c, 0.0), float(v))
            assert texts[round(y + 0.18, 6)].get_position()[0] == pytest.approx(widths.sum(), rel=1e-12), number_id
            (ours,) = rows[round(y - 0.18, 6)]
            assert to_hex(ours.get_facecolor()) == "#000000" and ours.get_x() == 0
            optimizer = str(by_id.loc[number_id, "optimizer"])
            assert labels[y] == f"{by_id.loc[number_id, 'quantity']}\n{style.OPTIMIZER_LABELS[optimizer]}", number_id
    # the caption's panels: communication (the original run's and the async one's) left, the optimizer right; each
    # quantity for both optimizers
    both = [style.OPTIMIZER_LABELS[o] for o in ("muon", "adamw")]
    for ax, numbers in zip(fig.axes[:2], (("comm", "async_comm"), ("optimizer",))):
        shown = {tuple(t.get_text().split("\n")) for t in ax.get_yticklabels()}
        assert shown == {(by_id.loc[f"{n}_ms_muon", "quantity"], o) for n in numbers for o in both}, shown
    thin = [t.get_text() for legend in fig.legends for t in legend.get_texts() if "too thin to see" in t.get_text()]
    assert thin, "the committed study has a category too thin to see"
    for text in thin:
        category = text.split(": at most", 1)[0]
        assert text == f"{category}: at most {ms(largest[category])}, too thin to see"
