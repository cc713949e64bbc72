"""Ctrl-C during ``publish`` and ``download`` (fake Hub, no network): one line on stderr saying what the Hub or
the disk holds, exit status 130. The interrupt is raised inside the work (the commit, the download, the check)."""

from __future__ import annotations

import pytest
from hub_support import build, fake_hub, hub_api, sources  # noqa: F401 (fixtures)

from muon_repro.cli import main
from muon_repro.hub import download as download_module
from muon_repro.hub import publish as publish_module
from muon_repro.hub.interrupts import DOWNLOAD_KEPT, NOTHING_SENT, PublishInterrupted

REPO = "test-org/muon-traces"


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def _quiet(line: str) -> None:
    pass


def test_an_interrupted_commit_says_whether_it_may_have_landed_and_tags_nothing(sources, tmp_path, fake_hub, hub_api):  # noqa: F811
    bundle = build(sources, tmp_path / "b1", repo_id=REPO)
    hub_api.create_repo(REPO, repo_type="dataset")
    hub_api.create_commit = _interrupt  # Ctrl-C while the files upload
    with pytest.raises(PublishInterrupted) as stopped:
        publish_module.publish(bundle, REPO, "1.0.0", api=hub_api, echo=_quiet)
    assert str(stopped.value).startswith("whether the commit landed is unknown (it is one atomic call: main is either still at")
    assert "nothing was tagged. Run publish again" in str(stopped.value)
    assert not [t for t in hub_api.list_repo_refs(REPO, repo_type="dataset").tags]


def test_an_interrupted_check_says_nothing_was_sent(sources, tmp_path, fake_hub, hub_api, monkeypatch):  # noqa: F811
    bundle = build(sources, tmp_path / "b1", repo_id=REPO)
    monkeypatch.setattr(publish_module, "check_bundle_verifies", _interrupt)
    with pytest.raises(PublishInterrupted, match=f"^{NOTHING_SENT}$"):
        publish_module.publish(bundle, REPO, "1.0.0", api=hub_api, echo=_quiet)
    assert fake_hub.requests == []


@pytest.mark.parametrize(
    "raised, said",
    [
        (PublishInterrupted("the commit is on main, untagged"), "the commit is on main, untagged"),
        (KeyboardInterrupt(), NOTHING_SENT),
    ],
)
def test_publish_cli_ends_an_interrupt_in_one_line(raised, said, monkeypatch, capsys):
    def stopped(*args, **kwargs):
        raise raised

    monkeypatch.setattr(publish_module, "publish", stopped)
    assert main(["publish", "--repo-id", REPO, "--version", "1.0.0"]) == 130
    assert capsys.readouterr().err.splitlines() == [f"muon-repro publish: interrupted; {said}"]


def test_download_cli_interrupted_while_downloading_keeps_the_files(monkeypatch, capsys):
    monkeypatch.setattr(download_module, "download", _interrupt)
    assert main(["download", "--repo-id", REPO]) == 130
    assert capsys.readouterr().err.splitlines() == [f"muon-repro download: interrupted; {DOWNLOAD_KEPT}"]


def test_download_cli_interrupted_while_checking_names_the_complete_copy(tmp_path, monkeypatch, capsys):
    from muon_repro.dataset import cli as dataset_cli

    monkeypatch.setattr(download_module, "download", lambda *args, **kwargs: tmp_path)
    monkeypatch.setattr(dataset_cli, "report_verify", _interrupt)
    assert main(["download", "--repo-id", REPO]) == 130
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"muon-repro download: interrupted; the download in {tmp_path} is complete, its check is not: "
        f"run muon-repro verify {tmp_path}"
    )
