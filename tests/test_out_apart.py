"""A command's output folder never is, holds or lies in a folder it reads: what it writes would mix with its
inputs (figures among the tables made the next analyze refuse the folder)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["figures", "--metrics", "{m}", "--out", "{m}"], "--metrics"),
        (["report", "--metrics", "{m}", "--out", "{m}/report"], "--metrics"),
        (["report", "--metrics", "{m}", "--figures", "{f}", "--out", "{f}"], "--figures"),
    ],
)
def test_report_and_figures_never_write_into_what_they_read(tmp_path, capsys, argv, option):
    """Written among the tables, a report or figures made a later analyze refuse the folder."""
    from muon_repro.cli import main

    m, f = tmp_path / "metrics", tmp_path / "figures"
    m.mkdir()
    f.mkdir()
    assert main([a.format(m=m, f=f) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "overlaps the source" in err and f"({option})" in err
    assert sorted(p.name for p in m.iterdir()) == [] and sorted(p.name for p in f.iterdir()) == []
