"""muon-repro: reproduce Distributed Muon's communication and cost claims (also python -m muon_repro)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap

INTERRUPTED_EXIT = 130  # what a shell reports for a process stopped by Ctrl-C (128 + SIGINT)
# What a command that says nothing of its own about Ctrl-C has left: every result file of this package is
# written to a temporary name and renamed whole (tables, bundles, records, trial folders).
INTERRUPTED_NOTE = "what was complete is kept (every file is written whole): run the same command again to finish"

# Each module registers its subcommands with ``register(subparsers)`` and keeps its heavy imports inside the
# command functions; a command's module alone is imported to run it (every module for help or an unknown name).
COMMANDS: dict[str, str] = {  # command -> the module that registers it, in the order help lists them
    "run": "muon_repro.job",
    "equivalence": "muon_repro.optim.equivalence_cli",
    "bench": "muon_repro.bench.cli",
    "converge": "muon_repro.converge.cli",
    "analyze": "muon_repro.analyze_cli",
    "figures": "muon_repro.report_cli",
    "report": "muon_repro.report_cli",
    "bundle": "muon_repro.dataset.cli",
    "card": "muon_repro.dataset.cli",
    "verify": "muon_repro.dataset.cli",
    "publish": "muon_repro.hub.cli",
    "download": "muon_repro.hub.cli",
    "contribute": "muon_repro.contrib.cli",
    "review": "muon_repro.contrib.cli",
    "calibrate": "muon_repro.costmodel.cli",
    "predict": "muon_repro.costmodel.cli",
    "regimes": "muon_repro.costmodel.cli",
    "study": "muon_repro.study.cli",
    "migrate-layout": "muon_repro.migrate_layout",
}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


class WholeWordsFormatter(argparse.HelpFormatter):
    """argparse's help, its lines broken at spaces only: argparse breaks after a hyphen, and a reader copying
    ``muon-`` / ``repro analyze`` or ``8xH100-nvlink-`` / ``nccl`` off two lines gets a name that does not exist."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )


class Parser(argparse.ArgumentParser):
    """The command line's parsers (every subcommand's too: ``add_subparsers`` makes its own kind), with
    :class:`WholeWordsFormatter` help."""

    def __init__(self, *args, formatter_class: type[argparse.HelpFormatter] = WholeWordsFormatter, **kwargs) -> None:
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's, or only the module of ``command`` when it names one (so that
    running a command imports what it needs, not what every other command's options need)."""
    from muon_repro import __version__

    parser = Parser(prog="muon-repro", description=__doc__)
    parser.add_argument("--version", action="version", version=f"muon-repro {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


# Commands whose process ends without tearing its objects down one by one: analyze holds a trace's columns
# (hundreds of MB for a 1 GB trace) when it is done, and freeing them costs ~0.1 s that the operating system does
# at once. It has written and closed every file (atomically) and joined its workers by then.
EXIT_WITHOUT_TEARDOWN = frozenset({"analyze"})


def main(argv: list[str] | None = None) -> int:
    """Run one command; ``argv`` None: this process's own command line (the ``muon-repro`` entry point)."""
    code = _run_command(argv)
    if argv is None and sys.argv[1:2] and sys.argv[1] in EXIT_WITHOUT_TEARDOWN:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if argv is None and code == INTERRUPTED_EXIT:
        # Interrupted as a process: leave now. A request still in flight on a thread (to a Hub that stopped
        # answering) would hold the interpreter's exit until it timed out; the command has said what it left,
        # and every file it wrote is whole.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run_command(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        import difflib

        from muon_repro.terminal import shown

        close = difflib.get_close_matches(argv[0], list(COMMANDS), n=3)
        hint = f"did you mean {' or '.join(close)}?" if close else "`muon-repro --help` lists them"
        print(f"muon-repro: error: {shown(argv[0])} is no command; {hint}", file=sys.stderr)
        return 2
    parser = build_parser(argv[0] if argv else None)
    args, extra = parser.parse_known_args(argv)
    if extra:
        return _unrecognized(parser, args.command, extra)
    args.command_line = ["muon-repro", *argv]  # what a run records as the command that made it
    if args.command is None:
        parser.print_help()
        return 0
    from muon_repro.terminal import escaped_output, plain_warnings

    with escaped_output(args.command), plain_warnings(args.command):
        return _call(args)


def _unrecognized(parser: argparse.ArgumentParser, command: str | None, extra: list[str]) -> int:
    """What argparse says of arguments no option takes, said by the command they were given to, with its usage and
    the options whose names are close (``--trails``: did you mean ``--trials``?)."""
    import difflib

    from muon_repro.terminal import shown

    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    sub = commands.get(command, parser) if command else parser
    options = [name for action in sub._actions for name in action.option_strings]
    hints = []
    for arg in extra:
        name = arg.split("=", 1)[0]
        if name.startswith("-") and (close := difflib.get_close_matches(name, options, n=2, cutoff=0.7)):
            hints.append(f"{shown(name)}: did you mean {' or '.join(close)}?")
    who = f"muon-repro {command}" if command else "muon-repro"
    said = "; ".join(hints) if hints else f"`{who} --help` lists what it takes"
    sys.stderr.write(sub.format_usage())
    print(f"{who}: error: unrecognized argument(s) {shown(' '.join(extra))}: {said}", file=sys.stderr)
    return 2


def _call(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"muon-repro {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C (or the launcher's LaunchInterrupted) where the command has no word of its own
        said = " ".join(str(exc).split())  # one line, whatever the exception holds
        print(f"muon-repro {args.command}: interrupted{f' ({said})' if said else ''}; {INTERRUPTED_NOTE}", file=sys.stderr)
        return int(getattr(exc, "exit_code", INTERRUPTED_EXIT))
