"""The README's claims and checks tables, generated from ``metrics/`` so that they cannot drift.

``python -m muon_repro.report.readme [README.md] [--metrics metrics]`` rewrites the lines between
:data:`BEGIN` and :data:`END` with the claims table and, below it, the consistency checks, formatted as
the report formats them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from muon_repro.report.checks_section import checks_matrix
from muon_repro.report.claims_section import claims_matrix
from muon_repro.report.data import load
from muon_repro.tables.files import write_atomic

BEGIN = "<!-- claims: generated from metrics/claims.parquet by `python -m muon_repro.report.readme` -->"
END = "<!-- claims: end -->"


def claims_markdown(metrics_dir: str | Path) -> str:
    """The claims table as the report has it, less the region column (one measured column per hardware profile),
    then the consistency checks of the profile with most runs, less their 'fails if' column."""
    data = load(metrics_dir)
    header, rows, _ = claims_matrix(data)
    lines = _table(header, rows, drop="agrees if in")
    check_header, check_rows, _ = checks_matrix(data)
    if check_rows:
        lines += ["", f"Consistency checks on {data.profiles[0]} (they hold by construction, so they are not claims):", ""]
        lines += _table(check_header, check_rows, drop="fails if")
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[str]], drop: str) -> list[str]:
    keep = [i for i, name in enumerate(header) if name != drop]
    lines = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    return lines + ["| " + " | ".join(row[i] for i in keep) + " |" for row in rows]


def with_claims(readme: str, metrics_dir: str | Path) -> str:
    """``readme`` with the text between its :data:`BEGIN` and :data:`END` lines replaced by the table."""
    head, begin, rest = readme.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the README has no {BEGIN!r} ... {END!r} lines to put the claims table between")
    return f"{head}{BEGIN}\n{claims_markdown(metrics_dir)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m muon_repro.report.readme", description=__doc__.splitlines()[0])
    parser.add_argument("readme", nargs="?", default="README.md", type=Path)
    parser.add_argument("--metrics", default="metrics", type=Path, help="folder of the analysis tables (default: metrics)")
    args = parser.parse_args(argv)
    text = with_claims(args.readme.read_text(encoding="utf-8"), args.metrics)
    write_atomic(args.readme, text)
    print(f"updated the claims table in {args.readme} from {args.metrics}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
