"""Benchmark: ``muon-repro analyze`` against HolisticTraceAnalysis's parser on a ~1 GB trace, plain and gzip.

    python -m tools.analysis_benchmark --hta-python /tmp/hta-venv/bin/python   # the full table
    python -m tools.analysis_benchmark --size-mb 200 --skip-hta                 # ours only, a smaller trace
    python -m tools.analysis_benchmark --hta-python /tmp/hta-venv/bin/python --check

The trace is a real one (by default the A100 NCCL DDP rank of ``../shared/traces/external``)
repeated until it reaches the size (:mod:`tools.bench_trace`): its events' text is copied as is,
with timestamps shifted by one span per copy and ids (``External id``, ``correlation``, flow
``id``) offset so every copy is distinct; the source's ProfilerStep annotations become three
steps covering a third of the copies each (so both tools see a trace with as few steps as the
source, and HTA's per-step loop is not what is measured). Its gzip copy (level 6) is the same
bytes compressed. Both are built once and cached under ``.bench/``.

Timed on the same traces, in the same run, each in fresh child processes (:mod:`tools.bench_process`):

* **ours in-process**: ``read_trace`` + ``analyze_trace`` in a Python child, timed around the
  call (interpreter start and imports excluded), per ``--workers`` count, plain trace;
* **ours end to end**: ``python -m muon_repro analyze TRACE --workers N --out TMPDIR`` as a user
  runs it, timed from process start to exit (imports, reading, analysis and writing the tables
  included): per ``--workers`` count on the plain trace; on the gzip trace with each gzip decoder
  installed (python-isal's ``igzip`` where installed, else the standard library's; the standard
  library forced with ``MUON_REPRO_GZIP=zlib``). A gzip stream is inflated by one process;
  reader processes only split plain files;
* **HTA**: ``hta.common.trace.parse_trace_file`` with its default configuration, timed around
  the call, on the plain and the gzip trace.

Ours run in ``--repeat`` rounds, each configuration once per round in the same order, so that a machine that
slows down for a while slows every row alike (HTA ``--hta-repeat`` times, after); the table shows the median and
the range. MB/s is the trace's JSON (decompressed) bytes over the wall time. Peak memory is the
highest total resident set of the child and all its descendants, sampled every 10 ms (never
below the child's own ``VmHWM``). Speed-up is HTA's wall time over ours on the same file, memory
ratio ours' peak over HTA's. The last line checks the targets for the end-to-end run with the
CLI's default reader processes on the plain trace: at least :data:`TARGET_SPEEDUP` times faster
than HTA, at most :data:`TARGET_MEMORY` times its peak memory (``--check``: a miss exits 1).

HTA 0.5 is in the project's dev extra (pinned in constraints.txt, for ``tools/study_hta_check.py``); ``--hta-python``
runs it from another interpreter, e.g. an environment of its own, so that its timing shares nothing with ours::

    python -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install HolisticTraceAnalysis psutil   # psutil: imported by HTA 0.5 but not declared
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.bench_process import REPO, Measurement, measure, run_sampled
from tools.bench_trace import build_trace, ensure_gzip, ensure_trace

__all__ = ["Measurement", "Row", "Summary", "build_trace", "check_targets", "format_report", "main", "measure_cli"]

DEFAULT_SOURCE = REPO.parent / "shared" / "traces" / "external" / "hta_a100_nccl_ddp_rank0.json.gz"
DEFAULT_OUT = REPO / ".bench" / "bench_trace.json"
HTA_INSTALL = "python -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis psutil"
TARGET_SPEEDUP = 20.0
"""End to end, ``muon-repro analyze`` must be at least this many times faster than HTA's parser."""
TARGET_MEMORY = 0.10
"""End to end, its peak memory must be at most this fraction of HTA's."""
FORCE_ZLIB = {"MUON_REPRO_GZIP": "zlib"}  # muon_repro.analysis.byte_source.FORCE_VARIABLE

OURS = textwrap.dedent(
    """
    import json, sys, time
    from muon_repro.analysis.breakdown import analyze_trace
    from muon_repro.analysis.reader import read_trace
    if __name__ == "__main__":
        t = time.perf_counter()
        trace = read_trace(sys.argv[1], workers=int(sys.argv[2]))
        t_read = time.perf_counter() - t
        b = analyze_trace(trace)
        wall = time.perf_counter() - t
        print(json.dumps({"wall": wall, "read": t_read, "events": len(trace.events), "steps": len(b.steps)}))
    """
)

HTA = textwrap.dedent(
    """
    import json, logging, sys, time
    logging.disable(logging.CRITICAL)
    from hta.common.trace import parse_trace_file
    from hta.configs.parser_config import ParserConfig
    if __name__ == "__main__":
        t = time.perf_counter()
        meta, df, symbols = parse_trace_file(sys.argv[1], ParserConfig.get_default_cfg())
        wall = time.perf_counter() - t
        print(json.dumps({"wall": wall, "events": len(df)}))
    """
)


