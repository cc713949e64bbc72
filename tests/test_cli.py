"""The muon-repro command line as a reader meets it: every subcommand described in plain text, one way to name
the Hub repository (--repo-id ORG/NAME), and the positional form download and review took at first deprecated."""

from __future__ import annotations

import argparse
import re
from types import SimpleNamespace

import pytest

from muon_repro.cli import build_parser, main

# Every subcommand that names a dataset repository on the Hub.
REPO_COMMANDS = ("bundle", "card", "publish", "download", "contribute", "review")
# Those that took it as a positional argument in 0.1.0, still accepted (with a warning) for one release.
POSITIONAL_ALIAS = ("download", "review")
MARKUP = ("``", "`", ":mod:", ":func:", ":class:", ":meth:", ":data:", "%%")


def subcommands() -> dict[str, tuple[argparse.ArgumentParser, str | None]]:
    """Every subcommand of ``muon-repro``: its parser and the help line the top-level listing shows."""
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    return {name: (sub, helps.get(name)) for name, sub in action.choices.items()}


def test_the_walk_finds_every_subcommand():
    assert {"run", "bench", "analyze", "figures", "report", *REPO_COMMANDS, "verify", "migrate-layout"} <= set(subcommands())


def test_each_command_is_registered_by_the_module_the_map_names():
    """Running a command imports its module alone (muon_repro.cli.COMMANDS): the map must say where each one is."""
    from muon_repro.cli import COMMANDS

    assert set(subcommands()) == set(COMMANDS)
    for command, module in COMMANDS.items():
        parser = build_parser(command)
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        assert command in action.choices, (command, module)
        assert set(action.choices) == {c for c, m in COMMANDS.items() if m == module}


def test_running_a_command_imports_its_module_alone(monkeypatch):
    import importlib

    from muon_repro import cli

    imported: list[str] = []
    real = importlib.import_module
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: imported.append(name) or real(name))
    cli.build_parser("analyze")
    assert imported == ["muon_repro.analyze_cli"]
    imported.clear()
    cli.build_parser("no-such-command")  # help and argparse's error list every command
    assert imported == list(cli.COMMAND_MODULES)


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_subcommand_has_a_description_and_a_help_line(name):
    sub, help_line = subcommands()[name]
    assert sub.description and sub.description.strip(), f"muon-repro {name} has no description"
    assert help_line and help_line.strip(), f"muon-repro {name} has no help line in the command list"


def markup_in(text: str) -> list[str]:
    """The lines of ``text`` with reStructuredText or Markdown markup a terminal shows as is."""
    return [line for line in text.splitlines() if any(m in line for m in MARKUP) or line.rstrip().endswith("::")]


def test_the_markup_check_catches_docstring_markup():
    for marked in ("``--out``", "`muon-repro analyze`", ":mod:`x`", ":func:`y`", ":class:`Z`", "Layout::", "1.1%%"):
        assert markup_in(marked), marked
    assert markup_in("a line\nthe layout::\n") == ["the layout::"]
    assert not markup_in("muon-repro analyze PATH... [--out metrics/]: traces in, tables out (default: 1.1%)")


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_no_subcommand_help_shows_markup(name):
    sub, _ = subcommands()[name]
    assert markup_in(sub.format_help()) == [], f"muon-repro {name} --help shows markup"


def test_the_top_level_help_shows_no_markup():
    assert markup_in(build_parser().format_help()) == []


@pytest.mark.parametrize("name", REPO_COMMANDS)
def test_every_hub_command_names_the_repository_with_repo_id(name):
    sub, _ = subcommands()[name]
    (action,) = [a for a in sub._actions if a.dest == "repo_id"]
    assert action.option_strings == ["--repo-id"] and action.metavar == "ORG/NAME"
    assert "--repo-id ORG/NAME" in sub.format_help()
    # No visible positional repository: the deprecated alias is hidden from the usage and the help.
    visible = [a for a in sub._actions if not a.option_strings and a.help is not argparse.SUPPRESS]
    assert all(a.metavar != "ORG/NAME" for a in visible), name
    assert not re.search(r"^\s+ORG/NAME\b", sub.format_help(), re.M), name


