"""Figures and report on a synthetic metrics folder (tests/report_bundle.py): the PDF read back,
the Markdown's links, the claims as the table has them, the optimizer step decomposed, missing
metrics named, trials kept apart, figures degrading with one optimizer or one run, and both
commands working from ``metrics/`` alone."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pandas as pd
import pytest
from fake_figures import stand_in_figures
from PIL import Image
from report_bundle import FULL, SEQ_LEN, STEPS, TOKENS_PER_STEP, TRIALS, Run, make_bundle, phase_ms, transfer_ms
from run_once import build_once, shared_root
from support.markdown import markdown_section

from muon_repro.claims import VERDICTS
from muon_repro.cli import main
from muon_repro.report import derive, timeline_figures
from muon_repro.report.claims_section import claim_measured, claims_rows, report_verdict
from muon_repro.report.context import SECTIONS
from muon_repro.report.data import MissingMetric, load
from muon_repro.report.figures import FIGURES as TABLE_FIGURES
from muon_repro.report.formatting import ms
from muon_repro.report.plotting import empty_reason
from muon_repro.report.regime_figures import REGIME_FIGURES
from muon_repro.tables.schemas import SCHEMAS

FIGURES = (*TABLE_FIGURES, *REGIME_FIGURES)  # every figure the report shows

REPO = Path(__file__).resolve().parents[1]
# The runs' ids, as the analysis makes them from the synthetic run folders: <profile>/<group>/<name>.
MUON, ADAMW = Run("comparison", "muon", 2, 2).key, Run("comparison", "adamw", 2, 2).key
MUON_DP4 = Run("distributed_muon", "muon", 4, 1).key


def _run(root: Path, *argv: str) -> int:
    return main([*argv[:1], "--metrics", str(root / "metrics"), *argv[1:]])


@pytest.fixture(scope="session")
def bundle(tmp_path_factory) -> Path:
    """A full synthetic metrics folder with figures and the report in md, html and pdf, read-only.

    Built once per session: under pytest-xdist the workers share it through the parent of
    their temporary directories, the first to take the lock builds it.
    """
    root = shared_root(tmp_path_factory) / "report_bundle"

    def build(root: Path) -> str:
        make_bundle(root)
        assert _run(root, "figures", "--out", str(root / "figures")) == 0
        report = ["report", "--figures", str(root / "figures"), "--out", str(root / "report"), "--format", "md,html"]
        assert _run(root, *report) == 0
        return ""

    build_once(root, build)
    return root


@pytest.fixture(scope="session")
def pdf(bundle: Path) -> Path:
    """The bundle's report as a PDF (weasyprint takes ~6 s: only the slow tier reads it back), built once per
    session like the bundle, in a folder of its own beside the bundle's report."""

    def build(out: Path) -> str:
        assert _run(bundle, "report", "--figures", str(bundle / "figures"), "--out", str(out), "--format", "pdf") == 0
        return ""

    out = bundle.parent / "report_bundle_pdf"
    build_once(out, build)
    return out / "report.pdf"


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _pdf_text(path: Path) -> str:
    from pypdf import PdfReader

    return _squash(" ".join(page.extract_text() for page in PdfReader(path).pages))


def _drawn_image_sizes(path: Path) -> set[tuple[int, int]]:
    """(width, height) of every image a page's content stream actually paints (``Do``), forms included."""
    from pypdf import PdfReader
    from pypdf.generic import ContentStream

    reader, sizes = PdfReader(path), set()

    def walk(content, resources) -> None:
        xobjects = resources.get_object().get("/XObject", {}) if resources is not None else {}
        xobjects = xobjects.get_object() if hasattr(xobjects, "get_object") else xobjects
        for operands, op in ContentStream(content, reader).operations:
            if op == b"Do":
                obj = xobjects[operands[0]].get_object()
                if obj["/Subtype"] == "/Image":
                    sizes.add((int(obj["/Width"]), int(obj["/Height"])))
                elif obj["/Subtype"] == "/Form":
                    walk(obj, obj.get("/Resources"))

    for page in reader.pages:
        walk(page.get_contents(), page.get("/Resources"))
    return sizes


# ---------------------------------------------------------------- figures


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_every_figure_is_written_as_png_at_print_resolution_and_svg(bundle: Path) -> None:
    for name in FIGURES:
        png, svg = bundle / "figures" / f"{name}.png", bundle / "figures" / f"{name}.svg"
        assert png.is_file() and svg.is_file(), name
        with Image.open(png) as im:
            assert im.size[0] >= 1800, (name, im.size)  # ~7 in wide at 300 dpi
            assert round(im.info["dpi"][0]) >= 300, (name, im.info.get("dpi"))
        assert "<svg" in svg.read_text()[:2000]
    assert not list((bundle / "figures").glob(".*.tmp"))  # atomic writes leave nothing behind


@pytest.mark.slow  # end to end: every figure drawn for each degraded table set
@pytest.mark.parametrize(
    "runs",
    [
        pytest.param(tuple(r for r in FULL if r.optimizer == "muon"), id="muon-only"),
        pytest.param(tuple(r for r in FULL if r.optimizer == "adamw"), id="adamw-only"),
        pytest.param((Run("comparison", "muon", 2, 2),), id="one-configuration"),
        pytest.param((Run("distributed_muon", "adamw", 1, 4),), id="one-configuration-no-dp"),
    ],
)
def test_figures_degrade_with_one_optimizer_or_one_configuration(tmp_path: Path, runs: tuple[Run, ...]) -> None:
    root = make_bundle(tmp_path, runs)
    assert _run(root, "figures", "--out", str(root / "figures")) == 0
    for name in FIGURES:
        assert (root / "figures" / f"{name}.png").stat().st_size > 10_000, name


