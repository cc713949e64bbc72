"""The template context -> ``report.md``, ``report.html`` and ``report.pdf``, written atomically.

One template (``report.j2``) holds the content; the format only decides which building blocks
(``md.j2`` or ``html.j2``) it imports, so the Markdown and the PDF say the same thing. Jinja runs
with ``StrictUndefined`` and a ``finalize`` hook that refuses ``None`` and NaN, so a value missing
from the context fails the render instead of printing "None".
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib import request
from urllib.parse import urljoin

import jinja2
from markupsafe import Markup

from muon_repro.report.data import MissingMetric
from muon_repro.report.escape import block_text, code_fence, html_inline, inline_code, markdown_cell, markdown_inline, one_line
from muon_repro.tables.files import write_atomic

FORMATS = ("md", "html", "pdf")
TEMPLATES = Path(__file__).parent / "templates"


def _refuse_missing(value: Any) -> Any:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        raise MissingMetric(f"the report template was handed a missing value ({value!r}); a metric is absent from the context")
    return value


def _squash(text: Any) -> Any:
    """Collapse runs of whitespace (template line breaks) into one space; keeps Markup safe."""
    squashed = re.sub(r"\s+", " ", str(text)).strip()
    return Markup(squashed) if isinstance(text, Markup) else squashed


def _md_cell(text: Any) -> str:
    return markdown_cell(_refuse_missing(text))


def _html_text(text: Any) -> Any:
    """Control characters visible; Markup (a macro's own output) is left as it is, so it is not escaped twice."""
    return text if isinstance(text, Markup) else block_text(text)


def environment(fmt: str) -> jinja2.Environment:
    """The Jinja environment of a format. Run text (commands, host and GPU names, run ids) is data: HTML escapes
    every value (autoescape); Markdown escapes through the filters the templates name, ``text`` (a sentence),
    ``cell`` (a table cell), ``code`` (a code span) and ``fence`` (a code block's), each from
    :mod:`muon_repro.report.escape`; ``command`` puts a recorded command on one line in either format, and in
    both, ``text`` and ``cell`` show control characters (an ANSI escape) as visible escapes."""
    html = fmt != "md"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        autoescape=html,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_refuse_missing,
    )
    env.filters["squash"] = _squash
    env.filters["command"] = one_line
    # HTML: autoescape does the markup; sentences and cells show code spans as code, as the Markdown does, and
    # control characters visible; code and blocks (``verbatim``) only the latter.
    env.filters["cell"] = html_inline if html else _md_cell
    env.filters["text"] = html_inline if html else markdown_inline
    env.filters["verbatim"] = _html_text
    env.filters["code"] = inline_code  # Markdown's only (md.j2), as fence
    env.filters["fence"] = code_fence
    return env


def render_markdown(context: dict[str, Any]) -> str:
    text = environment("md").get_template("report.md.j2").render(**context, macros="md.j2")
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def render_html(context: dict[str, Any], image_base: str = "") -> str:
    """The report as one HTML page; ``image_base``, when given, is the URL the figures' relative paths are joined
    to (the PDF's: its links stay relative, see :data:`PDF_BASE_URL`)."""
    css = (TEMPLATES / "report.css").read_text()
    env = environment("html")
    env.globals["image_url"] = lambda src: urljoin(image_base, src) if image_base else src
    return env.get_template("report.html.j2").render(**context, macros="html.j2", css=Markup(css))


def write_formats(
    context: dict[str, Any], out_dir: str | Path, formats: tuple[str, ...] = ("md", "pdf"), *, base_dir: str | Path | None = None
) -> dict[str, Path]:
    """Render every format asked for into ``out_dir/report.<fmt>``; image paths are relative to ``base_dir``, the
    folder the report is meant for (default ``out_dir``; another when ``out_dir`` is a stage moved there after)."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"unknown report format(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(FORMATS)}")
    out = Path(out_dir)
    # Render everything before writing anything: a missing metric leaves no half-written bundle.
    md = render_markdown(context) if "md" in formats else None
    html = render_html(context) if "html" in formats else None
    pdf_html = render_html(context, image_base=PDF_BASE_URL) if "pdf" in formats else None
    written: dict[str, Path] = {}
    if md is not None:
        written["md"] = write_atomic(out / "report.md", md)
    if "html" in formats:
        written["html"] = write_atomic(out / "report.html", html)
    if "pdf" in formats:
        import weasyprint

        # No base URL: the links to the project's files stay relative in the PDF, resolved against where the PDF
        # lies (PDF 32000-1, 12.6.4.7); only the figures, already absolute, are fetched.
        document = weasyprint.HTML(string=pdf_html, url_fetcher=_report_fetcher_class()(Path(base_dir or out)))
        with source_date(context.get("recorded_at", "")):
            written["pdf"] = write_atomic(out / "report.pdf", lambda p: document.write_pdf(str(p)))
    return written


PDF_BASE_DIR = "/" + "r/" * 16 + "report"
PDF_BASE_URL = f"file://{PDF_BASE_DIR}/"
"""Where the PDF's figures seem to sit: WeasyPrint names what it embeds by URL, so a checkout's path in the image
URLs changed the PDF's bytes from one clone to another. Deep enough that the figures' relative paths (up to 16
folders up) resolve below it. Only the figures' URLs are joined to it: a link joined to it would point at no file."""


def _report_fetcher_class():
    from weasyprint.urls import URLFetcher, URLFetcherResponse

    class ReportFetcher(URLFetcher):
        """Reads a file URL under :data:`PDF_BASE_URL` from the same relative place under the report's real folder,
        keeping the URL as WeasyPrint asked for it."""

        def __init__(self, out: Path) -> None:
            super().__init__()
            self.out = os.path.abspath(out)  # the report's links are relative to the folders as laid out (links kept)

        def fetch(self, url: str, headers: dict | None = None) -> URLFetcherResponse:
            if not url.startswith("file:"):
                return super().fetch(url, headers)
            asked = request.url2pathname(url.split("?")[0].removeprefix("file:"))
            laid_out = os.path.normpath(os.path.join(self.out, os.path.relpath(asked, PDF_BASE_DIR)))
            real = super().fetch(Path(laid_out).resolve().as_uri(), headers)
            try:
                return URLFetcherResponse(url, real.read(), real.headers)
            finally:
                real.close()

    return ReportFetcher


def pdf_epoch(recorded_at: str) -> int:
    """``SOURCE_DATE_EPOCH`` for the PDF: the environment's if set, else the newest run's recording
    time (``recorded_at``), else 0: never the clock, so the same tables give the same bytes."""
    if os.environ.get("SOURCE_DATE_EPOCH", "").strip():
        return int(os.environ["SOURCE_DATE_EPOCH"])
    if not recorded_at:
        return 0
    when = datetime.fromisoformat(recorded_at.replace("Z", "+00:00"))
    return int((when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp())


@contextmanager
def source_date(recorded_at: str) -> Iterator[None]:
    """Set ``SOURCE_DATE_EPOCH`` while WeasyPrint writes: the only clock it reads is fontTools' (the
    ``head`` table of every embedded font subset), which honours it; the PDF's CreationDate and
    ModDate come from the HTML's ``dcterms.created``/``modified`` (the same date), its /ID from its content."""
    before = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(pdf_epoch(recorded_at))
    try:
        yield
    finally:
        if before is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = before