@pytest.fixture
def hub_calls(monkeypatch, tmp_path):
    """download and review with the Hub left out: what each was asked for."""
    import muon_repro.contrib.review as review_module
    import muon_repro.dataset.cli as dataset_cli
    import muon_repro.hub.download as download_module

    calls = []

    def download(repo_id, revision, local_dir, *, timeout):
        calls.append(("download", repo_id))
        return tmp_path

    def review(repo_id, pr, *, workers, timeout, max_files, max_bytes):
        calls.append(("review", repo_id))
        return SimpleNamespace(ok=True)

    monkeypatch.setattr(download_module, "download", download)
    monkeypatch.setattr(dataset_cli, "report_verify", lambda path: 0)
    monkeypatch.setattr(review_module, "review", review)
    return calls


def _argv(command: str, *repo: str) -> list[str]:
    return [command, *repo, *(["--pr", "3"] if command == "review" else [])]


@pytest.mark.parametrize("command", POSITIONAL_ALIAS)
def test_repo_id_reaches_the_command_without_a_warning(command, hub_calls, capsys):
    assert main(_argv(command, "--repo-id", "org/data")) == 0
    assert hub_calls == [(command, "org/data")]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", POSITIONAL_ALIAS)
def test_the_positional_repository_still_works_with_a_one_line_deprecation_note(command, hub_calls, capsys):
    assert main(_argv(command, "org/data")) == 0
    assert hub_calls == [(command, "org/data")]
    err = capsys.readouterr().err
    assert err == (
        f"muon-repro {command}: warning: the positional ORG/NAME is deprecated and will be removed in the next release; "
        "use --repo-id org/data\n"
    )


@pytest.mark.parametrize("command", POSITIONAL_ALIAS)
def test_the_repository_given_both_ways_is_refused(command, hub_calls, capsys):
    assert main(_argv(command, "org/data", "--repo-id", "org/other")) == 2
    assert hub_calls == []
    err = capsys.readouterr().err
    assert err.startswith(f"muon-repro {command}: error: the repository is given twice") and "--repo-id only" in err


@pytest.mark.parametrize("command", POSITIONAL_ALIAS)
def test_no_repository_says_repo_id_is_required(command, hub_calls, capsys):
    assert main(_argv(command)) == 2
    assert hub_calls == []
    assert capsys.readouterr().err == f"muon-repro {command}: error: the following argument is required: --repo-id ORG/NAME\n"


@pytest.mark.parametrize("argv", (["publish", "--version", "1.0.0"], ["contribute", "--runs", "traces"]))
def test_publish_and_contribute_take_no_positional_repository(argv, capsys):
    assert main([*argv, "--repo-id", "org/data", "org/data"]) == 2
    assert f"muon-repro {argv[0]}: error: unrecognized argument(s) org/data" in capsys.readouterr().err


def test_a_mistyped_command_is_answered_with_the_closest_ones(capsys):
    assert main(["anlyze", "traces"]) == 2
    assert capsys.readouterr().err == "muon-repro: error: anlyze is no command; did you mean analyze?\n"
    assert main(["\x1b[2Jzzz"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "muon-repro --help" in err


def test_a_misspelled_option_is_said_by_its_command_with_the_close_names(capsys):
    """`run --trails 2` printed the top-level usage and no hint, where a misspelled command got one."""
    assert main(["run", "--trails", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: muon-repro run ")
    assert err.rstrip().endswith("muon-repro run: error: unrecognized argument(s) --trails 2: --trails: did you mean --trials?")
    assert main(["analyze", "traces", "--bogus"]) == 2
    assert "`muon-repro analyze --help` lists what it takes" in capsys.readouterr().err


def test_help_breaks_lines_at_spaces_only(capsys):
    """argparse broke 'muon-' / 'repro/distributed-muon-traces' over two lines: a name copied off them does not exist."""
    from muon_repro.dataset.naming import DEFAULT_REPO_ID

    with pytest.raises(SystemExit):
        main(["bundle", "--help"])
    lines = capsys.readouterr().out.splitlines()
    assert any(DEFAULT_REPO_ID in line for line in lines)
    assert not any(line.rstrip().endswith("-") and not line.rstrip().endswith(" -") for line in lines), lines


def test_every_command_dates_a_dataset_alike(tmp_path, monkeypatch):
    """bundle took SOURCE_DATE_EPOCH's day and run and report the newest run's: one data set, two dates."""
    from muon_repro.dataset.citation import report_meta
    from muon_repro.dataset.meta import dataset_date

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # 2026-01-01
    assert dataset_date(tmp_path) == report_meta(tmp_path).date == "2026-01-01"