# ---------------------------------------------------------------- the PDF read back


@pytest.mark.slow  # reads the PDF back
def test_pdf_has_every_section_heading_and_claims_row(bundle: Path, pdf: Path) -> None:
    text = _pdf_text(pdf)
    for _, heading in SECTIONS:
        assert heading in text, heading
    claims = claims_rows(load(bundle / "metrics"))
    assert len(claims) >= 6
    for c in claims:
        assert _squash(c["claim"]) in text, c["claim"]
        assert c["verdict"] in text
    for claim_id in (
        "comm_time_dp2_tp2",
        "optimizer_share",
        "hybrid_beats_pure",
        "latency_overhead",
    ):
        assert claim_id in {c["id"] for c in claims}
    assert "Consistency checks" in text and "bytes_bucketed" not in text  # the checks, in words


def _pdf_pages(path: Path) -> list[str]:
    from pypdf import PdfReader

    return [_squash(page.extract_text()) for page in PdfReader(path).pages]


def _first_page(pages: list[str], text: str) -> int:
    """The 1-based number of the first page that shows ``text`` (0 if none does)."""
    return next((i for i, page in enumerate(pages, 1) if text in page), 0)


@pytest.mark.slow  # reads the PDF back
def test_the_pdf_opens_with_title_block_abstract_and_the_claims_by_page_3(bundle: Path, pdf: Path) -> None:
    pages = _pdf_pages(pdf)
    claims_header = "claim source claimed agrees if in"  # the claims table's header row, as the PDF reads back
    assert 0 < _first_page(pages, claims_header) <= 3, [p[:80] for p in pages]
    assert 0 < _first_page(pages, "Consistency checks") <= 4
    first = pages[0]
    assert "Version " in first and "2026-01-02" in first  # the newest run's day (tests/report_bundle.py), not the clock
    assert "Abstract" in first and first.index("Abstract") < first.index("Summary")
    title = (bundle / "report" / "report.md").read_text().split("\n## ")[0]
    # the dataset "How to cite" cites, as the report's caller gave it: one identity, not a CITATION.cff of before
    assert "Version 0.1.0" in title and "Authors: muon-repro." in title and "(Revision v0.1.0)" in "".join(pages)


def _appendix_headings() -> dict[str, str]:
    """Each appendix table's heading when the report shows them all, as the bundle's does."""
    from muon_repro.report.context import APPENDIX_TABLES, appendix_headings

    return {key: h["heading"] for key, h in appendix_headings(key for key, _ in APPENDIX_TABLES).items()}


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_long_tables_are_in_the_appendix_after_its_heading(bundle: Path) -> None:
    from muon_repro.report.context import anchor

    md = (bundle / "report" / "report.md").read_text()
    body, _, appendix = md.partition("\n## Appendix: tables\n")
    assert appendix, "no appendix heading"
    for header in ("| run | trials × steps |", "| configuration | run | analytic MB |"):  # runs, bytes
        assert header not in body and header in appendix, header
    headings = _appendix_headings()
    for heading in list(headings.values())[:3]:
        assert f"### {heading}" in appendix
    # the main body cites them
    assert f"(#{anchor(headings['runs'])})" in body and f"(#{anchor(headings['bytes'])})" in body


@pytest.mark.slow  # reads the PDF back
def test_the_pdf_puts_the_appendix_after_the_last_section(pdf: Path) -> None:
    pages = _pdf_pages(pdf)
    start = _first_page(pages, "Appendix: tables")
    assert start > _first_page(pages, "How to cite") > 0
    # the main body names them in its text, the tables start after the appendix
    for heading in list(_appendix_headings().values())[:3]:
        assert _first_page(pages[start - 1 :], heading) > 0, heading


def test_the_appendix_numbers_the_tables_it_shows_in_order():
    from muon_repro.report.context import appendix_headings

    shown = appendix_headings(["claims", "runs", "comparisons", "bytes", "decomposition", "environment"])
    assert [h["heading"][:3] for h in shown.values()] == ["A1.", "A2.", "A3.", "A4.", "A5.", "A6."]
    assert shown["environment"] == {"heading": "A6. Machine and software", "id": "a6-machine-and-software"}
    with pytest.raises(ValueError, match=r"no appendix table \['plots'\]"):
        appendix_headings(["runs", "plots"])


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_the_abstract_is_short_and_made_of_table_values(bundle: Path) -> None:
    from test_report_abstract import pool_of, unsupported

    from muon_repro.report.abstract_section import MAX_WORDS, abstract

    data = load(bundle / "metrics")
    data = data.of_profile(data.profiles[0])
    text = abstract(data)
    assert len(text.split()) <= MAX_WORDS
    assert not unsupported(text, pool_of(data)), text
    assert text in _squash((bundle / "report" / "report.md").read_text())


