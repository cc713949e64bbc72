"""``muon-repro calibrate`` and ``muon-repro predict``: measure this machine, price a run on any machine.

Heavy imports (torch, pandas) stay inside the command functions, so ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from muon_repro.bench.custom import add_run_shape_arguments, run_shape_flags_given
from muon_repro.claims import LEVELS
from muon_repro.hardware import PROFILE_FIELD, add_profile_argument, validate_profile_id

INTERRUPTED_EXIT = 130  # what a shell reports for a process stopped by Ctrl-C (128 + SIGINT)


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_calibrate(subparsers)
    _register_predict(subparsers)
    _register_regimes(subparsers)


def _register_calibrate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="measure this machine's compute and collective rates into a machine profile (JSON)",
        description=(
            "Microbenchmark this machine (matmuls, Newton-Schulz, attention, cross-entropy, GELU, element-wise kernels "
            "at the model presets' shapes; operator overhead; the compute share of ranks on shared cores; an "
            "alpha-beta fit per collective and group size in gloo or NCCL worlds of --ranks workers) and write the "
            "profile muon-repro predict --machine reads, plus a calibration table beside it. About a minute on 2 cores."
        ),
    )
    p.add_argument("--out", type=Path, required=True, help="the profile to write, e.g. machine.json (written atomically)")
    p.add_argument("--name", help="profile name (default: --out's file name without .json)")
    p.add_argument(
        "--backend", choices=("gloo", "nccl"), default="gloo", help="collectives' backend (nccl: GPUs) (default: %(default)s)"
    )
    p.add_argument(
        "--ranks",
        type=_int_list,
        default=(2, 4),
        help="world sizes to measure, comma-separated (default: 2,4); 1 alone: one device, kernels only, no collectives "
        "(one GPU: NCCL runs no two ranks on it)",
    )
    p.add_argument("--threads", type=int, help="torch threads per rank (default: the bench's, cpu_count // ranks, at least 1)")
    p.add_argument("--quick", action="store_true", help="fewer shapes, sizes and repetitions: seconds instead of a minute")
    p.add_argument(
        "--tables",
        type=Path,
        help="folder for calibration.parquet and .csv (default: beside --out, as <--out's stem>.calibration.*)",
    )
    add_profile_argument(p, "hardware profile the calibration table's rows name (its profile column)")
    p.set_defaults(func=_calibrate)


def _register_predict(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "predict",
        help="predict a run's per-rank step time and its parts on a machine profile",
        description=(
            "Price one run shape (the flags below) on --machine: a profile file from muon-repro calibrate, or a shipped "
            "profile's name. Prints the step time of the slowest rank, forward, backward, the optimizer and its phases, "
            "communication transfer and wait, per rank. --validate TRACES predicts every recorded run under TRACES "
            "instead and compares with its measured times (the predictions table): each run priced by its own "
            "calibration (the profile scaled by the day's speed its speed probe measured) unless --as-calibrated."
        ),
    )
    p.add_argument(
        "--machine",
        help="machine profile: a JSON file, or a shipped name (see --list-machines); needed, but with --list-machines and "
        "--pipeline-scale-out (which has its own default)",
    )
    p.add_argument("--list-machines", action="store_true", help="list the shipped profiles and exit")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.add_argument("--unprofiled", action="store_true", help="price the step without the bench's profiler's per-operator cost")
    p.add_argument(
        "--validate",
        type=Path,
        metavar="TRACES",
        help="predict every recorded run under TRACES and compare with its measurements",
    )
    p.add_argument("--out", type=Path, help="with --validate: folder for predictions.parquet and predictions.csv")
    p.add_argument(
        "--as-calibrated",
        action="store_true",
        help="with --validate: price every run with the profile as calibrated, not as fast as the machine ran that day",
    )
    p.add_argument(
        "--model-dtype",
        choices=("fp32", "bf16"),
        help="price the training in this precision (bf16: mixed precision as Megatron-Core runs it, activations "
        "between pipeline stages included) whatever the run's own --precision (default: the run's)",
    )
    p.add_argument(
        "--pipeline-scale-out",
        action="store_true",
        help="instead of one run: the 7B model as TP8 x PP4 x DP on 32-1024 GPUs, Muon and AdamW, 4M tokens per step "
        "in micro-batches of one sequence (--machine default: h100-multinode-ib400); --out DIR writes "
        "DIR/pipeline_scale_out.csv",
    )
    add_run_shape_arguments(p)
    p.set_defaults(func=_predict)


def _register_regimes(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "regimes",
        help="the regime sweep: time Muon and AdamW over tokens per step, widths, DP x TP shapes and layouts; predict them",
        description=(
            "Record the regime sweep (muon_repro.bench.regimes: 48 points timed without the profiler and 28 held out "
            "for the cost model's test, ~6 minutes a trial on 2 cores) into OUT/<profile>/regimes/ (the hardware "
            "profile: --profile, else derived from this machine), calibrate this machine into "
            "OUT/<profile>/costmodel/machine.json if it has no profile there, and write the cost model's records into "
            "OUT/<profile>/costmodel/: every recorded run of the profile under OUT "
            "predicted, the model lines over tokens per step (this machine, the shipped profiles at the gpu scale's "
            "model and at 7B, the scale-out to 32-1024 GPUs) and the tokens per step at which Muon's overhead falls "
            f"to {' and '.join(lv.percent for lv in LEVELS)}. Then muon-repro analyze OUT makes the regimes, predictions, "
            "calibration, "
            "regime_model and regime_thresholds tables. Complete trials are skipped (--force redoes them)."
        ),
    )
    p.add_argument(
        "--out", type=Path, default=Path("traces"), help="the traces folder to add the sweep to (default: %(default)s)"
    )
    p.add_argument("--trials", type=int, default=2, help="trials per point, interleaved (default: %(default)s)")
    p.add_argument(
        "--machine", help="price with this profile instead of OUT/<profile>/costmodel/machine.json (a file or a shipped name)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="4 small points and a quick calibration (about a minute): a smoke run of the machinery; its records price "
        "this machine's lines only",
    )
    p.add_argument(
        "--records-only",
        action="store_true",
        help="record nothing: predict the runs already under OUT/<profile> and write the records (refused when it holds no run)",
    )
    p.add_argument("--force", action="store_true", help="record complete trials again")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_profile_argument(p)
    p.set_defaults(func=_regimes)


def _regimes(args: argparse.Namespace) -> int:
    from muon_repro.bench.configs import check_trials_limit
    from muon_repro.bench.environment import recording_profile
    from muon_repro.bench.regimes import regime_points
    from muon_repro.bench.sweep import BenchError, BenchInterrupted, check_out_folder, record_local
    from muon_repro.costmodel.machine import resolve_profile
    from muon_repro.costmodel.records import write_records
    from muon_repro.rundir import COSTMODEL_DIR, MACHINE_FILE

    if args.trials < 1:
        raise ValueError(f"--trials must be a positive integer, got {args.trials}")
    check_trials_limit(args.trials)  # before a minute of calibration, not after
    check_out_folder(args.out)
    hardware = recording_profile("gloo", args.profile)  # the sweep runs on gloo, on this machine's cores
    folder = args.out / hardware  # this profile's runs and records: OUT/<profile>/{regimes,costmodel}/
    if args.records_only and args.force:  # said before calibrating (a minute or more)
        raise ValueError("--records-only records nothing, so --force has nothing to redo; give one of them")
    # the records price every run of the profile (the regime sweep's, and others': predictions): with none, say so
    if args.records_only and not (folder.is_dir() and any(p.is_dir() and p.name != COSTMODEL_DIR for p in folder.iterdir())):
        raise ValueError(
            f"--records-only prices the runs recorded under {folder}, and there are none: record them first "
            f"(muon-repro regimes --out {args.out}), or give the --out and --profile that hold them"
        )
    profile = args.machine or folder / COSTMODEL_DIR / MACHINE_FILE
    if args.machine is None and not Path(profile).is_file():
        print(f"muon-repro regimes: no profile of this machine at {profile}: calibrating it first", flush=True)
        name = f"cpu-{os.cpu_count()}c-gloo"
        calibrate_args = [
            "calibrate",
            "--out",
            str(profile),
            "--name",
            name,
            "--profile",
            hardware,
            *(["--quick"] if args.quick else []),
        ]
        calibrated = _calibrate(build_calibrate_namespace(calibrate_args))
        if calibrated:  # interrupted: it said so; nothing to price with
            return calibrated
    machine = resolve_profile(str(profile))
    if not args.records_only:
        command = getattr(args, "command_line", None) or ["muon-repro", "regimes"]
        try:
            results = record_local(
                regime_points(args.quick),
                args.out,
                "gloo",
                trials=args.trials,
                force=args.force,
                command=command,
                progress=not args.no_progress,
                profile=hardware,
            )
        except BenchInterrupted as exc:
            print(f"muon-repro regimes: {exc}", file=sys.stderr)
            return exc.exit_code
        except BenchError as exc:
            print(f"muon-repro regimes: error: {exc}", file=sys.stderr)
            return 1
        print(
            f"muon-repro regimes: {sum(r.status == 'recorded' for r in results)} trial(s) recorded, "
            f"{sum(r.status != 'recorded' for r in results)} already complete"
        )
    written = write_records(args.out, machine, profile=hardware, quick=args.quick, log=lambda line: print(line, flush=True))
    print(f"wrote {', '.join(str(w) for w in written)}")
    print(f"next: muon-repro analyze {args.out} --out metrics   (the regimes, predictions and regime_* tables)")
    return 0


def build_calibrate_namespace(argv: list[str]) -> argparse.Namespace:
    """``muon-repro calibrate`` arguments parsed as the command line would parse them."""
    parser = argparse.ArgumentParser(prog="muon-repro")
    _register_calibrate(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def _int_list(text: str) -> tuple[int, ...]:
    """World sizes, each at least 1, refused as the arguments are read (not after a machine-load probe)."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 2,4, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected world sizes of at least 1, such as 2,4, got {text!r}")
    return sizes


