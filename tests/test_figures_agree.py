"""The figures agree with the claims and checks tables: for the committed ``metrics/``, every claim or check value a
figure states is the table's value written the same way (and is in the drawn SVG); every run has its own label; no
percentage is written with an exponent; k is 1,000."""

from __future__ import annotations

import html
import itertools
import math
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.report import bytes_figures, figures, stated
from muon_repro.report.checks_section import check_number
from muon_repro.report.claims_section import claim_number
from muon_repro.report.formatting import count, pct, percent
from muon_repro.report.selection import run_labels, sort_runs, study_runs

METRICS = Path(__file__).resolve().parents[1] / "metrics"


@pytest.fixture(scope="module")
def tables(figure_data):
    """claims and checks read straight from the parquet files (not through the report), of the figures' profile."""
    claims = pd.read_parquet(METRICS / "claims.parquet")
    checks = pd.read_parquet(METRICS / "checks.parquet")
    return claims[claims["profile"] == figure_data.profile], checks[checks["profile"] == figure_data.profile]


def _claim(claims: pd.DataFrame, claim_id: str) -> pd.Series:
    return claims[claims["claim_id"] == claim_id].iloc[0]


def _stated(figure_data, table: str, row_id: str, profile: str, name: str) -> float:
    """A number of the stated_numbers table, read directly (not through the report's lookup)."""
    n = figure_data.stated_numbers
    hit = n[(n["table"] == table) & (n["row_id"] == row_id) & (n["profile"] == profile) & (n["name"] == name)]
    assert len(hit) == 1, (table, row_id, profile, name)
    return float(hit["value"].iloc[0])


def _svg_text(path: Path) -> str:
    """The SVG's text (svg.fonttype none keeps it as text), lines joined as the figure wraps them."""
    return " ".join(html.unescape(Path(path).with_suffix(".svg").read_text()).split())


def test_comm_time_states_the_claims_values(figure_data, tables, tmp_path, svg_only):
    claims, _ = tables
    row = _claim(claims, "comm_time_dp2_tp2")
    said = figures.comm_time_stated(figure_data.runs, figure_data.claims, figure_data.stated_numbers)
    unit, cid = str(row["unit_kind"]), "comm_time_dp2_tp2"
    assert said.values["claims.comm_time_dp2_tp2.measured_value"] == claim_number(row["measured_value"], unit, cid)
    waiting = _stated(figure_data, "claims", cid, row["profile"], "comm_ms_ratio_with_waiting")
    assert said.values["stated_numbers.comm_time_dp2_tp2.comm_ms_ratio_with_waiting"] == claim_number(waiting, unit, cid)
    assert said.values["claims.comm_time_dp2_tp2.claimed_value"] == claim_number(row["claimed_value"], unit, cid, digits=0)
    # The claim's quantity is named, and so is the bars' other one.
    assert "transfer time" in said.text and "the claim's quantity" in said.text
    assert "the bars (profiled steps, communication incl. waiting)" in said.text
    for value in said.values.values():
        assert value in said.text
    png = figures.comm_time_by_kind(
        figure_data.runs, figure_data.steps, figure_data.claims, figure_data.stated_numbers, tmp_path / "comm_time_by_kind"
    )
    svg = _svg_text(png)
    for value in said.values.values():
        assert value in svg


def test_optimizer_overhead_states_the_claims_values(figure_data, tables, tmp_path, svg_only):
    claims, _ = tables
    row = _claim(claims, "optimizer_share")
    said = figures.optimizer_share_stated(figure_data.runs, figure_data.claims)
    unit = str(row["unit_kind"])
    assert said.values["claims.optimizer_share.measured_value"] == claim_number(row["measured_value"], unit, "optimizer_share")
    assert said.values["claims.optimizer_share.claimed_value"] == claim_number(
        row["claimed_value"], unit, "optimizer_share", digits=0
    )
    assert "the bars:" in said.text and "(its bar)" in said.text
    svg = _svg_text(figures.optimizer_overhead(figure_data.runs, figure_data.claims, tmp_path / "optimizer_overhead"))
    for value in said.values.values():
        assert value in svg