@pytest.mark.slow  # reads the PDF back
def test_pdf_embeds_every_figure_as_an_image(bundle: Path, pdf: Path) -> None:
    drawn = _drawn_image_sizes(pdf)
    for name in FIGURES:
        if empty_reason(bundle / "figures" / f"{name}.png"):
            continue  # no data in any panel: the report says so instead of painting it (the Markdown's test)
        with Image.open(bundle / "figures" / f"{name}.png") as im:
            assert im.size in drawn, f"figure {name} ({im.size}) is not painted in the PDF"


@pytest.mark.slow  # reads the PDF back
def test_a_pdf_page_renders_to_a_non_blank_image(pdf: Path) -> None:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(pdf)
    try:
        assert len(document) >= 3
        inked = []
        for index in range(len(document)):
            image = document[index].render(scale=0.5).to_pil().convert("L")
            inked.append(sum(image.histogram()[:200]) / (image.width * image.height))  # pixels clearly darker than the white page
        assert inked[0] > 0.01, "the first page looks blank"
        # a section's last page may be short, but most pages carry text, tables or figures
        assert sum(share > 0.01 for share in inked) >= 0.75 * len(inked), [round(share, 3) for share in inked]
    finally:
        document.close()


# ---------------------------------------------------------------- the Markdown


def _method_anchors() -> set[str]:
    """The anchors GitHub gives the repository's docs/method.md headings."""
    text = (REPO / "docs" / "method.md").read_text()
    return {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    }


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_markdown_links_and_images_resolve_inside_the_bundle(bundle: Path) -> None:
    md_path = bundle / "report" / "report.md"
    md = md_path.read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", md)
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", md)
    # every figure is shown, or said not drawn with why: the bundle has no convergence or regime run
    not_drawn = re.findall(r"^\*Figure \d+\.\* Not drawn: (.+)$", md, flags=re.MULTILINE)
    assert len(images) + len(not_drawn) == len(FIGURES) and all("run `muon-repro" in why for why in not_drawn), not_drawn
    assert {Path(i).stem for i in images} == {n for n in FIGURES if not empty_reason(bundle / "figures" / f"{n}.png")}
    assert len(targets) > len(images)  # the SVGs and the tables are linked too
    method_links = 0
    own = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", md, flags=re.MULTILINE)}
    for href in targets:
        assert not re.match(r"^[a-z]+:", href), f"external link {href} in the report"
        if href.startswith("#"):  # a section of the report itself
            assert href[1:] in own, href
            continue
        path, _, anchor = href.partition("#")
        target = (md_path.parent / path).resolve()
        assert target.is_relative_to(bundle.resolve()), href
        if target == (bundle / "docs" / "method.md").resolve():
            # The repository's method notes, beside report/ in its layout (not in a metrics-only bundle).
            assert anchor in _method_anchors(), f"{href}: no such heading in docs/method.md"
            method_links += 1
        else:
            assert target.is_file() and not anchor, href
    assert method_links >= 3
    assert "DESIGN.md" not in md


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_markdown_and_html_say_the_same_thing(bundle: Path) -> None:
    md = (bundle / "report" / "report.md").read_text()
    html = (bundle / "report" / "report.html").read_text()
    for _, heading in SECTIONS:
        assert f"## {heading}" in md and f">{heading}</h2>" in html
    for token in re.findall(r"\d+\.\d+×", md):
        assert token in html


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_no_none_or_nan_reaches_the_report(bundle: Path) -> None:
    for name in ("report.md", "report.html"):
        text = (bundle / "report" / name).read_text()
        assert not re.search(r"\b(None|nan|NaN|null|<NA>)\b", text), name


# ---------------------------------------------------------------- missing metrics are named


@pytest.fixture(scope="session")
def report_inputs(tmp_path_factory) -> Path:
    """The synthetic metrics folder and a stand-in for each figure (:func:`stand_in_figures`), read-only: what the
    report reads before it refuses, without drawing the real figures (~10 s), built once per test run."""

    def build(root: Path) -> str:
        make_bundle(root)
        with pytest.MonkeyPatch.context() as monkeypatch:
            stand_in_figures(monkeypatch)
            assert _run(root, "figures", "--out", str(root / "figures")) == 0
        return ""

    root = shared_root(tmp_path_factory) / "report_inputs"
    build_once(root, build)
    return root


@pytest.fixture
def bundle_copy(report_inputs: Path, tmp_path: Path) -> Path:
    """A writable copy of :func:`report_inputs`, for a test to damage."""
    for sub in ("metrics", "figures"):
        shutil.copytree(report_inputs / sub, tmp_path / sub)
    return tmp_path


def _report_error(root: Path, capsys) -> str:
    code = _run(root, "report", "--figures", str(root / "figures"), "--out", str(root / "report"), "--format", "md")
    err = capsys.readouterr().err
    assert code == 2, err
    assert not (root / "report" / "report.md").exists()  # nothing half-written
    return err


def _edit_table(root: Path, name: str, edit) -> None:
    path = root / "metrics" / f"{name}.parquet"
    df = pd.read_parquet(path, dtype_backend="numpy_nullable")
    edit(df).to_parquet(path)


def test_a_missing_value_fails_with_its_name(bundle_copy: Path, capsys) -> None:
    def drop_value(df: pd.DataFrame) -> pd.DataFrame:
        df.loc[df["run"] == MUON, "tokens_per_s"] = pd.NA
        return df

    _edit_table(bundle_copy, "runs", drop_value)
    err = _report_error(bundle_copy, capsys)
    assert "runs.tokens_per_s" in err and MUON in err


