"""A bundle holds what its documents promise: the files its card, report and docs link to, and the code its card's
recipe installs. An empty --figures or --code folder gave a bundle that passed verify and could be published."""

from __future__ import annotations

import shutil

import pytest
from hub_support import build, make_sources, stub_code

from muon_repro.dataset.links import code_problems, link_problems, relative_links
from muon_repro.dataset.verify import verify_bundle


def test_relative_links_are_the_links_to_files_beside_the_text():
    text = "\n".join(
        [
            'See [the method](../docs/method.md#claims) and ![a figure](../figures/a%20b.png "A").',
            '<img src="../figures/c.svg"> [a site](https://example.org/x.md) [mail](mailto:a@b.c) [here](#top)',
            "`[not a link](inline/code.md)` and [twice](../docs/method.md)",
            "```",
            "[inside a fence](fenced.md)",
            "```",
        ]
    )
    assert relative_links(text) == ["../docs/method.md", "../figures/a b.png", "../figures/c.svg"]


@pytest.fixture
def sources(tmp_path):
    sources = make_sources(tmp_path / "src")
    (sources["figures"] / "loss.png").write_bytes(b"\x89PNG\r\n")
    (sources["report"] / "report.md").write_text("# Report\n\n![Figure 1](../figures/loss.png)\n")
    return sources


def test_a_bundle_whose_report_links_figures_it_lacks_is_refused_and_nothing_is_written(sources, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "bundle"
    with pytest.raises(
        ValueError,
        match=r"nothing was bundled: report/report\.md: 1 link\(s\) to what the dataset does not "
        r"hold: \.\./figures/loss\.png\..*--figures " + str(empty),
    ):
        build({**sources, "figures": empty}, out, code=stub_code(tmp_path / "code"))
    assert not out.exists()
    build(sources, out, code=stub_code(tmp_path / "code"))  # with its figures, the same bundle is written
    assert (out / "figures" / "loss.png").is_file()


def test_a_bundle_without_the_code_its_card_installs_is_refused(sources, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        ValueError,
        match=r"no muon_repro/__init__\.py, muon_repro/cli\.py, pyproject\.toml, constraints\.txt: "
        "the card's 'How to regenerate' installs",
    ):
        build(sources, tmp_path / "bundle", code=empty)
    assert not (tmp_path / "bundle").exists()


def test_verify_names_a_linked_file_and_the_code_a_bundle_lacks(sources, tmp_path):
    bundle = build(sources, tmp_path / "bundle", code=stub_code(tmp_path / "code"))
    assert verify_bundle(bundle).ok
    (bundle / "figures" / "loss.png").unlink()
    shutil.rmtree(bundle / "muon_repro")
    failed = verify_bundle(bundle).failed
    assert "report/report.md: 1 link(s) to what the dataset does not hold: ../figures/loss.png" in failed
    assert any(line.startswith("no muon_repro/__init__.py, muon_repro/cli.py: the card's") for line in failed), failed
    assert link_problems(bundle) and code_problems(bundle)  # verify's lines are these functions'


def test_a_link_out_of_the_dataset_is_named_as_such(tmp_path):
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.md").write_text("[up](../../etc/passwd) [ok](report.md)\n")
    assert link_problems(tmp_path) == [
        "report/report.md: 1 link(s) to what the dataset does not hold: ../../etc/passwd (outside the dataset)"
    ]


def test_the_docs_links_are_the_reference_datasets(tmp_path):
    """docs/ is the repository's, written for the reference dataset: a bundle of other runs ships it as it is."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "gpu.md").write_text("![the H200 figure](../figures/1xH200-nccl/single_device.png)\n")
    assert link_problems(tmp_path) == []


def test_the_reports_links_follow_the_folders_as_laid_out(tmp_path):
    """A tree whose figures/ is a link (as the publishing test lays a clone out): resolved, the report's links led
    where the link points, outside any bundle of the tree."""
    from muon_repro.report.context import _Links, method_links

    elsewhere = tmp_path / "elsewhere" / "figures"
    elsewhere.mkdir(parents=True)
    tree = tmp_path / "tree"
    (tree / "report").mkdir(parents=True)
    (tree / "figures").symlink_to(elsewhere, target_is_directory=True)
    links = _Links(tree / "report")
    assert links.rel(tree / "figures" / "loss.png") == "../figures/loss.png"
    assert all(link.startswith("../docs/method.md#") for link in method_links(tree / "report", tree).values())
