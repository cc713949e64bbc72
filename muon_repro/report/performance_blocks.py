"""The analysis's speed as README.md and docs/performance.md state it, generated from the result file the benchmark
wrote (``python -m tools.analysis_benchmark``: ``docs/analysis_benchmark.json``), so that every number is the
run's: the end-to-end row (start, read, analyze, write the tables, as a user runs it) is the one quoted as end to
end, never the in-process one, with the machine it ran on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BENCHMARK_FILE = Path("docs") / "analysis_benchmark.json"
BENCHMARK_COMMAND = "python -m tools.analysis_benchmark --hta-python /tmp/hta-venv/bin/python --check"


def load_benchmark(path: str | Path) -> dict[str, Any]:
    """The benchmark's result file, with the rows the blocks quote; ValueError naming the file and what it lacks."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not the benchmark's result file ({exc}); run `{BENCHMARK_COMMAND}`") from None
    rows = record.get("rows") if isinstance(record, dict) else None
    if not isinstance(rows, list) or _default_row(rows) is None or _hta_row(rows) is None:
        raise ValueError(f"{path}: no default end-to-end row and HTA row on the plain trace; run `{BENCHMARK_COMMAND}`")
    return record


def _default_row(rows: list[dict]) -> dict | None:
    return next((r for r in rows if r.get("default") and r.get("kind") == "end to end" and r.get("trace") == "plain"), None)


def _hta_row(rows: list[dict], trace: str = "plain") -> dict | None:
    return next((r for r in rows if r.get("kind") == "HTA" and r.get("trace") == trace), None)


def _one_process(rows: list[dict]) -> dict | None:
    return next((r for r in rows if r.get("kind") == "end to end" and r.get("how", "").endswith("--workers 1")), None)


def _machine(record: dict) -> str:
    m = record.get("machine", {})
    cpu = f" ({m['cpu']})" if m.get("cpu") else ""
    return f"{m.get('cpus', '?')} cores{cpu}, Python {m.get('python', '?')}"


def _mb(value: float) -> str:
    return f"{value / 1e9:.1f} GB" if value >= 1e9 else f"{value / 1e6:.0f} MB"


def readme_paragraph(record: dict) -> str:
    """The README's performance paragraph: the end-to-end row against HTA, one process, and where it was measured."""
    rows = record["rows"]
    ours, hta, single = _default_row(rows), _hta_row(rows), _one_process(rows)
    size = record["trace"]["size_bytes"] / 1e6
    met = all(t["met"] for t in record.get("targets", [])) if record.get("targets") else None
    verdict = "" if met is None else (" (its targets met)" if met else " (a target missed: see docs/performance.md)")
    text = (
        f"`muon-repro analyze` reads a {size:.0f} MB Kineto trace end to end (start, read, analyze, write the tables) "
        f"in {ours['wall_s']:.2f} s, {ours['mb_per_s']:.0f} MB/s: {ours['speedup']:.1f}x HolisticTraceAnalysis's parser "
        f"({hta['wall_s']:.1f} s) at {ours['memory_ratio']:.3f}x its peak memory ({_mb(ours['peak_rss_bytes'])} against "
        f"{_mb(hta['peak_rss_bytes'])})"
    )
    if single is not None:
        text += f"; with one process {single['mb_per_s']:.0f} MB/s"
    return (
        f"{text}. Measured side by side in one run on {record['date']}, on {_machine(record)}, by "
        f"`{BENCHMARK_COMMAND}`{verdict}: [docs/performance.md](docs/performance.md)."
    )


def performance_table(record: dict) -> str:
    """docs/performance.md's table: every row of the run, the trace, and the targets as judged."""
    trace = record["trace"]
    gz = f" ({trace['gzip_bytes'] / 1e6:.0f} MB gzipped)" if trace.get("gzip_bytes") else ""
    lines = [
        f"Measured on {record['date']} on {_machine(record)} (medians of each row's runs; MB/s = MB of JSON over the "
        "wall time; speed-up and memory ratio against HTA on the same file):",
        "",
        "| | runs | wall s | MB/s | peak RSS MB | vs HTA: speed-up | memory ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in record["rows"]:
        label = f"{'ours ' if r['kind'] != 'HTA' else ''}{r['kind']}, {r['trace']}: {r['how']}"
        cells = [
            label,
            str(r["runs"]),
            f"{r['wall_s']:.2f}",
            f"{r['mb_per_s']:.0f}" if r.get("mb_per_s") else "–",
            f"{r['peak_rss_bytes'] / 1e6:,.0f}",
            f"{r['speedup']:.1f}x" if r.get("speedup") else "",
            f"{r['memory_ratio']:.3f}x" if r.get("memory_ratio") else "",
        ]
        if r.get("default"):
            cells = [f"**{c}**" if c else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"The trace: {trace['size_bytes'] / 1e6:.0f} MB of JSON{gz}, {trace['events'] / 1e6:.2f}M events, "
        f"{trace.get('copies', '?')} copies of {trace.get('source', '?')}. The targets, judged on the bold row: "
        + "; ".join(f"{t['target']}: {t['value']:.3g}x, {'met' if t['met'] else 'MISSED'}" for t in record.get("targets", []))
        + ".",
    ]
    return "\n".join(lines)
