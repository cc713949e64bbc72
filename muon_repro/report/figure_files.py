"""The figure files the report embeds, checked before anything is rendered: each there, each a whole PNG.

A PNG cut short (a copy interrupted, a disk full while ``muon-repro figures`` wrote) still opens, and a PDF renderer
draws what it can of it: a black box, with no error. So every figure the report shows is checked here first: Pillow
reads its chunks to the end and checks each one's CRC (well under a millisecond for a figure of a few hundred KB).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

REDRAW = "run `muon-repro figures --metrics METRICS --out FIGURES` to draw them again"


def checked_figures(figure_paths: Mapping[str, Path], names: Iterable[str]) -> dict[str, Path]:
    """``name -> path`` for each of ``names``; ``FileNotFoundError`` naming every missing figure and the folder it was
    looked for in, ``ValueError`` naming the first one that is not a whole PNG."""
    names = list(names)
    missing = [n for n in names if n not in figure_paths or not Path(figure_paths[n]).is_file()]
    if missing:
        folders = sorted({str(Path(figure_paths[n]).parent) for n in missing if n in figure_paths}) or ["(none given)"]
        raise FileNotFoundError(
            f"figure(s) {', '.join(missing)} not found in {', '.join(folders)}: {REDRAW.replace('them', 'the figures')}"
        )
    for name in names:
        _check_png(name, Path(figure_paths[name]))
    return {name: Path(figure_paths[name]) for name in names}


def _check_png(name: str, path: Path) -> None:
    from PIL import Image

    try:
        with Image.open(path) as image:
            if image.format != "PNG":
                raise ValueError(f"a {image.format} image, not a PNG")
            image.verify()  # every chunk read and its CRC checked, the image data included: a cut or changed byte shows
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError... for a damaged file
        raise ValueError(f"figure {name} ({path}) is not a whole PNG ({e}): {REDRAW.replace('them', 'it')}") from None
