"""``muon-repro bundle``: assemble exactly what gets published, in one folder.

::

    traces/  metrics/  figures/  report/  analysis_scripts/  docs/   copied from their source folders
    muon_repro/  tests/  tools/  pyproject.toml  constraints.txt       the code that made them (CODE_PATHS)
    README.md          the dataset card (muon_repro.dataset.card)
    CITATION.cff       muon_repro.dataset.citation
    croissant.json     muon_repro.dataset.croissant (Croissant 1.1: record sets, files, responsible-AI fields)
    MANIFEST.sha256    sha256 and size of every other file (muon_repro.dataset.manifest)

A download therefore rebuilds itself with no checkout beside it: ``pip install -c constraints.txt -e .``
in it, then ``muon-repro run``, which re-records nothing and writes the same tables.

The bundle is staged in a temporary folder beside ``--out`` and renamed into place when
complete, so a failed or interrupted run never leaves a half bundle where a good one was.
CITATION.cff and croissant.json also live at the repository root (written with the card, one set),
byte for byte the bundle's, so that "Cite this repository" and Croissant tools work on a clone.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, fields
from pathlib import Path

from muon_repro.dataset.card import CARD_NAME, render_card
from muon_repro.dataset.citation import CFF_NAME, citation_cff
from muon_repro.dataset.croissant import CROISSANT_NAME, croissant_json
from muon_repro.dataset.links import code_problems, link_problems
from muon_repro.dataset.manifest import (
    MANIFEST_NAME,
    FileEntry,
    check_bundle_path,
    digest_files,
    format_manifest,
    is_ignored,
    read_manifest,
)
from muon_repro.dataset.meta import BundleMeta
from muon_repro.dataset.run_info import is_trace
from muon_repro.provenance import is_generated
from muon_repro.tables.files import (
    check_apart,
    check_out_folder,
    check_replaceable,
    list_files,
    sha256_file,
    staged_dir,
    write_atomic,
    write_atomic_all,
)

DEFAULT_OUT = Path("dist/dataset")
REQUIRED = ("traces", "metrics")
CODE_PATHS = ("muon_repro", "tests", "tools", "pyproject.toml", "constraints.txt")
"""Under :attr:`Sources.code`: the package's source, its tests and tools, and how it is built and pinned."""


@dataclass(frozen=True)
class Sources:
    """Where each published folder comes from (defaults: the repository root's folders)."""

    traces: Path = Path("traces")
    metrics: Path = Path("metrics")
    figures: Path = Path("figures")
    report: Path = Path("report")
    analysis_scripts: Path = Path("analysis_scripts")
    docs: Path = Path("docs")  # docs/method.md: the formulas and conventions the card and the report cite
    code: Path | None = Path(".")  # the folder holding CODE_PATHS (the repository root); None: the data alone


def _folder_files(prefix: str, folder: Path) -> dict[str, Path]:
    """(bundle path -> file) for every file under ``folder`` but the generated ones, as ``<prefix>/<relative path>``;
    a link to a file outside ``folder`` is refused by name (its target would be published as this folder's)."""
    files = {check_bundle_path(f"{prefix}/{rel}"): folder / rel for rel in list_files(folder) if not is_generated(rel)}
    inside = folder.resolve()
    for path in files.values():
        if path.is_symlink() and not path.resolve().is_relative_to(inside):
            raise ValueError(
                f"{path}: a link to {path.resolve()}, outside --{prefix.replace('_', '-')} {folder}: a bundle holds the "
                "folder's own files; copy the file in or remove the link"
            )
    return files


def collect(sources: Sources) -> tuple[dict[str, Path], list[str]]:
    """(bundle path -> source file, warnings) for every file to publish."""
    files: dict[str, Path] = {}
    warnings = []
    for f in fields(sources):
        if f.name == "code":
            continue
        folder = Path(getattr(sources, f.name))
        if not folder.is_dir():
            message = f"--{f.name.replace('_', '-')} {folder}: no such folder"
            if f.name in REQUIRED:
                raise FileNotFoundError(message)
            warnings.append(message + f"; the bundle has no {f.name}/")
            continue
        files.update(_folder_files(f.name, folder))
        if f.name == "report" and "report/report.md" not in files:  # a folder of something else, say
            warnings.append(f"--report {folder}: no report.md; the card's link to report/report.md will not resolve")
    if sources.code is not None:
        files.update(_code_files(Path(sources.code), warnings))
    if not any(is_trace(p) for p in files):
        raise ValueError(f"no traces (*.json.gz) under {sources.traces}: record runs first (muon-repro bench)")
    if not any(p.startswith("metrics/") and p.endswith(".parquet") for p in files):
        raise ValueError(f"no Parquet tables in {sources.metrics}: build them first (muon-repro analyze)")
    return files, warnings


