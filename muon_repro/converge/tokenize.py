"""A byte-level BPE trained on the training split (Hugging Face ``tokenizers``); torch-free.

Byte-level, so any text round-trips exactly (``decode(encode(t)) == t``) and no token is unknown.
The vocabulary is kept small (default 512) so that the embedding table and the LM head, which
AdamW manages under either optimizer, are a minority of the reference model's parameters (14%); in a model as
narrow as the compute-optimal configuration's (hidden 32) they are still the majority (57%).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used: reading the module does not load tokenizers
    from tokenizers import Tokenizer

from muon_repro.values import is_count

DEFAULT_VOCAB = 512


def train_bpe(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB) -> Tokenizer:
    """A byte-level BPE ``tokenizers.Tokenizer`` with ``vocab_size`` tokens (the 256 bytes plus merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if not (is_count(vocab_size) and vocab_size >= 257):
        raise ValueError(f"vocab_size must be an integer above 256 (the byte alphabet), got {vocab_size!r}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return tok


def encode(tok: Tokenizer, texts: Iterable[str]) -> np.ndarray:
    """Token ids of the texts, concatenated in order (documents joined back to back), as int32."""
    ids = [np.asarray(e.ids, dtype=np.int32) for e in tok.encode_batch(list(texts), add_special_tokens=False)]
    return np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)


def decode(tok: Tokenizer, ids: Iterable[int]) -> str:
    return tok.decode(list(int(i) for i in ids), skip_special_tokens=False)


def tokenizer_sha256(tok: Tokenizer) -> str:
    """Digest of the tokenizer's JSON: identifies the vocabulary and merges a run used."""
    return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()
