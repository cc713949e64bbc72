"""What a bundle says about itself: repository, version, date, license, authors; checked once, here."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

from muon_repro.dataset.naming import DEFAULT_REPO_ID, check_repo_id, check_version, dataset_url, tag_for

DEFAULT_LICENSE = "MIT"
DEFAULT_AUTHORS = ("muon_repro developers",)
DEFAULT_PRETTY_NAME = "Distributed Muon vs AdamW: profiler traces and metrics"
ABSTRACT = (
    "PyTorch profiler traces, metrics tables, figures and a report comparing distributed Muon with "
    "distributed AdamW (ZeRO-1 over data parallel, Megatron-style tensor parallel)."
)  # CITATION.cff's abstract and croissant.json's description
TAGS = [
    "muon",
    "optimizer",
    "distributed-training",
    "tensor-parallelism",
    "zero-redundancy-optimizer",
    "pytorch-profiler",
    "traces",
    "benchmark",
    "reproducibility",
]  # the card's tags, croissant.json's keywords
PAPER = {
    "title": "Muon is Scalable for LLM Training",
    "authors": "Jingyuan Liu and Jianlin Su and Xingcheng Yao and Zhejun Jiang and Guokun Lai and Yulun Du and others",
    "arxiv": "2502.16982",
    "year": 2025,
}
_SPDX = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]*")


def default_date() -> str:
    """``SOURCE_DATE_EPOCH`` if set (reproducible builds), else today, UTC, as YYYY-MM-DD."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        try:
            return datetime.fromtimestamp(int(epoch), timezone.utc).date().isoformat()
        except ValueError as exc:
            raise ValueError(f"SOURCE_DATE_EPOCH={epoch!r} is not a number of seconds; unset it or fix it") from exc
    return datetime.now(timezone.utc).date().isoformat()


@dataclass(frozen=True)
class BundleMeta:
    repo_id: str = DEFAULT_REPO_ID
    version: str = "0.1.0"
    date: str = field(default_factory=default_date)
    license: str = DEFAULT_LICENSE  # an SPDX id: MIT, Apache-2.0, CC-BY-4.0, ...
    authors: tuple[str, ...] = DEFAULT_AUTHORS
    pretty_name: str = DEFAULT_PRETTY_NAME
    code_url: str | None = None  # where the muon_repro source lives, if public

    def __post_init__(self) -> None:
        check_repo_id(self.repo_id)
        check_version(self.version)
        try:
            date.fromisoformat(self.date)
        except ValueError as exc:
            raise ValueError(f"invalid date {self.date!r}: expected YYYY-MM-DD") from exc
        if not _SPDX.fullmatch(self.license):
            raise ValueError(f"invalid license {self.license!r}: expected an SPDX identifier such as MIT or CC-BY-4.0")
        if not self.authors or not all(a.strip() for a in self.authors):
            raise ValueError("at least one non-empty author name is needed (--author NAME)")
        if not self.pretty_name.strip():
            raise ValueError("the pretty name cannot be empty")

    @property
    def tag(self) -> str:
        return tag_for(self.version)

    @property
    def url(self) -> str:
        return dataset_url(self.repo_id)

    @property
    def hub_license(self) -> str:
        """The card's ``license:``: the Hub uses lower-case SPDX ids (mit, apache-2.0, cc-by-4.0)."""
        return self.license.lower()
