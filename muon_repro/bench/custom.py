"""A run shape from the command line: ``--optimizer --dp --tp --preset | --hidden --layers --heads ...``.

Shared by ``muon-repro predict`` and ``muon-repro bench custom``: :func:`add_run_shape_arguments`
puts the flags on a parser, :func:`config_from_args` turns them into a validated
:class:`~muon_repro.bench.configs.BenchConfig` of group ``custom`` named after the flags. Errors are
``ValueError``s naming the flag, which ``muon-repro`` prints as ``muon-repro <command>: error: ...``.
Imports nothing heavy (no torch), so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse

from muon_repro.bench.configs import SCALE_SPECS, SCALES, BenchConfig
from muon_repro.model_config import CROSS_ENTROPY_MODES, PRESETS
from muon_repro.phases import LAYOUTS, NS_METHODS, OVERLAPS
from muon_repro.run_records import CUSTOM_GROUP

DEFAULT_BASE_PRESET = "small"  # the unspecified fields of a shape given without --preset (vocabulary, sequence room)
RUN_SHAPE_DEFAULTS = "run_shape_defaults"  # the parsed namespace's attribute: each run-shape flag and its default
# --flag -> BenchConfig field, for the model shape
SHAPE_FLAGS = {"hidden": "hidden", "layers": "n_layers", "heads": "n_heads", "ffn": "ffn_hidden", "vocab": "vocab_size"}


def add_run_shape_arguments(parser: argparse.ArgumentParser, *, scale: bool = True) -> None:
    """The flags that say what one run trains and how it is laid out over DP x TP x PP ranks
    (``scale=False``: the parser has its own ``--scale``, as ``muon-repro bench`` does)."""
    group = parser.add_argument_group(
        "run shape", "one run's shape (bench's CONFIG custom, or predict's single run): * marks the flags it needs"
    )
    actions: list[argparse.Action] = []

    def shape(*flags: str, **kwargs) -> None:
        actions.append(group.add_argument(*flags, **kwargs))

    shape("--optimizer", choices=("muon", "adamw"), help="the optimizer *")
    shape("--dp", type=int, help="data-parallel ranks *")
    shape("--tp", type=int, help="tensor-parallel ranks *")
    shape("--pp", type=int, default=1, help="pipeline stages, 1F1B over --micro-batches micro-batches (default: %(default)s)")
    shape("--preset", choices=sorted(PRESETS), help="model size; the shape flags below override its fields")
    shape("--hidden", type=int, metavar="H", help="hidden width (with --layers and --heads when there is no --preset)")
    shape("--layers", type=int, metavar="L", help="transformer blocks")
    shape("--heads", type=int, metavar="A", help="attention heads")
    shape("--ffn", type=int, metavar="F", help="MLP width (default: the preset's, or 4 x --hidden when --hidden is given)")
    shape("--vocab", type=int, metavar="V", help=f"vocabulary (default: the preset's; {DEFAULT_BASE_PRESET}'s without --preset)")
    shape("--tokens-per-step", type=int, metavar="T", help="tokens per step over all DP ranks *")
    shape("--seq-len", type=int, metavar="S", help="tokens per sequence *")
    shape("--layout", choices=LAYOUTS, default="contiguous", help="ZeRO-1 layout (default: %(default)s)")
    shape("--overlap", choices=OVERLAPS, default="none", help="how Muon's gathers are scheduled (default: %(default)s)")
    shape("--bucket-elems", type=int, metavar="N", help="bucket size of the bucketed layout (default: the scale's)")
    shape(
        "--ns-unit-elems",
        type=int,
        metavar="N",
        help="Muon: at most N elements of full matrices per Newton-Schulz unit on a rank, bounding the step's transient "
        "memory at one gather per unit (default: the layout's own units; docs/method.md#newton-schulz-units)",
    )
    shape(
        "--cross-entropy",
        choices=CROSS_ENTROPY_MODES,
        default="vocab_parallel",
        help="the loss from each TP rank's logits shard, or from all-gathered logits as runs recorded before the option "
        "(default: %(default)s; not part of the run's name)",
    )
    shape(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="fp32, or the forward and backward under bf16 autocast with fp32 weights and optimizer (default: %(default)s)",
    )
    shape(
        "--micro-batches",
        type=int,
        default=1,
        metavar="M",
        help="gradient accumulation: forward+backward in M slices of each DP rank's batch (default: %(default)s)",
    )
    shape(
        "--ns-method",
        choices=NS_METHODS,
        default="quintic",
        help="Newton-Schulz variant (docs/method.md#newton-schulz; default: %(default)s, Moonlight's)",
    )
    if scale:
        shape(
            "--scale",
            choices=SCALES,
            default="cpu",
            help="the scale whose bucket size the bucketed layout takes (default: %(default)s)",
        )
    # what each flag is when not given: a command that records or prices its own shapes refuses the ones given
    parser.set_defaults(**{RUN_SHAPE_DEFAULTS: {a.dest: (a.option_strings[0], a.default) for a in actions}})


def run_shape_flags_given(args: argparse.Namespace) -> list[str]:
    """The run-shape flags given a value other than their default, as typed (``--layout``), in the parser's order."""
    defaults = getattr(args, RUN_SHAPE_DEFAULTS, {})
    return [flag for dest, (flag, default) in defaults.items() if getattr(args, dest, default) != default]


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """The validated run of the flags (group ``custom``, a name derived from them)."""
    missing = [
        f"--{flag.replace('_', '-')}"
        for flag in ("optimizer", "dp", "tp", "tokens_per_step", "seq_len")
        if getattr(args, flag) is None
    ]
    if missing:
        raise ValueError(f"the run shape needs {', '.join(missing)}")
    for flag in ("dp", "tp", "pp", "tokens_per_step", "seq_len", "micro_batches"):
        value = getattr(args, flag)
        if value < 1:  # BenchConfig takes 0 for "filled in later" in registry entries; a flag means what it says
            raise ValueError(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
    preset, shape = model_shape(args)
    fields = dict(
        group=CUSTOM_GROUP,
        optimizer=args.optimizer,
        dp=args.dp,
        tp=args.tp,
        pp=args.pp,
        layout=args.layout,
        overlap=args.overlap,
        scale=args.scale,
        preset=preset,
        tokens_per_step=args.tokens_per_step,
        seq_len=args.seq_len,
        bucket_elems=bucket_elems(args),
        ns_unit_elems=ns_unit_elems(args),
        precision=args.precision,
        micro_batches=args.micro_batches,
        ns_method=args.ns_method,
        # timed steps as the scale's named runs have them, so that rounds after --traced-trials are timed only
        timed_steps=SCALE_SPECS[args.scale].timed_steps,
        timed_warmup=SCALE_SPECS[args.scale].timed_warmup,
        **shape,
    )
    # Not in the name: BenchConfig.key leaves it out too, so a run keeps its folder whichever loss it used.
    return BenchConfig(name=run_name(fields), cross_entropy=args.cross_entropy, **fields)


def model_shape(args: argparse.Namespace) -> tuple[str, dict[str, int]]:
    """The base preset and the BenchConfig shape overrides the flags give."""
    given = {field: getattr(args, flag) for flag, field in SHAPE_FLAGS.items() if getattr(args, flag) is not None}
    if args.preset is None:
        needed = [f"--{flag}" for flag in ("hidden", "layers", "heads") if getattr(args, flag) is None]
        if needed:
            missing = f"{', '.join(needed)} {'is' if len(needed) == 1 else 'are'} missing"
            raise ValueError(f"give --preset NAME, or the model's shape with --hidden, --layers and --heads ({missing})")
    if "hidden" in given and "ffn_hidden" not in given:
        given["ffn_hidden"] = 4 * given["hidden"]
    return args.preset or DEFAULT_BASE_PRESET, given


def bucket_elems(args: argparse.Namespace) -> int | None:
    if args.layout != "bucketed":
        if args.bucket_elems is not None:
            raise ValueError(f"--bucket-elems applies to --layout bucketed only, not {args.layout}")
        return None
    if args.bucket_elems is not None and args.bucket_elems < 1:
        raise ValueError(f"--bucket-elems must be a positive integer, got {args.bucket_elems}")
    return args.bucket_elems or SCALE_SPECS[args.scale].bucket_elems


def ns_unit_elems(args: argparse.Namespace) -> int | None:
    value = getattr(args, "ns_unit_elems", None)
    if value is None:
        return None
    if value < 1:
        raise ValueError(f"--ns-unit-elems must be a positive integer, got {value}")
    if args.optimizer != "muon":
        raise ValueError(f"--ns-unit-elems caps Muon's Newton-Schulz units; --optimizer {args.optimizer} has none")
    return value


def run_name(fields: dict) -> str:
    """``muon_dp2_tp2_small_t1024_s128_contiguous``, with ``pp..`` for pipeline stages and ``h..l..a..`` (and
    ``f``/``v``) for a custom shape."""
    shape = fields["preset"] if not any(k in fields for k in SHAPE_FLAGS.values()) else _shape_label(fields)
    parts = [
        fields["optimizer"],
        f"dp{fields['dp']}",
        f"tp{fields['tp']}",
        *([f"pp{fields['pp']}"] if fields.get("pp", 1) > 1 else []),
        shape,
        f"t{fields['tokens_per_step']}",
        f"s{fields['seq_len']}",
        fields["layout"],
    ]
    if fields["overlap"] != "none":
        parts.append(fields["overlap"])
    if fields.get("precision", "fp32") != "fp32":
        parts.append(fields["precision"])
    if fields.get("micro_batches", 1) > 1:
        parts.append(f"m{fields['micro_batches']}")
    if fields.get("ns_method", "quintic") != "quintic":
        parts.append(fields["ns_method"])
    if fields.get("ns_unit_elems") is not None:
        parts.append(f"u{fields['ns_unit_elems']}")
    return "_".join(parts)


def _shape_label(fields: dict) -> str:
    letters = {"hidden": "h", "n_layers": "l", "n_heads": "a", "ffn_hidden": "f", "vocab_size": "v"}
    return fields["preset"] + "-" + "".join(f"{letter}{fields[name]}" for name, letter in letters.items() if name in fields)
