"""``muon-repro run``: record, analyze, draw, report, bundle and verify in one command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from muon_repro.bench.configs import DEFAULT_TRACED_TRIALS, DEFAULT_TRIALS, SCALES
from muon_repro.hardware import add_profile_argument

if TYPE_CHECKING:
    from muon_repro.job import RunPlan


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="the whole job: record every configuration, analyze, figures, report, bundle, verify",
        description=(
            "Record the reference configurations (the original study's runs and the layout ablation; complete runs are "
            "skipped), analyze the traces into metrics/, draw figures/, render report/, write dataset_card.md and "
            "MANIFEST.sha256, assemble and verify the bundle in dist/dataset/. Ctrl-C at any point and run again "
            "to resume. --scale gpu does the same on 4+ GPUs."
        ),
    )
    p.add_argument("--scale", choices=SCALES, default="cpu", help="model and batch size (default: cpu: 2-core laptop, gloo)")
    p.add_argument(
        "--out", type=Path, default=Path("."), help="artifact root: traces/, metrics/, figures/, report/... (default: .)"
    )
    p.add_argument(
        "--configs",
        nargs="+",
        default=["reference"],
        metavar="CONFIG",
        help="configs, groups, 'study', 'reference' or 'all' (default: reference)",
    )
    p.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    p.add_argument(
        "--trials",
        type=int,
        default=DEFAULT_TRIALS,
        help="rounds: recordings of each configuration, interleaved (default: %(default)s; the committed reference has 10)",
    )
    p.add_argument(
        "--traced-trials",
        type=int,
        default=DEFAULT_TRACED_TRIALS,
        help="of those, the first rounds profiled with traces; the others are timed only (default: %(default)s)",
    )
    p.add_argument("--force", action="store_true", help="re-record complete runs")
    p.add_argument(
        "--author",
        action="append",
        default=None,
        metavar="NAME",
        help="an author the card, CITATION.cff, croissant.json and the report cite; repeat for more "
        "(default: the project's checked-in list, never the machine's git config)",
    )
    p.add_argument("--no-progress", action="store_true")
    add_profile_argument(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from muon_repro.bench.sweep import BenchError, BenchInterrupted
    from muon_repro.job import RunPlan, run_job
    from muon_repro.stages import StageError

    plan = RunPlan(
        out=args.out,
        scale=args.scale,
        configs=tuple(args.configs),
        trials=args.trials,
        traced_trials=args.traced_trials,
        backend=args.backend,
        force=args.force,
        progress=not args.no_progress,
        profile=args.profile,
        command=tuple(getattr(args, "command_line", ()) or ("muon-repro", "run")),
        authors=tuple(args.author or ()),
    )
    try:
        seconds = run_job(plan)
    except BenchInterrupted as exc:  # says which trials were dropped and which kept
        print(f"muon-repro run: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "muon-repro run: interrupted; every stage writes atomically, so what is there is complete: "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    except (BenchError, StageError) as exc:
        print(f"muon-repro run: error: {exc}", file=sys.stderr)
        return 1
    _print_summary(plan, seconds)
    return 0


def _print_summary(plan: RunPlan, seconds: dict[str, float]) -> None:
    from muon_repro.job import STAGES, claims_summary

    total = sum(seconds.values())
    print("\nClaims, as measured here:\n" + claims_summary(plan.metrics))
    print("\nWall time per stage: " + ", ".join(f"{s} {seconds[s]:.1f} s" for s in STAGES) + f"; total {total:.1f} s")
    print("\nArtifacts:")
    for label, path in (
        ("traces (open in ui.perfetto.dev)", plan.traces),
        ("tables (Parquet + CSV)", plan.metrics),
        ("figures", plan.figures),
        ("report", plan.report / "report.md"),
        ("report (PDF)", plan.report / "report.pdf"),
        ("dataset card", plan.out / "dataset_card.md"),
        ("bundle (verified)", plan.bundle),
    ):
        print(f"  {label:<34} {path}")
