"""Record the original study's experiments (Jen Wei's "Reproducing and Validating Distributed Muon").

    python analysis_scripts/muon_vs_adam.py --protocol study --out DIR             # its protocol: CPU, gloo, seconds
    python analysis_scripts/muon_vs_adam.py --protocol study-equal-work --out DIR  # the same, equal work
    torchrun --standalone --nproc-per-node 4 analysis_scripts/muon_vs_adam.py --protocol study --backend nccl --out DIR
                                                                                   # on 4 GPUs, the study's sizes
    python analysis_scripts/muon_vs_adam.py --scale cpu      # our benchmark of its comparison and DP/TP grid (gloo)
    python analysis_scripts/muon_vs_adam.py --scale gpu      # the same on 4 GPUs (NCCL)

--protocol study replays the study's own muon_vs_adam.py (its five parameter shapes, random gradients, warm-up, 5
profiled steps, its record_function scopes; optimizer-only, full-step and async runs); its traces are read by the
same path as the study's published ones (`muon-repro analyze`). Without --protocol, the study's configurations of
our benchmark are recorded. Extra arguments go to `muon-repro bench` (--out, --trials, --force, --backend...).
"""

import sys

from muon_repro.bench.configs import STUDY_CONFIGS
from muon_repro.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if any(a == "--protocol" or a.startswith("--protocol=") for a in args) or any(a in ("-h", "--help") for a in args):
        print(__doc__) if any(a in ("-h", "--help") for a in args) else None
        raise SystemExit(main(["bench", *args]))
    raise SystemExit(main(["bench", *STUDY_CONFIGS, *args]))