def cli_command(trace: str, out_dir: str, python: str = sys.executable, workers: int | None = None) -> list[str]:
    """What a user runs: ``muon-repro analyze TRACE [--workers N] --out DIR``, through this interpreter."""
    chosen = [] if workers is None else ["--workers", str(workers)]
    return [python, "-m", "muon_repro", "analyze", trace, *chosen, "--out", out_dir]


def measure_cli(
    trace: str, timeout: float, python: str = sys.executable, workers: int | None = None, env: dict[str, str] | None = None
) -> Measurement:
    """``muon-repro analyze`` end to end in a fresh process: start, read, analyze, write the tables.

    Wall time is the process's whole life; the tables go to a temporary directory, which is
    checked (the run must write a ``steps`` table) and removed after the clock has stopped.
    """
    with tempfile.TemporaryDirectory(prefix="muon-repro-bench-") as tmp:
        done = run_sampled(cli_command(trace, tmp, python, workers), timeout, env)
        if done.returncode != 0:
            raise RuntimeError(f"muon-repro analyze failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        written = sorted(p.name for p in Path(tmp).iterdir())
    if not any(name.startswith("steps.") for name in written):
        raise RuntimeError(f"muon-repro analyze wrote no steps table (wrote: {', '.join(written) or 'nothing'})")
    return Measurement(wall_s=done.wall_s, peak_rss_bytes=done.peak_rss_bytes, result={"files": len(written)})


def hta_available(python: str) -> bool:
    probe = (
        "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('hta') and importlib.util.find_spec('psutil') else 1)"
    )
    return subprocess.run([python, "-c", probe], capture_output=True, check=False).returncode == 0


def gzip_decoders() -> list[str]:
    """The gzip decoders the analysis can use here: ``isal`` where python-isal is installed, and ``zlib``."""
    from muon_repro.analysis.byte_source import gzip_decoder

    return ["isal", "zlib"] if gzip_decoder() == "isal" else ["zlib"]


# ---------------------------------------------------------------- report


@dataclass(frozen=True)
class Summary:
    """Median and range of several runs of one thing."""

    runs: int
    wall_s: float
    wall_min: float
    wall_max: float
    peak_rss_bytes: float
    rss_min: int
    rss_max: int

    @classmethod
    def of(cls, runs: list[Measurement]) -> Summary:
        walls = [m.wall_s for m in runs]
        rss = [m.peak_rss_bytes for m in runs]
        return cls(len(runs), statistics.median(walls), min(walls), max(walls), statistics.median(rss), min(rss), max(rss))


@dataclass(frozen=True)
class Row:
    """One line of the table: what was timed (``kind``: ``in-process``, ``end to end`` or ``HTA``), on which
    trace (``plain`` or ``gzip``), how, and its runs. ``default`` marks the run the targets judge."""

    kind: str
    trace: str
    how: str
    runs: list[Measurement]
    default: bool = False

    @property
    def label(self) -> str:
        return f"{'ours ' if self.kind != 'HTA' else ''}{self.kind}, {self.trace}: {self.how}"


def check_targets(cli: Summary, hta: Summary) -> list[tuple[str, float, bool]]:
    """(description, measured value, met) for each target, end to end against HTA (medians)."""
    speedup = hta.wall_s / cli.wall_s
    memory = cli.peak_rss_bytes / hta.peak_rss_bytes
    return [
        (f"end to end >= {TARGET_SPEEDUP:g}x faster than HTA", speedup, speedup >= TARGET_SPEEDUP),
        (f"end to end <= {TARGET_MEMORY:g}x HTA's peak memory", memory, memory <= TARGET_MEMORY),
    ]


def _judged(rows: list[Row]) -> tuple[Summary | None, Summary | None]:
    """(the default end-to-end run on the plain trace, HTA on the plain trace), either None if not measured."""
    cli = next((Summary.of(r.runs) for r in rows if r.default and r.runs), None)
    hta = next((Summary.of(r.runs) for r in rows if r.kind == "HTA" and r.trace == "plain" and r.runs), None)
    return cli, hta


RESULT_FILE = REPO / "docs" / "analysis_benchmark.json"
"""What the last full run measured, written by ``--result`` (default here): the README's and docs/performance.md's
numbers are generated from it (``python -m muon_repro.report.readme``), so that they are the run's, never retyped."""


def machine() -> dict:
    """The machine the benchmark ran on, as the result file and the README say it."""
    import platform

    model = ""
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor()
    return {"cpus": os.cpu_count(), "cpu": model, "python": sys.version.split()[0], "system": platform.system()}


def _against_hta(rows: list[Row]) -> list[tuple[Row, Summary, Summary | None]]:
    """Each row with its summary and HTA's on the same trace (None for HTA's own rows, or without HTA)."""
    hta = {r.trace: Summary.of(r.runs) for r in rows if r.kind == "HTA" and r.runs}
    return [(r, Summary.of(r.runs), hta.get(r.trace) if r.kind != "HTA" else None) for r in rows]


def result_record(info: dict, rows: list[Row], when: str) -> dict:
    """The run as one JSON object: the trace, the machine, every row's medians and ranges, the targets."""
    out_rows = [
        {
            "kind": r.kind,
            "trace": r.trace,
            "how": r.how,
            "default": r.default,
            "runs": s.runs,
            "wall_s": s.wall_s,
            "wall_min_s": s.wall_min,
            "wall_max_s": s.wall_max,
            "mb_per_s": info["size_bytes"] / 1e6 / s.wall_s if s.wall_s > 0 else None,
            "peak_rss_bytes": s.peak_rss_bytes,
            "speedup": ref.wall_s / s.wall_s if ref else None,
            "memory_ratio": s.peak_rss_bytes / ref.peak_rss_bytes if ref else None,
        }
        for r, s, ref in _against_hta(rows)
    ]
    cli, ref = _judged(rows)
    targets = [{"target": t, "value": v, "met": ok} for t, v, ok in check_targets(cli, ref)] if cli and ref else []
    trace = {k: info[k] for k in ("size_bytes", "events", "copies") if k in info}
    trace |= {"gzip_bytes": info.get("gzip_bytes"), "source": Path(info["source"]).name}
    return {"date": when, "machine": machine(), "trace": trace, "rows": out_rows, "targets": targets}


def format_report(info: dict, rows: list[Row]) -> str:
    """One table, every row measured in this run, then the targets line."""
    json_mb = info["size_bytes"] / 1e6
    table = [("", "runs", "wall s", "min-max s", "MB/s", "peak RSS MB", "min-max MB", "speed-up", "memory ratio")]
    for r, s, ref in _against_hta(rows):
        table.append(
            (
                r.label,
                str(s.runs),
                f"{s.wall_s:.2f}",
                f"{s.wall_min:.2f}-{s.wall_max:.2f}",
                f"{json_mb / s.wall_s:.0f}" if s.wall_s > 0 else "-",
                f"{s.peak_rss_bytes / 1e6:.0f}",
                f"{s.rss_min / 1e6:.0f}-{s.rss_max / 1e6:.0f}",
                f"{ref.wall_s / s.wall_s:.1f}x" if ref else "-",
                f"{s.peak_rss_bytes / ref.peak_rss_bytes:.3f}x" if ref else "-",
            )
        )
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    gz = f", gzip copy {info['gzip_bytes'] / 1e6:.0f} MB" if info.get("gzip_bytes") else ""
    lines = [
        (
            f"trace: {info.get('path', '')}: {json_mb:.0f} MB of JSON{gz}, {info['events'] / 1e6:.2f}M events, "
            f"{info['copies']} copies of {Path(info['source']).name}"
        ),
        f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; peak RSS = whole process tree, sampled every 10 ms",
        "wall s and peak RSS MB: medians of the runs; MB/s = JSON (decompressed) MB / wall s; speed-up = HTA wall / ours "
        "wall on the same file; memory ratio = ours peak / HTA peak",
        "",
    ]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(t, widths))) for t in table]
    lines.append("")
    cli, ref = _judged(rows)
    if cli and ref:
        (speed, speedup, speed_ok), (mem, memory, mem_ok) = check_targets(cli, ref)
        lines.append(
            f"targets (plain trace, the CLI's default reader processes): {speed}: {speedup:.1f}x "
            f"{'PASS' if speed_ok else 'FAIL'}; {mem}: {memory:.3f}x {'PASS' if mem_ok else 'FAIL'}"
        )
    else:
        lines.append(f"targets: not checked, HTA not measured (give it its own environment: {HTA_INSTALL}; then --hta-python)")
    return "\n".join(lines)


