"""What ``muon-repro figures`` and ``muon-repro report`` leave in their output folders: the whole new set or the whole
old one (an error or Ctrl-C midway changes nothing), a previous run's files the new set lacks removed, anything else
left alone; and bad input refused by name (a format list, a column of the wrong type, a missing profile column)
before anything is written. On a small synthetic metrics folder (tests/report_bundle.py), built once here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from fake_figures import tiny_png
from report_bundle import make_bundle

from muon_repro.cli import main
from muon_repro.report import build, figures, pipeline_section, profile_figures, regime_figures, study_section
from muon_repro.tables import files as tables_files
from muon_repro.tables.files import files_manifest, staged_files
from muon_repro.tables.io import read_table

FIGURE_NAMES = (*figures.FIGURES, *regime_figures.REGIME_FIGURES)
REPORT_FIGURES = (
    *FIGURE_NAMES,
    *profile_figures.PROFILE_FIGURES,
    *pipeline_section.PIPELINE_FIGURES,
    *study_section.STUDY_FIGURES,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The synthetic metrics folder (read-only: tests copy it)."""
    return make_bundle(tmp_path_factory.mktemp("outputs"))


@pytest.fixture
def root(built: Path, tmp_path: Path) -> Path:
    shutil.copytree(built / "metrics", tmp_path / "metrics")
    return tmp_path


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too), by relative path."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _no_staging_left(root: Path) -> None:
    """No hidden stage, old-files folder or lock of a writer beside (or in) the output folders."""
    left = [p.name for p in root.iterdir() if ".muon-repro-" in p.name]
    assert not left, left


def _old_figures(folder: Path) -> dict[str, bytes]:
    """A previous set of figures (bytes no drawing makes), a file its user put beside them, and a user's subfolder."""
    for name in FIGURE_NAMES:
        for suffix in (".png", ".svg"):
            (folder / f"{name}{suffix}").parent.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}{suffix}").write_bytes(f"old {name}{suffix}".encode())
    (folder / "notes.txt").write_text("mine")
    (folder / "mine").mkdir()
    (folder / "mine" / "sketch.png").write_bytes(b"my own figure")
    return _snapshot(folder)


def test_an_interrupted_figures_run_leaves_the_old_set_whole(root: Path, monkeypatch, quick_figures) -> None:
    out = root / "figures"
    before = _old_figures(out)
    drawn = []

    def interrupted(data, path):
        drawn.append(path)
        raise KeyboardInterrupt  # Ctrl-C while the loss figure is drawn: several figures are written by then

    monkeypatch.setitem(build.DRAW, "loss", interrupted)
    code = main(["figures", "--metrics", str(root / "metrics"), "--out", str(out)])
    assert code != 0 and drawn
    assert _snapshot(out) == before  # byte for byte, nothing added, nothing removed
    _no_staging_left(root)


def test_a_failed_figures_run_leaves_the_old_set_whole(root: Path, monkeypatch, capsys, quick_figures) -> None:
    out = root / "figures"
    before = _old_figures(out)

    def broken(data, path):
        raise ValueError("metric runs.step_ms is missing for run x")

    monkeypatch.setitem(build.DRAW, "timeline", broken)
    assert main(["figures", "--metrics", str(root / "metrics"), "--out", str(out)]) == 2
    assert "runs.step_ms" in capsys.readouterr().err
    assert _snapshot(out) == before
    _no_staging_left(root)


