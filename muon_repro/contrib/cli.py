"""``muon-repro contribute | review``: runs from other hardware, offered and checked as Hub pull requests."""

from __future__ import annotations

import argparse
from pathlib import Path

from muon_repro.hub.cli import add_timeout_argument
from muon_repro.hub.errors import hub_errors, request_failed


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "contribute", help="check runs recorded on your hardware, open a pull request adding them to the dataset"
    )
    p.add_argument("--repo-id", required=True, help="ORG/NAME of the dataset repository")
    p.add_argument(
        "--runs",
        type=Path,
        required=True,
        metavar="DIR",
        help="folder of runs: <profile>/<group>/<name>/trial<k>/ (or the older <group>/<name>/trial<k>/)",
    )
    p.add_argument("--revision", default="main", help="the branch the pull request targets (default: %(default)s)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan (files added, manifest lines, files left out); send nothing"
    )
    add_timeout_argument(p)
    p.set_defaults(func=_contribute)

    p = subparsers.add_parser("review", help="check a contributed pull request and show the claims before and after it")
    p.add_argument("repo_id", metavar="ORG/NAME")
    p.add_argument("--pr", type=int, required=True, metavar="N", help="the pull request's number (refs/pr/N)")
    p.add_argument("--workers", type=int, default=None, help="processes for the analysis (default: the CPU count, at most 8)")
    add_timeout_argument(p)
    p.set_defaults(func=_review)


def _contribute(args: argparse.Namespace) -> int:
    from muon_repro.contrib.contribute import contribute

    try:
        contribute(args.runs, args.repo_id, revision=args.revision, dry_run=args.dry_run, timeout=args.timeout)
    except hub_errors() as exc:
        raise ValueError(request_failed(exc, "; nothing was contributed")) from exc
    return 0


def _review(args: argparse.Namespace) -> int:
    from muon_repro.contrib.review import review

    try:
        result = review(args.repo_id, args.pr, workers=args.workers, timeout=args.timeout)
    except hub_errors() as exc:
        raise ValueError(request_failed(exc)) from exc
    return 0 if result.ok else 1
