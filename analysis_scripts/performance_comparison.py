"""Analyze the recorded traces: per-rank, per-step breakdown and the metrics tables.

    python analysis_scripts/performance_comparison.py            # traces/ -> metrics/
    python analysis_scripts/performance_comparison.py --json     # one JSON object per trace

Runs ``muon-repro analyze traces/ --out metrics/`` from the repository root (so the tables
record paths like ``traces/<profile>/<group>/<name>``); extra arguments go to ``muon-repro analyze``
(other paths, ``--out``, ``--json``, ``--no-write``, ``--max-trace-bytes``...). The paths given, and ``--out``'s
folder (``--out DIR`` or ``--out=DIR``), are relative to the folder the command was typed in; which arguments are
option values is read from analyze's own parser.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = "--out"


def analyze_options() -> dict[str, bool]:
    """Each option string of ``muon-repro analyze`` -> whether it takes a value (its own parser's word)."""
    from muon_repro.cli import build_parser

    commands = next(a for a in build_parser("analyze")._actions if isinstance(a, argparse._SubParsersAction))
    return {name: action.nargs != 0 for action in commands.choices["analyze"]._actions for name in action.option_strings}


def _option(name: str, options: dict[str, bool]) -> str | None:
    """The option ``name`` stands for: itself, or the one long option it abbreviates (as argparse reads it)."""
    if name in options:
        return name
    close = [o for o in options if o.startswith("--") and o.startswith(name)] if name.startswith("--") else []
    return close[0] if len(close) == 1 else None


def analyze_args(args: list[str], cwd: Path) -> tuple[list[str], bool, bool]:
    """``args`` with each path and ``--out``'s value absolute (from ``cwd``), whether they name a path, whether
    they give ``--out``. An option analyze does not know is left as it is, for analyze to refuse by name."""
    options = analyze_options()
    out: list[str] = []
    paths = given_out = positional_only = False
    expects: str | None = None  # the option whose value comes next
    for arg in args:
        if expects is not None:
            out.append(str(cwd / arg) if expects == OUT else arg)
            expects = None
        elif positional_only or arg == "-" or not arg.startswith("-"):
            out.append(str(cwd / arg))
            paths = True
        elif arg == "--":
            out.append(arg)
            positional_only = True
        else:
            name, eq, value = arg.partition("=")
            option = _option(name, options)
            given_out |= option == OUT
            if option is None or not options[option]:
                out.append(arg)
            elif eq:
                out.append(f"{name}={cwd / value}" if option == OUT else arg)
            else:
                out.append(arg)
                expects = option
    return out, paths, given_out


def analyze_command(args: list[str], cwd: Path) -> tuple[list[str], bool]:
    """The ``muon-repro analyze`` command line for ``args`` typed in ``cwd``, to run from the repository's root, and
    whether it reads the default ``traces/`` (no path given)."""
    absolute, paths, given_out = analyze_args(args, cwd)
    return ["analyze", *([] if paths else ["traces"]), *([] if given_out else [OUT, "metrics"]), *absolute], not paths


if __name__ == "__main__":
    from muon_repro.cli import main

    command, default_traces = analyze_command(sys.argv[1:], Path.cwd())
    os.chdir(ROOT)
    helped = any(_option(a, analyze_options()) in ("-h", "--help") for a in sys.argv[1:] if a.startswith("-"))
    if default_traces and not helped and not Path("traces").is_dir():
        sys.exit(f"{ROOT / 'traces'} does not exist: record traces first (python analysis_scripts/muon_vs_adam.py)")
    raise SystemExit(main(command))