def test_a_figures_run_replaces_the_set_and_keeps_what_it_did_not_write(root: Path, capsys, quick_figures) -> None:
    out = root / "figures"
    _old_figures(out)
    (out / "gone.png").write_bytes(b"a figure the previous run drew, the new one does not")
    (out / "old_profile").mkdir()
    (out / "old_profile" / "loss.png").write_bytes(b"a profile the new tables do not have")
    manifest = out / files_manifest(build.FIGURES_WRITER)
    manifest.write_text("# previous run\ngone.png\nold_profile/loss.png\n../outside.png\n")
    (root / "outside.png").write_bytes(b"never ours")
    assert main(["figures", "--metrics", str(root / "metrics"), "--out", str(out)]) == 0
    for name in FIGURE_NAMES:
        for suffix in (".png", ".svg"):
            assert not (out / f"{name}{suffix}").read_bytes().startswith(b"old "), name
    assert not (out / "gone.png").exists() and not (out / "old_profile").exists()  # the previous run's, now stale
    assert (out / "notes.txt").read_text() == "mine" and (out / "mine" / "sketch.png").read_bytes() == b"my own figure"
    assert (root / "outside.png").is_file()  # a manifest never reaches outside the folder
    listed = manifest.read_text().splitlines()[1:]
    assert sorted(listed) == sorted(f"{n}{s}" for n in FIGURE_NAMES for s in (".png", ".svg"))
    assert f"loss                 {out / 'loss.png'} (+ .svg)" in capsys.readouterr().out  # the paths printed are out's
    _no_staging_left(root)


