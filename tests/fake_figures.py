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