def test_bytes_by_layout_states_the_checks_values(figure_data, tables, tmp_path, svg_only):
    _, checks = tables
    said = bytes_figures.bytes_by_layout_stated(
        figure_data.runs, figure_data.phases, figure_data.checks, figure_data.stated_numbers
    )
    by_layout = checks[checks["layout"].notna()]
    assert len(by_layout) > 0
    for _, c in by_layout.iterrows():
        cid = str(c["check_id"])
        expected = check_number(c["measured_value"], str(c["unit_kind"]), cid)
        assert said.values[f"checks.{cid}.measured_value"] == expected
        assert f"{str(c['layout']).replace('_', '-')} {expected}" in said.text
    # The bar totals' ratios (TP gather included) are named as the other quantity they are.
    assert "the bytes checks' quantity" in said.text and "TP gather included (the bar totals)" in said.text
    # The DP-group bytes above the bars are the checks' (stated muon_dp_bytes / adamw_dp_bytes) ...
    for key, printed in said.values.items():
        if key.startswith("stated_numbers."):
            _, cid, name = key.split(".")
            profile = checks[checks["check_id"] == cid].iloc[0]["profile"]
            assert printed == stated.dp_mb(_stated(figure_data, "checks", cid, profile, name))
    # ... and the drawn DP bars add up to them.
    for _, r in sort_runs(figure_data.runs).iterrows():
        if r["dp"] != 2 or r["tp"] != 2 or r["group"] not in ("comparison", "layout_ablation"):
            continue
        layout = r["layout"] if r["optimizer"] == "muon" else "contiguous"
        rows = by_layout[by_layout["layout"] == layout]
        if rows.empty:
            continue
        from muon_repro.report import derive

        table = derive.phase_bytes(figure_data.phases, str(r["run"]))
        dp_phases = [p for p in table.index if p.startswith("dp_")]
        drawn = float(table.loc[dp_phases, "trace"].sum())
        dp_bytes = _stated(figure_data, "checks", rows.iloc[0]["check_id"], rows.iloc[0]["profile"], f"{r['optimizer']}_dp_bytes")
        assert drawn == pytest.approx(dp_bytes, rel=1e-9)
    svg = _svg_text(
        bytes_figures.bytes_by_layout(
            figure_data.runs, figure_data.phases, figure_data.checks, figure_data.stated_numbers, tmp_path / "bytes_by_layout"
        )
    )
    for value in said.values.values():
        assert value in svg


def test_every_run_has_its_own_label(figure_data):
    rs = sort_runs(figure_data.runs)
    for group in (False, True):
        labels = run_labels(rs, group=group)
        assert len(set(labels)) == len(labels), labels
    overlap = rs[rs["group"] == "overlap"]
    labels = run_labels(overlap, group=True)
    assert any("naive async" in label for label in labels) and any("pipelined" in label for label in labels)


@pytest.mark.parametrize(
    "fraction, expected",
    [(0.011, "1.1%"), (0.5, "50%"), (0.997, "100%"), (1.0, "100%"), (1.03, "103%"), (0.0012, "0.12%"), (12.3, "1230%")],
)
def test_percent_never_has_an_exponent(fraction, expected):
    assert percent(fraction) == expected
    assert "e+" not in percent(fraction, digits=3) and "e+" not in percent(fraction, signed=True)


def test_k_is_one_thousand():
    assert count(103_000) == "103k"
    assert count(2**20) == "1.05M"  # never 1,024 k
    assert count(999_500) == "1M"
    assert count(512) == "512"


