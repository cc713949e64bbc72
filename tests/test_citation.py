"""Citing: CITATION.cff at the repository root (the bundle's, byte for byte, valid for cffconvert) and the BibTeX
entry with the Hub's revision convention, in the card (version tag) and printed by publish (commit)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hub_support import DATE, build

from muon_repro.dataset.bundle import Sources, documents_from_sources
from muon_repro.dataset.citation import CFF_NAME, bibtex, read_citation
from muon_repro.dataset.croissant import CROISSANT_NAME
from muon_repro.dataset.meta import BundleMeta
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
    bundle = build(sources, tmp_path / "dataset")
    assert sorted(p.name for p in root.iterdir()) == ["CITATION.cff", "croissant.json", "dataset_card.md"]  # no temporary left
    assert (root / "dataset_card.md").read_bytes() == (bundle / "README.md").read_bytes()
    for name in (CFF_NAME, CROISSANT_NAME):
        assert (root / name).read_bytes() == (bundle / name).read_bytes(), name


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
    meta = dataclasses.replace(META, authors=("Ada Lovelace", "muon_repro developers"), code_url="https://example.org/muon_repro")
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
