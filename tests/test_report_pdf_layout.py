"""The committed report's PDF as a reader sees it: every table within the page, every link to a file opening it."""

from __future__ import annotations

from pathlib import Path

from pdf_layout import broken_links, file_links, text_outside_margins

COMMITTED = Path(__file__).resolve().parents[1] / "report" / "report.pdf"


def test_no_text_of_the_committed_report_runs_off_its_pages():
    assert text_outside_margins(COMMITTED) == {}


def test_every_link_of_the_committed_report_to_a_file_opens_it():
    uris = [uri for _, uri in file_links(COMMITTED)]
    assert any(u.startswith("../metrics/") for u in uris) and any(u.startswith("../docs/") for u in uris), uris
    assert broken_links(COMMITTED) == []


def test_the_committed_report_names_its_authors_in_the_pdfs_metadata():
    from pypdf import PdfReader

    from muon_repro.report.abstract_section import title_block

    authors = title_block(COMMITTED.parents[1], "", title="", version="")["author_names"]
    assert authors and PdfReader(COMMITTED).metadata["/Author"] == authors