def test_a_verdict_outside_the_vocabulary_is_refused(bundle_copy: Path, capsys) -> None:
    def old_vocabulary(df: pd.DataFrame) -> pd.DataFrame:
        df.loc[df["claim_id"] == "latency_overhead", "verdict"] = "supported"
        return df

    _edit_table(bundle_copy, "claims", old_vocabulary)
    err = _report_error(bundle_copy, capsys)
    assert "claims.verdict" in err and "latency_overhead" in err and "'supported'" in err


def test_a_table_without_trials_is_named(bundle_copy: Path, capsys) -> None:
    _edit_table(bundle_copy, "phases", lambda df: df.drop(columns=["trial"]))
    assert "phases.trial" in _report_error(bundle_copy, capsys)


def test_a_missing_column_fails_with_its_name(bundle_copy: Path, capsys) -> None:
    _edit_table(bundle_copy, "comparisons", lambda df: df.drop(columns=["comm_bytes_ratio"]))
    assert "comparisons.comm_bytes_ratio" in _report_error(bundle_copy, capsys)


def test_a_missing_environment_field_fails_with_its_name(bundle_copy: Path, capsys) -> None:
    _edit_table(bundle_copy, "environment", lambda df: df[~((df["run"] == ADAMW) & (df["key"] == "host_cpu"))])
    err = _report_error(bundle_copy, capsys)
    assert "host_cpu" in err and ADAMW in err


def test_a_missing_byte_source_fails_with_its_name(bundle_copy: Path, capsys) -> None:
    def drop_analytic(df: pd.DataFrame) -> pd.DataFrame:
        df.loc[df["run"] == MUON_DP4, "analytic_bytes"] = pd.NA
        return df

    _edit_table(bundle_copy, "phases", drop_analytic)
    err = _report_error(bundle_copy, capsys)
    assert "phases.analytic_bytes" in err and MUON_DP4 in err


def test_a_missing_table_or_figure_fails_with_its_name(bundle_copy: Path, capsys) -> None:
    (bundle_copy / "figures" / "timeline.png").unlink()
    assert "timeline" in _report_error(bundle_copy, capsys)
    (bundle_copy / "metrics" / "claims.parquet").unlink()
    assert "claims.parquet" in _report_error(bundle_copy, capsys)


def test_a_typical_step_without_rows_is_named(bundle_copy: Path, capsys) -> None:
    def far_step(df: pd.DataFrame) -> pd.DataFrame:
        df.loc[df["run"] == MUON, "typical_step"] = 99
        return df

    _edit_table(bundle_copy, "runs", far_step)
    assert _run(bundle_copy, "figures", "--out", str(bundle_copy / "figures2")) == 2
    err = capsys.readouterr().err
    assert "runs.typical_step 99" in err and MUON in err
    # The timeline alone (the step breakdown would refuse first).
    data = load(bundle_copy / "metrics")
    with pytest.raises(MissingMetric, match=rf"timeline.*{re.escape(MUON)} at step 99 of trial"):
        timeline_figures.timeline(data.timeline, data.runs, bundle_copy / "figures2" / "timeline")


def test_a_typical_trial_without_rows_is_named(bundle_copy: Path) -> None:
    def far_trial(df: pd.DataFrame) -> pd.DataFrame:
        df.loc[df["run"] == MUON, "typical_trial"] = 7
        return df

    _edit_table(bundle_copy, "runs", far_trial)
    data = load(bundle_copy / "metrics")
    with pytest.raises(MissingMetric, match=rf"{re.escape(MUON)} at step \d+ of trial 7"):
        timeline_figures.timeline(data.timeline, data.runs, bundle_copy / "figures2" / "timeline")


@pytest.mark.slow  # draws the figures up to the one that refuses (~5 s)
def test_a_figure_refuses_a_missing_metric(bundle_copy: Path, capsys) -> None:
    def drop_value(df: pd.DataFrame) -> pd.DataFrame:
        df.loc[df["run"] == MUON_DP4, "step_ms_p90"] = pd.NA
        return df

    _edit_table(bundle_copy, "runs", drop_value)
    assert _run(bundle_copy, "figures", "--out", str(bundle_copy / "figures2")) == 2
    err = capsys.readouterr().err
    assert "runs.step_ms_p90" in err and MUON_DP4 in err


