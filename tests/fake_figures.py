"""A stand-in figure for tests that check where files go, not what they show: the smallest whole PNG, carrying a
text so that tests can tell one drawing from another (the report refuses a PNG that does not decode)."""

from __future__ import annotations

import io


def tiny_png(text: str) -> bytes:
    """A 1 x 1 grey PNG whose ``tEXt`` chunk holds ``text``."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("muon-repro-test", text)
    out = io.BytesIO()
    Image.new("L", (1, 1), 128).save(out, format="PNG", pnginfo=info)
    return out.getvalue()
