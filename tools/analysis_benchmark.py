"""Benchmark: ``muon-repro analyze`` against HolisticTraceAnalysis's parser on a ~1 GB trace.

    python -m tools.analysis_benchmark                 # build .bench/bench_trace.json, time all three
    python -m tools.analysis_benchmark --size-mb 200   # a smaller trace
    python -m tools.analysis_benchmark --skip-hta      # ours only
    python -m tools.analysis_benchmark --hta-python /tmp/hta-venv/bin/python --check

The trace is a real one (by default the A100 NCCL DDP rank of ``../shared/traces/external``)
repeated until it reaches the size: its events' text is copied as is, with timestamps shifted
by one span per copy and ids (``External id``, ``correlation``, flow ``id``) offset so every
copy is distinct; the source's ProfilerStep annotations become three steps covering a third
of the copies each (so both tools see a trace with as few steps as the source, and HTA's
per-step loop is not what is measured). It is built once and cached under ``.bench/``.

Three things are timed on the same trace, in the same run, each in fresh child processes:

* **ours in-process**: ``read_trace`` + ``analyze_trace`` in a Python child, timed around the
  call (interpreter start and imports excluded), once per ``--workers`` configuration;
* **ours end to end**: ``python -m muon_repro analyze TRACE --out TMPDIR`` as a user runs it,
  timed from process start to exit (imports, reading, analysis and writing the tables
  included), the CLI choosing its own reader processes;
* **HTA**: ``hta.common.trace.parse_trace_file`` with its default configuration, timed around
  the call.

Each runs ``--repeat`` times (HTA ``--hta-repeat`` times); the table shows the median and the
range. Peak memory is the highest total resident set of the child and all its descendants,
sampled every 10 ms (and never below the child's own ``VmHWM`` as last sampled). Speed-up is
HTA's wall time over ours, memory ratio ours' peak over HTA's. The last line checks the targets
for the end-to-end run: at least :data:`TARGET_SPEEDUP` times faster than HTA, at most
:data:`TARGET_MEMORY` times its peak memory (``--check`` makes a miss exit with status 1).

HTA is not a dependency of this project, and installing it next to the project would change
pinned versions. Give it an environment of its own and point ``--hta-python`` at it::

    python -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install HolisticTraceAnalysis psutil   # psutil: imported by HTA 0.5 but not declared
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from muon_repro.tables.files import write_atomic

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "traces" / "external" / "hta_a100_nccl_ddp_rank0.json.gz"
DEFAULT_OUT = REPO / ".bench" / "bench_trace.json"
HTA_INSTALL = "python -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis psutil"
TARGET_SPEEDUP = 15.0
"""End to end, ``muon-repro analyze`` must be at least this many times faster than HTA's parser."""
TARGET_MEMORY = 0.15
"""End to end, its peak memory must be at most this fraction of HTA's."""

# ---------------------------------------------------------------- building the trace

_NUMBERS = re.compile(rb'("ts": ?|"External id": ?|"correlation": ?|"id": ?)(-?\d+(?:\.\d+)?)')
_ID_SHIFT = 10_000_000


def _events_span(text: bytes) -> tuple[int, int, dict, list]:
    """(start, end) of the events array's contents in ``text``, the top-level keys, the events."""
    from muon_repro.analysis.trace_layout import find_events_start, parse_meta

    found = find_events_start(text, Path("source"))
    if found is None or found[1]:
        raise ValueError("the source trace must be a JSON object with a traceEvents array")
    start = found[0]
    doc = json.loads(text.decode("utf-8", "replace"), strict=False)
    events = doc["traceEvents"]
    p = len(text)
    while (p := text.rfind(b"]", start, p)) >= 0:
        if parse_meta(text[:start], text[p + 1 :]) is not None:
            try:
                body = json.loads(b"[" + text[start:p] + b"]", strict=False)
            except ValueError:
                continue
            if len(body) == len(events):
                return start, p, doc, events
    raise ValueError("could not find the end of the source's traceEvents array")


