"""Synthetic, learnable token streams: no dataset download, loss that visibly falls.

Each sequence walks a fixed random permutation of the vocabulary (``next = perm[token]``) from a
random start, so a model that learns the permutation predicts every token but the first.
"""

from __future__ import annotations

import torch


class PermutationStream:
    """Batches of ``[batch, seq_len]`` tokens and next-token targets, identical on every rank."""

    def __init__(self, vocab_size: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab_size
        self.seed = seed
        self.perm = torch.randperm(vocab_size, generator=gen)

    def global_batch(self, step: int, batch: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        tokens = torch.empty(batch, seq_len + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(self.vocab_size, (batch,), generator=gen)
        for t in range(seq_len):
            tokens[:, t + 1] = self.perm[tokens[:, t]]
        return tokens[:, :-1], tokens[:, 1:]

    def local_batch(self, step: int, batch_per_dp: int, seq_len: int, dp: int, dp_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This DP rank's slice of the global batch (TP ranks of one DP rank see the same data)."""
        tokens, targets = self.global_batch(step, batch_per_dp * dp, seq_len)
        rows = slice(dp_rank * batch_per_dp, (dp_rank + 1) * batch_per_dp)
        return tokens[rows], targets[rows]
