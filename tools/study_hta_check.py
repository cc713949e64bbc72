"""Cross-check: the per-step NCCL time of the original study's traces, ours against HolisticTraceAnalysis.

    python -m tools.study_hta_check                                   # HTA installed here (the dev extra)
    python -m tools.study_hta_check --hta-python /tmp/hta-venv/bin/python

For each of the study's traces (``traces/<study profile>/comparison/trace_*_rank*.json.gz``), two readings
of the same file:

* **ours**: :func:`muon_repro.study.scopes.read_study_trace`, its ``scopes`` rows with ``scope == "step"``,
  column ``comm_ms``;
* **HTA**: HolisticTraceAnalysis's own parser (``hta.common.trace.parse_trace_file``, default configuration)
  in a child process of ``--hta-python``. From its DataFrame: the NCCL kernels (GPU rows, ``stream >= 0``,
  named ``ncclKernel*``/``ncclDevKernel*``) and, through HTA's ``index_correlation``, the CPU runtime call
  that launched each. HTA's times are its own: it rounds nanosecond traces to whole microseconds (start up,
  end down).

The study has no ``ProfilerStep``, so HTA has no steps of its own here. The step windows are taken from the
raw JSON (plain ``json``/``gzip``, not our reader): the outer ``*_Battle``/``*_Full_Training_Step``
``user_annotation``; inside it, the iteration's scopes; step k's window is ``[start_k, start_{k+1})``,
``start_k`` being the ts of the k-th repeat of the scope that comes first, the last window closing at the end
of the outer scope. A kernel counts in the step whose window holds the ts of its launching runtime call
(HTA's attribution convention) and the step's NCCL time is the union of those kernels' intervals.

The table shows, per file and step, both values and their relative difference ``|ours - HTA| / HTA``; the
last line the largest difference and PASS or FAIL against :data:`TOLERANCE` (exit status 0 or 1; 2 when
HTA cannot be imported or no trace is found). What differences remain come from HTA's rounding to whole
microseconds (up to 2 us per kernel): with ``HTA_DISABLE_NS_ROUNDING=1`` in the environment they vanish.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from muon_repro.study.scopes import NCCL_KERNEL_PREFIXES, OUTER_SUFFIXES, PHASE_SCOPES, STEP, read_study_trace
from muon_repro.study.sources import study_folder

REPO = Path(__file__).resolve().parents[1]
TRACES = study_folder(REPO / "traces")
PATTERN = "trace_*_rank*.json.gz"
TOLERANCE = 0.02
"""Largest relative difference allowed between our per-step NCCL time and HTA's."""
HTA_INSTALL = "python -m pip install -c constraints.txt -e '.[dev]'  (or: pip install HolisticTraceAnalysis==0.5.0 psutil)"

# The HTA half, run by --hta-python: argv = output JSON path, NCCL name prefixes (JSON), trace paths.
HTA = textwrap.dedent(
    """
    import json, logging, sys
    logging.disable(logging.CRITICAL)
    from importlib.metadata import version
    import numpy as np
    from hta.common.trace import parse_trace_file
    from hta.configs.parser_config import ParserConfig

    def nccl_kernels(path, prefixes):
        meta, df, symbols = parse_trace_file(path, ParserConfig.get_default_cfg())
        names = symbols.sym_table
        name = df["name"].map(lambda i: names[i])
        gpu = df[(df["stream"] >= 0) & name.str.startswith(prefixes)]
        linked = gpu[gpu["index_correlation"] > 0]
        launch = df.set_index("index", drop=False).loc[linked["index_correlation"].to_numpy()]
        return {
            "kernels": np.column_stack(
                [linked["ts"].to_numpy(np.float64), linked["end"].to_numpy(np.float64), launch["ts"].to_numpy(np.float64)]
            ).tolist(),
            "launch_cats": sorted({names[c] for c in launch["cat"]}),
            "unlinked": int(len(gpu) - len(linked)),
        }

    if __name__ == "__main__":
        out, prefixes, paths = sys.argv[1], tuple(json.loads(sys.argv[2])), sys.argv[3:]
        result = {"version": version("HolisticTraceAnalysis"), "traces": {p: nccl_kernels(p, prefixes) for p in paths}}
        with open(out, "w") as fh:
            json.dump(result, fh)
    """
)