def test_no_percentage_printed_with_an_exponent(report_data, figure_data):
    from muon_repro.report import readme, regimes_section

    texts = [
        figures.comm_time_stated(figure_data.runs, figure_data.claims, figure_data.stated_numbers).text,
        figures.optimizer_share_stated(figure_data.runs, figure_data.claims).text,
        bytes_figures.bytes_by_layout_stated(
            figure_data.runs, figure_data.phases, figure_data.checks, figure_data.stated_numbers
        ).text,
        stated.pipeline(figure_data.claims, stated.profile_of(figure_data.runs)).text,
        *(readme.BLOCKS[name](report_data) for name in readme.BLOCKS),
        *regimes_section.sweep_lines(figure_data.regimes),
    ]
    for text in texts:
        assert "e+" not in text and "e-0" not in text, text


@pytest.mark.slow  # end to end: lays out every figure of the committed tables (~8 s)
def test_no_legend_covers_a_panel(tmp_path, monkeypatch):
    """Every figure drawn from the committed tables keeps its legends off the plotting areas: each legend's box
    meets no panel's box (beside or under the panels, never inside), no tick label is written as a power, and no
    two texts of one panel (value labels, notes) overlap: the bytes figure's labels ran into their neighbours'."""
    import matplotlib.pyplot as plt

    from muon_repro.report.build import make_figures

    problems: list[str] = []
    close = plt.close

    def check_then_close(fig=None):
        if isinstance(fig, plt.Figure):
            renderer = fig.canvas.get_renderer()
            name = fig.get_suptitle()[:50]
            panels = [ax for ax in fig.axes if ax.get_visible() and ax.has_data()]
            legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
            for legend in legends:
                box = legend.get_window_extent(renderer)
                for ax in panels:
                    if box.overlaps(ax.get_window_extent(renderer)):
                        problems.append(f"{name}: a legend covers a panel")
            for ax in panels:
                for label in ax.get_xticklabels() + ax.get_yticklabels():
                    if "^" in label.get_text() or "e+" in label.get_text():
                        problems.append(f"{name}: tick label {label.get_text()!r}")
                texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
                boxes = [t.get_window_extent(renderer) for t in texts]
                for i, j in itertools.combinations(range(len(texts)), 2):
                    if boxes[i].overlaps(boxes[j]):
                        problems.append(f"{name}: {texts[i].get_text()!r} overlaps {texts[j].get_text()!r}")
        return close(fig)

    def lay_out_only(fig, fname, **_):  # the layout a save computes, not the pixels: what this test looks at
        fig.draw_without_rendering()
        Path(fname).write_bytes(b"")

    monkeypatch.setattr(plt, "close", check_then_close)
    monkeypatch.setattr(plt.Figure, "savefig", lay_out_only)
    drawn = make_figures(METRICS, tmp_path)
    assert len(drawn) >= 13
    assert not problems, "\n".join(sorted(set(problems)))


def test_the_optimizer_share_has_one_estimator(figure_data):
    """The claim's optimizer share, interval included, is its run's runs.optimizer_share: one estimator, one number
    (the bar optimizer_overhead draws for that run). The original study's profile is read from its own traces, one trial
    of 5 steps, with an interval over steps (muon_repro.study.claims): it has no runs rows."""
    claims, runs = figure_data.claims, figure_data.runs
    ours = claims["profile"].isin(set(runs["profile"]))
    checked = 0
    for _, c in claims[(claims["claim_id"] == "optimizer_share") & claims["measured_value"].notna() & ours].iterrows():
        mine = runs[(runs["profile"] == c["profile"]) & (runs["optimizer"] == "muon")]
        same = mine[[math.isclose(float(v), float(c["measured_value"]), rel_tol=1e-12) for v in mine["optimizer_share"]]]
        assert len(same), f"no {c['profile']} run has the claim's optimizer share {c['measured_value']}"
        row = same.iloc[0]
        for end in ("low", "high"):
            claim_end, run_end = c[f"measured_{end}"], row[f"optimizer_share_{end}"]
            assert (pd.isna(claim_end) and pd.isna(run_end)) or math.isclose(float(claim_end), float(run_end), rel_tol=1e-12)
        checked += 1
    assert checked, "no profile measures the optimizer share"


