"""Named benchmark configurations: the original study's experiments, their AdamW twins, the layout ablation.

A :class:`BenchConfig` says everything one run needs; :func:`resolve` fills in the model size,
the global tokens per step and the sequence length for a *scale*: ``cpu`` (a 2-core laptop,
gloo) or ``gpu`` (sized for 4 GPUs, NCCL).

Every configuration of a scale trains the same number of tokens per step, whatever its DP x TP
grid: the batch per DP rank is ``tokens_per_step / (dp * seq_len)``. Without that, DP4 would train
twice the tokens of DP2·TP2 in a step and step times could not be compared.

The DP2·TP2 Muon run with the contiguous layout is recorded once, as ``comparison/muon_dp2_tp2``:
it is the original study's comparison, the hybrid point of its DP x TP grid, and the contiguous
member of the layout ablation.

The original study is Jen Wei's "Reproducing and Validating Distributed Muon" (Hugging Face dataset
bird-of-paradise/muon-distributed-reproducibility); its runs are the group ``study`` (``seed`` is kept as an alias).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from muon_repro.model_config import CROSS_ENTROPY_MODES, PRESETS, GPTConfig
from muon_repro.phases import LAYOUTS, NS_METHODS, OVERLAPS, PP_SEND_ACTIVATION, PP_SEND_GRAD
from muon_repro.run_records import DEFAULT_SCALE, RECORD_INT_RANGES
from muon_repro.values import is_count

SCALES = (DEFAULT_SCALE, "gpu", "tiny")
DTYPE_NAMES = ("fp32", "bf16")
MODEL_SHAPE_FIELDS = ("hidden", "n_layers", "n_heads", "ffn_hidden", "vocab_size")  # BenchConfig fields that override the preset
# The largest value of each size a config may name (docs/limits.md, "Run shapes"): far above any model trained (the
# widest published models are ~25k wide, ~130 blocks deep, with 256k-token vocabularies), low enough that pricing
# or building one stays seconds and bytes countable in int64 (predict at 1,024 blocks takes ~10 s on 2 cores).
SIZE_LIMITS = {
    "hidden": 2**17,
    "n_layers": 1024,
    "n_heads": 2**12,
    "ffn_hidden": 2**19,
    "vocab_size": 2**22,
    "dp": 2**16,
    "tp": 2**10,
    "pp": 2**10,
    "micro_batches": 2**16,
    "seq_len": 2**22,
    "tokens_per_step": 2**36,
}
_SHAPE_FLAG = {"n_layers": "layers", "n_heads": "heads", "ffn_hidden": "ffn", "vocab_size": "vocab"}  # field -> its flag


@dataclass(frozen=True)
class ScaleSpec:
    """Model size and batch for one scale."""

    preset: str
    tokens_per_step: int  # global: divisible by dp * seq_len for every dp of the registry (1 to 8)
    seq_len: int
    bucket_elems: int  # for the bucketed layout: several buckets per model at this size
    timed_steps: int = 8  # steps timed without the profiler before the profiled ones (BenchConfig.timed_steps)
    timed_warmup: int = 2
    precision: str = "fp32"  # BenchConfig.precision of the scale's runs (a registry entry may set its own)
    # Tokens one rank's forward+backward pass takes at most: the DP rank's batch is accumulated over as many
    # micro-batches as that needs (None: the whole batch in one pass).
    micro_tokens: int | None = None


SCALE_SPECS = {
    # tiny: tests and CI smoke runs (seconds).
    "tiny": ScaleSpec(preset="tiny", tokens_per_step=128, seq_len=16, bucket_elems=4096, timed_steps=4, timed_warmup=1),
    # cpu: ~4M parameters; a 4-rank step takes about a second on 2 cores.
    "cpu": ScaleSpec(preset="small", tokens_per_step=1024, seq_len=128, bucket_elems=1_000_000),
    # gpu: ~370M parameters (d_model 1,024) on 4 GPUs, bf16, 524,288 tokens a step (512 per d_model: inside the
    # claims' conditions, hundreds to thousands) accumulated over passes of 16,384 tokens a rank.
    "gpu": ScaleSpec(
        preset="large",
        tokens_per_step=524_288,
        seq_len=1024,
        bucket_elems=40_000_000,
        precision="bf16",
        micro_tokens=16_384,
    ),
}
DEFAULT_TRIALS = 3  # rounds of a sweep (each configuration recorded once per round)
DEFAULT_TRACED_TRIALS = 1  # of which the first this many are profiled and keep traces; the others are timed only
# The most rounds one sweep records (--trials and --traced-trials of bench and run; docs/limits.md, "Run shapes"): a
# run record holds trials 0 to 9,999 (run_records.RECORD_INT_RANGES), and a sweep plans every recording before the
# first one starts. The committed reference has 10 rounds.
MAX_TRIALS = RECORD_INT_RANGES["trials"][1]


def check_trials_limit(trials: object, traced_trials: object = None) -> None:
    """Refuse ``--trials`` or ``--traced-trials`` past :data:`MAX_TRIALS`, naming the option (other values are the
    callers' to check: each says what a round is where it asks)."""
    for flag, value in (("--trials", trials), ("--traced-trials", traced_trials)):
        if isinstance(value, int) and value > MAX_TRIALS:
            raise ValueError(
                f"{flag} {value:,} is past the limit of {MAX_TRIALS:,} rounds (docs/limits.md, run shapes): a run record "
                f"holds trials 0 to {MAX_TRIALS - 1:,}; give {MAX_TRIALS:,} or fewer"
            )


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run. ``group/name`` is its place under ``traces/``."""

    group: str
    name: str
    optimizer: str  # "muon" | "adamw"
    dp: int
    tp: int
    layout: str = "contiguous"
    # Pipeline stages (muon_repro.parallel.grid3d): the model's blocks split over pp ranks, trained with 1F1B over
    # micro_batches micro-batches; 1 (every run before the field): no pipeline.
    pp: int = 1
    overlap: str = "none"  # how Muon's gathers are scheduled (muon_repro.phases.OVERLAPS)
    scale: str = DEFAULT_SCALE
    preset: str = ""  # filled by resolve()
    tokens_per_step: int = 0  # global, over all DP ranks
    seq_len: int = 0
    bucket_elems: int | None = None
    # Caps Muon's Newton-Schulz units (DistributedMuon's ns_unit_elems): null, the layout's own units, as every run
    # before the field; config.json names it only when set.
    ns_unit_elems: int | None = None
    qkv: str = "fused"
    # How the model's loss meets the vocab-sharded logits (GPT's cross_entropy): not part of the key, so that
    # a run keeps its folder; "gathered" is how every run recorded before the field trained (see from_dict).
    cross_entropy: str = "vocab_parallel"
    # profiler schedule: steps skipped, warmed up, recorded (ProfilerStep#N for the recorded ones)
    wait: int = 0
    warmup: int = 1
    active: int = 5
    # False: no profiler and no trace. With timed_steps (a round after the traced ones, see timed_only) the
    # run trains only its timed steps; without (the regime sweep) its wait+warmup+active steps are timed instead.
    profile: bool = True
    # Steps trained and timed with no profiler at all before the profiled ones (a profiled run only; resolve()
    # takes the scale's): timed_warmup steps run but not kept, then timed_steps kept (metrics.json timed_*).
    # 0 (what config.json files written before them read as): none, the run starts with the profiled steps.
    timed_steps: int = 0
    timed_warmup: int = 0
    lr: float = 3e-3
    weight_decay: float = 0.1
    ns_dtype: str | None = None  # default: bf16 on CUDA, fp32 on CPU
    ns_method: str = "quintic"  # Newton-Schulz variant (optim.newton_schulz.NS_METHODS; docs/method.md#newton-schulz)
    # "bf16": forward and backward under bf16 autocast, as the cost model's bf16 workload (weights, gradients and
    # optimizer state stay fp32; the LM head's logits come out bf16 and the loss is computed from them cast to fp32);
    # "fp32": no autocast, as every run before the field.
    precision: str = "fp32"
    # Gradient accumulation: each DP rank runs forward+backward on batch_per_dp / micro_batches sequences at a time,
    # and the optimizer steps once on their summed gradient (same tokens per step, less activation memory).
    micro_batches: int = 1
    gather_dtype: str = "bf16"
    reduce_dtype: str = "fp32"
    seed: int = 0
    # Model shape overrides (``muon-repro bench custom``, ``muon-repro predict``): null keeps the preset's.
    hidden: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    ffn_hidden: int | None = None
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        if self.optimizer not in ("muon", "adamw"):
            raise ValueError(f"config {self.key}: optimizer must be 'muon' or 'adamw', got {self.optimizer!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"config {self.key}: unknown layout {self.layout!r}; choose one of {', '.join(LAYOUTS)}")
        if self.overlap not in OVERLAPS:
            raise ValueError(f"config {self.key}: unknown overlap {self.overlap!r}; choose one of {', '.join(OVERLAPS)}")
        if self.overlap != "none" and self.optimizer != "muon":
            raise ValueError(f"config {self.key}: overlap={self.overlap!r} schedules Muon's gathers; AdamW has none (use 'none')")
        cap = self.ns_unit_elems
        if cap is not None:
            if not is_count(cap):
                raise ValueError(f"config {self.key}: ns_unit_elems must be a positive integer or null, got {cap!r}")
            if self.optimizer != "muon":
                raise ValueError(f"config {self.key}: ns_unit_elems caps Muon's Newton-Schulz units; AdamW has none (use null)")
        if self.cross_entropy not in CROSS_ENTROPY_MODES:
            raise ValueError(
                f"config {self.key}: unknown cross_entropy {self.cross_entropy!r}; choose one of {', '.join(CROSS_ENTROPY_MODES)}"
            )
        if self.scale not in SCALES:
            raise ValueError(f"config {self.key}: unknown scale {self.scale!r}; choose one of {', '.join(SCALES)}")
        for name in ("dp", "tp", "pp", "active", "micro_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"config {self.key}: {name} must be >= 1, got {getattr(self, name)}")
        self._check_size_limits()
        for name in ("wait", "warmup", "timed_steps", "timed_warmup"):
            if getattr(self, name) < 0:
                raise ValueError(f"config {self.key}: {name} must be >= 0, got {getattr(self, name)}")
        for name in ("ns_dtype", "gather_dtype", "reduce_dtype", "precision"):
            value = getattr(self, name)
            if value is not None and value not in DTYPE_NAMES:
                raise ValueError(f"config {self.key}: {name} must be one of {DTYPE_NAMES}, got {value!r}")
        if self.ns_method not in NS_METHODS:
            raise ValueError(f"config {self.key}: ns_method must be one of {', '.join(NS_METHODS)}, got {self.ns_method!r}")
        if self.pp > 1 and self.precision != "fp32":
            raise ValueError(
                f"config {self.key}: pipeline stages (pp={self.pp}) send fp32 activations, so they train in fp32 only; "
                "set precision='fp32' or pp=1"
            )
        if self.preset and self.preset not in PRESETS:
            raise ValueError(f"config {self.key}: unknown model preset {self.preset!r}")
        self._check_model_shape()
        if self.tokens_per_step < 0:
            raise ValueError(f"config {self.key}: tokens_per_step must be >= 1, got {self.tokens_per_step}")
        if self.seq_len:  # a registry entry may name its tokens per step and leave the sequence length to resolve()
            per_batch = self.dp * self.seq_len
            if self.seq_len < 1 or self.tokens_per_step < 1 or self.tokens_per_step % per_batch:
                raise ValueError(
                    f"config {self.key}: tokens_per_step={self.tokens_per_step} does not divide into dp={self.dp} x "
                    f"micro-batches of seq_len={self.seq_len}; use a positive multiple of {max(per_batch, 1)}"
                )
            if self.batch_per_dp % self.micro_batches:
                raise ValueError(
                    f"config {self.key}: micro_batches={self.micro_batches} does not divide the {self.batch_per_dp} sequences "
                    f"each DP rank trains per step; choose a divisor of {self.batch_per_dp}"
                )

    def _check_size_limits(self) -> None:
        """No size past SIZE_LIMITS: a model or a world that large is a typo, and would cost hours or overflow."""
        for name, limit in SIZE_LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, int) and value > limit:
                flag = "--" + _SHAPE_FLAG.get(name, name).replace("_", "-")
                raise ValueError(
                    f"config {self.key}: {name}={value:,} ({flag}) is past the limit of {limit:,} (docs/limits.md, run shapes): "
                    "no model or world this project prices is that large; check the value"
                )

    def _check_model_shape(self) -> None:
        """Overrides are positive integers and, with the preset, make a model every TP rank can hold."""
        for name, value in self.model_overrides().items():
            if not is_count(value):
                raise ValueError(f"config {self.key}: {name} must be a positive integer, got {value!r}")
        if not self.preset:
            if self.model_overrides():
                raise ValueError(f"config {self.key}: model shape overrides need a base preset (one of {', '.join(PRESETS)})")
            return
        try:
            model = self.model_config()
        except ValueError as exc:
            raise ValueError(f"config {self.key}: {exc}") from None
        if model.n_layers < self.pp:
            raise ValueError(
                f"config {self.key}: pp={self.pp} stages need at least one block each, the model has n_layers={model.n_layers}"
            )
        for name, value in model.sizes_tp_splits_unevenly(self.tp).items():
            raise ValueError(f"config {self.key}: {name}={value} is not divisible by tp={self.tp}; choose sizes tp divides")

    def model_overrides(self) -> dict[str, int]:
        """The model-shape fields this config sets (GPTConfig field names), without the nulls."""
        return {name: value for name in MODEL_SHAPE_FIELDS if (value := getattr(self, name)) is not None}

    def model_config(self) -> GPTConfig:
        """The model this run trains: the preset with the shape overrides, the run's QKV mode and seed,
        and room for its sequence length."""
        base = GPTConfig.preset(self.preset)
        return GPTConfig.preset(
            self.preset, qkv=self.qkv, seed=self.seed, max_seq_len=max(self.seq_len, base.max_seq_len), **self.model_overrides()
        )

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}"

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def batch_per_dp(self) -> int:
        """Sequences each DP rank trains per step."""
        return self.tokens_per_step // (self.dp * self.seq_len) if self.seq_len else 0

    @property
    def activation_elements(self) -> int:
        """Elements of one micro-batch's activation between two pipeline stages, ``[micro-batch sequences, seq,
        hidden]``; its gradient, sent back, is as large."""
        return self.tokens_per_step // (self.dp * self.micro_batches) * self.model_config().hidden

    def pipeline_send_bytes(self, pp_rank: int, element_size: int = 4) -> dict[str, int]:
        """Bytes stage ``pp_rank`` sends per step to its neighbours: every micro-batch's activation forward (every
        stage but the last) and its gradient back (every stage but the first), fp32 as the runtime sends them by
        default; {} without pipeline stages."""
        if self.pp == 1:
            return {}
        sent = self.micro_batches * self.activation_elements * element_size
        return {PP_SEND_ACTIVATION: sent if pp_rank < self.pp - 1 else 0, PP_SEND_GRAD: sent if pp_rank > 0 else 0}

    @property
    def steps(self) -> int:
        """The profiled steps (the profiler's schedule): what ``step_ms``, ``loss`` and the ledger cover."""
        return self.wait + self.warmup + self.active

    @property
    def timed_total(self) -> int:
        """Steps trained first, timed without the profiler (warm-up included); 0 for a run without timed steps."""
        return self.timed_warmup + self.timed_steps if self.timed_steps else 0

    @property
    def timed_only(self) -> bool:
        """A trial recorded in an untraced round: its timed steps and nothing after them (no profiled steps)."""
        return not self.profile and self.timed_steps > 0

    @property
    def profiled_steps(self) -> int:
        """Steps trained after the timed ones: under the profiler, or timed without it for a regime point."""
        return 0 if self.timed_only else self.steps

    def untraced(self) -> BenchConfig:
        """This configuration as a trial of an untraced round records it: timed steps only, no trace."""
        if not self.timed_steps:
            raise ValueError(f"config {self.key}: a trial without a trace needs timed steps (timed_steps > 0)")
        return replace(self, profile=False)

    def to_dict(self) -> dict:
        derived = {"key": self.key, "steps": self.steps, "world_size": self.world_size, "batch_per_dp": self.batch_per_dp}
        unset = [  # config.json names only what a run overrides
            name for name in (*MODEL_SHAPE_FIELDS, "ns_unit_elems") if getattr(self, name) is None
        ]
        return {k: v for k, v in {**asdict(self), **derived}.items() if k not in unset}


def _grid(group: str, optimizer: str, dp: int, tp: int, suffix: str = "", pp: int = 1, **kw) -> BenchConfig:
    """A config named like the original study's runs: ``muon_dp2_tp2``, ``adamw_dp4``, ``muon_tp4``; with
    pipeline stages the PP size leads a 2-D grid (``muon_pp2_dp2``) and ends the 3-D one (``muon_dp2_tp2_pp2``)."""
    sizes = [f"dp{dp}"] * (dp > 1) + [f"tp{tp}"] * (tp > 1)
    if pp > 1:
        sizes = sizes + [f"pp{pp}"] if len(sizes) == 2 else [f"pp{pp}", *sizes]
    grid = "_".join(sizes) or "tp1"
    return BenchConfig(group=group, name=f"{optimizer}_{grid}{suffix}", optimizer=optimizer, dp=dp, tp=tp, pp=pp, **kw)


PIPELINE_GROUP = "pipeline"
# The deepest Muon pipeline again, with each stage's last backward stamped on the host's clock in its timed steps:
# the idle time after it is what could hold the stage's optimizer step (the bubble_hides_step claim).
PIPELINE_BUBBLE_GROUP = "pipeline_bubble"
# The pipeline group's grids (dp, tp, pp): three with PP and the original study's three without, at 4 ranks, and
# the 3-D grid at 8. Every one trains micro-batches of one sequence (see _pipeline), so they differ only in layout.
PIPELINE_GRIDS = ((4, 1, 1), (1, 4, 1), (2, 2, 1), (2, 1, 2), (1, 2, 2), (1, 1, 4), (2, 2, 2))


SINGLE_DEVICE_TOKENS = (8192, 32768, 131072, 262144)
SINGLE_DEVICE_MICRO_TOKENS = 16384
SINGLE_DEVICE_TRACED_TOKENS = 32768

_ALL = [
    # The original study's comparison: Muon vs AdamW at DP=2, TP=2.
    _grid("comparison", "adamw", 2, 2),
    _grid("comparison", "muon", 2, 2),
    # The original study's grid of Muon layouts, with AdamW twins for DP4 and TP4.
    _grid("distributed_muon", "muon", 4, 1),
    _grid("distributed_muon", "muon", 1, 4),
    _grid("distributed_muon", "adamw", 4, 1),
    _grid("distributed_muon", "adamw", 1, 4),
    # ZeRO-1 layout ablation at DP=2, TP=2.
    *[_grid("layout_ablation", "muon", 2, 2, layout=layout, suffix=f"_{layout}") for layout in LAYOUTS if layout != "contiguous"],
    # The original study's async trap at DP=2, TP=2: every overlap variant, the blocking one included, so that
    # the three are recorded interleaved in one sweep (the bucketed layout: several units to pipeline).
    *[_grid("overlap", "muon", 2, 2, layout="bucketed", overlap=overlap, suffix=f"_{overlap}") for overlap in OVERLAPS],
    # 8 ranks (2 nodes x 4 GPUs): the original study's wishlist of going past one node.
    _grid("scale_out", "muon", 4, 2),
    _grid("scale_out", "adamw", 4, 2),
    _grid("scale_out", "muon", 8, 1),
    _grid("scale_out", "adamw", 8, 1),
    # DP x TP x PP (docs/pipeline.md): the same tokens per step on every grid, in micro-batches of one sequence.
    # Three profiled steps keep the traces small (14 runs); the intervals come from the timed steps of every round.
    *[
        _grid(PIPELINE_GROUP, optimizer, dp, tp, pp=pp, active=3)
        for dp, tp, pp in PIPELINE_GRIDS
        for optimizer in ("muon", "adamw")
    ],
    _grid(PIPELINE_BUBBLE_GROUP, "muon", 1, 1, pp=4, active=3),
    # One device, no DP or TP: the optimizer step against forward+backward as tokens per step grow, in bf16 autocast
    # as the cost model's bf16 workload, in micro-batches of at most SINGLE_DEVICE_MICRO_TOKENS (the gpu scale's
    # 369M model fits one 80 GB GPU at 16k tokens a pass).
    *[
        BenchConfig(
            group="single_device",
            name=f"{optimizer}_t{tokens // 1024}k",
            optimizer=optimizer,
            dp=1,
            tp=1,
            tokens_per_step=tokens,
            precision="bf16",
            micro_batches=max(1, tokens // SINGLE_DEVICE_MICRO_TOKENS),
            # 5 timed steps, then a short profiled window up to 32k tokens; the larger steps are timed only in every
            # round (a profiled 128k-token window of 2 steps is an 11 MB trace, 256k 23 MB, on an H200)
            profile=tokens <= SINGLE_DEVICE_TRACED_TOKENS,
            active=2,
            timed_steps=5,
            timed_warmup=2,
        )
        for tokens in SINGLE_DEVICE_TOKENS
        for optimizer in ("muon", "adamw")
    ],
]
CONFIGS: dict[str, BenchConfig] = {c.key: c for c in _ALL}
# The original study's runs: the group name ``study`` (``seed``, its older name, still works).
STUDY_CONFIGS = tuple(c.key for c in _ALL if c.group in ("comparison", "distributed_muon"))
STUDY_GROUP_NAMES = ("study", "seed")
# What `muon-repro run` records by default: the original study's runs and the layout ablation (4 ranks each).
REFERENCE_CONFIGS = tuple(
    c.key for c in _ALL if c.group not in ("scale_out", "overlap", "single_device", PIPELINE_GROUP, PIPELINE_BUBBLE_GROUP)
)


def resolve(key: str, scale: str = DEFAULT_SCALE, **overrides) -> BenchConfig:
    """The configuration ``key`` at ``scale``, with model size and batch filled in."""
    if key not in CONFIGS:
        raise ValueError(f"unknown benchmark config {key!r}; {_closest(key, list(CONFIGS))}")
    if scale not in SCALE_SPECS:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SCALE_SPECS)}")
    spec = SCALE_SPECS[scale]
    base = CONFIGS[key]
    tokens_per_step = base.tokens_per_step or spec.tokens_per_step
    return replace(
        base,
        scale=scale,
        preset=spec.preset,
        tokens_per_step=tokens_per_step,
        seq_len=spec.seq_len,
        bucket_elems=spec.bucket_elems if base.layout == "bucketed" else None,
        **{**_timed_steps_of(base, spec), **_micro_batches_of(base, tokens_per_step, spec), **overrides},
    )


