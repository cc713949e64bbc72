"""``muon-repro figures`` and ``muon-repro report``: tables -> figures -> report, each the stage of that name
(:mod:`muon_repro.stages`), the report citing the dataset as its card does. Outside the report package, which
reads tables only: the citation is the dataset's.

    muon-repro figures [--metrics metrics/] [--out figures/]
    muon-repro report  [--metrics metrics/] [--figures figures/] [--out report/] [--format md,pdf] [--author NAME ...]

Both read only the tables ``muon-repro analyze`` wrote under ``--metrics``: a copy of that
folder is all they need, no traces or run directories. ``--out`` is checked before anything
is read: it must be a folder (or a place one can be made) that can be written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from muon_repro.dataset.meta import AUTHOR_HELP, DATE_HELP
from muon_repro.tables.files import check_apart, check_out_folder


def _out_checked(read: str) -> str:
    """The description's sentence on --out, naming the folders the command reads."""
    return (
        "--out is checked before anything is read: it must be a folder (or a place one can be made) that can be written, "
        f"apart from the folders read ({read})."
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--metrics", default="metrics", metavar="DIR", help="tables written by muon-repro analyze (default: %(default)s)"
    )

    f = subparsers.add_parser(
        "figures",
        parents=[common],
        help="draw the report's figures (PNG + SVG) from the metrics tables",
        description=(
            "Draw the report's figures (PNG and SVG) from the tables muon-repro analyze wrote under --metrics: a "
            "copy of that folder is all it needs, no traces or run folders. " + _out_checked("--metrics")
        ),
    )
    f.add_argument("--out", default="figures", metavar="DIR", help="where the figures go (default: %(default)s)")
    f.set_defaults(func=run_figures)

    r = subparsers.add_parser(
        "report",
        parents=[common],
        help="write report.md and report.pdf from the tables and figures",
        description=(
            "Write the report (report.md, report.html, report.pdf: the formats --format names) from the tables "
            "muon-repro analyze wrote under --metrics and the figures muon-repro figures drew under --figures: "
            "copies of those folders are all it needs, no traces or run folders. " + _out_checked("--metrics, --figures")
        ),
    )
    r.add_argument(
        "--figures", default="figures", metavar="DIR", help="figures drawn by muon-repro figures (default: %(default)s)"
    )
    r.add_argument("--out", default="report", metavar="DIR", help="where report.md / report.pdf go (default: %(default)s)")
    r.add_argument("--format", default="md,pdf", metavar="LIST", help="comma-separated: md, html, pdf (default: %(default)s)")
    cite = r.add_argument_group('what its "How to cite" says (the dataset\'s card and CITATION.cff say the same)')
    cite.add_argument("--repo-id", default=None, metavar="ORG/NAME", help="the dataset repository (default: the project's)")
    cite.add_argument("--version", default=None, help="the dataset version X.Y.Z (default: this package's)")
    cite.add_argument("--date", default=None, help=DATE_HELP)
    cite.add_argument(
        "--author",
        action="append",
        default=None,
        metavar="NAME",
        help=AUTHOR_HELP,
    )
    cite.add_argument("--pretty-name", default=None, help="the dataset's title")
    r.set_defaults(func=run_report)


def run_figures(args: argparse.Namespace) -> int:
    from muon_repro.stages import figures

    check_apart(args.out, f"--out {args.out}", [("--metrics", args.metrics)])
    check_out_folder(Path(args.out), f"--out {args.out}")
    for name, path in figures(args.metrics, args.out).items():
        print(f"{name:20s} {path} (+ .svg)")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from muon_repro.dataset.citation import report_meta
    from muon_repro.report.build import check_formats
    from muon_repro.stages import report

    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    check_formats(formats, "--format")  # before anything is read or written
    check_apart(args.out, f"--out {args.out}", [("--metrics", args.metrics), ("--figures", args.figures)])
    check_out_folder(Path(args.out), f"--out {args.out}")
    given = {k: getattr(args, k) for k in ("repo_id", "version", "date", "pretty_name") if getattr(args, k) is not None}
    meta = report_meta(args.metrics, authors=tuple(args.author or ()), **given)
    for fmt, path in report(args.metrics, args.figures, args.out, formats=formats, meta=meta).items():
        print(f"{fmt:4s} {path}")
    return 0
