"""The model's shape and its named sizes: plain data, importable without torch (the CLI and
the benchmark registry validate against it before anything is trained)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from muon_repro.values import is_count, is_index

QKV_MODES = ("fused", "split")
# The sizes tensor parallelism splits across ranks: the one list the model, the configs and the CLIs check tp against.
TP_SPLIT_FIELDS = ("hidden", "n_heads", "ffn_hidden", "vocab_size")
# How the GPT computes its loss under TP (GPT's ``cross_entropy``, BenchConfig's field): from each rank's
# logits shard, or from the logits all-gathered on every rank (how the runs recorded before the option did).
CROSS_ENTROPY_MODES = ("vocab_parallel", "gathered")


@dataclass(frozen=True)
class GPTConfig:
    """Model shape and initialization. ``seed`` fixes the full weights for every TP size."""

    vocab_size: int
    hidden: int
    n_layers: int
    n_heads: int
    ffn_hidden: int
    max_seq_len: int
    qkv: str = "fused"
    seed: int = 0
    init_std: float = 0.02
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden", "n_layers", "n_heads", "ffn_hidden", "max_seq_len"):
            value = getattr(self, name)
            if not is_count(value):
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if not is_index(self.seed):
            raise ValueError(f"GPTConfig.seed must be a non-negative integer, got {self.seed!r}")
        if self.qkv not in QKV_MODES:
            raise ValueError(f"GPTConfig.qkv must be one of {QKV_MODES}, got {self.qkv!r}")
        for name in ("init_std", "norm_eps", "rope_theta"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"GPTConfig.{name} must be a positive number, got {value!r}")
        if self.hidden % self.n_heads != 0:
            raise ValueError(f"GPTConfig.hidden={self.hidden} is not divisible by n_heads={self.n_heads}")
        if self.head_dim % 2 != 0:
            raise ValueError(f"GPTConfig head_dim = hidden/n_heads = {self.head_dim} must be even (RoPE rotates pairs)")

    def sizes_tp_splits_unevenly(self, tp: int) -> dict[str, int]:
        """The :data:`TP_SPLIT_FIELDS` that ``tp`` does not divide, by name (empty when ``tp`` fits this model)."""
        return {name: value for name in TP_SPLIT_FIELDS if (value := getattr(self, name)) % tp}

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    @classmethod
    def preset(cls, name: str, **overrides) -> GPTConfig:
        """A named size (see ``PRESETS``), optionally with some fields replaced."""
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown GPTConfig field(s) {unknown}")
        return replace(PRESETS[name], **overrides)

    def num_params(self) -> int:
        """Parameters of the full (un-sharded) model."""
        h, f, v = self.hidden, self.ffn_hidden, self.vocab_size
        per_block = 2 * h + 4 * h * h + 2 * h * f  # two norms, q/k/v/proj, fc1/fc2
        return 2 * v * h + self.n_layers * per_block + h

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs (forward + backward) per token: ``6 N_matmul + 12 L h T`` (PaLM App. B).

        ``N_matmul`` counts the weights used in matmuls (everything but the embedding table and
        norms); the attention term counts the full (not causally halved) score and value matmuls.
        """
        t = self.max_seq_len if seq_len is None else seq_len
        return 6 * self.matmul_params() + 12 * self.n_layers * self.hidden * t

    def matmul_params(self, layers: int | None = None, head: bool = True) -> int:
        """``N_matmul``: the weights of ``layers`` blocks (default: all) and, with ``head``, of the LM head."""
        h, f = self.hidden, self.ffn_hidden
        return (self.n_layers if layers is None else layers) * (4 * h * h + 2 * h * f) + (self.vocab_size * h if head else 0)


# tiny: tests (tp=4 divides heads, hidden, ffn and vocab). small: CPU benchmarks (a few M params).
# medium (~110M) and large (~370M, GPT-2-medium shaped): GPU runs.
PRESETS: dict[str, GPTConfig] = {
    "tiny": GPTConfig(vocab_size=128, hidden=32, n_layers=2, n_heads=4, ffn_hidden=128, max_seq_len=16),
    "small": GPTConfig(vocab_size=2048, hidden=256, n_layers=4, n_heads=8, ffn_hidden=1024, max_seq_len=128),
    "medium": GPTConfig(vocab_size=16384, hidden=768, n_layers=12, n_heads=12, ffn_hidden=3072, max_seq_len=1024),
    "large": GPTConfig(vocab_size=32768, hidden=1024, n_layers=24, n_heads=16, ffn_hidden=4096, max_seq_len=1024),
}
# A LLaMA-7B-shaped model (GPTConfig fields over the large preset): the cost model's 7B (costmodel.records.MODEL_7B)
# and the calibration's Newton-Schulz target shapes (costmodel.compute_bench).
LLAMA_7B_SHAPE: dict[str, int] = {"hidden": 4096, "n_layers": 32, "n_heads": 32, "ffn_hidden": 11008, "vocab_size": 32000}


def stage_layers(n_layers: int, pp: int) -> list[range]:
    """The blocks of each of ``pp`` pipeline stages, first to last: contiguous, sizes differing by one at most, the
    larger first (the last stage also holds the head and the loss). Here, without torch, for the analysis and the
    cost model; :class:`muon_repro.model_stages.GPTStage` builds its blocks from it."""
    for name, value in (("n_layers", n_layers), ("pp", pp)):
        if not is_count(value):
            raise ValueError(f"stage_layers: {name} must be a positive integer, got {value!r}")
    if n_layers < pp:
        raise ValueError(
            f"a pipeline of pp={pp} stages needs at least one block per stage, but the model has n_layers={n_layers}; "
            "lower pp or use a deeper model"
        )
    per_stage, spare = divmod(n_layers, pp)
    ranges, start = [], 0
    for s in range(pp):
        size = per_stage + (1 if s < spare else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges


@dataclass(frozen=True)
class StagePart:
    """What part of the model a rank runs: ``layers`` blocks, the embedding or not, the final norm, LM head and loss
    (``head``) or not: all of it without pipeline stages, a stage's share otherwise."""

    layers: int
    embedding: bool = True
    head: bool = True


def stage_parts(n_layers: int, pp: int) -> tuple[StagePart, ...]:
    """What each of ``pp`` stages holds, first to last: :func:`stage_layers`' blocks, the embedding on the first
    stage, the head on the last (ValueError if ``n_layers < pp``)."""
    layers = stage_layers(n_layers, pp)
    return tuple(StagePart(len(blocks), embedding=s == 0, head=s == pp - 1) for s, blocks in enumerate(layers))
