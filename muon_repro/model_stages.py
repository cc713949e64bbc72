"""The GPT of :mod:`muon_repro.model` cut into pipeline stages by layer.

Stage ``s`` of ``pp`` holds a contiguous run of blocks (:func:`stage_layers`); the first stage also holds
the embedding, the last the final norm, the LM head and the loss::

    stage 0:       tokens -> embed -> blocks[0 : n_0]                          -> activation
    stage s:   activation ->         blocks[n_{s-1} : n_s]                     -> activation
    stage pp-1: activation ->        blocks[... : n_layers] -> final_norm -> lm_head -> loss

Boundaries: with ``q, r = divmod(n_layers, pp)`` stage ``s`` holds ``q + 1`` blocks if ``s < r``, else
``q``. The spare blocks go to the first stages because the last stage already carries the LM head and
the loss (a ``[tokens, vocab]`` matmul and its softmax), the heaviest non-block work; the embedding of
the first stage is a lookup. Every stage holds at least one block (``n_layers >= pp``).

Parameter names are the full model's (``blocks.{i}`` keeps the global layer index), so the optimizer's
routing (:func:`~muon_repro.optim.muon_param_groups`: embedding and head to AdamW by name), checkpoints
and the comparison with a single-device :class:`~muon_repro.model.GPT` all speak one vocabulary. The
weights are the full model's: every stage draws the same full tensors from ``config.seed``
(:func:`~muon_repro.model.init_full_tensors`) and keeps its own layers' TP shards, so stages of any
``pp`` and ``tp`` compose into the same function.

Tied parameters: none. :class:`~muon_repro.model.GPT` does not tie the embedding to the LM head
(``embed.weight`` and ``lm_head.weight`` are separate parameters, drawn separately), so no gradient is
shared between the first and the last stage and no all-reduce of a tied gradient (Megatron's
embedding group) is needed. Should the model ever tie them, :func:`tied_parameter_names` finds it and
the tests fail until that all-reduce is added.

Activations between stages are the residual stream ``[batch, seq, hidden]`` in fp32, replicated across
the stage's TP ranks (as everywhere in the TP model), so each TP rank sends its copy to the same TP
rank of the next stage.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from muon_repro.model import Block, RMSNorm, TPShardedModule
from muon_repro.model_config import GPTConfig, stage_layers
from muon_repro.parallel.comm import Group
from muon_repro.parallel.cross_entropy import vocab_parallel_cross_entropy
from muon_repro.parallel.tensor_parallel import ColumnParallelLinear, VocabParallelEmbedding
from muon_repro.values import is_index

FIRST_STAGE_PARAMS = ("embed.weight",)
LAST_STAGE_PARAMS = ("final_norm.weight", "lm_head.weight")


def stage_of_parameter(name: str, n_layers: int, pp: int) -> int:
    """The stage that holds full-model parameter ``name``."""
    if name in FIRST_STAGE_PARAMS:
        return 0
    if name in LAST_STAGE_PARAMS:
        return pp - 1
    if name.startswith("blocks."):
        layer = int(name.split(".")[1])
        return next(s for s, layers in enumerate(stage_layers(n_layers, pp)) if layer in layers)
    raise ValueError(f"stage_of_parameter: {name!r} is no parameter of the GPT")


def tied_parameter_names(model: nn.Module) -> list[tuple[str, str]]:
    """Pairs of parameter names that share storage in ``model`` (tied weights); empty for the GPT."""
    by_storage: dict[int, str] = {}
    tied = []
    for name, param in model.named_parameters(remove_duplicate=False):
        key = param.untyped_storage().data_ptr()
        if key in by_storage:
            tied.append((by_storage[key], name))
        else:
            by_storage[key] = name
    return tied


class GPTStage(TPShardedModule):
    """Stage ``stage`` of ``pp`` of the TP-sharded GPT: this rank's shard of this stage's layers.

    ``forward`` takes tokens ``[batch, seq]`` on the first stage, the previous stage's activation
    ``[batch, seq, hidden]`` elsewhere; it returns the activation for the next stage, or on the last stage
    (given ``targets``) the mean cross-entropy, computed as :meth:`GPT.forward` computes it.

    The full <-> shard conversion is :class:`~muon_repro.model.TPShardedModule`'s, over this stage's
    parameters: :meth:`load_full_state_dict` skips the tensors of other stages.
    """

    _skips_foreign_tensors = True

    @property
    def _shard_owner(self) -> str:
        return f"stage {self.stage} of {self.pp}"

    def __init__(
        self,
        config: GPTConfig,
        stage: int,
        pp: int,
        tp_group: Group,
        *,
        device: torch.device | str | None = None,
        cross_entropy: str = "vocab_parallel",
    ) -> None:
        super().__init__()
        if not (is_index(stage) and stage < pp):
            raise ValueError(f"GPTStage: stage must be an integer in [0, pp={pp}), got {stage!r}")
        tp = tp_group.size
        self._check_config(config, tp, cross_entropy)
        self.config = config
        self.stage, self.pp = stage, pp
        self.tp_group = tp_group
        self.cross_entropy = cross_entropy
        self.layers = stage_layers(config.n_layers, pp)[stage]
        if self.is_first:
            self.embed = VocabParallelEmbedding(config.vocab_size, config.hidden, tp_group, device=device)
        # A ModuleDict keyed by the global layer index keeps the full model's names: blocks.{i}.<...>.
        self.blocks = nn.ModuleDict({str(i): Block(config, tp_group, device) for i in self.layers})
        if self.is_last:
            self.final_norm = RMSNorm(config.hidden, config.norm_eps, device)
            gathered = cross_entropy == "gathered"
            self.lm_head = ColumnParallelLinear(config.hidden, config.vocab_size, tp_group, gather_output=gathered, device=device)
            self.vocab_start = tp_group.rank * (config.vocab_size // tp)
        self._finish_init(config, device)

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.pp - 1

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        if self.is_first and x.dim() != 2:
            raise ValueError(f"stage 0 takes tokens [batch, seq], got shape {tuple(x.shape)}")
        if not self.is_first and (x.dim() != 3 or x.shape[-1] != self.config.hidden):
            raise ValueError(f"stage {self.stage} takes activations [batch, seq, {self.config.hidden}], got {tuple(x.shape)}")
        t = x.shape[1]
        if t > self.config.max_seq_len:
            raise ValueError(f"sequence length {t} exceeds max_seq_len={self.config.max_seq_len}")
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        if self.is_first:
            x = self.embed(x)
        for block in self.blocks.values():
            x = block(x, cos, sin)
        if not self.is_last:
            return x
        if targets is None:
            raise ValueError(f"the last stage (stage {self.stage}) computes the loss: pass targets [batch, seq]")
        logits = self.lm_head(self.final_norm(x))
        flat_logits, flat_targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
        if self.cross_entropy == "gathered":
            return F.cross_entropy(flat_logits, flat_targets)
        return vocab_parallel_cross_entropy(flat_logits, flat_targets, self.tp_group, self.vocab_start)

    def activation_shape(self, batch: int, seq: int) -> tuple[int, int, int]:
        """Shape of the activation this stage receives (and sends) for a micro-batch of ``batch`` sequences."""
        return (batch, seq, self.config.hidden)
