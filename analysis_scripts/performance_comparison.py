"""Analyze the recorded traces: per-rank, per-step breakdown and the metrics tables.

    python analysis_scripts/performance_comparison.py            # traces/ -> metrics/
    python analysis_scripts/performance_comparison.py --json     # one JSON object per trace

Runs ``muon-repro analyze traces/ --out metrics/`` from the repository root (so the tables
record paths like ``traces/<profile>/<group>/<name>``); extra arguments go to ``muon-repro analyze``
(other paths, ``--out``, ``--json``, ``--no-write``...).
"""

import os
import sys
from pathlib import Path

from muon_repro.cli import main

ROOT = Path(__file__).resolve().parents[1]
VALUE_OPTIONS = ("--out", "--rank", "--workers")

if __name__ == "__main__":
    args = sys.argv[1:]
    paths = [a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] not in VALUE_OPTIONS)]
    # paths given on the command line are relative to where it was typed
    args = [str(Path(a).absolute()) if a in paths or (i and args[i - 1] == "--out") else a for i, a in enumerate(args)]
    os.chdir(ROOT)
    defaults = []
    if not paths:
        if not Path("traces").is_dir():
            sys.exit(f"{ROOT / 'traces'} does not exist: record traces first (python analysis_scripts/muon_vs_adam.py)")
        defaults.append("traces")
    if "--out" not in args:
        defaults += ["--out", "metrics"]
    raise SystemExit(main(["analyze", *defaults, *args]))
