"""``muon-repro bench``: record named configurations into ``traces/<profile>/<group>/<name>/``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from muon_repro.bench.configs import (
    CONFIGS,
    DEFAULT_TRACED_TRIALS,
    DEFAULT_TRIALS,
    MAX_TRIALS,
    SCALES,
    check_trials_limit,
    expand_config_names,
)
from muon_repro.bench.custom import CUSTOM_GROUP, add_run_shape_arguments, config_from_args, run_shape_flags_given
from muon_repro.hardware import add_profile_argument
from muon_repro.run_records import DEFAULT_SCALE
from muon_repro.terminal import after_a_bar


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="record profiler traces and metrics for named configurations",
        description=(
            "Record each CONFIG (a name from --list, a group such as 'comparison', 'study' for the experiments of the "
            "original study, Jen Wei's 'Reproducing and Validating Distributed Muon' ('seed' is an older alias), "
            "'reference' for those and the layout ablation, or 'all') into OUT/<profile>/<group>/<name>/ (the "
            "hardware profile: --profile, else derived from this machine); or 'custom' with "
            "the run-shape flags below (no registry edit needed). On one machine the dp*tp workers are started "
            "with torch's elastic launcher; under torchrun (any number of nodes) each process is one rank. "
            "Complete runs are skipped unless --force."
        ),
    )
    p.add_argument("configs", nargs="*", metavar="CONFIG")
    p.add_argument(
        "--protocol",
        choices=("benchmark", "study", "study-equal-work", "study-both"),
        default="benchmark",
        help="benchmark (default): the named CONFIGs, our like-for-like benchmark; study: the original study's "
        "experiment as its muon_vs_adam.py ran it (its 6 runs on 4 ranks, its record_function scopes); "
        "study-equal-work: the same with both optimizers reducing and sharding alike; study-both: both, interleaved "
        "(docs/recording.md#the-original-studys-protocol)",
    )
    p.add_argument(
        "--world-size",
        type=int,
        choices=(4, 1),
        default=4,
        help="with a study --protocol: its 4 ranks at DP2·TP2 (default), or 1 rank (DP1·TP1: no collective, so that on a "
        "GPU the optimizer scope can be set against its kernels alone; filed under study_protocol_1rank)",
    )
    p.add_argument("--list", action="store_true", help="list the named configurations and exit")
    p.add_argument("--scale", choices=SCALES, default=DEFAULT_SCALE, help=f"model and batch size (default: {DEFAULT_SCALE})")
    p.add_argument("--out", type=Path, default=Path("traces"), help="output folder (default: traces/)")
    p.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default=None,
        help="default: nccl on a machine with GPUs (configurations needing more GPUs than it has are refused by name), "
        "gloo on the CPU without; gloo asks for the CPU anyway",
    )
    p.add_argument(
        "--trials",
        type=int,
        default=DEFAULT_TRIALS,
        help="rounds: recordings of each configuration, interleaved across configurations (default: %(default)s; at most "
        f"{MAX_TRIALS:,}, docs/limits.md)",
    )
    p.add_argument(
        "--traced-trials",
        type=int,
        default=DEFAULT_TRACED_TRIALS,
        help="of those, the first rounds run the profiler and keep traces; later rounds record only the steps timed "
        "without it (default: %(default)s)",
    )
    p.add_argument("--force", action="store_true", help="re-record runs that are already complete")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_profile_argument(p)
    add_run_shape_arguments(p, scale=False)
    p.set_defaults(func=_run)


def _under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _run(args: argparse.Namespace) -> int:
    if args.list:
        print(f"{'config':<42} {'optimizer':<9} {'dp':>2} {'tp':>2} {'pp':>2}  layout")
        for key, c in CONFIGS.items():
            print(f"{key:<42} {c.optimizer:<9} {c.dp:>2} {c.tp:>2} {c.pp:>2}  {c.layout}")
        return 0
    check_trials_limit(args.trials, args.traced_trials)  # before any folder is made or any recording planned
    if args.protocol != "benchmark":
        return _record_protocol(args)
    if args.world_size != 4:
        raise ValueError("--world-size chooses the ranks of the study's protocol: give it with --protocol study")
    if not args.configs:
        raise ValueError("name at least one CONFIG (see --list), a group, 'study', 'reference' or 'all'")
    try:
        return _record(args)
    except KeyboardInterrupt:  # record_local reports an interrupted recording itself (BenchInterrupted)
        where = "" if _under_torchrun() else " while no trial was being recorded; complete trials are kept"
        print(f"muon-repro bench: interrupted{where}", file=sys.stderr)
        return 130


def _record_protocol(args: argparse.Namespace) -> int:
    """The study's protocol (muon_repro.bench.study_record): its own six runs, no CONFIG."""
    from muon_repro.bench.study_record import record_protocols
    from muon_repro.rundir import STUDY_PROTOCOLS as PROTOCOLS

    if args.configs:
        raise ValueError(f"--protocol {args.protocol} records the study's own six runs: name no CONFIG with it")
    ignored = [
        flag
        for flag, given in (
            ("--scale", args.scale != DEFAULT_SCALE),
            ("--traced-trials", args.traced_trials != DEFAULT_TRACED_TRIALS),
            ("--force", args.force),
        )
        if given
    ]
    if ignored := ignored + run_shape_flags_given(args):
        raise ValueError(
            f"--protocol {args.protocol} records the study's own six runs at their own sizes, every round traced, and "
            f"skips complete ones: {', '.join(ignored)} would be ignored; drop them (to record a run again, remove its "
            "folder)"
        )
    protocols = PROTOCOLS if args.protocol == "study-both" else (args.protocol,)
    command = getattr(args, "command_line", None) or ["muon-repro", "bench", "--protocol", args.protocol]
    written = record_protocols(
        args.out,
        protocols=protocols,
        trials=args.trials,
        world_size=args.world_size,
        backend=args.backend,
        profile_id=args.profile,
        command=command,
        progress=not args.no_progress,
    )
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"recorded {len(written)} runs of the study's protocol under {args.out} (complete ones skipped)")
    return 0


