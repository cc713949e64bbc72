"""The README's claims table, generated from ``metrics/claims.parquet`` so that it cannot drift.

``python -m muon_repro.report.readme [README.md] [--metrics metrics]`` rewrites the lines between
:data:`BEGIN` and :data:`END` with the table, formatted as the report formats it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from muon_repro.report.claims_section import claims_matrix
from muon_repro.report.data import load
from muon_repro.tables.files import write_atomic

BEGIN = "<!-- claims: generated from metrics/claims.parquet by `python -m muon_repro.report.readme` -->"
END = "<!-- claims: end -->"


def claims_markdown(metrics_dir: str | Path) -> str:
    """The claims table as the report has it, less the region column: one measured column per hardware profile."""
    header, rows, _ = claims_matrix(load(metrics_dir))
    keep = [i for i, name in enumerate(header) if name != "agrees if in"]
    lines = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    lines += ["| " + " | ".join(row[i] for i in keep) + " |" for row in rows]
    return "\n".join(lines)


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
