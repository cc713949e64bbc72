"""``muon-repro figures`` and ``muon-repro report``: tables (and run directories) -> figures -> report.

    muon-repro figures [--metrics metrics/] [--traces traces/] [--out figures/]
    muon-repro report  [--metrics metrics/] [--traces traces/] [--figures figures/] [--out report/] [--format md,pdf]

Both read the tables ``muon-repro analyze`` wrote under ``--metrics`` and, for what the tables do
not hold (loss, state split, environment, the one-step timeline), each run's directory:
``<traces>/<group>/<name>`` when it exists, else the ``path`` the runs table recorded.
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--metrics", default="metrics", metavar="DIR", help="tables written by `muon-repro analyze` (default: %(default)s)")
    common.add_argument("--traces", default="traces", metavar="DIR", help="run directories <group>/<name>; else the runs table's path (default: %(default)s)")

    f = subparsers.add_parser("figures", parents=[common], help="draw the report's figures (PNG + SVG) from the metrics tables",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    f.add_argument("--out", default="figures", metavar="DIR", help="where the figures go (default: %(default)s)")
    f.set_defaults(func=run_figures)

    r = subparsers.add_parser("report", parents=[common], help="write report.md and report.pdf from the tables and figures",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    r.add_argument("--figures", default="figures", metavar="DIR", help="figures drawn by `muon-repro figures` (default: %(default)s)")
    r.add_argument("--out", default="report", metavar="DIR", help="where report.md / report.pdf go (default: %(default)s)")
    r.add_argument("--format", default="md,pdf", metavar="LIST", help="comma-separated: md, html, pdf (default: %(default)s)")
    r.set_defaults(func=run_report)


def run_figures(args: argparse.Namespace) -> int:
    from muon_repro.report.build import make_figures
    from muon_repro.report.data import load

    data = load(args.metrics, args.traces)
    paths = make_figures(data, Path(args.out))
    for name, path in paths.items():
        print(f"{name:20s} {path} (+ .svg)")
    return 0


def _shown(path: Path) -> str:
    """A path as a reader should type it: relative to the working directory when inside it."""
    try:
        return Path(os.path.relpath(path.resolve(), Path.cwd())).as_posix() if path.resolve().is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def run_report(args: argparse.Namespace) -> int:
    from muon_repro.report.context import build_context
    from muon_repro.report.data import load
    from muon_repro.report.figures import FIGURES
    from muon_repro.report.render import write_report

    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    data = load(args.metrics, args.traces)
    figures_dir = Path(args.figures)
    figure_paths = {name: figures_dir / f"{name}.png" for name in FIGURES}
    traces_root = Path(os.path.commonpath([str(d.path.resolve().parent.parent) for d in data.run_dirs.values()]))
    m, fd, out = _shown(Path(args.metrics)), _shown(figures_dir), _shown(Path(args.out))
    invocations = [
        shlex.join(["muon-repro", "analyze", _shown(traces_root), "--out", m]),
        shlex.join(["muon-repro", "figures", "--metrics", m, "--traces", _shown(traces_root), "--out", fd]),
        shlex.join(["muon-repro", "report", "--metrics", m, "--traces", _shown(traces_root), "--figures", fd, "--out", out, "--format", ",".join(formats)]),
    ]
    context = build_context(data, figure_paths, Path(args.out), metrics_dir=Path(args.metrics), invocations=invocations)
    for fmt, path in write_report(context, Path(args.out), formats).items():
        print(f"{fmt:4s} {path}")
    return 0
