"""Citing: CITATION.cff at the repository root (the bundle's, byte for byte, valid for cffconvert) and the BibTeX
entry with the Hub's revision convention, in the card (version tag) and printed by publish (commit).

One entry: the card, croissant.json's citeAs, the report and publish carry the bytes of one renderer, for the
authors the publisher names (--author), else the checked-in list (never a placeholder)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from hub_support import DATE, build, source_args
from report_bundle import make_bundle

from muon_repro import __version__
from muon_repro.cli import main
from muon_repro.dataset import meta as meta_module
from muon_repro.dataset.bundle import Sources, documents_from_sources
from muon_repro.dataset.citation import CFF_NAME, bibtex, read_citation
from muon_repro.dataset.croissant import CROISSANT_NAME
from muon_repro.dataset.meta import BundleMeta, project_authors, resolve_authors
from muon_repro.dataset.naming import DEFAULT_REPO_ID, HUB_URL
from muon_repro.hub.publish import publish
from muon_repro.job import RunPlan, _meta, _sources

REPO_ROOT = Path(__file__).resolve().parents[1]
REPO = "test-org/muon-traces"
META = BundleMeta(repo_id=REPO, version="1.0.0", date=DATE)
SHA = "0123456789abcdef0123456789abcdef01234567"


def _cffconvert() -> str | None:
    """$CFFCONVERT (CI: .ci/run makes a venv of its own), else cffconvert on PATH, else the local venv .ci/run would make."""
    local = REPO_ROOT / ".ci" / ".cffconvert" / "bin" / "cffconvert"
    return os.environ.get("CFFCONVERT") or shutil.which("cffconvert") or (str(local) if local.is_file() else None)


@pytest.mark.slow  # renders the repository's card (~4 s); tests/test_artifacts.py checks dataset_card.md beside it
def test_the_root_files_are_what_the_package_generates_for_the_committed_metadata():
    plan = RunPlan(out=REPO_ROOT)
    docs = documents_from_sources(_sources(plan), _meta(plan))
    for name in (CFF_NAME, CROISSANT_NAME):
        path = REPO_ROOT / name
        assert path.is_file(), f"{name} is missing at the repository root: `muon-repro run` writes it (its card stage)"
        assert path.read_text(encoding="utf-8") == docs.root_files[name], f"{name} is stale: regenerate it with `muon-repro run`"


def test_the_card_stage_writes_the_root_files_beside_the_card(sources, tmp_path):  # noqa: F811
    from muon_repro import stages

    root = tmp_path / "root"
    stages.card(Sources(**sources), META, root / "dataset_card.md")
    bundle = build(sources, tmp_path / "dataset", code=REPO_ROOT)  # the card stage describes the repository's code
    assert sorted(p.name for p in root.iterdir()) == ["CITATION.cff", "croissant.json", "dataset_card.md"]  # no temporary left
    assert (root / "dataset_card.md").read_bytes() == (bundle / "README.md").read_bytes()
    for name in (CFF_NAME, CROISSANT_NAME):
        assert (root / name).read_bytes() == (bundle / name).read_bytes(), name


@pytest.mark.slow  # cffconvert is a Python console script: a process
@pytest.mark.parametrize("which", ["root", "bundle"])
def test_citation_cff_validates_with_cffconvert(which, sources, tmp_path):  # noqa: F811
    cffconvert = _cffconvert()
    if cffconvert is None:
        reason = (
            "cffconvert not found: set CFFCONVERT, put cffconvert on PATH, or make the venv .ci/run makes: "
            "python -m venv .ci/.cffconvert && .ci/.cffconvert/bin/pip install -q cffconvert==2.0.0"
        )
        if os.environ.get("CI"):
            pytest.fail("CI must provide cffconvert (CFFCONVERT=path), see .ci/run; " + reason)
        pytest.skip(reason)
    path = REPO_ROOT / CFF_NAME if which == "root" else build(sources, tmp_path / "dataset") / CFF_NAME
    out = subprocess.run([cffconvert, "--validate", "-i", str(path)], check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_read_citation_gives_back_the_metadata_it_was_written_from(sources, tmp_path):  # noqa: F811
    meta = dataclasses.replace(META, authors=("Ada Lovelace", "The muon-repro team"), code_url="https://example.org/muon_repro")
    (tmp_path / CFF_NAME).write_text(documents_from_sources(Sources(**sources), meta).root_files[CFF_NAME])
    assert read_citation(tmp_path / CFF_NAME) == meta
    broken = tmp_path / "broken.cff"
    broken.write_text((tmp_path / CFF_NAME).read_text().replace("version: 1.0.0\n", ""))
    with pytest.raises(ValueError, match=r"broken\.cff: missing or malformed field 'version'"):
        read_citation(broken)
    broken.write_text((tmp_path / CFF_NAME).read_text().replace("version: 1.0.0", "version: '1.0'"))
    with pytest.raises(ValueError, match=r"broken\.cff: invalid version '1\.0'"):
        read_citation(broken)


def test_bibtex_cites_the_version_tag_or_the_commit_as_the_hub_does():
    tagged = bibtex(META)
    assert "title = {{Distributed Muon vs AdamW: profiler traces and metrics (Revision v1.0.0)}}" in tagged
    assert "publisher = {Hugging Face}" in tagged and "tree/v1.0.0}" in tagged
    committed = bibtex(META, SHA)
    assert "(Revision 0123456)}}" in committed and f"/tree/{SHA}}}" in committed
    # The same entry, the revision aside: same key, authors, year, version, publisher.
    assert committed == tagged.replace("(Revision v1.0.0)", "(Revision 0123456)").replace("tree/v1.0.0", f"tree/{SHA}")


def test_the_card_cites_the_version_tag(sources, tmp_path):  # noqa: F811
    card = (build(sources, tmp_path / "dataset") / "README.md").read_text()
    assert bibtex(META) in card and "(Revision v1.0.0)" in card


def test_publish_prints_the_entry_with_the_commit_it_tagged(sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    bundle = build(sources, tmp_path / "dataset")
    lines: list[str] = []
    result = publish(bundle, REPO, "1.0.0", api=hub_api, echo=lines.append)
    assert result.tagged and result.commit == fake_hub.get_repo(REPO).tags["v1.0.0"]
    expected = bibtex(META, result.commit, endpoint=fake_hub.url)  # linked on the Hub that holds the commit
    assert f"(Revision {result.commit[:7]})" in expected and f"{fake_hub.url}/datasets/{REPO}/tree/{result.commit}" in expected
    assert lines[-1] == f"Cite this version as:\n{expected}"
    # Publishing the same bundle again finds it published and cites the same commit.
    lines.clear()
    publish(bundle, REPO, "1.0.0", api=hub_api, echo=lines.append)
    assert lines[-1] == f"Cite this version as:\n{expected}"


# ---------------------------------------------------------------------- one entry, the publisher's authors

AUTHORS = ("Ada Lovelace", "Grace Hopper & the {COBOL} team")  # BibTeX's special characters are escaped once
PLACEHOLDERS = ("muon_repro developers", "muon\\_repro developers")


def dataset_entries(text: str) -> list[str]:
    """Every ``@misc`` entry of the dataset in a text: Markdown, a card, JSON-decoded citeAs, publish's output (the
    original study's entries, keyed ``wei2025...``, left out)."""
    return re.findall(r"^@misc\{(?!wei2025).*?^\}", text, re.M | re.S)