def _micro_batches_of(base: BenchConfig, tokens_per_step: int, spec: ScaleSpec) -> dict:
    """The pipeline group trains micro-batches of one sequence on every grid, with or without PP: the same
    matmul shapes everywhere, and 1F1B as many micro-batches as each DP replica has sequences. A scale with
    ``micro_tokens`` (gpu) accumulates each DP rank's batch in passes of at most that many tokens, at the scale's
    precision, where the registry entry sets neither itself."""
    if base.group in (PIPELINE_GROUP, PIPELINE_BUBBLE_GROUP):
        return {"micro_batches": tokens_per_step // (base.dp * spec.seq_len)}
    out: dict = {}
    if base.precision == "fp32":
        out["precision"] = spec.precision
    if spec.micro_tokens and base.micro_batches == 1:
        out["micro_batches"] = max(1, tokens_per_step // (base.dp * spec.micro_tokens))
    return out


def _timed_steps_of(base: BenchConfig, spec: ScaleSpec) -> dict[str, int]:
    """The registry entry's own timed steps where it names them, else the scale's."""
    source = base if base.timed_steps else spec
    return {"timed_steps": source.timed_steps, "timed_warmup": source.timed_warmup}


def from_dict(data: dict) -> BenchConfig:
    """Inverse of :meth:`BenchConfig.to_dict` (derived keys dropped)."""
    fields = {k: v for k, v in data.items() if k not in ("key", "steps", "world_size", "batch_per_dp")}
    # A config.json written before the field existed: its model all-gathered the logits for the loss
    # (the field's default, vocab_parallel, would misstate what that run did and sent).
    fields.setdefault("cross_entropy", "gathered")
    return BenchConfig(**fields)


def expand_config_names(names: list[str]) -> list[str]:
    """Config keys from names, groups, 'study' (the original study's runs; 'seed' is an alias), 'reference' and
    'all', in registry order, without repeats."""
    chosen: list[str] = []
    for name in names:
        if name == "all":
            keys = list(CONFIGS)
        elif name in STUDY_GROUP_NAMES:
            keys = list(STUDY_CONFIGS)
        elif name == "reference":
            keys = list(REFERENCE_CONFIGS)
        elif name in CONFIGS:
            keys = [name]
        else:
            keys = [k for k, c in CONFIGS.items() if c.group == name.rstrip("/")]
            if not keys:
                names = [*CONFIGS, *sorted({c.group for c in CONFIGS.values()}), *STUDY_GROUP_NAMES, "reference", "all"]
                raise ValueError(f"unknown benchmark config {name!r}; {_closest(name, names)}")
        chosen += [k for k in keys if k not in chosen]
    return chosen


def _closest(name: str, names: list[str]) -> str:
    """The names nearest ``name`` (by spelling, then its group's), else the groups; and where to see them all."""
    import difflib

    group = name.split("/")[0]
    near = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
    near += [n for n in names if n.startswith(f"{group}/") and n not in near][: max(0, 5 - len(near))]
    groups = sorted({c.group for c in CONFIGS.values()}) + ["'study'", "'reference'", "'all'"]
    listed = f"did you mean {', '.join(near)}? " if near else f"a configuration or a group ({', '.join(groups)}); "
    return f"{listed}`muon-repro bench --list` lists every name"