# ---------------------------------------------------------------- metrics/ alone


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_figures_and_report_need_only_the_metrics_folder(
    bundle: Path, tmp_path: Path, monkeypatch, capsys, quick_figures
) -> None:
    shutil.copytree(bundle / "metrics", tmp_path / "metrics")
    monkeypatch.chdir(tmp_path)  # the defaults: metrics/, figures/, report/; no traces/ anywhere
    assert main(["figures"]) == 0
    assert main(["report", "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "timeline             figures/timeline.png (+ .svg)" in out and "md   report/report.md" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures", "metrics", "report"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "muon-repro analyze traces --out metrics\n" in md
    assert "muon-repro figures --metrics metrics --out figures\n" in md
    assert "muon-repro report --metrics metrics --figures figures --out report --format md\n" in md
    assert "--traces" not in md


def test_a_pair_recorded_apart_shows_other_sweep_for_its_times_and_its_bytes() -> None:
    """A comparisons row of two runs recorded by different sweeps has no time ratios: the report writes "other sweep"
    there, not a missing metric, and still its byte and state ratios; a table from before the column reads as always."""
    from muon_repro.report.results_section import NOT_TIMED_TOGETHER, comparison_ratio

    apart = pd.Series({"muon_run": "m", "recorded_together": False, "step_ms_ratio": pd.NA, "state_bytes_ratio": 0.5})
    assert comparison_ratio(apart, "step_ms_ratio") == NOT_TIMED_TOGETHER
    assert comparison_ratio(apart, "state_bytes_ratio") == "0.50×"
    before = pd.Series({"muon_run": "m", "step_ms_ratio": 1.25})
    assert comparison_ratio(before, "step_ms_ratio") == "1.25×"
    with pytest.raises(MissingMetric, match="comparisons.step_ms_ratio is missing for muon_run m"):
        comparison_ratio(pd.Series({"muon_run": "m", "recorded_together": True, "step_ms_ratio": pd.NA}), "step_ms_ratio")


def test_the_optimizer_share_names_the_steps_it_is_read_on() -> None:
    """The runs table's share reads the steps timed without the profiler when a run has them: the sentence quotes
    those steps' medians, and the profiled ones (the decomposition's) apart, never one set's share with the other's."""
    from muon_repro.report.decomposition_section import _share_source

    run = {"optimizer_ms": 293.0, "step_ms": 590.0, "trials": 1, "steps": 5, "rounds": 10, "disturbed_rounds": 1}
    timed = _share_source(pd.Series({**run, "timed_optimizer_ms": 286.0, "timed_step_ms": 595.0}))
    assert "10 rounds timed without the profiler" in timed and "1 disturbed left out" in timed
    assert "optimizer step 286 ms of a 595 ms step" in timed and "293 ms of a 590 ms median step" in timed
    assert "over 1 trial × 5 profiled steps" in timed
    profiled = _share_source(pd.Series({**run, "trials": 2, "steps": 10, "timed_optimizer_ms": None, "timed_step_ms": None}))
    assert "timed without" not in profiled and "over 2 trials × 5 profiled steps" in profiled


def test_traces_is_no_option_of_figures_or_report(capsys) -> None:
    for command in ("figures", "report"):
        assert main([command, "--traces", "traces"]) == 2
        assert f"muon-repro {command}: error: unrecognized argument(s) --traces traces" in capsys.readouterr().err


# ---------------------------------------------------------------- derived frames


def test_phase_bytes_are_the_mean_over_ranks_and_trials_and_an_unrecorded_source_is_nan() -> None:
    rows = [
        {
            "run": "g/r",
            "trial": trial,
            "rank": rank,
            "phase": phase,
            "analytic_bytes": pd.NA,
            "ledger_bytes": nbytes,
            "trace_bytes": nbytes,
        }
        for trial in (0, 1)
        for rank, sent in ((0, 100.0), (1, 300.0))
        for phase, nbytes in (("forward", pd.NA), ("dp_reduce_scatter", sent), ("tp_gather", sent / 2))
    ]
    table = derive.phase_bytes(pd.DataFrame(rows), "g/r")
    assert table.loc["dp_reduce_scatter", "ledger"] == 200.0 and table.loc["tp_gather", "trace"] == 100.0  # trials not summed
    assert table.loc["dp_gather", "ledger"] == 0.0  # no row: nothing sent
    assert table["analytic"].isna().all()
    assert derive.total_bytes(table) == 300.0  # the first recorded source
    with pytest.raises(MissingMetric, match="phases.analytic_bytes"):
        derive.require_sources(table, "g/r")


def test_one_step_is_the_typical_step_of_the_typical_trial() -> None:
    rows = [
        {
            "run": "g/r",
            "trial": trial,
            "rank": rank,
            "step": 3,
            "lane": lane,
            "phase": phase,
            "start_ms": 0.0,
            "end_ms": 10.0 * (trial + 1),
            "aligned": True,
        }
        for trial in (0, 1)
        for rank in (0, 1)
        for lane, phase in (("step", "step"), ("coarse", "forward"))
    ]
    timeline = pd.DataFrame(rows)
    one = derive.one_step(timeline, "g/r", 3, trial=1)
    assert (
        one.trial == 1 and len(one.windows) == 2 and set(one.windows["end_ms"]) == {20.0} and set(one.spans["end_ms"]) == {20.0}
    )
    with pytest.raises(MissingMetric, match="trial 2"):
        derive.one_step(timeline, "g/r", 3, trial=2)


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_the_decomposition_is_the_mean_over_trials_per_rank(bundle: Path) -> None:
    data = load(bundle / "metrics")
    run = Run("comparison", "muon", 2, 2)
    table = derive.optimizer_decomposition(data.phases, run.key)
    assert list(table.index) == list(range(run.world))
    for rank in table.index:
        expect = sum(phase_ms(run, rank, t, "newton_schulz") for t in TRIALS) / len(TRIALS)
        assert table.loc[rank, "muon_newton_schulz"] == pytest.approx(expect)
        # The DP gather's gloo transfer, split by the analysis across its DP group (ranks r and r + 2): the rank to
        # arrive last (r + 2: 0.3 ms later into the step, 6% slower) waits for no one, the other waits for it.
        wait, transfer = table.loc[rank, "muon_dp_gather_wait"], table.loc[rank, "muon_dp_gather_transfer"]
        assert wait + transfer == pytest.approx(sum(transfer_ms(run, rank, t, "dp_gather") for t in TRIALS) / len(TRIALS))
        assert (wait > 0) == (rank < run.tp), (rank, wait)
        parts = sum(table.loc[rank, k] for k, _, _ in derive.OPTIMIZER_PARTS) + table.loc[rank, "rest"]
        assert parts == pytest.approx(table.loc[rank, "optimizer"])
    adamw = derive.optimizer_decomposition(data.phases, ADAMW)
    assert (adamw["muon_newton_schulz"] == 0).all() and (adamw["muon_tp_gather"] == 0).all()


# ---------------------------------------------------------------- the report's sections


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_claims_show_the_table_verdict_interval_and_cause(bundle: Path) -> None:
    md = (bundle / "report" / "report.md").read_text()
    claims = pd.read_parquet(bundle / "metrics" / "claims.parquet", dtype_backend="numpy_nullable")
    section = markdown_section(md, "Claims")
    assert (
        "| claim | source | claimed | agrees if in | measured on cpu-2c-gloo (95% interval) | verdict | measured cause |"
        in section
    )
    for _, c in claims.iterrows():
        line = next(ln for ln in section.splitlines() if ln.startswith(f"| {c['claim']} |"))
        assert f"| {c['verdict']} |" in line, line  # the table's verdict, as it is
        assert str(c["explanation"]).split(";")[0].replace("|", "\\|") in line
        if c["verdict"] != "not measured":
            assert re.search(r"\(\S+(–| to )\S+\)|\(no spread\)", line), line  # measured with its interval
    # CPU runs: the time claims are not comparable here, the rest not measured; the counts are checks, not claims
    assert set(claims["verdict"]) <= set(VERDICTS)
    assert {"not comparable here", "not measured"} <= set(claims["verdict"])
    checks = pd.read_parquet(bundle / "metrics" / "checks.parquet", dtype_backend="numpy_nullable")
    assert len(checks) and "Consistency checks" in section
    for _, c in checks.iterrows():
        line = next(ln for ln in section.splitlines() if ln.startswith(f"| {c['check']} |"))
        assert ("| holds |" if c["holds"] else "| fails |") in line, line
    for text in (md, (bundle / "report" / "report.html").read_text()):
        assert "different conditions" not in text and "supported" not in text
    method = markdown_section(md, "Method")
    assert all(f"**{v}**" in method for v in VERDICTS) and "95% interval" in method and "t interval" in method
    assert all(v in markdown_section(md, "Summary") for v in ("not comparable here", "not measured", "Consistency checks"))


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_the_decomposition_section(bundle: Path) -> None:
    md = (bundle / "report" / "report.md").read_text()
    section = markdown_section(md, "The optimizer step, decomposed")
    header = "|  | " + " | ".join([f"Muon r{r}" for r in range(4)] + [f"AdamW r{r}" for r in range(4)]) + " |"
    assert header not in section and "A5. The optimizer step, rank by rank" in section  # the table is in the appendix
    table = markdown_section(md, "Appendix: tables").split("### A5.", 1)[1].split("\n### ", 1)[0]
    assert header in table
    for label in (
        "ZeRO-1 gradient reduce-scatter",
        "ZeRO-1 parameter all-gather",
        "DP gather (Muon)",
        "TP gather (Muon)",
        "↳ transfer",
        "↳ waiting for the group's last rank",
        "Newton-Schulz (Muon)",
        "momentum + element-wise update",
    ):
        assert f"| {label}" in table, label
    ns = next(ln for ln in table.splitlines() if ln.startswith("| Newton-Schulz (Muon) |")).split(" | ")
    rank0 = sum(phase_ms(Run("comparison", "muon", 2, 2), 0, t, "newton_schulz") for t in TRIALS) / len(TRIALS)
    assert ns[-1] == "— |"  # AdamW has none
    # Muon rank 0, mean over trials, shown to 0.01 ms: 9.225 from the traces' µs clock may print as 9.22 or 9.23
    assert float(ns[1]) == pytest.approx(rank0, abs=0.005 + 1e-9), (ns[1], rank0)
    runs = load(bundle / "metrics").runs.set_index("run")
    m, a = runs.loc[MUON], runs.loc[ADAMW]
    assert f"Optimizer share, Muon DP2·TP2: {100 * m['optimizer_ms'] / m['step_ms']:.1f}%" in section
    assert f"Optimizer share, AdamW DP2·TP2: {100 * a['optimizer_ms'] / a['step_ms']:.1f}%" in section
    # from the steps timed without the profiler where both runs have them (the profiler slows runs unequally)
    timed = pd.notna(m.get("timed_step_ms")) and pd.notna(a.get("timed_step_ms"))
    column, which = ("timed_step_ms", "timed without the profiler") if timed else ("step_ms", "profiled")
    extra = (m[column] - a[column]) / TOKENS_PER_STEP * 1000
    said = f"Muon's extra over AdamW per token: {extra:+.1f} µs per token (the difference of the median step times {which}"
    assert said.replace("-", "−") in section
    # contiguous: uneven Newton-Schulz work; what the DP gather's waits say of it is measured, not assumed
    assert "Newton-Schulz work differs across the ranks of Muon DP2·TP2" in section
    tables = load(bundle / "metrics")
    flops = derive.ns_flops_by_rank(tables.ranks, MUON)
    gather = tables.phases[(tables.phases["run"] == MUON) & (tables.phases["phase"] == "dp_gather")]
    waits = gather.groupby("rank")["wait_ms_per_step"].mean().dropna()
    if len(waits):
        least_waits_longest = int(flops.idxmin()) == int(waits.idxmax())
        assert ("with the least, waits longest in the DP gather" in section) == least_waits_longest
        assert ("the DP gather's longest wait is" in section) == (not least_waits_longest)


def test_setup_names_the_rounds_the_intervals_are_over_beside_the_traced_ones() -> None:
    from muon_repro.report.setup_section import rounds_and_steps

    run = pd.Series({"run": "r", "trials": 1, "steps": 5, "train_steps": 6, "rounds": 10})
    assert rounds_and_steps(run, "8") == (
        "10 rounds, each timing 8 steps without the profiler, the first round then running a traced pass of 6 steps "
        "(5 of them profiled)"
    )
    assert rounds_and_steps(run.drop("rounds")) == "1 traced × 6 steps (5 profiled)"  # recorded before timed rounds
    assert rounds_and_steps(run.replace({10: 1})) == "1 traced × 6 steps (5 profiled)"


def test_the_rounds_are_said_per_pipeline_group_each_recorded_by_its_own_command() -> None:
    from muon_repro.report.setup_section import rounds_said

    runs = pd.DataFrame(
        {
            "group": ["comparison", "comparison", "pipeline", "pipeline", "pipeline_bubble"],
            "pp": [1, 1, 1, 4, 4],
            "rounds": [10, 10, 6, 6, 10],
            "trials": [1, 1, 1, 1, 1],
        }
    )
    assert rounds_said(runs) == "10 (the pipeline runs' groups: pipeline 6, pipeline_bubble 10)"
    assert rounds_said(runs[runs["pp"] == 1].iloc[:2]) == "10"


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_workload_and_runs_table_show_the_equal_work(bundle: Path) -> None:
    md = (bundle / "report" / "report.md").read_text()
    setup = markdown_section(md, "Setup")
    assert f"| tokens per step (all DP ranks) | {TOKENS_PER_STEP:,} for every run" in setup
    for grid, dp in (("DP2·TP2", 2), ("DP4", 4), ("TP4", 1)):
        assert f"{grid} {TOKENS_PER_STEP // (dp * SEQ_LEN)} × {SEQ_LEN}" in setup
    assert f"{len(TRIALS)} traced × 5 steps ({len(STEPS)} profiled)" in setup  # every round traced
    results = markdown_section(md, "Results")
    appendix = markdown_section(md, "Appendix: tables")  # the runs table, long, is in the appendix
    assert "| trials × steps |" in appendix and "| tokens/s (no profiler) |" in appendix
    if "loopback_bytes_per_step" in SCHEMAS["runs"].names:  # what gloo sent, beside the ring model
        # The ring model's bytes are the traces' collectives, all 4 ranks per step: 4 × (53,376 + 2,000 + 20,000 + 53,376
        # bytes of the optimizer's, 50,000 of the model's TP all-reduce) = 715,008; rank 0's loopback count is 1.25× that.
        assert f"Muon DP2·TP2 ({MUON}): 0.89 MB per step over loopback against 0.72 MB by the ring model (1.250×" in results
    muon = next(ln for ln in appendix.splitlines() if f"| {MUON} |" in ln)
    runs = load(bundle / "metrics").runs.set_index("run")
    assert f"| {len(TRIALS)} × {len(STEPS)} |" in muon and f"| {runs.loc[MUON, 'tokens_per_s']:,.0f} |" in muon


# ---------------------------------------------------------------- verdicts


def test_the_report_verdict_is_the_table_verdict() -> None:
    runs = pd.DataFrame({"run": ["g/muon", "g/adamw"], "device": ["cpu", "cpu"], "backend": ["gloo", "gloo"]})
    for verdict in VERDICTS:
        row = pd.Series(
            {"claim_id": "comm_time_dp2_tp2", "verdict": verdict, "measured_value": 1.0, "conditions": "g/muon vs g/adamw"}
        )
        assert report_verdict(row, runs) == verdict
    for old in ("supported", "partly supported", "different conditions"):
        with pytest.raises(MissingMetric, match="claims.verdict"):
            report_verdict(pd.Series({"claim_id": "x", "verdict": old}), runs)


def test_claim_values_read_in_their_units() -> None:
    def row(value, low, high, kind, claim_id="c") -> pd.Series:
        return pd.Series(
            {"claim_id": claim_id, "unit_kind": kind, "measured_value": value, "measured_low": low, "measured_high": high}
        )

    assert claim_measured(row(1.62, 1.48, 1.77, "ratio")) == "1.62× (1.48–1.77)"
    assert claim_measured(row(0.336, 0.162, 0.663, "fraction")) == "33.6% (16.2–66.3%)"
    assert claim_measured(row(-0.209, -0.643, 0.679, "change")) == "−20.9% (−64.3% to +67.9%)"
    assert claim_measured(row(1.0, 1.0, 1.0, "ratio", "async_slowdown")) == "1.00× (no spread)"
    assert claim_measured(row(pd.NA, pd.NA, pd.NA, "ratio")) == "not measured"
    # an infinite end is kept as null: a one-sided interval, said as one
    assert claim_measured(row(0.955, 0.034, pd.NA, "fraction")) == "95.5% (from 3.4%, no upper end)"
    assert claim_measured(row(1.0, pd.NA, 1.2, "ratio")) == "1.00× (up to 1.20×, no lower end)"
    assert claim_measured(row(1.0, pd.NA, pd.NA, "ratio")) == "1.00× (no interval: fewer than 2 rounds)"
    # a share's interval starts at 0 at the lowest (rounds.share_interval), and says so where it was cut there (2 rounds
    # on the H200: "0.0–19.0%" read as a bound); a lead below 0 is a lead, not a share
    assert claim_measured(row(0.049, 0.0, 0.19, "fraction")) == "4.9% (0.0–19.0%, cut at 0)"
    lead = row(0.05, -0.2, 0.3, "fraction", "muon_leading_steps")
    assert claim_measured(lead) == "+5.0% (−20.0% to +30.0%)"
    # the region's numbers, in the claim's unit: tests/test_claims_declared.py


def test_formatters_refuse_missing_values() -> None:
    from muon_repro.report.formatting import mb, pct, ratio

    for fmt in (ms, pct, ratio, mb):
        with pytest.raises(MissingMetric, match="runs.x"):
            fmt(None, "runs.x")
        with pytest.raises(MissingMetric):
            fmt(float("nan"), "runs.x")


def test_commands_are_registered(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "figures" in out and "report" in out


@pytest.mark.slow
def test_the_pdf_is_the_same_bytes_when_rendered_again(bundle: Path, tmp_path: Path, monkeypatch) -> None:
    """Two renders of one set of tables give one PDF: dates from the runs' recorded_at, never the clock."""
    import time

    from pypdf import PdfReader

    from muon_repro import stages

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    out, pdfs = tmp_path / "report", []  # one folder: the report prints its --out in the commands
    for _ in range(2):
        stages.report(bundle / "metrics", bundle / "figures", out, formats=("pdf",))
        pdfs.append((out / "report.pdf").read_bytes())
        time.sleep(1.1)  # the clock moves on by a second: it must not show
    assert pdfs[0] == pdfs[1]
    assert "SOURCE_DATE_EPOCH" not in os.environ  # restored
    info = PdfReader(out / "report.pdf").metadata
    assert info["/CreationDate"].startswith("D:20260102") and info["/ModDate"] == info["/CreationDate"]


@pytest.mark.slow  # the session bundle draws every figure at print resolution (~20 s)
def test_without_pipeline_runs_the_3d_section_is_one_sentence(bundle: Path) -> None:
    """The synthetic bundle has no pipeline run: the section says so, and no pipeline figure is drawn or shown."""
    from muon_repro.report.pipeline_section import NO_PIPELINE

    md = (bundle / "report" / "report.md").read_text()
    section = markdown_section(md, "3-D parallelism (DP x TP x PP)")
    assert "No pipeline run in these tables" in section and NO_PIPELINE.split(":")[0] in section
    assert "|" not in section and "![" not in section
    assert not (bundle / "figures" / "pipeline.png").exists()


@pytest.mark.slow
def test_the_pdf_has_the_same_bytes_from_any_checkout_path(tmp_path):
    """A fresh clone's `muon-repro run` must not rewrite report.pdf: nothing of the folder's path reaches it
    (WeasyPrint names images by URL; the report renders them from a fixed base)."""
    import hashlib
    import shutil

    from muon_repro.stages import report

    digests = []
    for where in (tmp_path / "a", tmp_path / "b" / "deeper" / "clone"):
        shutil.copytree(REPO / "metrics", where / "metrics")
        shutil.copytree(REPO / "figures", where / "figures")
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(where)
            report("metrics", "figures", "report", formats=("pdf",))
        pdf = (where / "report" / "report.pdf").read_bytes()
        assert pdf.count(b"/Subtype /Image") or len(pdf) > 1_000_000  # the figures are in it
        digests.append(hashlib.sha256(pdf).hexdigest())
    assert digests[0] == digests[1]


@pytest.mark.slow  # reads the PDF back
def test_the_pdf_keeps_its_tables_on_the_page_and_its_links_open(pdf: Path) -> None:
    from pdf_layout import file_links, text_outside_margins

    assert text_outside_margins(pdf) == {}
    # The links to the project's files are relative to where the PDF lies (the synthetic bundle has no docs/)
    links = file_links(pdf)
    assert links and all(not urlsplit(uri).scheme and not uri.startswith("/") for _, uri in links), links


def test_the_committed_reports_machine_and_software_covers_every_run():
    """The report promises 'the machine and software of every run' and its A8 listed the main profile's alone: the
    8 H200 runs, which back the claims table's H200 column, had no machine in it."""
    report = (REPO / "report" / "report.md").read_text(encoding="utf-8")
    a8 = report.split("### A8. Machine and software", 1)[1].split("\n### ", 1)[0]
    runs = pd.read_csv(REPO / "metrics" / "runs.csv")["run"]
    assert runs.str.startswith("1xH200-nccl/").any()
    missing = [run for run in runs if run not in a8]
    assert not missing, missing