@pytest.mark.slow  # end to end: card, croissant, report and a publish
def test_card_croissant_report_and_publish_carry_one_entry_for_the_authors_given(sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    flags = [arg for author in AUTHORS for arg in ("--author", author)]
    cite = ["--repo-id", REPO, "--version", "1.0.0", "--date", DATE, *flags]
    entry = bibtex(BundleMeta(repo_id=REPO, version="1.0.0", date=DATE, authors=AUTHORS))
    assert "author = {{Ada Lovelace} and {Grace Hopper \\& the \\{COBOL\\} team}}" in entry

    # The bundle (its card and croissant.json), then the card stage from the bundle's CITATION.cff.
    bundle = tmp_path / "dataset"
    assert main(["bundle", "--out", str(bundle), *cite, *source_args(sources)]) == 0
    meta = read_citation(bundle / CFF_NAME)
    assert meta.authors == AUTHORS
    from muon_repro import stages

    card = stages.card(Sources(**sources), meta, tmp_path / "root" / "dataset_card.md")
    croissant = json.loads((tmp_path / "root" / CROISSANT_NAME).read_text())
    assert card.read_bytes() == (bundle / "README.md").read_bytes()
    assert [c["name"] for c in croissant["creator"]] == list(AUTHORS)

    # The report, from tables of its own, told the same.
    root = make_bundle(tmp_path / "report_src")
    assert main(["figures", "--metrics", str(root / "metrics"), "--out", str(root / "figures")]) == 0
    report_args = ["--metrics", str(root / "metrics"), "--figures", str(root / "figures"), "--out", str(root / "report")]
    assert main(["report", *report_args, "--format", "md", *cite]) == 0
    report = (root / "report" / "report.md").read_text()
    assert f"--format md {' '.join(cite[:6])} --author 'Ada Lovelace'" in report  # "How to reproduce" cites it again

    # Publish prints the same entry, the tagged commit as its revision (title and link), nothing else changed.
    lines: list[str] = []
    result = publish(bundle, REPO, "1.0.0", api=hub_api, echo=lines.append, authors=AUTHORS)
    printed = dataset_entries(lines[-1])
    assert dataset_entries(card.read_text()) == dataset_entries(report) == dataset_entries(croissant["citeAs"]) == [entry]
    assert printed == [bibtex(meta, result.commit, endpoint=fake_hub.url)]
    tagged = entry.replace("(Revision v1.0.0)", f"(Revision {result.commit[:7]})")
    assert printed[0] == tagged.replace(
        f"{HUB_URL}/datasets/{REPO}/tree/v1.0.0", f"{fake_hub.url}/datasets/{REPO}/tree/{result.commit}"
    )


def test_the_committed_card_croissant_and_report_cite_one_entry():
    """What `muon-repro run` wrote: the card, croissant.json and the report cite the job's metadata, one entry."""
    expected = [bibtex(_meta(RunPlan(out=REPO_ROOT)))]
    assert dataset_entries((REPO_ROOT / "dataset_card.md").read_text()) == expected, "regenerate with `muon-repro run`"
    assert dataset_entries(json.loads((REPO_ROOT / CROISSANT_NAME).read_text())["citeAs"]) == expected
    assert dataset_entries((REPO_ROOT / "report" / "report.md").read_text()) == expected, "regenerate with `muon-repro run`"


def test_publish_refuses_authors_the_bundle_does_not_cite_and_a_dry_run_shows_the_entry(sources, tmp_path, hub_api):  # noqa: F811
    bundle = build(sources, tmp_path / "dataset")
    with pytest.raises(ValueError, match="cites muon-repro, not Ada Lovelace; rebuild it .* --author 'Ada Lovelace'"):
        publish(bundle, REPO, "1.0.0", api=hub_api, echo=lambda line: None, authors=["Ada Lovelace"], dry_run=True)
    lines: list[str] = []
    publish(bundle, REPO, "1.0.0", api=hub_api, echo=lines.append, authors=list(project_authors()), dry_run=True)
    assert dataset_entries("\n".join(lines)) == [bibtex(META)]


def test_the_job_cites_the_checked_in_authors_or_the_given_ones_never_the_machines_git(tmp_path, monkeypatch):
    monkeypatch.setattr(meta_module, "git_user_name", lambda: pytest.fail("the job asked git for a name"))
    assert _meta(RunPlan(out=tmp_path)).authors == project_authors()
    assert _meta(RunPlan(out=tmp_path, authors=AUTHORS)).authors == AUTHORS
    assert RunPlan(out=tmp_path).command == ("muon-repro", "run")


def test_authors_come_from_the_flag_then_git_for_another_repository_then_the_checked_in_list(monkeypatch):
    monkeypatch.setattr(meta_module, "git_user_name", lambda: "Someone Else")
    assert resolve_authors(["Ada Lovelace", "Alan Turing"], repo_id="me/mine") == ("Ada Lovelace", "Alan Turing")
    assert resolve_authors(None, repo_id="me/mine") == ("Someone Else",)
    assert resolve_authors([]) == resolve_authors(None, repo_id=DEFAULT_REPO_ID) == project_authors()  # the project's own
    monkeypatch.setattr(meta_module, "git_user_name", lambda: None)  # a machine without git, or without a name
    assert resolve_authors(None, repo_id="me/mine") == project_authors()
    with pytest.raises(ValueError, match="empty --author"):
        resolve_authors(["Ada Lovelace", " "])
    assert BundleMeta(repo_id=REPO, version="1.0.0", date=DATE).authors == project_authors()


def test_the_checked_in_authors_are_pyprojects_and_no_placeholder_is_left_in_the_package():
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["authors"]
    assert tuple(a["name"] for a in declared) == project_authors() and project_authors()
    found = [
        f"{path.relative_to(REPO_ROOT)}: {word}"
        for path in sorted([*(REPO_ROOT / "muon_repro").rglob("*"), REPO_ROOT / "pyproject.toml"])
        if path.is_file() and path.suffix not in (".pyc",)
        for word in PLACEHOLDERS
        if word in path.read_text(encoding="utf-8", errors="replace")
    ]
    assert found == []
    assert not set(project_authors()) & set(PLACEHOLDERS)
    assert __version__ in bibtex(_meta(RunPlan(out=REPO_ROOT)))


def test_the_paper_and_the_original_study_are_cited_alike_in_cff_and_bibtex(tmp_path):
    """CITATION.cff's references and the BibTeX entries name the same people: the paper's 28 authors in order,
    and Jen Wei for the study's report and its dataset."""
    import yaml

    from muon_repro.dataset.citation import citation_cff, paper_bibtex, study_bibtex
    from muon_repro.dataset.meta import BundleMeta

    cff = yaml.safe_load(citation_cff(BundleMeta(authors=("A Team",), date="2026-01-01")))
    paper, report, data = cff["references"]
    names = [(a["family-names"], a["given-names"]) for a in paper["authors"]]
    assert len(names) == 28 and names[0] == ("Liu", "Jingyuan") and names[-1] == ("Yang", "Zhilin")
    assert paper_bibtex().count(" and ") == 27 and "Liu, Jingyuan and Su, Jianlin" in paper_bibtex()
    assert "Moonshot AI" not in paper_bibtex() and all("name" not in a for a in paper["authors"])
    assert report["type"] == "report" and report["url"].startswith("https://medium.com/@jenwei0312/")
    assert data["type"] == "data" and data["authors"] == report["authors"] == [{"given-names": "Jen", "family-names": "Wei"}]
    entries = study_bibtex()
    assert entries.count("@misc{") == 2 and entries.count("author = {Wei, Jen}") == 2 and report["url"] in entries


def test_docs_publishing_gives_the_papers_bibtex_the_card_gives():
    """The paper is cited with every author, as the card and the report cite it: no second, shortened entry."""
    from muon_repro.dataset.citation import paper_bibtex

    doc = (Path(__file__).resolve().parents[1] / "docs" / "publishing.md").read_text()
    assert paper_bibtex().strip() in doc and "and others}" not in doc
