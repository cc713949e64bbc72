"""Time two versions of the package on the same benchmark runs, in paired rounds: is the new one slower?

Each version is a git revision checked out into its own worktree; every pair records the named configurations
once with each (``muon-repro bench CONFIG --trials 1``, the order alternating A B, B A, ... so that neither always
runs first), and reads the steps timed without the profiler from the runs' ``metrics.json``. Per pair and run, the
optimizer step time is the mean over ranks of each rank's median; the ratio new / old is the geometric mean over
pairs of their ratios, with a t interval on the log ratios (the pairs share the machine's state, so their ratio
cancels a slow minute that both saw).

    python -m tools.paired_versions --old 4bca457 --new HEAD --pairs 8 --out paired.json comparison

Writes ``--out`` (JSON: every pair's numbers and the summary) and prints the summary; the worktrees and runs go
to a temporary folder, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from scipy import stats

from muon_repro.tables.files import write_atomic

REPO = Path(__file__).resolve().parents[1]
COLUMNS = ("timed_optimizer_ms", "timed_step_ms")


def _worktree(rev: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(where), rev], check=True)
    return where


def _record(tree: Path, configs: list[str], out: Path) -> dict[str, dict[str, float]]:
    """Record ``configs`` once with the package of ``tree``; per run, each column's mean over ranks of medians."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "muon_repro", "bench", *configs, "--trials", "1", "--out", str(out), "--no-progress"]
    subprocess.run([*cmd, "--profile", "paired"], check=True, env=env, cwd=tree, stdout=subprocess.DEVNULL)
    found = {}
    for path in sorted(out.rglob("metrics.json")):
        ranks = json.loads(path.read_text())["ranks"]
        run = f"{path.parent.parent.parent.name}/{path.parent.parent.name}"
        found[run] = {c: statistics.fmean(statistics.median(r[c]) for r in ranks) for c in COLUMNS}
    return found


def summary(pairs: list[dict]) -> dict:
    """Per run and column: old and new medians over pairs, the geometric-mean ratio and its 95% t interval."""
    out: dict = {}
    for run in pairs[0]["old"]:
        for column in COLUMNS:
            logs = [math.log(p["new"][run][column] / p["old"][run][column]) for p in pairs]
            mean = statistics.fmean(logs)
            half = (
                stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan
            )
            out[f"{run} {column}"] = {
                "old_ms": statistics.median(p["old"][run][column] for p in pairs),
                "new_ms": statistics.median(p["new"][run][column] for p in pairs),
                "ratio": math.exp(mean),
                "low": math.exp(mean - half),
                "high": math.exp(mean + half),
                "pairs": len(logs),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.paired_versions", description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+", help="configurations or groups, as muon-repro bench takes them")
    parser.add_argument("--old", required=True, help="git revision of the version to compare against")
    parser.add_argument("--new", default="HEAD", help="git revision of the new version (default: HEAD)")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True, help="JSON file for every pair and the summary")
    args = parser.parse_args(argv)
    if args.pairs < 2:
        parser.error("--pairs must be at least 2 (an interval needs two)")
    with tempfile.TemporaryDirectory(prefix="paired-") as tmp:
        work = Path(tmp)
        trees = {"old": _worktree(args.old, work / "old"), "new": _worktree(args.new, work / "new")}
        try:
            pairs = []
            for i in range(args.pairs):
                pair = {}
                for version in ("old", "new") if i % 2 == 0 else ("new", "old"):
                    pair[version] = _record(trees[version], args.configs, work / "runs" / f"{i}-{version}")
                pairs.append(pair)
                print(f"pair {i + 1}/{args.pairs} done", flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    result = {"old": args.old, "new": args.new, "configs": args.configs, "pairs": pairs, "summary": summary(pairs)}
    write_atomic(args.out, json.dumps(result, indent=1))
    for key, s in result["summary"].items():
        print(
            f"{key}: old {s['old_ms']:.1f} ms, new {s['new_ms']:.1f} ms, new/old {s['ratio']:.3f} "
            f"[{s['low']:.3f}, {s['high']:.3f}] over {s['pairs']} pairs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
