"""Figures and report on a synthetic bundle (tests/report_bundle.py): the PDF read back, the
Markdown's links, missing metrics named, figures degrading with one optimizer or one run."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image
from report_bundle import FULL, Run, make_bundle

from muon_repro.cli import main
from muon_repro.report.context import SECTIONS, claims_rows, report_verdict
from muon_repro.report.data import MissingMetric, load
from muon_repro.report.figures import FIGURES


def _run(root: Path, *argv: str) -> int:
    return main([*argv[:1], "--metrics", str(root / "metrics"), "--traces", str(root / "traces"), *argv[1:]])


@pytest.fixture(scope="session")
def bundle(tmp_path_factory) -> Path:
    """A full synthetic bundle with figures and the report in md, html and pdf, read-only.

    Built once per session: under pytest-xdist the workers share it through the parent of
    their temporary directories, the first to take the lock builds it.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "report_bundle"
    with open(shared / "report_bundle.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "done").is_file():
            shutil.rmtree(root, ignore_errors=True)
            make_bundle(root)
            assert _run(root, "figures", "--out", str(root / "figures")) == 0
            assert _run(root, "report", "--figures", str(root / "figures"), "--out", str(root / "report"), "--format", "md,html,pdf") == 0
            (root / "done").touch()
    return root


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


def test_every_figure_is_written_as_png_at_print_resolution_and_svg(bundle: Path) -> None:
    for name in FIGURES:
        png, svg = bundle / "figures" / f"{name}.png", bundle / "figures" / f"{name}.svg"
        assert png.is_file() and svg.is_file(), name
        with Image.open(png) as im:
            assert im.size[0] >= 1800, (name, im.size)  # ~7 in wide at 300 dpi
            assert round(im.info["dpi"][0]) >= 300, (name, im.info.get("dpi"))
        assert "<svg" in svg.read_text()[:2000]
    assert not list((bundle / "figures").glob(".*.tmp"))  # atomic writes leave nothing behind


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


def test_pdf_has_every_section_heading_and_claims_row(bundle: Path) -> None:
    text = _pdf_text(bundle / "report" / "report.pdf")
    for _, heading in SECTIONS:
        assert heading in text, heading
    claims = claims_rows(load(bundle / "metrics", bundle / "traces"))
    assert len(claims) >= 6
    for c in claims:
        assert _squash(c["claim"]) in text, c["claim"]
        assert c["verdict"] in text
    for claim_id in ("comm_time_dp2_tp2", "optimizer_share", "state_memory", "hybrid_beats_pure", "comm_bytes_ratio", "latency_overhead"):
        assert claim_id in {c["id"] for c in claims}


def test_pdf_embeds_every_figure_as_an_image(bundle: Path) -> None:
    drawn = _drawn_image_sizes(bundle / "report" / "report.pdf")
    for name in FIGURES:
        with Image.open(bundle / "figures" / f"{name}.png") as im:
            assert im.size in drawn, f"figure {name} ({im.size}) is not painted in the PDF"


def test_a_pdf_page_renders_to_a_non_blank_image(bundle: Path) -> None:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(bundle / "report" / "report.pdf")
    try:
        assert len(pdf) >= 3
        for index in (0, len(pdf) // 2):
            image = pdf[index].render(scale=1.0).to_pil().convert("L")
            inked = sum(image.histogram()[:200])  # pixels clearly darker than the white page
            assert inked / (image.width * image.height) > 0.01, f"page {index + 1} looks blank"
    finally:
        pdf.close()


# ---------------------------------------------------------------- the Markdown


def test_markdown_links_and_images_resolve_inside_the_bundle(bundle: Path) -> None:
    md_path = bundle / "report" / "report.md"
    md = md_path.read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", md)
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", md)
    assert len(images) == len(FIGURES)
    assert len(targets) > len(images)  # the SVGs and the tables are linked too
    for href in targets:
        assert not re.match(r"^[a-z]+:", href), f"external link {href} in the report"
        target = (md_path.parent / href).resolve()
        assert target.is_file(), href
        assert target.is_relative_to(bundle.resolve()), href


def test_markdown_and_html_say_the_same_thing(bundle: Path) -> None:
    md = (bundle / "report" / "report.md").read_text()
    html = (bundle / "report" / "report.html").read_text()
    for _, heading in SECTIONS:
        assert f"## {heading}" in md and f">{heading}</h2>" in html
    for token in re.findall(r"\d+\.\d+×", md):
        assert token in html


def test_no_none_or_nan_reaches_the_report(bundle: Path) -> None:
    for name in ("report.md", "report.html"):
        text = (bundle / "report" / name).read_text()
        assert not re.search(r"\b(None|nan|NaN|null|<NA>)\b", text), name


# ---------------------------------------------------------------- missing metrics are named


@pytest.fixture
def bundle_copy(bundle: Path, tmp_path: Path) -> Path:
    for sub in ("metrics", "traces", "figures"):
        shutil.copytree(bundle / sub, tmp_path / sub)
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
        df.loc[df["run"] == "comparison/muon_dp2_tp2", "optimizer_share"] = pd.NA
        return df

    _edit_table(bundle_copy, "runs", drop_value)
    err = _report_error(bundle_copy, capsys)
    assert "runs.optimizer_share" in err and "comparison/muon_dp2_tp2" in err


def test_a_missing_column_fails_with_its_name(bundle_copy: Path, capsys) -> None:
    _edit_table(bundle_copy, "comparisons", lambda df: df.drop(columns=["comm_bytes_ratio"]))
    assert "comparisons.comm_bytes_ratio" in _report_error(bundle_copy, capsys)


def test_a_missing_environment_field_fails_with_its_name(bundle_copy: Path, capsys) -> None:
    env = bundle_copy / "traces" / "comparison" / "adamw_dp2_tp2" / "environment.json"
    env.write_text(env.read_text().replace('"host_cpu": "Test CPU"', '"host_cpu": null'))
    err = _report_error(bundle_copy, capsys)
    assert "host_cpu" in err and "comparison/adamw_dp2_tp2" in err


def test_a_missing_table_or_figure_fails_with_its_name(bundle_copy: Path, capsys) -> None:
    (bundle_copy / "figures" / "timeline.png").unlink()
    assert "timeline" in _report_error(bundle_copy, capsys)
    (bundle_copy / "metrics" / "claims.parquet").unlink()
    assert "claims.parquet" in _report_error(bundle_copy, capsys)


def test_a_figure_refuses_a_missing_metric(bundle_copy: Path, capsys) -> None:
    def drop_value(df: pd.DataFrame) -> pd.DataFrame:
        df.loc[df["run"] == "distributed_muon/muon_dp4", "step_ms_p90"] = pd.NA
        return df

    _edit_table(bundle_copy, "runs", drop_value)
    assert _run(bundle_copy, "figures", "--out", str(bundle_copy / "figures2")) == 2
    err = capsys.readouterr().err
    assert "runs.step_ms_p90" in err and "distributed_muon/muon_dp4" in err


# ---------------------------------------------------------------- verdicts


def test_verdicts_in_the_report_terms() -> None:
    runs = pd.DataFrame({"run": ["g/muon", "g/adamw"], "device": ["cpu", "cpu"], "backend": ["gloo", "gloo"]})
    gpu = runs.assign(device="cuda", backend="nccl")

    def row(claim_id: str, verdict: str, value=1.0) -> pd.Series:
        return pd.Series({"claim_id": claim_id, "verdict": verdict, "measured_value": value, "conditions": "g/muon vs g/adamw"})

    assert report_verdict(row("comm_time_dp2_tp2", "supported"), runs) == "reproduced"
    assert report_verdict(row("comm_time_dp2_tp2", "not supported"), runs) == "different conditions"
    assert report_verdict(row("comm_time_dp2_tp2", "not supported"), gpu) == "not reproduced"
    assert report_verdict(row("state_memory", "partly supported"), runs) == "not reproduced"
    assert report_verdict(row("async_slowdown", "not measured", pd.NA), runs) == "not measured"


def test_formatters_refuse_missing_values() -> None:
    from muon_repro.report.context import mb, ms, pct, ratio

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
