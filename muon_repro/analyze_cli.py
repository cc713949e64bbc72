"""``muon-repro analyze PATH... [--out metrics/] [--json]``: traces in, tables out.

Prints one line per trace file (a readable table, or with ``--json`` one JSON object per
file), writes the tables of :mod:`muon_repro.table_set` under ``--out``, and reports
every file it could not read on stderr without stopping (a trial whose config.json, environment.json or
metrics.json is there but unreadable is left out, named). A run folder whose config.json names
more ranks than it has traces is no run: its traces are analyzed one by one, with a warning. A trace of the
original study's (or of a run of its protocol) that cannot be read leaves its run out of the study tables, named.
A file stands for itself: no folder around it is searched (one of the original study's traces, beside its
provenance file, stands for its folder's study runs, read together).
``--out`` holds only the tables and is replaced whole; it is checked before any trace is read.
A trace past one of the reader's limits (``--max-trace-bytes``, ``--max-trace-events``,
``--max-event-bytes``, ``--max-event-names``; docs/limits.md) is one of those files: its error names the limit.
Exit status: 0 when every trace was analyzed and every run folder was complete, 1 otherwise
(the others' results are still printed and written), 2 for a bad option or ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from muon_repro.analysis.limits import add_limit_options, limits_from_options


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="break profiler traces down per rank and step; write the metrics tables",
        description=(
            "Break each profiler trace (a trace file, a run folder, or a tree of them) down per rank and step, print "
            "one line per trace file (a readable table, or with --json one JSON object per file) and write the "
            "metrics tables (Parquet and CSV) to --out. --out holds only the tables and is replaced whole; it is "
            "checked before any trace is read. Every file that cannot be read is reported on stderr without "
            "stopping (a trial whose config.json, environment.json or metrics.json is there but unreadable is left "
            "out, named; a trace of the original study's or of a run of its protocol leaves its run out of the study "
            "tables). A run folder whose config.json names more ranks than it has traces is no run: its traces "
            "are analyzed one by one, with a warning. A trace file stands for itself: no folder around it is searched "
            "(one of the original study's traces stands for the study runs of its own folder)."
        ),
        epilog=(
            "A trace past one of the reader's limits (--max-trace-bytes, --max-trace-events, --max-event-bytes, "
            "--max-event-names; "
            "docs/limits.md) is reported like an unreadable file, its error naming the limit. "
            "Exit status: 0 when every trace was analyzed and every run folder was complete; 1 otherwise (the "
            "others' results are still printed and written); 2 for a bad option or --out. A run with fewer trials "
            "than its sweep asked for (an interrupted sweep) is noted, its trials used."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace file (.json / .json.gz), run directory, or a tree of them")
    p.add_argument(
        "--out", default="metrics", metavar="DIR", help="directory for the tables (Parquet + CSV); default: %(default)s"
    )
    p.add_argument("--no-write", action="store_true", help="print only; write no tables")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace --out even if it holds tables this command did not write (it never replaces a checkout)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per trace file instead of the table")
    p.add_argument("--rank", type=_rank, default=None, help="rank of traces with no distributedInfo and no rank in the file name")
    p.add_argument(
        "--workers", type=workers_count, default=None, help="processes for reading traces (default: CPU count, at most 8)"
    )
    add_limit_options(p)
    p.set_defaults(func=run_analyze)


def _int_at_least(text: str, least: int, what: str) -> int:
    """``text`` as an int of at least ``least``, else the argparse error that names ``what`` it is."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def _rank(text: str) -> int:
    return _int_at_least(text, 0, "a global rank, 0 or more")


def workers_count(text: str) -> int:
    """``--workers``: processes to start, 1 or more (also ``muon-repro review``'s)."""
    return _int_at_least(text, 1, "a number of processes, 1 or more")


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _short(path: str, width: int = 48) -> str:
    return path if len(path) <= width else "..." + path[-(width - 3) :]


