"""Re-record the original study's experiments (Jen Wei's): Muon vs AdamW at DP2/TP2, and Muon at DP4, TP4, DP2/TP2.

    python analysis_scripts/muon_vs_adam.py --scale cpu      # 2-core laptop, gloo
    python analysis_scripts/muon_vs_adam.py --scale gpu      # 4 GPUs, NCCL

Extra arguments go to ``muon-repro bench`` (``--out``, ``--force``, ``--backend``...).
"""

import sys

from muon_repro.bench.configs import STUDY_CONFIGS
from muon_repro.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["bench", *STUDY_CONFIGS, *sys.argv[1:]]))
