"""Names from files, tables and the Hub reach the terminal as data (issue 45, item 5): control and format
characters are written as escapes, so a downloaded dataset cannot clear the screen or fake a line."""

from __future__ import annotations

import io
import sys

from muon_repro.terminal import EscapingStream, escaped_output

HOSTILE = "rank0\x1b[2J\x1b]0;pwned\x07\r All checks passed.\u202etxt.gz"


def test_control_and_bidi_characters_are_escaped_newlines_kept():
    out = io.StringIO()
    EscapingStream(out).write(HOSTILE + "\nnext line\tcolumn\n")
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text and "\x07" not in text
    assert "\\x1b[2J" in text and "\\r All checks passed." in text and "\\u202e" in text
    assert text.endswith("\nnext line\tcolumn\n")


def test_commands_print_through_it_and_recorders_do_not(monkeypatch):
    for command, escaped in (("verify", True), ("download", True), ("bench", False)):
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        with escaped_output(command):
            print(HOSTILE)
        assert ("\x1b" not in out.getvalue()) is escaped, command
    assert sys.stdout is out  # put back


def test_a_file_name_in_verify_is_shown_quoted_when_it_is_not_plain(tmp_path):
    from muon_repro.dataset.manifest import check_manifest

    (tmp_path / "MANIFEST.sha256").write_text("")
    (tmp_path / "a\nAll checks passed.").write_text("x")
    (problem,) = check_manifest(tmp_path)
    assert "\n" not in problem and problem.startswith("'a\\nAll checks passed.': present but not listed")


def test_a_warning_is_one_line_naming_the_command_not_a_source_line(capsys):
    """analyze's trace warnings printed Python's form: the package's file and line, then that line of code."""
    import warnings

    from muon_repro.terminal import plain_warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        before = warnings.showwarning
        with plain_warnings("analyze"):
            warnings.warn("rank1.json.gz: 3 events dropped", UserWarning, stacklevel=1)
        assert warnings.showwarning is before  # put back when the command ends
    err = capsys.readouterr().err
    assert err == "muon-repro analyze: warning: rank1.json.gz: 3 events dropped\n"
