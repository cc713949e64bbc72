"""muon-repro: reproduce Distributed Muon's communication and cost claims (also python -m muon_repro)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

INTERRUPTED_EXIT = 130  # what a shell reports for a process stopped by Ctrl-C (128 + SIGINT)
# What a command that says nothing of its own about Ctrl-C has left: every result file of this package is
# written to a temporary name and renamed whole (tables, bundles, records, trial folders).
INTERRUPTED_NOTE = "what was complete is kept (every file is written whole): run the same command again to finish"

# Each module registers its subcommands with ``register(subparsers)`` and keeps its heavy imports
# inside the command functions.
COMMAND_MODULES = (
    "muon_repro.job",
    "muon_repro.optim.equivalence_cli",
    "muon_repro.bench.cli",
    "muon_repro.converge.cli",
    "muon_repro.analyze_cli",
    "muon_repro.report_cli",
    "muon_repro.dataset.cli",
    "muon_repro.hub.cli",
    "muon_repro.contrib.cli",
    "muon_repro.costmodel.cli",
    "muon_repro.study.cli",
    "muon_repro.migrate_layout",
)


def build_parser() -> argparse.ArgumentParser:
    from muon_repro import __version__

    parser = argparse.ArgumentParser(prog="muon-repro", description=__doc__)
    parser.add_argument("--version", action="version", version=f"muon-repro {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; ``argv`` None: this process's own command line (the ``muon-repro`` entry point)."""
    code = _run_command(argv)
    if argv is None and code == INTERRUPTED_EXIT:
        # Interrupted as a process: leave now. A request still in flight on a thread (to a Hub that stopped
        # answering) would hold the interpreter's exit until it timed out; the command has said what it left,
        # and every file it wrote is whole.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run_command(argv: list[str] | None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = parser.parse_args(argv)
    args.command_line = ["muon-repro", *argv]  # what a run records as the command that made it
    if args.command is None:
        parser.print_help()
        return 0
    from muon_repro.terminal import escaped_output

    with escaped_output(args.command):
        return _call(args)


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
