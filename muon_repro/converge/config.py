"""A convergence run's configuration, the model it trains and its learning-rate schedule: checked data, torch-free."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from muon_repro.bench.configs import SIZE_LIMITS
from muon_repro.model_config import GPTConfig
from muon_repro.run_records import MAX_STEPS, RECORD_INT_RANGES
from muon_repro.values import is_count, is_index

# The most each size may be (docs/limits.md, "Run shapes"): the limits ``predict`` and ``bench custom`` hold the same
# sizes to (bench.configs.SIZE_LIMITS), so that a typo is refused by name before any worker starts, not a worker's
# failed allocation. ConvergeConfig field -> its SIZE_LIMITS key.
SIZE_LIMIT_KEYS = {
    "dp": "dp",
    "tp": "tp",
    "hidden": "hidden",
    "layers": "n_layers",
    "heads": "n_heads",
    "ffn": "ffn_hidden",
    "seq_len": "seq_len",
}
FIELD_OF_SIZE = {key: name for name, key in SIZE_LIMIT_KEYS.items()}  # GPTConfig field -> ConvergeConfig field
MAX_VOCAB = RECORD_INT_RANGES["vocab_size"][1]  # the most a run record may hold
# The tokens of one step (batch x seq_len) and of one evaluation's windows (eval_windows x seq_len): bench's
# tokens_per_step limit (the reference run: 1,024 and 8,192). Like the others it stops a typo; a run within the limits
# can still need more memory than the machine has.
MAX_TOKENS = SIZE_LIMITS["tokens_per_step"]

OPTIMIZERS = ("muon", "adamw")


def _positive_int(owner: str, name: str, value: object) -> None:
    if not is_count(value):
        raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ConvergeConfig:
    """One training run: model shape, optimizer, schedule, data and evaluation.

    The schedule is linear warm-up over ``warmup_frac`` of the steps, then cosine from ``lr`` down
    to ``min_lr_ratio * lr``; weight decay applies to every parameter, norm gains included.
    """

    optimizer: str
    lr: float
    seed: int = 0
    steps: int = 1000
    dp: int = 1
    tp: int = 1
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    ffn: int = 512
    seq_len: int = 64
    batch: int = 16  # sequences per step, over all DP ranks
    weight_decay: float = 0.1
    warmup_frac: float = 0.05
    min_lr_ratio: float = 0.1
    eval_every: int = 50
    eval_windows: int = 128  # held-out windows of seq_len tokens, the same ones at every evaluation
    checkpoint_every: int = 200

    def __post_init__(self) -> None:
        owner = "ConvergeConfig"
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"{owner}.optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        for name in (
            "steps",
            "dp",
            "tp",
            "hidden",
            "layers",
            "heads",
            "ffn",
            "seq_len",
            "batch",
            "eval_every",
            "eval_windows",
            "checkpoint_every",
        ):
            _positive_int(owner, name, getattr(self, name))
        self._check_size_limits()
        if not is_index(self.seed):
            raise ValueError(f"{owner}.seed must be a non-negative integer, got {self.seed!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"{owner}.lr must be a positive number, got {self.lr!r}")
        if not (isinstance(self.weight_decay, (int, float)) and 0 <= self.weight_decay < math.inf):
            raise ValueError(f"{owner}.weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        if not (isinstance(self.warmup_frac, (int, float)) and 0 <= self.warmup_frac < 1):
            raise ValueError(f"{owner}.warmup_frac must be in [0, 1), got {self.warmup_frac!r}")
        if not (isinstance(self.min_lr_ratio, (int, float)) and 0 <= self.min_lr_ratio <= 1):
            raise ValueError(f"{owner}.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        if self.batch % self.dp:
            raise ValueError(
                f"{owner}.batch={self.batch} must be divisible by dp={self.dp} (each DP rank takes batch/dp sequences)"
            )

    def _check_size_limits(self) -> None:
        """No size past the bench's limits (docs/limits.md, "Run shapes"): a run that large is a typo, and would end
        in each worker's failed allocation instead of one error naming the flag."""
        owner = "ConvergeConfig"
        see = "(docs/limits.md, run shapes), far past any run this project trains; check the value"
        if self.steps > MAX_STEPS:
            raise ValueError(
                f"{owner}.steps={self.steps:,} is past the limit of {MAX_STEPS:,} steps a run record may hold "
                "(docs/limits.md, run records); check the value"
            )
        for name, key in SIZE_LIMIT_KEYS.items():
            value, limit = getattr(self, name), SIZE_LIMITS[key]
            if value > limit:
                raise ValueError(f"{owner}.{name}={value:,} is past the limit of {limit:,} {see}")
        for name, what in (("batch", "the tokens of one step"), ("eval_windows", "the tokens of one evaluation")):
            value = getattr(self, name)
            if value * self.seq_len > MAX_TOKENS:
                raise ValueError(
                    f"{owner}.{name}={value:,} x {owner}.seq_len={self.seq_len:,} = {value * self.seq_len:,} tokens is "
                    f"past the limit of {MAX_TOKENS:,} for {what} {see}"
                )

    @property
    def world_size(self) -> int:
        return self.dp * self.tp

    def gpt_config(self, vocab_size: int) -> GPTConfig:
        """The model this run trains: split Q/K/V (as in the PR thread), the init seeded by the run's seed."""
        return GPTConfig(
            vocab_size=vocab_size,
            hidden=self.hidden,
            n_layers=self.layers,
            n_heads=self.heads,
            ffn_hidden=self.ffn,
            max_seq_len=self.seq_len,
            qkv="split",
            seed=self.seed,
        )

    def check_model(self, vocab_size: int) -> None:
        """Refuse, before any worker starts, a vocabulary outside 257 to :data:`MAX_VOCAB` (the byte alphabet and a
        merge at least; a record's limit) and a model the tensor-parallel GPT cannot build at this ``tp``."""
        owner = "ConvergeConfig"
        if not (is_count(vocab_size) and 257 <= vocab_size <= MAX_VOCAB):
            raise ValueError(f"{owner}.vocab_size must be an integer from 257 to {MAX_VOCAB:,}, got {vocab_size!r}")
        model = self.gpt_config(vocab_size)  # its own checks, by name
        for name, value in model.sizes_tp_splits_unevenly(self.tp).items():
            field = FIELD_OF_SIZE.get(name, name)  # vocab_size is no field: the tokenizer's
            raise ValueError(f"{owner}.{field}={value} is not divisible by {owner}.tp={self.tp}: each TP rank takes 1/tp")

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq_len

    @property
    def warmup_steps(self) -> int:
        return max(1, round(self.warmup_frac * self.steps)) if self.warmup_frac > 0 else 0

    @property
    def name(self) -> str:
        """The run folder's name: ``<optimizer>_lr<lr>_steps<steps>_seed<seed>``."""
        return f"{self.optimizer}_lr{self.lr:g}_steps{self.steps}_seed{self.seed}"

    def lr_at(self, step: int) -> float:
        """Learning rate of update ``step`` (1-based): warm-up to ``lr``, then cosine to ``min_lr_ratio * lr``."""
        if not 1 <= step <= self.steps:
            raise ValueError(f"step must be in [1, {self.steps}], got {step}")
        w = self.warmup_steps
        if step <= w:
            return self.lr * step / w
        progress = (step - w) / max(1, self.steps - w)
        floor = self.min_lr_ratio * self.lr
        return floor + (self.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    def to_dict(self) -> dict:
        return asdict(self)
