"""What a reader of a report PDF sees, read back with pdfium and pypdf: text that lies outside the page's text
area (a table wider than the page: WeasyPrint lets it run off the edge, yet text extraction still finds it), and
links that open nothing (a link to a project file resolved against a made-up folder)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from muon_repro.report.render import TEMPLATES

MM = 72 / 25.4  # PDF points per millimetre


def page_margins_pt() -> tuple[float, float]:
    """The left and right page margins report.css gives ``@page``, in points."""
    css = (TEMPLATES / "report.css").read_text()
    margin = re.search(r"@page\s*{[^}]*?margin:((?:\s*[\d.]+mm){4})", css)
    _, right, _, left = (float(v) for v in re.findall(r"[\d.]+", margin[1]))
    return left * MM, right * MM


def text_outside_margins(pdf: Path, tolerance_pt: float = 1.0) -> dict[int, str]:
    """By page number (from 1): the first characters of the text that lies left or right of the text area."""
    import pypdfium2 as pdfium

    left, right = page_margins_pt()
    outside = {}
    document = pdfium.PdfDocument(pdf)
    try:
        for index in range(len(document)):
            page = document[index]
            width, _ = page.get_size()
            text = page.get_textpage()
            chars = [c for c in range(text.count_chars()) if _outside(text.get_charbox(c), left, width - right, tolerance_pt)]
            if chars:
                outside[index + 1] = f"{len(chars)} characters, from {text.get_text_range(chars[0], 30)!r}"
    finally:
        document.close()
    return outside


def _outside(box: tuple[float, float, float, float], left: float, right: float, tolerance: float) -> bool:
    x0, _, x1, _ = box
    return x1 > x0 and (x1 > right + tolerance or x0 < left - tolerance)


def file_links(pdf: Path) -> list[tuple[int, str]]:
    """(page number, URI) of each link of the PDF that is not a web link."""
    from pypdf import PdfReader

    links = []
    for number, page in enumerate(PdfReader(pdf).pages, start=1):
        for annotation in page.get("/Annots") or []:
            uri = (annotation.get_object().get("/A") or {}).get("/URI")
            if uri is not None and urlsplit(str(uri)).scheme not in ("http", "https"):
                links.append((number, str(uri)))
    return links


def broken_links(pdf: Path) -> list[str]:
    """Each link of the PDF to a file that does not open: a ``file:`` URL (or any other scheme), or a relative one
    that names no file from the PDF's folder (fragments aside)."""
    broken = []
    for number, uri in file_links(pdf):
        parts = urlsplit(uri)
        if parts.scheme or not (pdf.parent / unquote(parts.path)).is_file():
            broken.append(f"page {number}: {uri}")
    return broken
