"""What a bundle says about itself: repository, version, date, license, authors; checked once, here."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

from muon_repro.dataset.naming import DEFAULT_REPO_ID, check_repo_id, check_version, dataset_url, tag_for

DEFAULT_LICENSE = "MIT"
AUTHORS_FILE = Path(__file__).with_name("authors.txt")  # the project's authors, checked in (and in the wheel)
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
# The Hub's task categories name model tasks; traces and timing tables of an optimizer fit none, so "other"
# (the Hub's own category for datasets outside its task list), and the tags above say what it is.
TASK_CATEGORIES = ("other",)
PAPER = {
    "title": "Muon is Scalable for LLM Training",
    # (given names, family name) of every author, in the paper's order (arXiv 2502.16982)
    "authors": tuple(
        tuple(name.split(" ", 1))
        for name in (
            "Jingyuan Liu", "Jianlin Su", "Xingcheng Yao", "Zhejun Jiang", "Guokun Lai", "Yulun Du", "Yidao Qin",
            "Weixin Xu", "Enzhe Lu", "Junjie Yan", "Yanru Chen", "Huabin Zheng", "Yibo Liu", "Shaowei Liu",
            "Bohong Yin", "Weiran He", "Han Zhu", "Yuzhi Wang", "Jianzhou Wang", "Mengnan Dong", "Zheng Zhang",
            "Yongsheng Kang", "Hao Zhang", "Xinran Xu", "Yutao Zhang", "Yuxin Wu", "Xinyu Zhou", "Zhilin Yang",
        )
    ),
    "arxiv": "2502.16982",
    "year": 2025,
}  # fmt: skip
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


def project_authors() -> tuple[str, ...]:
    """The checked-in list of the project's authors (``muon_repro/dataset/authors.txt``: one a line, ``#`` comments)."""
    try:
        lines = AUTHORS_FILE.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"{AUTHORS_FILE}: unreadable ({exc}); name the authors with --author NAME") from exc
    names = tuple(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
    if not names:
        raise ValueError(f"{AUTHORS_FILE} names no author: add one a line, or name them with --author NAME")
    return names


def git_user_name() -> str | None:
    """``git config user.name`` where this runs, or None (no git, no name set, not answering within 10 s)."""
    try:
        out = subprocess.run(["git", "config", "user.name"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    name = out.stdout.strip()
    return name if out.returncode == 0 and name else None


def resolve_authors(given: Sequence[str] | None = None, *, repo_id: str = DEFAULT_REPO_ID) -> tuple[str, ...]:
    """The authors the dataset's citation names, the first of these that gives any:

    1. ``given``: the publisher's ``--author NAME`` (repeatable), as written, in order;
    2. for a repository other than the project's own (``repo_id`` is not :data:`DEFAULT_REPO_ID`: a
       publisher's copy), ``git config user.name`` on this machine;
    3. the checked-in list of the project's authors, :func:`project_authors`.

    The project's own dataset (the committed card, CITATION.cff, croissant.json and report, which
    ``muon-repro run`` writes) never asks git: its citation must not depend on the machine, and the
    offline job runs where git has no name. Never a placeholder: an empty list is an error.
    """
    names = tuple(a.strip() for a in given or ())
    if names:
        if not all(names):
            raise ValueError("an empty --author: give each author's name")
        return names
    if repo_id != DEFAULT_REPO_ID:
        name = git_user_name()
        if name:
            return (name,)
    return project_authors()


def dataset_date(metrics: str | Path) -> str:
    """The date a dataset built from ``metrics`` cites when none is given: ``SOURCE_DATE_EPOCH``'s day where it is set
    (reproducible builds), else :func:`release_date`. Every command that cites one (run, report, bundle, card) uses it."""
    return default_date() if os.environ.get("SOURCE_DATE_EPOCH", "").strip() else release_date(metrics)


DATE_HELP = (
    "release date YYYY-MM-DD (default: $SOURCE_DATE_EPOCH's day if set, else the day of the newest run in the tables, "
    "so the same data always gets the same date; today if no run says)"
)
AUTHOR_HELP = (
    "an author (person or team); repeat for more (default: for the project's repository its checked-in list, for "
    "another git config user.name, else that list; see docs/publishing.md)"
)


def release_date(metrics: str | Path) -> str:
    """The day the newest run was recorded (runs.recorded_at, YYYY-MM-DD), so the card, the report's citation
    and the manifest follow from the data; today (local) if no run says."""
    from muon_repro.tables.io import read_table

    try:
        recorded = read_table(Path(metrics) / "runs.parquet", "runs", check_set=False)["recorded_at"].dropna()
    except (OSError, ValueError, KeyError):
        recorded = []
    return max(str(r) for r in recorded)[:10] if len(recorded) else datetime.now().date().isoformat()


@dataclass(frozen=True)
class BundleMeta:
    repo_id: str = DEFAULT_REPO_ID
    version: str = "0.1.0"
    date: str = field(default_factory=default_date)
    license: str = DEFAULT_LICENSE  # an SPDX id: MIT, Apache-2.0, CC-BY-4.0, ...
    authors: tuple[str, ...] = field(default_factory=project_authors)  # see resolve_authors for the CLI's order
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