def format_summaries(summaries: list[dict]) -> str:
    """The readable table: medians over steps, times in ms."""
    header = ("file", "rank", "device", "steps", "step", "fwd", "bwd", "optim", "compute", "comm", "exposed", "idle", "MB/step")
    rows = [header]
    for s in summaries:
        rows.append(
            (
                _short(s["file"]),
                str(s["rank"]),
                s["device"],
                str(s["steps"]),
                _fmt(s["step_ms"]),
                _fmt(s["forward_ms"]),
                _fmt(s["backward_ms"]),
                _fmt(s["optimizer_ms"]),
                _fmt(s["compute_ms"]),
                _fmt(s["comm_ms"]["total"]),
                _fmt(s["exposed_comm_ms"]),
                _fmt(s["idle_ms"]),
                _fmt(s["comm_bytes"] / 1e6, 3),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines) + "\n(times in ms, medians over steps; MB/step = bytes this rank sent per step)"


def _prestart_readers(args: argparse.Namespace) -> None:
    """One trace that will be read by several processes: start its reader processes first, so that their start
    (a new interpreter each) overlaps this process's imports (pandas, pyarrow) rather than the read."""
    from muon_repro.analysis.byte_source import Source
    from muon_repro.analysis.parallel_scan import default_workers, prestart_workers, reads_in_parallel
    from muon_repro.analysis.scan import PIECE_BYTES

    if len(args.paths) != 1 or not Path(args.paths[0]).is_file():
        return
    workers = args.workers or default_workers()
    try:
        with Source(Path(args.paths[0])) as src:
            gzipped = src.gzipped
        file_bytes = Path(args.paths[0]).stat().st_size
    except OSError:
        return  # said by the analysis, with the file's name
    if reads_in_parallel(file_bytes, gzipped, workers, PIECE_BYTES):
        prestart_workers(workers - 1)


def run_analyze(args: argparse.Namespace) -> int:
    from muon_repro.tables.io import check_tables_out, write_tables

    if args.no_write and (args.out != "metrics" or args.force):
        raise ValueError("--no-write writes no tables, so --out and --force have nothing to do; give one or the other")
    if not args.no_write:
        # before reading anything: a bad --out must not cost the analysis
        check_tables_out(Path(args.out), "--out", force=args.force)
    _prestart_readers(args)
    from muon_repro.analysis.batch_read import analyze_paths
    from muon_repro.table_set import tables_of

    analysis = analyze_paths(args.paths, workers=args.workers, rank=args.rank, limits=limits_from_options(args))
    summaries = [b.summary() for b in analysis.breakdowns]
    nothing = not summaries and not analysis.has_records and not analysis.timed_runs
    # the tables before any word: the study's traces are read there, and a damaged one is reported with the others
    tables = None if args.no_write or nothing else tables_of(analysis)
    if args.json:
        for s in summaries:
            print(json.dumps(s, sort_keys=False))
    elif summaries:
        print(format_summaries(summaries))
    for failure in analysis.failures:
        print(f"muon-repro analyze: error: {failure.message}", file=sys.stderr)
    for incomplete in analysis.incomplete:
        print(f"muon-repro analyze: warning: {incomplete.message}", file=sys.stderr)
    for note in analysis.notes:
        print(f"muon-repro analyze: note: {note}", file=sys.stderr)
    if nothing:
        print("muon-repro analyze: no trace could be analyzed and no record found; nothing written", file=sys.stderr)
        return 1
    if tables is not None:
        written = write_tables(tables, Path(args.out), force=args.force)
        counts = ", ".join(f"{name} {len(df)}" for name, df in tables.items())
        print(f"wrote {len(written)} files to {args.out} (rows: {counts})", file=sys.stderr if args.json else sys.stdout)
    return 1 if analysis.failures or analysis.incomplete else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m muon_repro.analyze_cli PATH...``, same as ``muon-repro analyze``."""
    parser = argparse.ArgumentParser(prog="muon-repro")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["analyze", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