def build_trace(source: Path, out: Path, size_bytes: int) -> dict:
    """Write ``out`` by repeating ``source``'s events (see the module docstring)."""
    raw = source.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    start, end, _, events = _events_span(text)
    body = text[start:end].strip()
    # no ProfilerStep inside the copies: three synthetic steps are appended instead
    body = re.sub(rb'"ProfilerStep#(\d+)"', rb'"Iteration#\1"', body)
    real = [e for e in events if isinstance(e.get("pid"), int) and isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in real)
    span = max(e["ts"] + e.get("dur", 0) for e in real) - t0 + 1000.0
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    main = steps[0] if steps else real[0]
    first_step = int(steps[0]["name"].split("#")[1]) if steps else 0

    parts = _NUMBERS.split(body)  # text, key, number, text, key, number, ..., text
    copies = max(1, math.ceil(size_bytes / len(body)))
    out.parent.mkdir(parents=True, exist_ok=True)
    n_steps = min(3, copies)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(text[:start] + b"\n  ")
            for k in range(copies):
                if k:
                    fh.write(b",\n  ")
                if k == 0:
                    fh.write(body)
                    continue
                shifted = list(parts)
                for i in range(1, len(parts), 3):
                    key, num = parts[i], parts[i + 1]
                    if key.startswith(b'"ts"'):
                        shifted[i + 1] = b"%.3f" % (float(num) + k * span)
                    elif b"." not in num:
                        shifted[i + 1] = b"%d" % (int(num) + k * _ID_SHIFT)
                fh.write(b"".join(shifted))
            per = copies / n_steps
            for s in range(n_steps):
                lo, hi = round(s * per), round((s + 1) * per)
                step = {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{first_step + s}",
                    "pid": main["pid"],
                    "tid": main["tid"],
                    "ts": round(t0 + lo * span, 3),
                    "dur": round((hi - lo) * span - 500.0, 3),
                    "args": {"External id": 0, "Record function id": 0},
                }
                fh.write(b",\n  " + json.dumps(step).encode())
            fh.write(b"\n" + text[end:])

    write_atomic(out, write)
    info = {
        "source": str(source),
        "source_bytes": len(raw),
        "size_bytes": out.stat().st_size,
        "copies": copies,
        "events": copies * len(events) + n_steps,
        "requested_bytes": size_bytes,
    }
    out.with_name(out.name + ".info.json").write_text(json.dumps(info, indent=1))
    return info


def ensure_trace(source: Path, out: Path, size_bytes: int, rebuild: bool) -> dict:
    info_path = out.with_name(out.name + ".info.json")
    if not rebuild and out.exists() and info_path.exists():
        info = json.loads(info_path.read_text())
        if (
            info.get("source") == str(source)
            and info.get("requested_bytes") == size_bytes
            and info.get("size_bytes") == out.stat().st_size
        ):
            return info
    print(f"building {out} ({size_bytes / 1e6:.0f} MB) from {source.name} ...", file=sys.stderr, flush=True)
    return build_trace(source, out, size_bytes)


