"""Record the original study's experiments (Jen Wei's "Reproducing and Validating Distributed Muon").

    python analysis_scripts/muon_vs_adam.py --protocol study --out DIR             # its protocol: CPU, gloo, seconds
    python analysis_scripts/muon_vs_adam.py --protocol study-equal-work --out DIR  # the same, equal work
    torchrun --standalone --nproc-per-node 4 analysis_scripts/muon_vs_adam.py --protocol study --backend nccl --out DIR
                                                                                   # on 4 GPUs, the study's sizes
    python analysis_scripts/muon_vs_adam.py --scale cpu      # our benchmark of its comparison and DP/TP grid (gloo)
    python analysis_scripts/muon_vs_adam.py --scale gpu      # the same on 4 GPUs (NCCL)

--protocol study replays the study's own muon_vs_adam.py (its five parameter shapes, random gradients, warm-up, 5
profiled steps, its record_function scopes; optimizer-only, full-step and async runs); its traces are read by the
same path as the study's published ones (`muon-repro analyze`). Without --protocol (or with --protocol benchmark,
bench's default), the study's configurations of our benchmark are recorded. Extra arguments go to `muon-repro bench`
(--out, --trials, --force, --backend...).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys

from muon_repro.bench.configs import STUDY_CONFIGS

HELP = ("-h", "--help")


def bench_parser() -> argparse.ArgumentParser:
    """``muon-repro bench``'s own parser."""
    from muon_repro.cli import build_parser

    commands = next(a for a in build_parser("bench")._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["bench"]


def chosen_protocol(args: list[str]) -> tuple[str | None, str]:
    """(the protocol ``args`` choose, as bench reads them, or None when bench would refuse them; the protocol that
    records CONFIGs: bench's default, the only one of its --protocol choices that takes any)."""
    parser = bench_parser()
    (action,) = [a for a in parser._actions if "--protocol" in a.option_strings]
    with contextlib.redirect_stderr(io.StringIO()):  # bench itself says what is wrong with them
        try:
            known, _ = parser.parse_known_args(args)
        except SystemExit:
            return None, action.default
    return getattr(known, action.dest), action.default


def bench_command(args: list[str]) -> list[str]:
    """The ``muon-repro bench`` command line for ``args``: the study's CONFIGs first, unless a protocol that records
    none of them is chosen (or the arguments ask for help, or are refused by bench as they stand)."""
    if any(a in HELP for a in args):
        return ["bench", *args]
    protocol, with_configs = chosen_protocol(args)
    return ["bench", *STUDY_CONFIGS, *args] if protocol == with_configs else ["bench", *args]


if __name__ == "__main__":
    from muon_repro.cli import main

    if any(a in HELP for a in sys.argv[1:]):
        print(__doc__)
    raise SystemExit(main(bench_command(sys.argv[1:])))