@pytest.mark.parametrize(
    ("value", "text"), [(0.5, "0.500×"), (1.25, "1.250×"), (1.0, "1.000×"), (1.000122, "1.000122×"), (1.2218457, "1.221846×")]
)
def test_a_check_ratio_never_reads_as_a_rounder_number(value, text):
    """Two checks printed 1.000 beside '(outside)' and '(inside)': one was 1.0, the other 1.000122."""
    assert check_number(value, "ratio", "t") == text


def test_checks_and_claims_write_each_unit_kind_the_same_way():
    """A ratio reads 1.25× and a share 50.0% in the checks as in the claims; an unknown kind is refused by name."""
    from muon_repro.report.claims_section import claim_number

    assert check_number(1.25, "ratio", "t").endswith("×") and claim_number(1.25, "ratio", "c").endswith("×")
    assert check_number(0.5, "fraction", "t") == claim_number(0.5, "fraction", "c") == "50.0%"
    assert check_number(-0.2, "change", "t") == claim_number(-0.2, "change", "c") == "−20.0%"
    with pytest.raises(ValueError, match="unit_kind 'elements'"):
        check_number(3, "elements", "checks.expected (x)")


@pytest.mark.parametrize(
    ("claim_id", "pattern"),
    [
        ("hybrid_beats_pure", r"DP2·TP2 (\d+) ms, DP4 (\d+) ms, TP4 (\d+) ms"),
        ("hybrid_survives_pp", r"DP2·TP2 (\d+) ms, the fastest pipeline \S+ (\d+) ms"),
    ],
)
def test_a_ratio_claims_quoted_times_make_its_value(tables, claim_id, pattern):
    """DP2·TP2 over the faster grid was 1.42x in the value and 611/451 = 1.35x in the times its explanation quoted:
    the explanation now quotes the averages the ratio is of (to the ms it rounds them to)."""
    import re

    row = _claim(tables[0], claim_id)
    found = re.search(pattern, str(row["explanation"]))
    assert found, row["explanation"]
    hybrid, *rivals = (float(x) for x in found.groups())
    quoted = hybrid / min(rivals)
    assert abs(quoted - float(row["measured_value"])) <= quoted * 1.0 / min(rivals) + 0.005, (quoted, row["measured_value"])


def test_every_figure_is_legible_at_the_pdfs_width():
    """The PDF draws each figure at the text width: its smallest text, scaled by that width over the figure's own,
    is at least 7 pt (it was 3-4 pt at 54% of the width)."""
    import re

    from muon_repro.report import style

    css = (Path(figures.__file__).parent / "templates" / "report.css").read_text()
    assert re.search(r"figure img \{[^}]*width: 100%", css), "the PDF no longer draws figures at the text width"
    small = []
    for svg in sorted(Path(METRICS.parent / "figures").rglob("*.svg")):
        text = svg.read_text()
        width_pt = float(re.search(r'<svg[^>]* width="([0-9.]+)pt"', text)[1])
        smallest = min(float(s) for s in re.findall(r"font-size: ([0-9.]+)px", text))
        on_page = smallest * style.PAGE_TEXT_WIDTH_PT / width_pt
        if on_page < 7.0:
            small.append(f"{svg.name}: {smallest} pt at {width_pt:.0f} pt wide is {on_page:.1f} pt on the page")
    assert not small, small


def test_the_sweep_says_which_held_out_points_validate_the_model(figure_data):
    """Only the points still held out validate the cost model; the earlier set its last change saw does not."""
    from muon_repro.report import regimes_section

    regimes = figure_data.regimes
    validating = int(regimes["held_out"].fillna(False).astype(bool).sum())
    seen = int(regimes["validation_set"].notna().sum()) - validating
    head = regimes_section.sweep_lines(regimes)[0]
    assert f"{validating} that validate the cost model" in head
    assert (f"{seen} of an earlier held-out set" in head) is (seen > 0)