def test_an_interruption_while_the_files_are_moved_in_puts_the_old_ones_back(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "figures"
    before = _old_figures(out)
    real_rename, moved = tables_files.os.rename, []

    def rename(src, dst):
        if Path(src).parent.name.startswith(".figures.muon-repro-stage-"):  # a new file moved in
            moved.append(dst)
            if len(moved) == 3:
                raise KeyboardInterrupt
        real_rename(src, dst)

    monkeypatch.setattr(tables_files.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt), staged_files(out, build.FIGURES_WRITER, build.FIGURE_SUFFIXES) as stage:
        for name in ("loss", "timeline", "profiles"):
            (stage / f"{name}.png").write_bytes(b"new")
        (stage / "new_profile").mkdir()
        (stage / "new_profile" / "loss.png").write_bytes(b"new")
    assert len(moved) == 3
    assert _snapshot(out) == before and not (out / "new_profile").exists()
    _no_staging_left(tmp_path)


def _fake_figures(root: Path) -> Path:
    """Every figure the report may show, as a 1 x 1 PNG: the Markdown and HTML only link them."""
    folder = root / "figures"
    folder.mkdir()
    for name in REPORT_FIGURES:
        (folder / f"{name}.png").write_bytes(tiny_png(name))
    return folder


def _report(root: Path, formats: str) -> int:
    return main(
        ["report", "--metrics", str(root / "metrics"), "--figures", str(root / "figures"), "--out", str(root / "report")]
        + ["--format", formats]
    )


@pytest.mark.slow  # renders the report and loads weasyprint (~3 s): the figures' twins above check the same writer fast
def test_an_interrupted_report_leaves_the_old_report_whole(root: Path, monkeypatch) -> None:
    import weasyprint

    _fake_figures(root)
    out = root / "report"
    out.mkdir()
    for fmt in ("md", "html", "pdf"):
        (out / f"report.{fmt}").write_text(f"old {fmt}")
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C as the PDF starts: report.md and report.html are written by then

    monkeypatch.setattr(weasyprint, "HTML", interrupted)
    assert _report(root, "md,html,pdf") != 0
    assert _snapshot(out) == before
    _no_staging_left(root)


@pytest.mark.slow  # renders the report twice (~3 s): the figures' twins above check the same writer fast
def test_a_report_replaces_its_set_and_keeps_what_it_did_not_write(root: Path) -> None:
    _fake_figures(root)
    out = root / "report"
    assert _report(root, "md,html") == 0
    (out / "notes.txt").write_text("mine")
    (out / "report.pdf").write_bytes(b"a PDF of unknown origin")  # not listed as the report's: left alone
    md = (out / "report.md").read_text()
    assert "](../figures/loss.png)" in md  # image paths relative to the report's folder, not the stage's
    assert _report(root, "md") == 0
    assert "--format md\n" in (out / "report.md").read_text()  # this run's: "How to reproduce" names its formats
    assert not (out / "report.html").exists()  # the previous run's, not in the new set: a stale HTML would mislead
    assert (out / "notes.txt").read_text() == "mine" and (out / "report.pdf").read_bytes() == b"a PDF of unknown origin"
    assert (out / files_manifest(build.REPORT_WRITER)).read_text().splitlines()[1:] == ["report.md"]
    _no_staging_left(root)


@pytest.mark.parametrize("formats", ["", " , ", "md,docx"])
def test_an_empty_or_unknown_format_list_is_refused(root: Path, capsys, formats: str) -> None:
    _fake_figures(root)
    assert _report(root, formats) == 2
    err = capsys.readouterr().err
    assert "--format" in err and "md, html, pdf" in err, err
    if "docx" in formats:
        assert "'docx'" in err
    assert not (root / "report").exists()
    _no_staging_left(root)


def _edit_table(root: Path, name: str, edit) -> None:
    path = root / "metrics" / f"{name}.parquet"
    edit(pd.read_parquet(path, dtype_backend="numpy_nullable")).to_parquet(path)


def _text_in_step_ms(df: pd.DataFrame) -> pd.DataFrame:
    df["step_ms"] = df["step_ms"].astype("string")
    df.loc[0, "step_ms"] = "abc"
    return df


def test_a_column_of_the_wrong_type_is_named_with_its_file(root: Path, capsys) -> None:
    _edit_table(root, "runs", _text_in_step_ms)
    path = root / "metrics" / "runs.parquet"
    for argv in (["figures", "--out", str(root / "figures")], ["report", "--out", str(root / "report"), "--format", "md"]):
        assert main([argv[0], "--metrics", str(root / "metrics"), *argv[1:]]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and "'step_ms'" in err and "Float64" in err and "'abc'" in err, err
        assert "muon-repro analyze" in err
    assert not (root / "figures").exists() and not (root / "report").exists()
    with pytest.raises(ValueError, match="step_ms"):  # what card and bundle read the tables with
        read_table(path, check_set=False)


def test_a_table_without_its_profile_column_is_refused_by_name(root: Path, capsys) -> None:
    _edit_table(root, "claims", lambda df: df.drop(columns=["profile"]))
    for argv in (["figures", "--out", str(root / "figures")], ["report", "--out", str(root / "report"), "--format", "md"]):
        assert main([argv[0], "--metrics", str(root / "metrics"), *argv[1:]]) == 2
        err = capsys.readouterr().err
        assert str(root / "metrics" / "claims.parquet") in err and "claims.profile" in err and "muon-repro analyze" in err, err
    assert not (root / "figures").exists() and not (root / "report").exists()


def test_claims_of_no_described_profile_are_named_with_their_file(root: Path, capsys) -> None:
    def elsewhere(df: pd.DataFrame) -> pd.DataFrame:
        df["profile"] = "1xH200-nccl"
        return df

    _edit_table(root, "claims", elsewhere)
    _fake_figures(root)
    assert _report(root, "md") == 2
    err = capsys.readouterr().err
    assert str(root / "metrics" / "claims.parquet") in err and "cpu-2c-gloo" in err, err
    assert not (root / "report").exists()


@pytest.mark.parametrize("damage", ["cut", "missing"])
def test_a_damaged_or_missing_figure_is_refused_by_name(root: Path, capsys, damage: str) -> None:
    """A PNG cut short drew as a black box in the PDF, with exit 0; a missing one was named without its folder."""
    folder = _fake_figures(root)
    figure = folder / f"{figures.FIGURES[0]}.png"
    if damage == "cut":
        figure.write_bytes(figure.read_bytes()[:40])
    else:
        figure.unlink()
    assert _report(root, "md") == 2
    err = capsys.readouterr().err
    assert figures.FIGURES[0] in err and str(folder) in err and "muon-repro figures" in err, err
    assert ("not a whole PNG" if damage == "cut" else "not found in") in err, err
    assert not (root / "report").exists()
    _no_staging_left(root)