def _calibrate(args: argparse.Namespace) -> int:
    from muon_repro.bench.environment import recording_profile
    from muon_repro.costmodel.calibrate import MAX_THREADS, calibrate, format_summary
    from muon_repro.rundir import json_text
    from muon_repro.tables.files import check_out_file, check_out_folder, write_atomic_all
    from muon_repro.tables.io import table_files
    from muon_repro.tables.schemas import CALIBRATION

    if args.out.is_dir():
        raise ValueError(f"--out {args.out} is a folder; give the profile's file name, such as {args.out / 'machine.json'}")
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise ValueError(f"--threads must be an integer from 1 to {MAX_THREADS} (torch threads per rank), got {args.threads}")
    # what ``predict --machine`` and the records find the profile by: a profile id, never a path
    name = args.name if args.name is not None else args.out.stem
    validate_profile_id(
        name, source="--name" if args.name is not None else f"--out {args.out}: its file name (the default --name)"
    )
    # every place this writes, before minutes of measuring: the profile's folder, the calibration table's
    check_out_file(args.out, f"--out {args.out}")
    if args.tables is not None:
        check_out_folder(args.tables, f"--tables {args.tables}")
    print(f"muon-repro calibrate: measuring this machine ({os.cpu_count()} cores, backend {args.backend}) ...", flush=True)
    _warn_if_busy(args.out)
    existed = args.out.is_file()
    try:
        profile, rows = calibrate(
            name,
            backend=args.backend,
            ranks=args.ranks,
            threads=args.threads,
            quick=args.quick,
            log=lambda line: print(line, flush=True),
        )
        hardware = recording_profile(args.backend, args.profile)  # whose measurements these are: each row says so
        rows = [{PROFILE_FIELD: hardware, **row} for row in rows]
        stem = None if args.tables else f"{args.out.stem}.calibration"
        table = table_files(rows, CALIBRATION, args.tables or args.out.parent, stem)
        # the profile and its calibration table as one set: an interruption leaves both as they were
        tables = write_atomic_all({args.out: json_text(profile.to_dict()), **table})[1:]
    except KeyboardInterrupt as exc:  # Ctrl-C in this process, or the launcher's LaunchInterrupted (its workers gone)
        kept = f"{args.out} is left as it was" if existed else f"nothing was written to {args.out}"
        print(
            f"muon-repro calibrate: interrupted; {kept} (a profile is written whole, once every measurement is done): "
            "run the same command again",
            file=sys.stderr,
        )
        return int(getattr(exc, "exit_code", INTERRUPTED_EXIT))
    print(format_summary(profile))
    print(f"wrote {args.out} and {', '.join(str(t) for t in tables)}")
    return 0