# ---------------------------------------------------------------- running


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.analysis_benchmark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real trace to repeat (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the big trace goes (default: %(default)s)")
    parser.add_argument("--size-mb", type=float, default=1000.0, help="size of the big trace in MB (default: %(default)s)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the big trace (and its gzip copy) even if cached")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=sorted({os.cpu_count() or 1, 1}, reverse=True),
        help="reader processes, one configuration each, in-process and end to end on the plain trace "
        "(default: the CPU count, and 1); the targets judge the CLI's own default",
    )
    parser.add_argument("--no-gzip", action="store_true", help="skip the gzip trace")
    parser.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="rounds of ours, in-process and end to end, each configuration once per round (default: %(default)s)",
    )
    parser.add_argument("--hta-repeat", type=int, default=1, help="runs of HTA per trace (default: %(default)s)")
    parser.add_argument("--skip-hta", action="store_true", help="measure ours only")
    parser.add_argument(
        "--hta-python", default=sys.executable, help="interpreter with HolisticTraceAnalysis installed (default: this one)"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per run (default: %(default)s)")
    parser.add_argument(
        "--result",
        type=Path,
        default=RESULT_FILE,
        help="write the run's numbers here as JSON, for the README and docs/performance.md (default: %(default)s; "
        "only a run that measured HTA writes it)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit with status 1 unless end to end is >= {TARGET_SPEEDUP:g}x faster than HTA and uses <= "
        f"{TARGET_MEMORY:g}x its peak memory (needs HTA)",
    )
    return parser


def _log(label: str, i: int, m: Measurement) -> None:
    line = f"{label}, run {i + 1}: {m.wall_s:.2f} s, peak {m.peak_rss_bytes / 1e6:.0f} MB, {m.result}"
    print(line, file=sys.stderr, flush=True)


def _repeat(row: Row, times: int, run) -> Row:
    for i in range(times):
        row.runs.append(run())
        _log(row.label, i, row.runs[-1])
    return row


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.check and args.skip_hta:
        parser.error("--check compares against HTA: it cannot be combined with --skip-hta")
    if args.repeat < 1 or args.hta_repeat < 1:
        parser.error("--repeat and --hta-repeat must be at least 1")
    if not args.skip_hta and not hta_available(args.hta_python):
        print(
            f"HolisticTraceAnalysis is not installed for {args.hta_python}.\n"
            f"Give it an environment of its own (it is not a project dependency):\n    {HTA_INSTALL}\n"
            "and pass --hta-python /tmp/hta-venv/bin/python, or --skip-hta to time ours only.",
            file=sys.stderr,
        )
        return 2
    if not args.source.exists():
        print(f"source trace {args.source} not found; pass --source", file=sys.stderr)
        return 2
    try:
        info = ensure_trace(args.source, args.out, int(args.size_mb * 1e6), args.rebuild)
    except ValueError as exc:  # names the source and what it lacks
        print(f"analysis_benchmark: error: {exc}", file=sys.stderr)
        return 2
    info["path"] = str(args.out)
    plain = str(args.out)
    traces = {"plain": plain}
    if not args.no_gzip:
        info = ensure_gzip(args.out, info, args.rebuild)
        traces["gzip"] = plain + ".gz"

    def procs(n: int) -> str:
        return f"{n} process{'es' if n > 1 else ''}"

    timed: list[tuple[Row, Callable[[], Measurement]]] = []
    for n in args.workers:
        row = Row("in-process", "plain", f"read_trace + analyze_trace, {procs(n)}", [])
        timed.append((row, lambda n=n: measure(sys.executable, OURS, [plain, str(n)], args.timeout)))
    default = Row("end to end", "plain", "muon-repro analyze --out DIR (default processes)", [], default=True)
    timed.append((default, lambda: measure_cli(plain, args.timeout)))
    for n in args.workers:
        row = Row("end to end", "plain", f"muon-repro analyze --workers {n}", [])
        timed.append((row, lambda n=n: measure_cli(plain, args.timeout, workers=n)))
    if "gzip" in traces:
        for decoder in gzip_decoders():
            env = FORCE_ZLIB if decoder == "zlib" else None
            row = Row("end to end", "gzip", f"muon-repro analyze, gzip by {decoder}", [])
            timed.append((row, lambda env=env: measure_cli(traces["gzip"], args.timeout, env=env)))
    # Round by round, every configuration once per round: a machine that slows down for a while slows every row
    # alike, instead of whichever row was being repeated then.
    for i in range(args.repeat):
        for row, run in timed:
            row.runs.append(run())
            _log(row.label, i, row.runs[-1])
    rows = [row for row, _ in timed]
    if not args.skip_hta:
        for kind, path in traces.items():
            print(f"HTA on the {kind} trace (this takes a while) ...", file=sys.stderr, flush=True)
            row = Row("HTA", kind, "parse_trace_file", [])
            rows.append(_repeat(row, args.hta_repeat, lambda path=path: measure(args.hta_python, HTA, [path], args.timeout)))
    print(format_report(info, rows))
    cli, ref = _judged(rows)
    if cli and ref and args.result:
        import datetime
        import json

        from muon_repro.tables.files import write_atomic

        record = result_record(info, rows, datetime.date.today().isoformat())
        write_atomic(args.result, json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.result}: regenerate the README's numbers with `python -m muon_repro.report.readme`")
    if args.check and cli and ref:
        return 0 if all(ok for _, _, ok in check_targets(cli, ref)) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
