"""muon-repro publish | download: a bundle to the Hub as one tagged commit, and one version back."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from muon_repro.dataset.bundle import DEFAULT_OUT

REPO_ID_METAVAR = "ORG/NAME"


def add_timeout_argument(p: argparse.ArgumentParser) -> None:
    """``--timeout SECONDS``: the longest wait for the Hub per request (every command that talks to it)."""
    from muon_repro.hub.publish import DEFAULT_TIMEOUT_S

    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="longest wait for the Hub per request: connecting, sending, each read (default: %(default)g)",
    )


def add_repo_id_argument(p: argparse.ArgumentParser, *, positional_alias: bool = False) -> None:
    """``--repo-id ORG/NAME``, the dataset repository of every command that talks to the Hub.

    ``positional_alias``: also accept the repository as a positional argument, hidden from the help: the form
    ``download`` and ``review`` took in 0.1.0, kept for one release; :func:`repo_id_of` says it is deprecated.
    """
    p.add_argument(
        "--repo-id",
        required=not positional_alias,  # with the alias, repo_id_of says when neither form was given
        default=None,
        metavar=REPO_ID_METAVAR,
        help="the dataset repository on the Hub (required)",
    )
    if positional_alias:
        p.add_argument("legacy_repo_id", nargs="?", default=None, metavar=REPO_ID_METAVAR, help=argparse.SUPPRESS)


def repo_id_of(args: argparse.Namespace) -> str:
    """The repository ``--repo-id`` names, or the deprecated positional form (with a one-line note on stderr)."""
    legacy = getattr(args, "legacy_repo_id", None)
    if legacy is None:
        if args.repo_id is None:
            raise ValueError(f"the following argument is required: --repo-id {REPO_ID_METAVAR}")
        return args.repo_id
    if args.repo_id is not None:
        raise ValueError(f"the repository is given twice ({legacy} and --repo-id {args.repo_id}): give --repo-id only")
    print(
        f"muon-repro {args.command}: warning: the positional {REPO_ID_METAVAR} is deprecated and will be removed "
        f"in the next release; use --repo-id {legacy}",
        file=sys.stderr,
    )
    return legacy


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "publish",
        help="publish a bundle to the Hub as one commit tagged vX.Y.Z",
        description=(
            "Publish the bundle (muon-repro bundle) to a Hugging Face dataset repository as one commit tagged "
            "vX.Y.Z. The bundle must match its manifest, be built for this repository and version and pass "
            "muon-repro verify; the plan against the remote head (files added, changed, deleted, unchanged) is "
            "printed first. A version tag never moves: publishing an existing version is an error unless it "
            "is already the head and nothing changed. The token is what huggingface_hub finds (HF_TOKEN, "
            "hf auth login); it is never printed."
        ),
    )
    add_repo_id_argument(p)
    p.add_argument("--version", required=True, help="X.Y.Z; the commit is tagged vX.Y.Z")
    p.add_argument("--bundle", type=Path, default=DEFAULT_OUT, help="bundle folder (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the plan against the remote and stop")
    p.add_argument("--create-pr", action="store_true", help="commit as a pull request (tag after merging, by publishing again)")
    p.add_argument("--private", action="store_true", help="create the repository private (if it does not exist)")
    p.add_argument("--verbose", action="store_true", help="the plan lists every file (default: one line per folder)")
    p.add_argument(
        "--author",
        action="append",
        default=None,
        metavar="NAME",
        help="an author the bundle must cite (its CITATION.cff, card and report); repeat for more. The bundle is "
        "built with them (muon-repro bundle --author): publish checks them, and prints the entry with the commit",
    )
    add_timeout_argument(p)
    p.set_defaults(func=_publish)

    p = subparsers.add_parser(
        "download",
        help="download one version of the dataset, then verify it",
        description=(
            "Download one version of the dataset from the Hub (the same files as hf download ORG/NAME "
            "--repo-type dataset), then check the copy as muon-repro verify does. Without --revision the "
            "newest vX.Y.Z tag is taken (main if there is none). A repository or revision that does not exist "
            "is said so, with the versions there are."
        ),
    )
    add_repo_id_argument(p, positional_alias=True)
    p.add_argument("--revision", default=None, help="vX.Y.Z, a branch or a commit (default: the newest vX.Y.Z tag)")
    p.add_argument(
        "--local-dir",
        type=Path,
        default=None,
        help=(
            "where to put the files (default: the Hub cache): a new or empty folder, or one holding this same version (an "
            "interrupted download goes on); one holding another version, or files no download put there that this "
            "version lacks, is refused"
        ),
    )
    add_timeout_argument(p)
    p.set_defaults(func=_download)


def _publish(args: argparse.Namespace) -> int:
    from muon_repro.hub.errors import hub_errors, request_failed
    from muon_repro.hub.interrupts import NOTHING_SENT, PublishInterrupted, say_interrupted
    from muon_repro.hub.publish import PublishError, publish

    try:
        publish(
            args.bundle,
            args.repo_id,
            args.version,
            dry_run=args.dry_run,
            create_pr=args.create_pr,
            private=args.private,
            timeout=args.timeout,
            authors=args.author,
            verbose=args.verbose,
        )
    except hub_errors() as exc:
        raise PublishError(request_failed(exc)) from exc
    except KeyboardInterrupt as exc:  # PublishInterrupted says what the step it stopped left on the Hub
        return say_interrupted("publish", str(exc) if isinstance(exc, PublishInterrupted) else NOTHING_SENT)
    return 0


def _download(args: argparse.Namespace) -> int:
    from muon_repro.dataset.cli import report_verify
    from muon_repro.hub.download import download
    from muon_repro.hub.errors import endpoint, hub_errors
    from muon_repro.hub.interrupts import DOWNLOAD_KEPT, say_interrupted
    from muon_repro.terminal import first_line

    try:
        path = download(repo_id_of(args), args.revision, args.local_dir, timeout=args.timeout)
    except hub_errors() as exc:
        raise ValueError(f"download from {endpoint()} failed: {first_line(exc)}") from exc
    except KeyboardInterrupt:
        return say_interrupted("download", DOWNLOAD_KEPT)
    try:
        return report_verify(path)
    except KeyboardInterrupt:
        return say_interrupted("download", f"the download in {path} is complete, its check is not: run muon-repro verify {path}")
