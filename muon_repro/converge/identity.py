"""What makes two convergence runs the same run: config, corpus, tokenizer and backend; torch-free.

A run folder is named ``<optimizer>_lr<lr>_steps<steps>_seed<seed>`` only, so a request for another
corpus, vocabulary, model shape or backend meets the same folders. A complete run is reused, and a
checkpoint resumed, only when every field of :func:`run_identity` agrees; otherwise ``converge``
refuses, naming the fields and ``--force`` (which trains the run again in place), and a checkpoint
of another identity is not resumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muon_repro.converge.config import ConvergeConfig

SHOWN_RUNS = 5  # differing runs a refusal lists one by one (the rest are counted): enough to see the pattern
DIGEST_SHOWN = 12  # hex digits of a sha256 a message shows: enough to tell two digests apart


def run_identity(cfg: ConvergeConfig, facts: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """What a run's numbers depend on besides the code: its config, the text (split included), the
    tokenizer (its vocabulary and merges) and the collectives' backend. ``facts``: ``TokenData.facts``."""
    tokenizer = facts.get("tokenizer") or {}
    return {
        "config": cfg.to_dict(),
        "corpus": facts.get("spec"),
        "corpus_sha256": facts.get("sha256"),
        "vocab_size": tokenizer.get("vocab_size"),
        "tokenizer_sha256": tokenizer.get("sha256"),
        "backend": backend,
    }


def recorded_identity(record: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`run_identity` as a run's ``convergence.json`` states it (absent facts read as None)."""
    corpus = record.get("corpus") if isinstance(record.get("corpus"), Mapping) else {}
    tokenizer = corpus.get("tokenizer") if isinstance(corpus.get("tokenizer"), Mapping) else {}
    return {
        "config": record.get("config"),
        "corpus": corpus.get("spec"),
        "corpus_sha256": corpus.get("sha256"),
        "vocab_size": tokenizer.get("vocab_size"),
        "tokenizer_sha256": tokenizer.get("sha256"),
        "backend": record.get("backend"),
    }


def _shown(value: Any, field: str) -> str:
    if field.endswith("sha256") and isinstance(value, str):
        return value[:DIGEST_SHOWN]
    return repr(value)


def identity_differences(recorded: Mapping[str, Any], asked: Mapping[str, Any]) -> list[str]:
    """Each differing field as ``field: recorded X, asked Y`` (config fields as ``config.<name>``); empty when equal.

    The corpus spec (``--corpus``) is named only beside a differing text: the same files under another
    path are the same corpus."""
    differences = []
    old_config, new_config = recorded.get("config"), asked["config"]
    if not isinstance(old_config, Mapping):
        differences.append(f"config: recorded {old_config!r}, asked {dict(new_config)!r}")
    else:
        for name in sorted(set(old_config) | set(new_config)):
            if old_config.get(name) != new_config.get(name):
                differences.append(f"config.{name}: recorded {old_config.get(name)!r}, asked {new_config.get(name)!r}")
    for field in ("corpus_sha256", "vocab_size", "tokenizer_sha256", "backend"):
        if recorded.get(field) != asked.get(field):
            differences.append(f"{field}: recorded {_shown(recorded.get(field), field)}, asked {_shown(asked.get(field), field)}")
    if recorded.get("corpus_sha256") != asked.get("corpus_sha256") and recorded.get("corpus") != asked.get("corpus"):
        differences.insert(0, f"corpus: recorded {recorded.get('corpus')!r}, asked {asked.get('corpus')!r}")
    return differences


class RunMismatch(ValueError):
    """Complete runs in the output folder were trained otherwise than asked: the message names them, the
    differing fields and ``--force``."""

    def __init__(self, folder: str, mismatched: dict[str, list[str]]) -> None:
        shown = [f"{name} ({'; '.join(diffs)})" for name, diffs in list(mismatched.items())[:SHOWN_RUNS]]
        more = len(mismatched) - len(shown)
        listed = ", ".join(shown) + (f", and {more} more" if more > 0 else "")
        super().__init__(
            f"{len(mismatched)} complete run(s) in {folder} were trained with other settings than asked, so they are not "
            f"reused: {listed}. Train them again with --force (each run folder is replaced), or train into another --out"
        )
        self.mismatched = mismatched