def _warn_if_busy(out: Path) -> None:
    """Other processes on the machine slow every figure down, the compute share and the jitter most."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return
    cores = os.cpu_count() or 1
    if load > 0.5 * cores:
        print(
            f"muon-repro calibrate: warning: calibrating {out} while the machine is busy (load average {load:.1f} on {cores} "
            "cores): "
            "the profile will price runs as if that load stayed; calibrate on a quiet machine for runs recorded on one",
            file=sys.stderr,
            flush=True,
        )


def _predict(args: argparse.Namespace) -> int:
    from muon_repro.costmodel.machine import named_profiles, resolve_profile

    if args.list_machines:
        described = {name: resolve_profile(path).description for name, path in named_profiles().items()}
        print(json.dumps(described, indent=1) if args.json else "\n".join(f"{n:<28} {d}" for n, d in described.items()))
        return 0
    if args.pipeline_scale_out:
        return _pipeline_scale_out(args)
    if args.machine is None:
        raise ValueError(f"--machine is required: a profile from muon-repro calibrate, or one of {', '.join(named_profiles())}")
    machine = resolve_profile(args.machine)
    if args.validate is not None:
        if given := [*run_shape_flags_given(args), *(["--model-dtype"] if args.model_dtype is not None else [])]:
            raise ValueError(f"--validate predicts the recorded runs' own shapes; drop {', '.join(given)}")
        return _validate(args, machine)
    if args.out is not None or args.as_calibrated:
        raise ValueError(
            "--out goes with --validate (the predictions table) or --pipeline-scale-out, --as-calibrated with --validate; "
            "a single prediction prints (use --json)"
        )
    from muon_repro.bench.custom import config_from_args
    from muon_repro.costmodel.pipeline import PipelinePrediction, format_pipeline
    from muon_repro.costmodel.predict import format_prediction, predict

    cfg = config_from_args(args)
    prediction = predict(cfg, machine, profiled=not args.unprofiled, model_dtype=args.model_dtype)
    text = format_pipeline(prediction) if isinstance(prediction, PipelinePrediction) else format_prediction(prediction)
    print(json.dumps(prediction.to_dict(), indent=1) if args.json else text)
    return 0


def _pipeline_scale_out(args: argparse.Namespace) -> int:
    from muon_repro.costmodel.machine import resolve_profile
    from muon_repro.costmodel.pipeline_scale_out import PIPELINE_MACHINE, format_scale_out, pipeline_scale_out_rows
    from muon_repro.costmodel.records import write_csv
    from muon_repro.tables.files import check_out_folder

    own = (
        ("--unprofiled", args.unprofiled),
        ("--model-dtype", args.model_dtype is not None),
        ("--validate", args.validate is not None),
        ("--as-calibrated", args.as_calibrated),
    )
    if given := [*run_shape_flags_given(args), *(flag for flag, on in own if on)]:
        raise ValueError(f"--pipeline-scale-out prices its own 7B runs; drop {', '.join(given)}")
    if args.out is not None:
        check_out_folder(args.out, f"--out {args.out}")
    rows = pipeline_scale_out_rows(machine=resolve_profile(args.machine or PIPELINE_MACHINE))
    print(json.dumps(rows, indent=1) if args.json else format_scale_out(rows))
    if args.out is not None:
        path = args.out / "pipeline_scale_out.csv"
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(path, rows)
        print(f"wrote {path}")
    return 0


def _validate(args: argparse.Namespace, machine) -> int:
    from muon_repro.costmodel.validate import format_validation, validate
    from muon_repro.tables.files import check_out_folder
    from muon_repro.tables.io import write_table
    from muon_repro.tables.schemas import PREDICTIONS

    if args.out is not None:
        check_out_folder(args.out, f"--out {args.out}")
    rows = validate(
        args.validate,
        machine,
        profiled=False if args.unprofiled else None,
        own_calibration=not args.as_calibrated,
        warn=lambda line: print(f"muon-repro predict: warning: {line}", file=sys.stderr),
    )
    for note in machine.unused_figures():
        print(f"muon-repro predict: note: {note}", file=sys.stderr)
    if not rows:
        raise ValueError(f"--validate {args.validate}: no run with measured steps")
    print(json.dumps(rows, indent=1) if args.json else format_validation(rows))
    if args.out is not None:
        written = write_table(rows, PREDICTIONS, args.out)
        print(f"wrote {', '.join(str(w) for w in written)}")
    return 0
