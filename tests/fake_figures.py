"""A stand-in figure for tests that check where files go, not what they show: the smallest whole PNG, carrying a
text so that tests can tell one drawing from another (the report refuses a PNG that does not decode)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest


def tiny_png(text: str) -> bytes:
    """A 1 x 1 grey PNG whose ``tEXt`` chunk holds ``text``."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("muon-repro-test", text)
    out = io.BytesIO()
    Image.new("L", (1, 1), 128).save(out, format="PNG", pnginfo=info)
    return out.getvalue()


def written_empty(monkeypatch: pytest.MonkeyPatch, formats: frozenset[str] | None = None) -> None:
    """``Figure.savefig`` writes an empty file for each format in ``formats`` (every format when None) and renders
    the others, through ``monkeypatch``: for tests that read a drawn figure or its SVG text, not its PNG (a PNG at
    print resolution costs ~0.4 s a figure, an SVG ~0.1 s; tests/test_report.py's bundle checks the files)."""
    from matplotlib.figure import Figure

    savefig = Figure.savefig

    def savefig_or_empty(self, fname, *args, format=None, **kwargs):
        if formats is None or format in formats:
            Path(fname).write_bytes(b"")
        else:
            savefig(self, fname, *args, format=format, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig_or_empty)


def stand_in_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every figure drawn as two tiny files (a whole 1 x 1 PNG and a stand-in SVG), through ``monkeypatch``."""
    from muon_repro.report import build, profile_figures, study_section

    def fake(name: str):
        def draw(*args) -> Path:
            png = Path(args[-1]).with_suffix(".png")
            png.parent.mkdir(parents=True, exist_ok=True)
            png.write_bytes(tiny_png(f"new {name}"))
            png.with_suffix(".svg").write_bytes(f"new {name}".encode())
            return png

        return draw

    for name in build.DRAW:
        monkeypatch.setitem(build.DRAW, name, fake(name))
    monkeypatch.setattr(profile_figures, "claims_by_profile", fake("claims_by_profile"))
    monkeypatch.setattr(study_section, "study_numbers", fake("study_numbers"))


def render_with_stand_ins(metrics: Path, root: Path) -> str:
    """report.md from the tables in ``metrics``, every figure a stand-in file under ``root``: the report's text alone."""
    from muon_repro.report import figures, pipeline_section, profile_figures, regime_figures, study_section
    from muon_repro.report.build import write_report

    fig_dir = root / "figures"
    fig_dir.mkdir()
    names = (
        *figures.FIGURES,
        *regime_figures.REGIME_FIGURES,
        *profile_figures.PROFILE_FIGURES,
        *pipeline_section.PIPELINE_FIGURES,
        *study_section.STUDY_FIGURES,
    )
    for name in names:
        (fig_dir / f"{name}.png").write_bytes(tiny_png(name))
        (fig_dir / f"{name}.svg").write_text("")
    write_report(metrics, fig_dir, root / "report", ("md",), citation=["@misc{x,\n  title = {x}\n}"])
    return (root / "report" / "report.md").read_text(encoding="utf-8")
