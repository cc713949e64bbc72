"""``MANIFEST.sha256``: the sha256 and size of every file of a bundle, and checking a folder against it.

One line per file, sorted by path, ``<sha256>  <size>  <path>`` (two spaces between fields, paths
relative and POSIX); lines starting with ``#`` are comments. ``sha256sum -c`` reads it after the
size column is cut out (the command is in the file's header).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from muon_repro.provenance import is_generated
from muon_repro.tables.files import list_files, sha256_file, write_atomic
from muon_repro.terminal import shown

MANIFEST_NAME = "MANIFEST.sha256"
_LINE = re.compile(r"([0-9a-f]{64})  (\d+)  (.+)")
HEADER = (
    f"# {MANIFEST_NAME}: sha256, size in bytes and path of every file of this bundle (except this one).\n"
    "# Check it with `muon-repro verify DIR`, or with coreutils:\n"
    f"#   grep -v '^#' {MANIFEST_NAME} | sed -E 's/^([0-9a-f]{{64}})  [0-9]+  /\\1  /' | sha256sum -c\n"
)


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    sha256: str


def check_bundle_path(path: str) -> str:
    """A path that is safe to publish and to write into a manifest line."""
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or any(c in path for c in "\\\n\r\t")
        or path != path.strip()
    ):
        raise ValueError(
            f"file name {path!r} cannot go into a bundle: use relative paths without '..', backslashes, tabs or newlines"
        )
    return path


# What a download's own rebuild (the card's recipe, `muon-repro run --from analyze`) adds beside the files it rewrites
# as they were: the card under its source name (the bundle publishes it as README.md) and the rebuilt bundle, which
# the recipe's last line verifies on its own.
REBUILD_OUTPUTS = ("dataset_card.md", "dist")


def is_ignored(path: str) -> bool:
    """Whether ``path`` is no file of the dataset: what the Hub and ``hf`` add, what installing the download's package
    adds (``<name>.egg-info/``), what its rebuild adds (:data:`REBUILD_OUTPUTS`), and the caches and hidden files a
    bundle never holds (:func:`is_generated`). Verify skips them, so ``pip install -e .``, the rebuild and running the
    tests in a download leave it verifiable."""
    top, _, rest = path.partition("/")  # the Hub's and hf's files (.gitattributes, .cache/) are hidden: is_generated
    rebuilt = (top == REBUILD_OUTPUTS[0] and not rest) or (top == REBUILD_OUTPUTS[1] and bool(rest))
    return (top.endswith(".egg-info") and bool(rest)) or rebuilt or is_generated(path)


def digest_files(root: str | Path, paths: list[str]) -> list[FileEntry]:
    root = Path(root)
    out = []
    for path in sorted(paths):
        size, sha = sha256_file(root / check_bundle_path(path))
        out.append(FileEntry(path, size, sha))
    return out


def manifest_lines(entries: list[FileEntry]) -> str:
    """The manifest's lines for ``entries`` (sorted by path), no header: what a contribution appends."""
    return "".join(f"{e.sha256}  {e.size}  {e.path}\n" for e in sorted(entries, key=lambda e: e.path))


def kept_manifest(text: str) -> str:
    """A published manifest's text as a contribution keeps it, before the lines it appends: unchanged,
    ending in a newline (an empty one stays empty)."""
    return text if not text or text.endswith("\n") else text + "\n"


def format_manifest(entries: list[FileEntry]) -> str:
    return HEADER + manifest_lines(entries)


def write_manifest(root: str | Path) -> list[FileEntry]:
    """Hash every file under ``root`` (but the manifest) and write ``root/MANIFEST.sha256``."""
    paths = [p for p in list_files(root) if p != MANIFEST_NAME and not is_ignored(p)]
    entries = digest_files(root, paths)
    write_atomic(Path(root) / MANIFEST_NAME, format_manifest(entries))
    return entries


MAX_SIZE_DIGITS = 20  # a file size in bytes: 20 digits reach 10**20, far past any disk


def parse_manifest(text: str, source: str = MANIFEST_NAME) -> list[FileEntry]:
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if not match or len(match[2]) > MAX_SIZE_DIGITS:  # int() of thousands of digits is refused (and slow)
            raise ValueError(f"{source}, line {number}: expected '<sha256>  <size>  <path>', got {line[:200]!r}")
        try:
            path = check_bundle_path(match[3])
        except ValueError:  # its advice is for a bundle being made; this is a listing that is not one's
            raise ValueError(
                f"{source}, line {number}: the path {match[3][:200]!r} is no file of a bundle (absolute, or with '..', "
                "a backslash or a tab): the manifest was edited or damaged; make the bundle again (`muon-repro bundle`) "
                "or download it again"
            ) from None
        entries.append(FileEntry(path, int(match[2]), match[1]))
    seen: set[str] = set()
    for entry in entries:
        if entry.path in seen:
            raise ValueError(f"{source}: {entry.path} is listed twice; a manifest lists each file once")
        seen.add(entry.path)
    return entries


def read_manifest(root: str | Path) -> list[FileEntry]:
    path = Path(root) / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {root} a bundle? (make one with `muon-repro bundle`)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # a ValueError that names no file
        said = f"{path}: not UTF-8 text ({exc})"
        raise ValueError(f"{said}; download the dataset again, or rebuild it (muon-repro bundle)") from None
    return parse_manifest(text, str(path))


def check_manifest(root: str | Path, *, digests: dict[str, str] | None = None) -> list[str]:
    """Problems found comparing ``root`` with its manifest: missing, changed, unlisted files. ``digests``,
    when given, gets the sha256 of every listed file it hashed, by path, so a later check needs no second read."""
    root = Path(root)
    try:
        entries = read_manifest(root)
    except (ValueError, FileNotFoundError) as exc:
        return [str(exc)]
    problems = []
    for e in entries:
        file = root / e.path
        if not file.is_file():
            problems.append(f"{shown(e.path)}: listed in {MANIFEST_NAME} but missing")
            continue
        size, sha = sha256_file(file)
        if digests is not None:
            digests[e.path] = sha
        if size != e.size:
            problems.append(f"{shown(e.path)}: size {size} bytes, {MANIFEST_NAME} says {e.size}")
        elif sha != e.sha256:
            problems.append(f"{shown(e.path)}: sha256 {sha[:12]}..., {MANIFEST_NAME} says {e.sha256[:12]}...")
    listed = {e.path for e in entries}
    for path in list_files(root):
        if path != MANIFEST_NAME and path not in listed and not is_ignored(path):
            problems.append(f"{shown(path)}: present but not listed in {MANIFEST_NAME}")
    return problems