def test_every_point_whose_extra_reaches_zero_is_named_held_out_ones_included(figure_data):
    """The list of points where Muon's extra step time is not distinguishable from zero left out the held-out ones
    (3 of the committed 10), so that it read as complete when it was not."""
    from muon_repro.report import regimes_section

    regimes = figure_data.regimes
    muon = regimes[(regimes["optimizer"] == "muon") & (regimes["muon_extra_lo"] <= 0)]
    assert muon["validation_set"].notna().any(), "the committed sweep has a held-out point whose interval reaches 0"
    (line,) = [line for line in regimes_section.sweep_lines(regimes) if "not distinguishable from zero" in line]
    for _, r in muon.iterrows():
        name = r["run"].split("/")[-1]
        assert f"{name} (" in line, name
        assert (f"{name} (" + line.split(f"{name} (")[1].split(")")[0]).endswith("held out") is pd.notna(r["validation_set"])


def test_a_figure_without_data_in_any_panel_says_why_in_its_png(tmp_path):
    """The report shows such a figure's number and why (a user's run without a regime sweep drew five of them, each
    embedded under a caption describing data that was not there); one panel with data keeps the figure."""
    import matplotlib.pyplot as plt

    from muon_repro.report.plotting import empty_reason, new_figure, save_figure, show_no_data

    fig, axes = new_figure(2.0, 2)
    for ax in axes:
        show_no_data(ax, "no regime sweep in these tables:\nrun `muon-repro regimes`")
    assert empty_reason(save_figure(fig, tmp_path / "empty")) == "no regime sweep in these tables: run `muon-repro regimes`"
    fig, axes = new_figure(2.0, 2)
    show_no_data(axes[0], "no AdamW run")
    axes[1].plot([0, 1], [0, 1])
    assert empty_reason(save_figure(fig, tmp_path / "half")) == ""
    plt.close("all")


def test_a_cut_axis_says_where_it_is_cut_and_how_high_the_data_reach():
    """The convergence panels stopped their y axis 2.5 nats above the lowest loss and hid, without a word, the
    curves above it; a cut a quarter or less above the span is not worth it: the axis then shows report_data."""
    import matplotlib.pyplot as plt

    from muon_repro.report.plotting import cut_axis, new_figure

    fig, (ax,) = new_figure(2.0)
    cut_axis(ax, 3.0, 2.0, 9.5, "curves")
    assert ax.get_ylim() == (3.0, 5.0)
    assert [t.get_text() for t in ax.texts] == ["axis cut at 5.00:\ncurves reach 9.50"]
    fig, (ax,) = new_figure(2.0)
    cut_axis(ax, 3.0, 2.0, 5.4, "curves")
    assert ax.get_ylim()[1] >= 5.4 and not ax.texts
    plt.close("all")


def test_the_optimizer_shares_labels_start_past_their_intervals(figure_data, tmp_path, monkeypatch):
    """A bar's label was written at the bar's end, on its whisker: 30.4% read as '-30.4%'."""
    import matplotlib.pyplot as plt

    labels = {}
    close = plt.close

    def keep_labels(fig=None):
        if isinstance(fig, plt.Figure):
            (ax, *_) = fig.axes
            labels.update({t.get_text().strip(): t.get_position()[0] for t in ax.texts if t.get_text().endswith("%")})
        return close(fig)

    monkeypatch.setattr(plt, "close", keep_labels)
    figures.optimizer_overhead(figure_data.runs, figure_data.claims, tmp_path / "optimizer_overhead")
    checked = 0
    for _, r in sort_runs(study_runs(figure_data.runs)).iterrows():
        label = pct(float(r["optimizer_share"]))
        if label in labels and pd.notna(r["optimizer_share_high"]):
            assert labels[label] >= 100 * float(r["optimizer_share_high"]) - 1e-9, label
            checked += 1
    assert checked >= 5
