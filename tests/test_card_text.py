"""The dataset card's words for a reader of the download: what to install first, where each file it names lies, what
the scripts do, what a rebuild writes, who is credited. Each is checked on a card rendered into a temporary folder."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hub_support import DATE, REPO_ROOT, build, make_sources
from support.markdown import markdown_section

from muon_repro.dataset.card import cpu_torch_command, pinned_version
from muon_repro.dataset.manifest import read_manifest
from muon_repro.tables.files import human_size

DATA_FOLDERS = ("traces", "metrics", "figures", "report", "analysis_scripts", "docs")
SCRIPTS = {
    "record.py": '"""Record the runs of one protocol.\n\nMore words.\n"""\nprint(1)\n',
    "tables.py": '"""Rebuild the tables from the traces | all of them."""\n',
    "helper.py": "print('no docstring')\n",
}


def _torch_pin() -> str:
    found = re.search(r"^torch==(\S+)$", (REPO_ROOT / "constraints.txt").read_text(), flags=re.MULTILINE)
    assert found, "constraints.txt pins no torch"
    return found[1]


@pytest.fixture(scope="module")
def study_folder() -> str:
    from muon_repro.study.sources import GROUP, STUDY_PROFILE

    return f"traces/{STUDY_PROFILE}/{GROUP}"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, study_folder) -> Path:
    """A bundle of the synthetic sources with the original study's notice files and scripts with docstrings."""
    from muon_repro.study.sources import LICENSE_NAME, PROVENANCE_NAME

    root = tmp_path_factory.mktemp("card")
    sources = make_sources(root / "src")
    study = sources["traces"] / Path(study_folder).relative_to("traces")
    study.mkdir(parents=True)
    (study / LICENSE_NAME).write_text("MIT License\n")
    (study / PROVENANCE_NAME).write_text("{}\n")
    for script in sources["analysis_scripts"].iterdir():
        script.unlink()
    for name, text in SCRIPTS.items():
        (sources["analysis_scripts"] / name).write_text(text)
    return build(sources, root / "dist" / "dataset", code=REPO_ROOT)  # the card names the code's pinned torch


@pytest.fixture(scope="module")
def card(bundle) -> str:
    return (bundle / "README.md").read_text()


def test_the_card_says_to_install_the_cpu_torch_first_at_the_pinned_version(card):
    regenerate = markdown_section(card, "How to regenerate")
    command = f"python -m pip install torch=={_torch_pin()} --index-url https://download.pytorch.org/whl/cpu"
    assert f"`{command}`" in regenerate
    # before the recipe, and outside its block (a reader, and tests/test_rebuild_from_download.py, run the block)
    block = re.search(r"```bash\n(.*?)```", regenerate, flags=re.DOTALL)
    assert block and regenerate.index(command) < block.start() and "whl/cpu" not in block[1]
    assert block[1].startswith('python -m pip install -c constraints.txt -e ".[dev]"')
    # constraints.txt, which a download carries, says the same command in its comment
    comments = [line for line in (REPO_ROOT / "constraints.txt").read_text().splitlines() if line.startswith("#")]
    assert any(command in line for line in comments), comments


def test_the_torch_pin_is_read_from_the_constraints(tmp_path):
    pins = tmp_path / "constraints.txt"
    pins.write_text("# torch==0.0.1 in a comment\nnumpy==2.4.6\nTorch == 9.9.9+cpu ; sys_platform == 'linux'\n")
    assert pinned_version(pins, "torch") == "9.9.9+cpu" and pinned_version(pins, "pandas") is None
    assert cpu_torch_command({"constraints.txt": pins}).startswith("python -m pip install torch==9.9.9+cpu --index-url")
    assert cpu_torch_command({}) == "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"


def test_the_study_notice_files_are_linked_by_their_path_in_the_bundle(bundle, card, study_folder):
    from muon_repro.study.sources import LICENSE_NAME, PROVENANCE_NAME

    license_text = markdown_section(card, "License")
    for name in (LICENSE_NAME, PROVENANCE_NAME):
        path = f"{study_folder}/{name}"
        assert f"[`{path}`]({path})" in license_text
        assert (bundle / path).is_file()
    assert f"`{LICENSE_NAME}`" not in license_text and f"`{PROVENANCE_NAME}`" not in license_text


def test_the_committed_license_files_are_where_the_card_links_them():
    """The repository's own card (dataset_card.md, which tests/test_artifacts.py rebuilds): each third-party license
    file under traces/ is linked by its path from the root."""
    card = (REPO_ROOT / "dataset_card.md").read_text(encoding="utf-8")
    found = sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "traces").rglob("LICENSE*"))
    assert found
    for path in found:
        assert f"[`{path}`]({path})" in card
    # the tests' traces of other projects: their sources and notices, from the card's license section
    assert "[`tests/data/external/README.md`](tests/data/external/README.md)" in card.split("## License", 1)[1]
    # and the scripts' row says what each one does, from its docstring, and claims no figures
    row = next(line for line in card.splitlines() if line.startswith("| `analysis_scripts/` |"))
    for script in sorted((REPO_ROOT / "analysis_scripts").glob("*.py")):
        first = ast.get_docstring(ast.parse(script.read_text())).splitlines()[0].rstrip(".")
        assert f"`{script.name}`: {first[0].lower()}{first[1:]}" in row, row
    assert "figures" not in row


def test_the_scripts_row_says_what_each_script_does(card):
    row = next(line for line in card.splitlines() if line.startswith("| `analysis_scripts/` |"))
    assert "`record.py`: record the runs of one protocol;" in row and "More words" not in row
    assert "`tables.py`: rebuild the tables from the traces \\| all of them |" in row
    assert "helper.py" not in row and "figures" not in row


def test_the_card_says_the_rebuild_writes_a_second_bundle_and_its_size(bundle, card):
    regenerate = markdown_section(card, "How to regenerate")
    # every file but the card and the manifest: what the rebuild copies into dist/dataset
    size = human_size(sum(e.size for e in read_manifest(bundle) if e.path != "README.md"))
    assert f"a second copy of the whole dataset, about {size}, into `dist/dataset/`" in " ".join(regenerate.split())


def test_the_authors_line_speaks_to_the_reader(card, bundle):
    from muon_repro.dataset.bundle import Sources, render_card_from_sources
    from muon_repro.dataset.meta import BundleMeta, project_authors

    citation = markdown_section(card, "Citation")
    assert "--author" not in citation and "muon-repro publish" not in citation
    said = f"No author was named when this bundle was built, so the citation credits the project: {', '.join(project_authors())}."
    assert said in citation
    sources = {name: bundle / name for name in DATA_FOLDERS}
    named = BundleMeta(repo_id="test-org/muon-traces", version="1.0.0", date=DATE, authors=("A. Author",))
    assert "No author was named" not in render_card_from_sources(Sources(**sources, code=None), named)


def test_no_sentence_of_the_committed_card_runs_into_the_next():
    """The licence paragraph read "Please cite the study when you use them.The profiler traces ...": the template's
    optional sentences join with a space."""
    joined = re.findall(r"[a-z)]\.[A-Z][a-z]+", (REPO_ROOT / "dataset_card.md").read_text())
    assert not joined, joined