def _code_files(root: Path, warnings: list[str]) -> dict[str, Path]:
    """(bundle path -> file) for :data:`CODE_PATHS` under ``root``; a word for each one missing."""
    files: dict[str, Path] = {}
    for name in CODE_PATHS:
        path = root / name
        if path.is_file():
            files[check_bundle_path(name)] = path
        elif path.is_dir():
            files.update(_folder_files(name, path))
        else:
            warnings.append(f"--code {root}: no {name}; the bundle cannot rebuild itself without it")
    return files


def _source_paths(sources: Sources) -> list[tuple[str, Path]]:
    """(option, path) of every source the bundle copies: the data folders, and each of CODE_PATHS."""
    paths = [(f.name, Path(getattr(sources, f.name))) for f in fields(sources) if f.name != "code"]
    if sources.code is not None:
        paths += [("code", Path(sources.code) / name) for name in CODE_PATHS]
    return paths


def _check_out(out: Path, sources: Sources) -> None:
    check_apart(out, f"--out {out}", ((f"--{name.replace('_', '-')}", path) for name, path in _source_paths(sources)))
    check_out_folder(out, f"--out {out}", replaced_whole=True)  # a file, a path under a file, a read-only place
    # Never replace a folder that is not a previous bundle (it may hold someone's work), nor a checkout.
    check_replaceable(
        out,
        BUNDLE_WRITER,
        f"--out {out}",
        ours=_is_earlier_bundle,
        why_not_ours=f"its files are not exactly those a {MANIFEST_NAME} in it lists",
        force_option=None,
    )


BUNDLE_WRITER = "muon-repro bundle"


def _is_earlier_bundle(folder: Path) -> bool:
    """A bundle: exactly the files its manifest lists (what the Hub and ``hf`` add aside)."""
    manifest = folder / MANIFEST_NAME
    if not manifest.is_file():
        return False
    try:
        listed = {e.path for e in read_manifest(folder)}
    except ValueError:
        return False
    return {p for p in list_files(folder) if p != MANIFEST_NAME and not is_ignored(p)} == listed


@dataclass(frozen=True)
class Documents:
    """What the package writes about a bundle: the card, and the root files that also sit at the repository root."""

    card: str
    root_files: dict[str, str]  # CITATION.cff, croissant.json -> text


def documents(meta: BundleMeta, files: dict[str, Path], digests: list[FileEntry]) -> Documents:
    """The documents for a bundle of ``files`` whose digests (these documents excluded) are ``digests``."""
    root_files = {CFF_NAME: citation_cff(meta), CROISSANT_NAME: croissant_json(meta, files, digests)}
    encoded = {name: text.encode() for name, text in root_files.items()}
    entries = [FileEntry(name, len(data), hashlib.sha256(data).hexdigest()) for name, data in encoded.items()]
    return Documents(render_card(meta, files, [*digests, *entries]), root_files)


def documents_from_sources(sources: Sources, meta: BundleMeta) -> Documents:
    """The documents that ``bundle`` would write, without copying anything."""
    files, _ = collect(sources)
    digests = [FileEntry(p, *sha256_file(files[p])) for p in sorted(files)]
    return documents(meta, files, digests)


def render_card_from_sources(sources: Sources, meta: BundleMeta) -> str:
    """The card that ``bundle`` would write (for ``muon-repro card``)."""
    return documents_from_sources(sources, meta).card


def root_files_in(docs: Documents, root: Path) -> dict[Path, str]:
    """CITATION.cff and croissant.json as they lie in ``root`` (the bundle's, or the repository's beside the card), for
    :func:`~muon_repro.tables.files.write_atomic_all`."""
    return {Path(root) / name: text for name, text in docs.root_files.items()}


