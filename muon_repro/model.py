"""A GPT-style decoder whose attention and MLP are Megatron-style tensor parallel.

Block (pre-norm, no biases, RoPE positions, so the only parameters are listed below)::

    h = h + attn.proj(attention(rope(q), rope(k), v))      q, k, v from attn_norm(h)
    h = h + mlp.fc2(gelu(mlp.fc1(mlp_norm(h))))

Parameters and their TP sharding (``param.tp_partition_dim``; see
:mod:`muon_repro.parallel.tensor_parallel`)::

    embed.weight                     [vocab, hidden]        vocab-parallel    dim 0
    blocks.{i}.attn_norm.weight      [hidden]               replicated
    blocks.{i}.attn.qkv.weight       [3*hidden, hidden]     column-parallel   dim 0   (qkv="fused")
    blocks.{i}.attn.{q,k,v}.weight   [hidden, hidden]       column-parallel   dim 0   (qkv="split")
    blocks.{i}.attn.proj.weight      [hidden, hidden]       row-parallel      dim 1
    blocks.{i}.mlp_norm.weight       [hidden]               replicated
    blocks.{i}.mlp.fc1.weight        [ffn_hidden, hidden]   column-parallel   dim 0
    blocks.{i}.mlp.fc2.weight        [hidden, ffn_hidden]   row-parallel      dim 1
    final_norm.weight                [hidden]               replicated
    lm_head.weight                   [vocab, hidden]        column-parallel   dim 0

The loss (``cross_entropy``): ``"vocab_parallel"`` (default, Megatron's) computes it from each rank's
logits shard ``[tokens, vocab/tp]`` with three all-reduces of ``[tokens]`` each
(:mod:`muon_repro.parallel.cross_entropy`); ``"gathered"`` all-gathers the full ``[tokens, vocab]``
logits on every rank and applies ``F.cross_entropy`` there (how the runs recorded before the option
trained). Both compute the same function.

Same function for every TP size: the full (tp=1) weights are drawn from
``torch.Generator().manual_seed(config.seed)`` in one fixed order, then each rank keeps its shard.
Fused and split QKV draw the same numbers too (``qkv = [q; k; v]``), so they also agree.

Fused QKV layout under TP (Megatron: each rank holds q, k and v of *its* heads). With
``s = hidden / tp`` the canonical full weight is ``[Wq; Wk; Wv]`` and rank ``r`` holds::

    shard_r = [Wq[r*s:(r+1)*s]; Wk[r*s:(r+1)*s]; Wv[r*s:(r+1)*s]]          # [3s, hidden]

so concatenating the shards along dim 0 gives the canonical rows in the order
``q_0 k_0 v_0 q_1 k_1 v_1 ...`` (chunk ``j`` of ``q``/``k``/``v`` belonging to rank ``j``): a
row permutation of ``[Wq; Wk; Wv]``, the identity for tp=1. Newton-Schulz is equivariant under
row permutations (``NS(P G) = P NS(G)``), so a Muon update computed on the concatenated shards
and cut again along dim 0 equals the canonical one. :meth:`GPT.shard_full_tensor` and
:meth:`GPT.assemble_full_tensor` convert between the layouts (for weights and gradients alike).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from muon_repro.model_config import CROSS_ENTROPY_MODES, PRESETS, QKV_MODES, TP_SPLIT_FIELDS, GPTConfig
from muon_repro.parallel.comm import Group
from muon_repro.parallel.cross_entropy import vocab_parallel_cross_entropy
from muon_repro.parallel.tensor_parallel import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    copy_to_tp,
    divide,
    gather_from_tp,
    tp_partition_dim,
)

# The config and the mode names live in model_config (torch-free).
__all__ = ["GPT", "GPTConfig", "PRESETS", "QKV_MODES", "CROSS_ENTROPY_MODES"]


# ---------------------------------------------------------------- layers


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned per-feature gain (replicated across TP ranks)."""

    def __init__(self, hidden: int, eps: float, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def rope_tables(config: GPTConfig, device: torch.device | str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, ``[max_seq_len, head_dim/2]``, for rotating channel pairs ``(j, j + head_dim/2)``."""
    half = config.head_dim // 2
    inv_freq = config.rope_theta ** (-torch.arange(half, dtype=torch.float64) / half)
    angles = torch.outer(torch.arange(config.max_seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().float().to(device), angles.sin().float().to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[batch, heads, seq, head_dim]`` by position (no parameters, so TP-agnostic)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    """Causal self-attention over this rank's ``n_heads/tp`` heads (column-parallel in, row-parallel out)."""

    def __init__(self, config: GPTConfig, group: Group, device: torch.device | str | None) -> None:
        super().__init__()
        h = config.hidden
        self.group = group
        self.fused = config.qkv == "fused"
        self.local_heads = divide(config.n_heads, group.size, "n_heads")
        self.head_dim = config.head_dim
        # Enter the TP region once in forward, so split Q/K/V costs one backward all-reduce, like fused.
        if self.fused:
            self.qkv = ColumnParallelLinear(h, 3 * h, group, copy_input=False, device=device)
        else:
            self.q = ColumnParallelLinear(h, h, group, copy_input=False, device=device)
            self.k = ColumnParallelLinear(h, h, group, copy_input=False, device=device)
            self.v = ColumnParallelLinear(h, h, group, copy_input=False, device=device)
        self.proj = RowParallelLinear(h, h, group, device=device)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        x = copy_to_tp(x, self.group)
        if self.fused:
            q, k, v = self.qkv(x).chunk(3, dim=-1)  # local layout [q_r; k_r; v_r]
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q, k, v = (z.view(b, t, self.local_heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, self.local_heads * self.head_dim))


class MLP(nn.Module):
    """``fc2(gelu(fc1(x)))`` with fc1 column-parallel and fc2 row-parallel over ``ffn_hidden``."""

    def __init__(self, config: GPTConfig, group: Group, device: torch.device | str | None) -> None:
        super().__init__()
        self.fc1 = ColumnParallelLinear(config.hidden, config.ffn_hidden, group, device=device)
        self.fc2 = RowParallelLinear(config.ffn_hidden, config.hidden, group, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm residual block: attention, then MLP."""

    def __init__(self, config: GPTConfig, group: Group, device: torch.device | str | None) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden, config.norm_eps, device)
        self.attn = Attention(config, group, device)
        self.mlp_norm = RMSNorm(config.hidden, config.norm_eps, device)
        self.mlp = MLP(config, group, device)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


# ---------------------------------------------------------------- full weights and their shards


def _is_fused_qkv(name: str) -> bool:
    return name.endswith(".attn.qkv.weight")


def init_full_tensors(config: GPTConfig) -> Iterator[tuple[str, torch.Tensor]]:
    """The full (tp=1, canonical layout) weights, drawn in one fixed order from ``config.seed``.

    Normal(0, init_std) for matrices, with the residual-stream outputs (``proj``, ``fc2``) scaled
    by ``1/sqrt(2 n_layers)`` (GPT-2); norm gains are ones. Yielded one at a time so that a rank
    never holds more than one full matrix besides its shards.
    """
    gen = torch.Generator().manual_seed(config.seed)
    h, f, v, std = config.hidden, config.ffn_hidden, config.vocab_size, config.init_std
    out_std = std / math.sqrt(2 * config.n_layers)

    def normal(shape: tuple[int, ...], scale: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * scale

    yield "embed.weight", normal((v, h), std)
    for i in range(config.n_layers):
        p = f"blocks.{i}."
        yield p + "attn_norm.weight", torch.ones(h)
        q, k, vv = normal((h, h), std), normal((h, h), std), normal((h, h), std)
        if config.qkv == "fused":
            yield p + "attn.qkv.weight", torch.cat((q, k, vv))
        else:
            yield from ((p + "attn.q.weight", q), (p + "attn.k.weight", k), (p + "attn.v.weight", vv))
        yield p + "attn.proj.weight", normal((h, h), out_std)
        yield p + "mlp_norm.weight", torch.ones(h)
        yield p + "mlp.fc1.weight", normal((f, h), std)
        yield p + "mlp.fc2.weight", normal((h, f), out_std)
    yield "final_norm.weight", torch.ones(h)
    yield "lm_head.weight", normal((v, h), std)


def shard_tensor(name: str, full: torch.Tensor, dim: int | None, rank: int, size: int) -> torch.Tensor:
    """Rank ``rank``'s shard of the canonical full tensor of parameter ``name`` (cut along ``dim``)."""
    if dim is None or size == 1:
        return full.clone()
    if _is_fused_qkv(name):
        return torch.cat([part.chunk(size, dim=0)[rank] for part in full.chunk(3, dim=0)])
    return full.chunk(size, dim=dim)[rank].clone()


def assemble_tensor(name: str, shards: list[torch.Tensor], dim: int | None) -> torch.Tensor:
    """Inverse of :func:`shard_tensor`: the canonical full tensor from the shards in rank order."""
    if dim is None or len(shards) == 1:
        return shards[0].clone()
    if _is_fused_qkv(name):
        q, k, v = zip(*(shard.chunk(3, dim=0) for shard in shards))
        return torch.cat([*q, *k, *v])
    return torch.cat(shards, dim=dim)


class TPShardedModule(nn.Module):
    """A module holding this rank's TP shards, with the full (canonical tp=1) <-> shard conversion of its
    parameters (weights and gradients alike): the base of :class:`GPT` and
    :class:`~muon_repro.model_stages.GPTStage`, so the conversion is written once.

    A subclass sets ``tp_group``, builds its layers, then calls :meth:`_finish_init`; it says in
    ``_shard_owner`` what its errors call it. A pipeline stage is handed the whole model's tensors and keeps
    its own layers' only, so it sets ``_skips_foreign_tensors``.
    """

    tp_group: Group
    _tp_dims: dict[str, int | None]  # each parameter's tp_partition_dim, by full-model name
    _shard_owner: str
    _skips_foreign_tensors: bool = False

    def _check_config(self, config: GPTConfig, tp: int, cross_entropy: str) -> None:
        """``ValueError`` naming the class for an unknown loss mode or a size that ``tp`` does not divide."""
        if cross_entropy not in CROSS_ENTROPY_MODES:
            owner = type(self).__name__
            raise ValueError(f"{owner}: unknown cross_entropy {cross_entropy!r}; choose one of {', '.join(CROSS_ENTROPY_MODES)}")
        for name in TP_SPLIT_FIELDS:
            divide(getattr(config, name), tp, name)

    def _finish_init(self, config: GPTConfig, device: torch.device | str | None) -> None:
        """Construction's last step, once every layer exists: the RoPE tables (buffers, not parameters), how each
        parameter is cut, and this rank's shard of the full weights drawn from ``config.seed``."""
        cos, sin = rope_tables(config, device)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._tp_dims = {name: tp_partition_dim(p) for name, p in self.named_parameters()}
        self.load_full_state_dict(init_full_tensors(config))

    def _dim_of(self, name: str) -> int | None:
        if name not in self._tp_dims:
            raise ValueError(f"{self._shard_owner} has no parameter {name!r}")
        return self._tp_dims[name]

    def shard_full_tensor(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's shard of a full tensor of parameter ``name`` in canonical tp=1 layout."""
        return shard_tensor(name, full, self._dim_of(name), self.tp_group.rank, self.tp_group.size)

    def assemble_full_tensor(self, name: str, shards: list[torch.Tensor]) -> torch.Tensor:
        """The canonical tp=1 tensor of parameter ``name`` from every rank's shard, in tp-rank order."""
        if len(shards) != self.tp_group.size:
            raise ValueError(f"assemble_full_tensor({name!r}): got {len(shards)} shards, tp={self.tp_group.size}")
        return assemble_tensor(name, shards, self._dim_of(name))

    def full_state_dict_from_shards(self, shard_dicts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Canonical full tensors from per-rank ``{name: shard}`` dicts (state or grads), in tp-rank order."""
        return {name: self.assemble_full_tensor(name, [d[name] for d in shard_dicts]) for name in shard_dicts[0]}

    @torch.no_grad()
    def load_full_state_dict(self, full: dict[str, torch.Tensor] | Iterator[tuple[str, torch.Tensor]]) -> None:
        """Copy this rank's shard of every full (canonical tp=1) tensor into the parameters."""
        params = dict(self.named_parameters())
        items = full.items() if isinstance(full, dict) else full
        seen = set()
        for name, tensor in items:
            if name not in params:
                if self._skips_foreign_tensors:
                    continue
                raise ValueError(f"unexpected parameter {name!r} in full state dict for {self._shard_owner}")
            params[name].copy_(self.shard_full_tensor(name, tensor))
            seen.add(name)
        missing = sorted(set(params) - seen)
        if missing:
            raise ValueError(f"full state dict is missing {missing} ({self._shard_owner})")


# ---------------------------------------------------------------- model


class GPT(TPShardedModule):
    """Tensor-parallel GPT: this rank's shard of the model defined by ``config``.

    ``tp_group`` is the group of ranks that share each layer (``Group.single("tp")`` for one
    process). Building communicates nothing; forward and backward communicate over ``tp_group``.
    ``cross_entropy`` says how the loss meets the vocab-sharded logits (one of
    :data:`CROSS_ENTROPY_MODES`; see the module docstring): ``"vocab_parallel"`` never gathers them
    for the loss, ``"gathered"`` does (the recorded runs' model, kept to reproduce them).
    """

    _shard_owner = "the GPT"

    def __init__(
        self,
        config: GPTConfig,
        tp_group: Group,
        *,
        device: torch.device | str | None = None,
        cross_entropy: str = "vocab_parallel",
    ) -> None:
        super().__init__()
        tp = tp_group.size
        self._check_config(config, tp, cross_entropy)
        self.config = config
        self.tp_group = tp_group
        self.cross_entropy = cross_entropy
        self.embed = VocabParallelEmbedding(config.vocab_size, config.hidden, tp_group, device=device)
        self.blocks = nn.ModuleList(Block(config, tp_group, device) for _ in range(config.n_layers))
        self.final_norm = RMSNorm(config.hidden, config.norm_eps, device)
        gathered = cross_entropy == "gathered"
        self.lm_head = ColumnParallelLinear(config.hidden, config.vocab_size, tp_group, gather_output=gathered, device=device)
        # The first vocabulary column of this rank's logits (lm_head's rows are cut in rank order).
        self.vocab_start = tp_group.rank * (config.vocab_size // tp)
        self._finish_init(config, device)

    # -- forward

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Full-vocab logits ``[batch, seq, vocab]`` (on every rank), or with ``targets`` ``[batch, seq]``
        the mean cross-entropy (the same on every rank; ``"vocab_parallel"`` gathers no logits for it)."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [batch, seq], got shape {tuple(tokens.shape)}")
        t = tokens.shape[1]
        if t > self.config.max_seq_len:
            raise ValueError(f"sequence length {t} exceeds max_seq_len={self.config.max_seq_len}")
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.lm_head(self.final_norm(x))  # [batch, seq, vocab], or this rank's [batch, seq, vocab/tp]
        if targets is None:  # a caller that wants the logits gets all of them, whichever the loss
            return logits if self.lm_head.gather_output else gather_from_tp(logits, self.tp_group)
        flat_logits, flat_targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
        if self.cross_entropy == "gathered":
            return F.cross_entropy(flat_logits, flat_targets)
        return vocab_parallel_cross_entropy(flat_logits, flat_targets, self.tp_group, self.vocab_start)

    # -- accounting

    def num_params(self, full: bool = True) -> int:
        """Parameters of the full model (``full=True``) or of this rank's shard."""
        if full:
            return self.config.num_params()
        return sum(p.numel() for p in self.parameters())
