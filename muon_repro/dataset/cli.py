"""muon-repro bundle | card | verify: the dataset folder, its card, and checking a copy of it."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from muon_repro import __version__
from muon_repro.dataset.bundle import DEFAULT_OUT, Sources
from muon_repro.dataset.meta import (
    AUTHOR_HELP,
    DATE_HELP,
    DEFAULT_LICENSE,
    DEFAULT_PRETTY_NAME,
    BundleMeta,
    dataset_date,
    resolve_authors,
)
from muon_repro.dataset.naming import DEFAULT_REPO_ID

SOURCE_OPTIONS = tuple(f.name for f in fields(Sources))  # traces, metrics, ..., code: one --option each


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_sources(p: argparse.ArgumentParser) -> None:
    # Defaults are None so that _sources can tell a folder given (which must exist) from a default (which may not).
    group = p.add_argument_group("source folders")
    for name in SOURCE_OPTIONS:
        if name != "code":
            group.add_argument(_flag(name), dest=name, type=Path, default=None, help=f"default: {name}/")
    group.add_argument(
        "--code",
        type=Path,
        default=None,
        help="the folder holding muon_repro/, tests/, tools/, pyproject.toml and constraints.txt, published so that a "
        "download rebuilds itself (default: .)",
    )


def _add_meta(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("what the card and CITATION.cff say")
    group.add_argument(
        "--repo-id", default=DEFAULT_REPO_ID, metavar="ORG/NAME", help="the dataset repository on the Hub (default: %(default)s)"
    )
    group.add_argument("--version", default=__version__, help="X.Y.Z, tagged vX.Y.Z when published (default: %(default)s)")
    group.add_argument(
        "--date",
        default=None,
        help=DATE_HELP,
    )
    group.add_argument("--license", default=DEFAULT_LICENSE, help="SPDX id (default: %(default)s)")
    group.add_argument(
        "--author",
        action="append",
        default=None,
        metavar="NAME",
        help=AUTHOR_HELP,
    )
    group.add_argument("--pretty-name", default=DEFAULT_PRETTY_NAME, help="the dataset's title")
    group.add_argument("--code-url", default=None, help="public URL of the muon_repro source, for the regeneration steps")


def _sources(args: argparse.Namespace) -> Sources:
    """The source folders: each one given must be a folder (a default one that is absent is left out, with a warning,
    or refused if the bundle needs it)."""
    given = {name: path for name in SOURCE_OPTIONS if (path := getattr(args, name)) is not None}
    for name, path in given.items():
        if not path.is_dir():
            said = "is a file, not a folder" if path.exists() else "does not exist"
            what, default = ("the code", ".") if name == "code" else (f"{name}/", f"{name}/")
            raise ValueError(f"{_flag(name)} {path}: {said}; give the folder to copy {what} from (default: {default})")
    return Sources(**given)


def _meta(args: argparse.Namespace, sources: Sources) -> BundleMeta:
    return BundleMeta(
        repo_id=args.repo_id,
        version=args.version,
        date=args.date or dataset_date(sources.metrics),
        license=args.license,
        pretty_name=args.pretty_name,
        code_url=args.code_url,
        authors=resolve_authors(args.author, repo_id=args.repo_id),
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bundle",
        help="assemble the dataset to publish (traces, tables, figures, report, card)",
        description=(
            "Assemble exactly what gets published in one folder: traces/, metrics/, figures/, report/, "
            "analysis_scripts/ and docs/ copied from their source folders, the package's source, tests, tools, "
            "pyproject.toml and constraints.txt (--code: a download rebuilds itself), the dataset card as README.md, "
            "CITATION.cff, croissant.json and MANIFEST.sha256 (sha256 and size of every other file). The bundle is "
            "staged beside --out and renamed into place when complete, so an interrupted run never leaves half a "
            "bundle. Check it with muon-repro verify, publish it with muon-repro publish."
        ),
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="bundle folder, replaced as a whole (default: %(default)s)")
    _add_sources(p)
    _add_meta(p)
    p.set_defaults(func=_bundle)

    p = subparsers.add_parser(
        "card",
        help="render the dataset card alone (what bundle puts in README.md)",
        description=(
            "Render the dataset card (YAML metadata for the Hub, then what a reader needs: the tables and their "
            "columns, how to download, cite and regenerate the data) from the source folders: byte for byte the "
            "README.md that bundle writes."
        ),
    )
    p.add_argument("--out", type=Path, default=Path("dataset_card.md"), help="default: %(default)s")
    _add_sources(p)
    _add_meta(p)
    p.set_defaults(func=_card)

    p = subparsers.add_parser(
        "verify",
        help="check a bundle or a downloaded copy: checksums, tables, traces",
        description=(
            "Check a bundle, a copy downloaded with hf download --local-dir or a snapshot in the Hub cache, each "
            "check on its own line: every file (traces, Parquet and CSV tables, figures, code) matches "
            "MANIFEST.sha256 and none is unlisted (an install's *.egg-info/, caches, and a rebuild's dataset_card.md "
            "and dist/ are no files of the dataset); the tables in metrics/ are one set, every CSV the one written "
            "with its Parquet twin; CITATION.cff, the card's metadata and croissant.json parse and name every table; "
            "the report cites the dataset CITATION.cff names; every relative link of the card and the report names a "
            "file of the dataset, and the code the card's recipe installs is there; every table loads with "
            "datasets.load_dataset and has the columns and rows the card documents; every trace parses. --recompute "
            "adds what no checksum can tell: the traces analyzed again give every table's values. Exit status 0 when "
            "every check passed, 1 otherwise, 2 when DIR is no folder."
        ),
    )
    p.add_argument("dir", nargs="?", type=Path, default=DEFAULT_OUT, help="default: %(default)s")
    p.add_argument(
        "--recompute",
        action="store_true",
        help="also analyze the bundle's traces again and compare every table's rows and values with the bundle's: "
        "catches a table changed and re-sealed (stamp, manifest, croissant.json remade), which the checksums cannot "
        "(reads every trace)",
    )
    p.set_defaults(func=_verify)


def _bundle(args: argparse.Namespace) -> int:
    from muon_repro.dataset.bundle import build_bundle

    sources = _sources(args)
    entries, warnings = build_bundle(sources, _meta(args, sources), args.out)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    size = sum(e.size for e in entries)
    print(f"Bundle in {args.out}: {len(entries) + 1} files, {size} bytes; check it with `muon-repro verify {args.out}`.")
    return 0


def _card(args: argparse.Namespace) -> int:
    from muon_repro.dataset.bundle import render_card_from_sources
    from muon_repro.tables.files import check_out_file, write_atomic

    check_out_file(args.out, f"--out {args.out}")  # before the work: a place that cannot be written is said at once
    sources = _sources(args)
    write_atomic(args.out, render_card_from_sources(sources, _meta(args, sources)))
    print(f"Wrote {args.out}")
    return 0


def report_verify(path: Path, *, recompute: bool = False) -> int:
    """Verify the bundle or downloaded copy at ``path``, print every check and the outcome; the exit code."""
    from muon_repro.dataset.verify import verify_bundle

    result = verify_bundle(path, echo=print, recompute=recompute)
    if result.ok:
        print(f"{path}: all {len(result.passed)} checks passed.")
        return 0
    print(f"{path}: {len(result.failed)} check(s) FAILED:", file=sys.stderr)
    for line in result.failed:
        print(f"  {line}", file=sys.stderr)
    return 1


def _verify(args: argparse.Namespace) -> int:
    return report_verify(args.dir, recompute=args.recompute)
