"""Benchmark: our reader + breakdown against HolisticTraceAnalysis's parser on a ~1 GB trace.

    python -m muon_repro.analysis.benchmark                 # build .bench/bench_trace.json, time both
    python -m muon_repro.analysis.benchmark --size-mb 200   # a smaller trace
    python -m muon_repro.analysis.benchmark --skip-hta      # ours only

The trace is a real one (by default the A100 NCCL DDP rank of ``../shared/traces/external``)
repeated until it reaches the size: its events' text is copied as is, with timestamps shifted
by one span per copy and ids (``External id``, ``correlation``, flow ``id``) offset so every
copy is distinct; the source's ProfilerStep annotations become three steps covering a third
of the copies each (so both tools see a trace with as few steps as the source, and HTA's
per-step loop is not what is measured). It is built once and cached under ``.bench/``.

Each tool runs in its own child process; wall time is measured around the call, peak memory
is the highest total resident set of the child and all its descendants, sampled every 10 ms
(and never below the child's own ``ru_maxrss``). Ours is ``read_trace`` + ``analyze_trace``;
HTA's is ``hta.common.trace.parse_trace_file`` with its default configuration.

HTA is not a dependency of this project. Install it for the benchmark only::

    pip install HolisticTraceAnalysis psutil    # psutil: imported by HTA 0.5 but not declared

or in a separate environment, and point ``--hta-python`` at that environment's interpreter.
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
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = REPO.parent / "shared" / "traces" / "external" / "hta_a100_nccl_ddp_rank0.json.gz"
DEFAULT_OUT = REPO / ".bench" / "bench_trace.json"
HTA_INSTALL = "pip install HolisticTraceAnalysis psutil"

# ---------------------------------------------------------------- building the trace

_NUMBERS = re.compile(rb'("ts": ?|"External id": ?|"correlation": ?|"id": ?)(-?\d+(?:\.\d+)?)')
_ID_SHIFT = 10_000_000


def _events_span(text: bytes) -> tuple[int, int, dict, list]:
    """(start, end) of the events array's contents in ``text``, the top-level keys, the events."""
    from muon_repro.analysis.scan import find_events_start, parse_meta

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
    tmp = out.with_name(out.name + ".tmp")
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
        n_steps = min(3, copies)
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
    os.replace(tmp, out)
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


@dataclass
class Measurement:
    wall_s: float
    peak_rss_bytes: int
    result: dict


def measure(python: str, script: str, args: list[str], timeout: float) -> Measurement:
    """Run ``script`` in a fresh interpreter; wall time as it reports, peak RSS of its tree."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.Popen([python, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = 0
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(f"{python} did not finish within {timeout:.0f} s")
        time.sleep(0.01)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed (exit {proc.returncode}):\n{err.decode(errors='replace')[-3000:]}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    usage_peak = result.pop("maxrss", 0)
    return Measurement(wall_s=result["wall"], peak_rss_bytes=max(peak, usage_peak), result=result)


def hta_available(python: str) -> bool:
    probe = (
        "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('hta') and importlib.util.find_spec('psutil') else 1)"
    )
    return subprocess.run([python, "-c", probe], capture_output=True, check=False).returncode == 0


# ---------------------------------------------------------------- report


def format_report(info: dict, ours: dict[int, list[Measurement]], hta: Measurement | None) -> str:
    """The table: one row per reader configuration (median of its runs), HTA, the ratios."""
    size_mb = info["size_bytes"] / 1e6
    rows = [("", "wall s", "MB/s", "peak RSS MB", "HTA/ours time", "HTA/ours memory")]
    medians = {}
    for workers, runs in ours.items():
        wall = statistics.median(m.wall_s for m in runs)
        rss = statistics.median(m.peak_rss_bytes for m in runs)
        medians[workers] = (wall, rss)
        label = f"muon_repro read+breakdown, {workers} process{'es' if workers > 1 else ''} (median of {len(runs)})"
        speed = f"{hta.wall_s / wall:.1f}x" if hta else ""
        memory = f"{hta.peak_rss_bytes / rss:.1f}x" if hta else ""
        rows.append((label, f"{wall:.2f}", f"{size_mb / wall:.0f}", f"{rss / 1e6:.0f}", speed, memory))
    if hta is not None:
        rows.append(
            (
                "HTA parse_trace_file",
                f"{hta.wall_s:.2f}",
                f"{size_mb / hta.wall_s:.1f}",
                f"{hta.peak_rss_bytes / 1e6:.0f}",
                "1.0x",
                "1.0x",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        (
            f"trace: {info.get('path', '')}: {size_mb:.0f} MB, {info['events'] / 1e6:.2f}M events, "
            f"{info['copies']} copies of {Path(info['source']).name}"
        ),
        f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; peak RSS = whole process tree, sampled every 10 ms",
        "",
    ]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    if hta is not None:
        workers, (wall, rss) = min(medians.items(), key=lambda kv: kv[1][0])
        speed, memory = hta.wall_s / wall, rss / hta.peak_rss_bytes
        lines += [
            "",
            f"fastest configuration ({workers} process{'es' if workers > 1 else ''}):",
            f"  target >= 10x faster than HTA: {speed:.1f}x -> {'met' if speed >= 10 else 'NOT met'}",
            f"  target <= 0.5x HTA's peak memory: {memory:.2f}x -> {'met' if memory <= 0.5 else 'NOT met'}",
        ]
    else:
        lines += ["", f"HTA not measured (install it with: {HTA_INSTALL})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m muon_repro.analysis.benchmark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
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
        help="reader processes to measure, one configuration each (default: the CPU count, and 1)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of ours (median reported; default: %(default)s)")
    parser.add_argument("--skip-hta", action="store_true", help="measure ours only")
    parser.add_argument(
        "--hta-python", default=sys.executable, help="interpreter with HolisticTraceAnalysis installed (default: this one)"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per run (default: %(default)s)")
    args = parser.parse_args(argv)

    if not args.skip_hta and not hta_available(args.hta_python):
        print(
            f"HolisticTraceAnalysis is not installed for {args.hta_python}.\n"
            f"Install it for the benchmark (it is not a project dependency):\n    {HTA_INSTALL}\n"
            "or pass --hta-python /path/to/env/bin/python, or --skip-hta to time ours only.",
            file=sys.stderr,
        )
        return 2
    if not args.source.exists():
        print(f"source trace {args.source} not found; pass --source", file=sys.stderr)
        return 2
    info = ensure_trace(args.source, args.out, int(args.size_mb * 1e6), args.rebuild)
    info["path"] = str(args.out)
    path = str(args.out)
    ours: dict[int, list[Measurement]] = {}
    for workers in args.workers:
        for i in range(max(1, args.repeat)):
            m = measure(sys.executable, OURS, [path, str(workers)], args.timeout)
            print(
                f"ours, {workers} process(es), run {i + 1}: {m.wall_s:.2f} s, peak {m.peak_rss_bytes / 1e6:.0f} MB, {m.result}",
                file=sys.stderr,
                flush=True,
            )
            ours.setdefault(workers, []).append(m)
    hta = None
    if not args.skip_hta:
        print("HTA run (this takes a while) ...", file=sys.stderr, flush=True)
        hta = measure(args.hta_python, HTA, [path], args.timeout)
        print(f"HTA: {hta.wall_s:.2f} s, peak {hta.peak_rss_bytes / 1e6:.0f} MB, {hta.result}", file=sys.stderr, flush=True)
    print(format_report(info, ours, hta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
