"""muon-repro contribute | review: runs from other hardware, offered and checked as Hub pull requests."""

from __future__ import annotations

import argparse
from pathlib import Path

from muon_repro.analyze_cli import workers_count
from muon_repro.contrib.limits import MAX_PR_BYTES, MAX_PR_FILES
from muon_repro.hub.cli import add_repo_id_argument, add_timeout_argument, repo_id_of
from muon_repro.hub.errors import hub_errors, request_failed
from muon_repro.hub.interrupts import NOTHING_SENT, say_interrupted


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "contribute",
        help="check runs recorded on your hardware, open a pull request adding them to the dataset",
        description=(
            "Check the runs under --runs (every problem listed, naming the file and what to do), plan them against "
            "the head of --revision (each run's files under traces/<profile>/<group>/<name>/trial<k>/, and the "
            "dataset's manifest with one line per added file) and open one Hub pull request that adds them; its URL "
            "is printed. Contributions add runs, they never replace one. --dry-run prints the plan and sends "
            "nothing. The token is what huggingface_hub finds (HF_TOKEN, hf auth login); it is never printed."
        ),
    )
    add_repo_id_argument(p)
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

    p = subparsers.add_parser(
        "review",
        help="check a contributed pull request and show the claims before and after it",
        description=(
            "A maintainer's check of pull request refs/pr/N: that it only adds run files under traces/<profile>/ "
            "and their manifest lines, and that every added run passes the checks contribute makes. Then, per "
            "hardware profile, the dataset's runs are analyzed again together with the pull request's and the "
            "claims are printed before and after. Nothing is written to the Hub; merging is the maintainer's "
            "decision. Exit status 0 when every check passed, 1 otherwise."
        ),
    )
    add_repo_id_argument(p, positional_alias=True)
    p.add_argument("--pr", type=int, required=True, metavar="N", help="the pull request's number (refs/pr/N)")
    p.add_argument(
        "--workers", type=workers_count, default=None, help="processes for the analysis (default: the CPU count, at most 8)"
    )
    p.add_argument(
        "--max-files",
        type=int,
        default=MAX_PR_FILES,
        metavar="N",
        help="refuse a pull request adding more files, before downloading any (default: %(default)s)",
    )
    p.add_argument(
        "--max-bytes",
        type=_byte_count,
        default=MAX_PR_BYTES,
        metavar="BYTES",
        help="refuse a pull request adding more bytes, before downloading any; a unit K, M, G or T may follow (binary: "
        "16G = 16 GiB) (default: %(default)s, 16 GiB)",
    )
    add_timeout_argument(p)
    p.set_defaults(func=_review)


def _contribute(args: argparse.Namespace) -> int:
    from muon_repro.contrib.contribute import contribute

    try:
        contribute(args.runs, args.repo_id, revision=args.revision, dry_run=args.dry_run, timeout=args.timeout)
    except hub_errors() as exc:
        raise ValueError(request_failed(exc, "; nothing was contributed")) from exc
    except KeyboardInterrupt as exc:  # ContributeInterrupted says what the upload may have left
        return say_interrupted("contribute", str(exc) or NOTHING_SENT)
    return 0


def _review(args: argparse.Namespace) -> int:
    from muon_repro.contrib.review import review

    try:
        result = review(
            repo_id_of(args),
            args.pr,
            workers=args.workers,
            timeout=args.timeout,
            max_files=args.max_files,
            max_bytes=args.max_bytes,
        )
    except hub_errors() as exc:
        raise ValueError(request_failed(exc)) from exc
    except KeyboardInterrupt:
        return say_interrupted("review", "nothing was changed on the Hub (a review only reads it)")
    return 0 if result.ok else 1


def _byte_count(text: str) -> int:
    """``--max-bytes``: bytes, with the units analyze's size limits take (16G = 16 GiB)."""
    from muon_repro.analysis.limits import parse_count

    try:
        return parse_count(text, is_size=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