def hta_problem(python: str) -> str | None:
    """Why ``python`` cannot run HTA's parser (the import error's last line), or None when it can."""
    try:
        done = subprocess.run(
            [python, "-c", "import hta.common.trace, hta.configs.parser_config"], capture_output=True, text=True, timeout=300
        )
    except OSError as e:
        return f"{python}: {e}"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return f"{python}: {lines[-1] if lines else f'exit status {done.returncode}'}"


def hta_kernels(paths: list[Path], python: str = sys.executable, timeout: float = 1800.0) -> dict:
    """HTA's reading of each trace, in one child process of ``python``: ``{"version": ..., "traces": {path:
    {"kernels": [[ts, end, launch_ts], ...] (us, HTA's), "launch_cats": [...], "unlinked": n}}}``."""
    with tempfile.TemporaryDirectory(prefix="study-hta-") as tmp:
        out = Path(tmp) / "hta.json"
        cmd = [python, "-c", HTA, str(out), json.dumps(NCCL_KERNEL_PREFIXES), *map(str, paths)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"HTA's half failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


# ---------------------------------------------------------------- the steps, from the raw JSON


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


def study_windows(path: Path) -> tuple[np.ndarray, float]:
    """(start of each step, end of the outer scope), in the trace's microseconds, from the raw JSON."""
    notes = [e for e in _events(path) if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    outer = [e for e in notes if str(e.get("name", "")).endswith(tuple(OUTER_SUFFIXES))]
    if len(outer) != 1:
        raise ValueError(f"{path}: expected one *_Battle or *_Full_Training_Step annotation, found {len(outer)}")
    lo, hi = float(outer[0]["ts"]), float(outer[0]["ts"]) + float(outer[0]["dur"])
    inner = sorted(
        (e for e in notes if e.get("name") in PHASE_SCOPES and lo <= e["ts"] and e["ts"] + e["dur"] <= hi),
        key=lambda e: e["ts"],
    )
    if not inner:
        raise ValueError(f"{path}: no scope of the study's loop inside {outer[0]['name']}")
    lead = inner[0]["name"]
    return np.array([float(e["ts"]) for e in inner if e["name"] == lead]), hi


def step_of(launch_ts: np.ndarray, starts: np.ndarray, outer_end: float) -> np.ndarray:
    """The step whose window holds each launch time; -1 outside every window."""
    step = np.searchsorted(starts, launch_ts, side="right") - 1
    return np.where((step >= 0) & (launch_ts <= outer_end), step, -1)


def union_us(ts: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of the intervals ``[ts, end]`` (an interval rounded to less than nothing counts 0)."""
    if len(ts) == 0:
        return 0.0
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order], np.maximum(end[order], ts[order])
    reach = np.maximum.accumulate(end)
    first = np.flatnonzero(np.r_[True, ts[1:] > reach[:-1]])  # where a new run of overlapping intervals begins
    return float((np.maximum.reduceat(end, first) - ts[first]).sum())


def per_step_ms(kernels: np.ndarray, starts: np.ndarray, outer_end: float) -> list[float]:
    """Per step, the union (ms) of the kernels ``[[ts, end, launch_ts], ...]`` launched in its window."""
    kernels = np.asarray(kernels, dtype=np.float64).reshape(-1, 3)
    step = step_of(kernels[:, 2], starts, outer_end)
    return [union_us(kernels[step == k, 0], kernels[step == k, 1]) / 1000.0 for k in range(len(starts))]


# ---------------------------------------------------------------- the comparison


@dataclass(frozen=True)
class Row:
    file: str
    step: int
    ours_ms: float
    hta_ms: float
    kernels: int  # HTA's NCCL kernels attributed to the step

    @property
    def rel(self) -> float:
        if self.hta_ms == 0:
            return 0.0 if self.ours_ms == 0 else float("inf")
        return abs(self.ours_ms - self.hta_ms) / self.hta_ms


@dataclass
class Comparison:
    rows: list[Row]
    hta_version: str
    problems: list[str]  # a step count that differs, kernels HTA could not link to a launch, ...
    notes: list[str]  # NCCL kernels launched outside every step (before or after the study's loop)

    @property
    def max_rel(self) -> float:
        return max((r.rel for r in self.rows), default=float("inf"))

    def passed(self, tolerance: float = TOLERANCE) -> bool:
        return bool(self.rows) and not self.problems and self.max_rel <= tolerance


def study_traces(folder: Path = TRACES) -> list[Path]:
    return sorted(folder.glob(PATTERN))


def compare(paths: list[Path], hta_python: str = sys.executable) -> Comparison:
    hta = hta_kernels(paths, hta_python)
    rows: list[Row] = []
    problems: list[str] = []
    notes: list[str] = []
    for path in paths:
        starts, outer_end = study_windows(path)
        theirs = hta["traces"][str(path)]
        kernels = np.asarray(theirs["kernels"], dtype=np.float64).reshape(-1, 3)
        hta_ms = per_step_ms(kernels, starts, outer_end)
        counts = np.bincount(step_of(kernels[:, 2], starts, outer_end) + 1, minlength=len(starts) + 1)
        if counts[0]:
            notes.append(f"{path.name}: {counts[0]} NCCL kernel(s) launched outside every step, not counted")
        steps = read_study_trace(path).scopes
        ours = steps.loc[steps["scope"] == STEP].sort_values("step")["comm_ms"].to_list()
        if len(ours) != len(starts):
            problems.append(f"{path.name}: ours has {len(ours)} steps, the raw JSON {len(starts)}")
        if theirs["unlinked"]:
            problems.append(f"{path.name}: {theirs['unlinked']} NCCL kernel(s) HTA links to no launch")
        if set(theirs["launch_cats"]) - {"cuda_runtime", "cuda_driver"}:
            problems.append(f"{path.name}: HTA links NCCL kernels to {theirs['launch_cats']}")
        rows += [Row(path.name, k, o, h, int(n)) for k, (o, h, n) in enumerate(zip(ours, hta_ms, counts[1:]))]
    return Comparison(rows, hta["version"], problems, notes)


def format_report(result: Comparison, tolerance: float = TOLERANCE) -> str:
    table = [("file", "step", "kernels", "ours ms", "HTA ms", "rel diff")]
    table += [(r.file, str(r.step), str(r.kernels), f"{r.ours_ms:.4f}", f"{r.hta_ms:.4f}", f"{r.rel:.4%}") for r in result.rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    lines = [
        f"per-step NCCL time (union of NCCL kernels launched in the step's window): muon_repro.study.scopes against "
        f"HolisticTraceAnalysis {result.hta_version} (parse_trace_file), {len({r.file for r in result.rows})} traces",
        "",
    ]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(t, widths))) for t in table]
    lines += ["", *(f"note: {n}" for n in result.notes), *(f"problem: {p}" for p in result.problems)]
    worst = max(result.rows, key=lambda r: r.rel, default=None)
    where = f" ({worst.file}, step {worst.step})" if worst else ""
    verdict = "PASS" if result.passed(tolerance) else "FAIL"
    shown = f"{tolerance * 100:.6g}%"  # every digit it was given: 2%, 0.05%
    lines.append(f"max relative difference: {result.max_rel:.4%}{where}; tolerance {shown}: {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.study_hta_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--hta-python", default=sys.executable, help="interpreter with HolisticTraceAnalysis installed (default: this one)"
    )
    parser.add_argument("--traces", type=Path, default=TRACES, help=f"folder of the study's {PATTERN} (default: %(default)s)")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE, help="largest relative difference (default: %(default)s)")
    args = parser.parse_args(argv)
    paths = study_traces(args.traces)
    if not paths:
        print(f"no {PATTERN} in {args.traces}", file=sys.stderr)
        return 2
    problem = hta_problem(args.hta_python)
    if problem:
        print(f"HolisticTraceAnalysis cannot be imported by {problem}\ninstall it: {HTA_INSTALL}", file=sys.stderr)
        return 2
    result = compare(paths, args.hta_python)
    print(format_report(result, args.tolerance))
    return 0 if result.passed(args.tolerance) else 1


if __name__ == "__main__":
    raise SystemExit(main())