def _configs(args: argparse.Namespace) -> list:
    """The named configurations, or the one run the flags describe (CONFIG ``custom``)."""
    from muon_repro.bench.configs import resolve

    if CUSTOM_GROUP in args.configs:
        if args.configs != [CUSTOM_GROUP]:
            raise ValueError(f"'{CUSTOM_GROUP}' records the one run the flags describe: name no other CONFIG with it")
        return [config_from_args(args)]
    if given := run_shape_flags_given(args):  # a named configuration records its own shape: they would be ignored
        raise ValueError(
            f"{', '.join(given)}: the run-shape flags describe a custom run (CONFIG '{CUSTOM_GROUP}'); a named "
            "configuration records its own shape: drop them, or use CONFIG 'custom'"
        )
    return [resolve(key, args.scale) for key in expand_config_names(args.configs)]


def _record(args: argparse.Namespace) -> int:
    from muon_repro.bench.placement import place, torchrun_backend, visible_gpus
    from muon_repro.bench.sweep import (
        BenchError,
        BenchInterrupted,
        check_out_folder,
        format_results,
        record_local,
        record_under_torchrun,
    )

    cfgs = _configs(args)
    check_out_folder(args.out)  # before torch elastic starts anything
    command = getattr(args, "command_line", None) or ["muon-repro", "bench", *args.configs]
    # What both launchers record: the same rounds, into the same folders, with the same command.
    sweep = dict(trials=args.trials, traced_trials=args.traced_trials, force=args.force, command=command, profile=args.profile)
    try:
        if _under_torchrun():
            local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            backend = torchrun_backend(cfgs, visible_gpus(), local_ranks, args.backend)  # never the CPU unasked
            results = record_under_torchrun(cfgs, args.out, backend, **sweep)
            if int(os.environ["RANK"]) != 0:
                return 0
        else:
            placement = place(cfgs, visible_gpus(), args.backend)  # never the CPU unasked on a GPU machine
            if placement.refused:
                print(f"muon-repro bench: not recorded here:\n{placement.refusals()}", file=sys.stderr)
            results = record_local(placement.runnable, args.out, placement.backend, progress=not args.no_progress, **sweep)
    except BenchInterrupted as exc:
        print(after_a_bar(f"muon-repro bench: {exc}"), file=sys.stderr)
        return exc.exit_code
    except BenchError as exc:
        print(f"muon-repro bench: error: {exc}", file=sys.stderr)
        return 1
    print(format_results(results))
    if not _under_torchrun() and placement.refused:
        print(f"muon-repro bench: {len(placement.refused)} configuration(s) not recorded (above)", file=sys.stderr)
        return 1
    return 0
