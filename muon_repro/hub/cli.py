"""``muon-repro publish | download``: a bundle to the Hub as one tagged commit, and one version back."""

from __future__ import annotations

import argparse
from pathlib import Path

from muon_repro.dataset.bundle import DEFAULT_OUT


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


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("publish", help="publish a bundle to the Hub as one commit tagged vX.Y.Z")
    p.add_argument("--repo-id", required=True, help="ORG/NAME of the dataset repository")
    p.add_argument("--version", required=True, help="X.Y.Z; the commit is tagged vX.Y.Z")
    p.add_argument("--bundle", type=Path, default=DEFAULT_OUT, help="bundle folder (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the plan against the remote and stop")
    p.add_argument("--create-pr", action="store_true", help="commit as a pull request (tag after merging, by publishing again)")
    p.add_argument("--private", action="store_true", help="create the repository private (if it does not exist)")
    add_timeout_argument(p)
    p.set_defaults(func=_publish)

    p = subparsers.add_parser("download", help="download one version of the dataset, then verify it")
    p.add_argument("repo_id", metavar="ORG/NAME")
    p.add_argument("--revision", default=None, help="vX.Y.Z, a branch or a commit (default: the newest vX.Y.Z tag)")
    p.add_argument("--local-dir", type=Path, default=None, help="where to put the files (default: the Hub cache)")
    add_timeout_argument(p)
    p.set_defaults(func=_download)


def _publish(args: argparse.Namespace) -> int:
    from muon_repro.hub.errors import hub_errors, request_failed
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
        )
    except hub_errors() as exc:
        raise PublishError(request_failed(exc)) from exc
    return 0


def _download(args: argparse.Namespace) -> int:
    from muon_repro.dataset.cli import report_verify
    from muon_repro.hub.download import download
    from muon_repro.hub.errors import endpoint, hub_errors
    from muon_repro.hub.publish import first_line

    try:
        path = download(args.repo_id, args.revision, args.local_dir, timeout=args.timeout)
    except hub_errors() as exc:
        raise ValueError(f"download from {endpoint()} failed: {first_line(exc)}") from exc
    return report_verify(path)