# ---------------------------------------------------------------- measuring a child process

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


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (Linux /proc)."""
    total = 0
    stack = [root]
    seen = set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    stack.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def _high_water(pid: int) -> int:
    """The process's own peak resident bytes so far (``VmHWM``), 0 if unreadable.

    Unlike ``ru_maxrss``, which survives ``exec`` and so starts at the forking parent's size,
    ``VmHWM`` belongs to the process's current address space.
    """
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclass
class Measurement:
    wall_s: float
    peak_rss_bytes: int
    result: dict


@dataclass
class _Finished:
    wall_s: float  # from just before the process started to its exit
    peak_rss_bytes: int  # sampled tree RSS, or the root process's own VmHWM if higher
    returncode: int
    stdout: str
    stderr: str


def _child_env() -> dict[str, str]:
    """This checkout first on the path, so children import the code being measured."""
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path}


def run_sampled(argv: list[str], timeout: float) -> _Finished:
    """Run ``argv`` to completion; its wall time and the peak resident set of its process tree.

    A thread samples the tree every 10 ms while this one blocks in ``waitpid``, so the wall time
    ends when the process exits, not at the next sample. Output goes to temporary files (a
    full pipe cannot stall the child).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=_child_env())
        peak = 0
        done = threading.Event()
        timed_out = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _tree_rss(proc.pid), _high_water(proc.pid))
                done.wait(0.01)

        def kill() -> None:
            if proc.returncode is None:
                timed_out.set()
                proc.kill()

        sampler = threading.Thread(target=sample, daemon=True)
        killer = threading.Timer(timeout, kill)
        sampler.start()
        killer.start()
        try:
            _, status = os.waitpid(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: tell Popen
        except BaseException:  # interrupted: leave no child behind
            proc.kill()
            proc.wait()
            raise
        finally:
            wall = time.perf_counter() - t0
            done.set()
            killer.cancel()
            sampler.join()
        if timed_out.is_set():
            raise TimeoutError(f"{' '.join(argv[:4])} ... did not finish within {timeout:.0f} s")
        out.seek(0)
        err.seek(0)
        return _Finished(
            wall_s=wall,
            peak_rss_bytes=peak,
            returncode=proc.returncode,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


def measure(python: str, script: str, args: list[str], timeout: float) -> Measurement:
    """Run ``script`` in a fresh interpreter; wall time as it reports, peak RSS of its tree."""
    done = run_sampled([python, "-c", script, *args], timeout)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return Measurement(wall_s=result["wall"], peak_rss_bytes=done.peak_rss_bytes, result=result)


def cli_command(trace: str, out_dir: str, python: str = sys.executable) -> list[str]:
    """What a user runs: ``muon-repro analyze TRACE --out DIR``, through this interpreter."""
    return [python, "-m", "muon_repro", "analyze", trace, "--out", out_dir]


def measure_cli(trace: str, timeout: float, python: str = sys.executable) -> Measurement:
    """``muon-repro analyze`` end to end in a fresh process: start, read, analyze, write the tables.

    Wall time is the process's whole life; the tables go to a temporary directory, which is
    checked (the run must write a ``steps`` table) and removed after the clock has stopped.
    """
    with tempfile.TemporaryDirectory(prefix="muon-repro-bench-") as tmp:
        done = run_sampled(cli_command(trace, tmp, python), timeout)
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


def check_targets(cli: Summary, hta: Summary) -> list[tuple[str, float, bool]]:
    """(description, measured value, met) for each target, end to end against HTA (medians)."""
    speedup = hta.wall_s / cli.wall_s
    memory = cli.peak_rss_bytes / hta.peak_rss_bytes
    return [
        (f"end to end >= {TARGET_SPEEDUP:g}x faster than HTA", speedup, speedup >= TARGET_SPEEDUP),
        (f"end to end <= {TARGET_MEMORY:g}x HTA's peak memory", memory, memory <= TARGET_MEMORY),
    ]


def format_report(info: dict, ours: dict[int, list[Measurement]], cli: list[Measurement], hta: list[Measurement] | None) -> str:
    """One table, every row measured on the same trace in this run, then the targets line."""
    size_mb = info["size_bytes"] / 1e6
    ref = Summary.of(hta) if hta else None
    rows = [("", "runs", "wall s", "min-max s", "MB/s", "peak RSS MB", "min-max MB", "speed-up", "memory ratio")]

    def row(label: str, s: Summary) -> tuple[str, ...]:
        return (
            label,
            str(s.runs),
            f"{s.wall_s:.2f}",
            f"{s.wall_min:.2f}-{s.wall_max:.2f}",
            f"{size_mb / s.wall_s:.0f}" if s.wall_s > 0 else "-",
            f"{s.peak_rss_bytes / 1e6:.0f}",
            f"{s.rss_min / 1e6:.0f}-{s.rss_max / 1e6:.0f}",
            f"{ref.wall_s / s.wall_s:.1f}x" if ref else "-",
            f"{s.peak_rss_bytes / ref.peak_rss_bytes:.3f}x" if ref else "-",
        )

    for workers, runs in ours.items():
        label = f"ours in-process: read_trace + analyze_trace, {workers} process{'es' if workers > 1 else ''}"
        rows.append(row(label, Summary.of(runs)))
    cli_summary = Summary.of(cli) if cli else None
    if cli_summary:
        rows.append(row("ours end to end: muon-repro analyze --out DIR (CLI)", cli_summary))
    if ref:
        rows.append(row("HTA: parse_trace_file", ref))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        (
            f"trace: {info.get('path', '')}: {size_mb:.0f} MB, {info['events'] / 1e6:.2f}M events, "
            f"{info['copies']} copies of {Path(info['source']).name}"
        ),
        f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; peak RSS = whole process tree, sampled every 10 ms",
        "wall s and peak RSS MB: medians of the runs; speed-up = HTA wall / ours wall; memory ratio = ours peak / HTA peak",
        "",
    ]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.append("")
    if ref and cli_summary:
        (speed, speedup, speed_ok), (mem, memory, mem_ok) = check_targets(cli_summary, ref)
        lines.append(
            f"targets: {speed}: {speedup:.1f}x {'PASS' if speed_ok else 'FAIL'}; "
            f"{mem}: {memory:.3f}x {'PASS' if mem_ok else 'FAIL'}"
        )
    elif not ref:
        lines.append(f"targets: not checked, HTA not measured (give it its own environment: {HTA_INSTALL}; then --hta-python)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.analysis_benchmark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real trace to repeat (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the big trace goes (default: %(default)s)")
    parser.add_argument("--size-mb", type=float, default=1000.0, help="size of the big trace in MB (default: %(default)s)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the big trace even if cached")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=sorted({os.cpu_count() or 1, 1}, reverse=True),
        help="reader processes for the in-process runs, one configuration each (default: the CPU count, and 1); "
        "the end-to-end runs use the CLI's own default",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each of ours, in-process and end to end (default: %(default)s)"
    )
    parser.add_argument("--hta-repeat", type=int, default=1, help="runs of HTA (default: %(default)s)")
    parser.add_argument("--skip-hta", action="store_true", help="measure ours only")
    parser.add_argument(
        "--hta-python", default=sys.executable, help="interpreter with HolisticTraceAnalysis installed (default: this one)"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per run (default: %(default)s)")
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"exit with status 1 unless end to end is >= {TARGET_SPEEDUP:g}x faster than HTA and uses <= "
        f"{TARGET_MEMORY:g}x its peak memory (needs HTA)",
    )
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
    info = ensure_trace(args.source, args.out, int(args.size_mb * 1e6), args.rebuild)
    info["path"] = str(args.out)
    path = str(args.out)

    def log(what: str, i: int, m: Measurement) -> None:
        line = f"{what}, run {i + 1}: {m.wall_s:.2f} s, peak {m.peak_rss_bytes / 1e6:.0f} MB, {m.result}"
        print(line, file=sys.stderr, flush=True)

    ours: dict[int, list[Measurement]] = {}
    for workers in args.workers:
        for i in range(args.repeat):
            m = measure(sys.executable, OURS, [path, str(workers)], args.timeout)
            log(f"ours in-process, {workers} process(es)", i, m)
            ours.setdefault(workers, []).append(m)
    cli: list[Measurement] = []
    for i in range(args.repeat):
        m = measure_cli(path, args.timeout)
        log("ours end to end (muon-repro analyze)", i, m)
        cli.append(m)
    hta: list[Measurement] | None = None
    if not args.skip_hta:
        hta = []
        for i in range(args.hta_repeat):
            print("HTA run (this takes a while) ...", file=sys.stderr, flush=True)
            m = measure(args.hta_python, HTA, [path], args.timeout)
            log("HTA", i, m)
            hta.append(m)
    print(format_report(info, ours, cli, hta))
    if args.check and hta:
        return 0 if all(ok for _, _, ok in check_targets(Summary.of(cli), Summary.of(hta))) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