def check_table_set(metrics: Path) -> None:
    """Refuse tables that are not one set: a CSV other than the one written with its Parquet twin (the sha256
    in the Parquet file's stamp), or tables of different runs of ``analyze``. Cheap: Parquet footers and a
    hash of each CSV, so a bundle never carries what ``verify`` would fail."""
    from muon_repro.hardware import profile_problems
    from muon_repro.tables.io import table_set_problems

    problems = table_set_problems(metrics) + profile_problems(metrics)
    if problems:
        raise ValueError(
            f"--metrics {metrics}: the tables are not one set, so they are not bundled: {'; '.join(problems)}. "
            f"Write them again with `muon-repro analyze TRACES --out {metrics}`"
        )


def check_traces_indexed(sources: Sources, files: dict[str, Path]) -> None:
    """Refuse tables whose trace index does not name exactly the bundle's traces as they will lie in it (--traces under
    traces/): verify would fail the bundle. The comparison is verify's own; tables without an index are not judged."""
    from muon_repro.dataset.verify import TRACE_INDEX, trace_index_problems

    index = files.get(TRACE_INDEX)
    if index is None:
        return
    problems = trace_index_problems(index, [path for path in files if is_trace(path)], fix="")
    if not problems:
        return
    traces, metrics = Path(sources.traces), Path(sources.metrics)
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    analyzed = traces.resolve()  # analyze names the files from the folder a link leads to
    if analyzed.name == "traces":
        how = f"Analyze them again (muon-repro analyze {traces} --out {metrics})"
    else:  # the index names each file from the folder above the one analyzed: tr0/... where the bundle has traces/...
        renamed = analyzed.with_name("traces")
        how = (
            f"The index names each trace from the folder above the one analyzed ({analyzed.name}/...): rename "
            f"{traces} to {renamed}, analyze it there (muon-repro analyze {renamed} --out {metrics})"
        )
    raise ValueError(
        f"--metrics {metrics}: its trace index ({TRACE_INDEX}) does not name the traces of --traces {traces} as the bundle "
        f"lays them out (under traces/), so nothing was bundled: {shown}. {how} and bundle again"
    )


def check_promises(stage: Path, sources: Sources) -> None:
    """Refuse a bundle whose card or report links to what it does not hold (an empty --figures: the report's
    figures), or without the code its card's recipe installs (unless built without code, ``Sources.code`` None):
    ``verify`` would fail it. Raised inside the staging, so nothing is written."""
    problems = link_problems(stage) + (code_problems(stage) if sources.code is not None else [])
    if problems:
        folders = ", ".join(f"--{f.name.replace('_', '-')} {getattr(sources, f.name)}" for f in fields(sources))
        raise ValueError(
            f"nothing was bundled: {'; '.join(problems)}. The bundle copies {folders}: give the folders that hold them, "
            "or make them first (`muon-repro run --from figures` draws the figures and writes the report)"
        )


def build_bundle(sources: Sources, meta: BundleMeta, out: Path = DEFAULT_OUT) -> tuple[list[FileEntry], list[str]]:
    """Assemble the bundle into ``out``; returns (manifest entries, warnings). Tables that are not one set
    (:func:`check_table_set`) or whose trace index does not name the bundle's traces (:func:`check_traces_indexed`),
    and documents that promise what the bundle lacks (:func:`check_promises`), are refused; nothing is written."""
    out = Path(out)
    _check_out(out, sources)
    files, warnings = collect(sources)
    check_table_set(Path(sources.metrics))
    check_traces_indexed(sources, files)
    # Swapped in whole when complete; removed, out untouched, when not. No marker inside: a bundle holds exactly what
    # is published, and is known as one by that (its files are its manifest's, _is_earlier_bundle).
    with staged_dir(out) as stage:
        for rel, src in files.items():
            dest = stage / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
        staged = {rel: stage / rel for rel in files}
        digests = digest_files(stage, list(files))
        docs = documents(meta, staged, digests)
        write_atomic_all({**root_files_in(docs, stage), stage / CARD_NAME: docs.card})
        check_promises(stage, sources)
        entries = digest_files(stage, [p for p in list_files(stage) if p != MANIFEST_NAME and not is_ignored(p)])
        write_atomic(stage / MANIFEST_NAME, format_manifest(entries))
    return entries, warnings
