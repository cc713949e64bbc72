"""Files, safely: writing without leaving anything half-written, one file (:func:`write_atomic`), a set of files
(:func:`write_atomic_all`) or one folder (:func:`staged_dir`, :func:`swap_dir`); the check every command runs on its output folder
before any work (:func:`check_out_folder`, and :func:`check_apart` where it must lie apart from the folders the
command reads); a generated block between two marker lines of a hand-written
document (:func:`with_block`); hashing in one pass, listing a tree, sizes for people. Standard library only."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

CHUNK = 4 * 2**20  # bytes read at a time when hashing


Content = str | bytes | Callable[[Path], object]  # text (UTF-8), bytes, or a function that writes the path it is given


def write_atomic(path: str | Path, content: Content) -> Path:
    """Write ``content`` to a temporary name beside ``path``, then rename it over ``path``.

    ``content`` is the text (UTF-8) or bytes to write, or a function that writes the file whose
    path it is given (a Parquet writer, ``savefig``). A reader sees the old file or the new one,
    never a part; the temporary file is removed when writing fails."""
    return write_atomic_all({path: content})[0]


def write_atomic_all(contents: Mapping[str | Path, Content]) -> list[Path]:
    """:func:`write_atomic` for files that belong together (a table's Parquet and CSV twins, a record's CSVs): every
    file is written whole to its temporary name before any is renamed into place, so an error or Ctrl-C while
    writing leaves every old file as it was; only a kill between the renames (a few system calls) can mix the set."""
    written: dict[Path, Path] = {}  # path -> its temporary file, in order
    try:
        for path, content in contents.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            # A name no other writer has (pid and random part), made with the umask's mode, as a plain write would.
            tmp = written[path] = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
            if callable(content):
                content(tmp)
            else:
                with open(tmp, "xb") as f:
                    f.write(content.encode("utf-8") if isinstance(content, str) else content)
        for path in list(written):
            os.replace(written.pop(path), path)
    except BaseException:
        for tmp in written.values():
            tmp.unlink(missing_ok=True)
        raise
    return [Path(path) for path in contents]


STAGING = "muon-repro"  # in the names of the hidden folders a writer stages beside its output: what they are
OUTPUT_MARKER = ".muon-repro-output"  # in a folder muon-repro replaces whole: which command wrote it
_SIBLING = re.compile(r"^\.(?P<name>.+)\.(?:muon-repro-)?(?P<role>stage|old)-(?P<pid>\d+)-[0-9a-f]{8}$")


def new_sibling_dir(out: Path, role: str, where: Path | None = None) -> Path:
    """A new hidden folder beside ``out`` (in ``where``, when given: inside a mount point, say), with ``out``'s mode
    when it exists, else the umask's, named ``.<out>.muon-repro-<role>-<pid>-<random>`` so that a reader knows whose
    it is; one an interrupted writer left is removed by the next writer of ``out`` (:func:`remove_stale_siblings`)."""
    folder = (where or out.parent) / f".{out.name}.{STAGING}-{role}-{os.getpid()}-{secrets.token_hex(4)}"
    folder.mkdir()
    if out.is_dir():
        folder.chmod(out.stat().st_mode & 0o7777)
    return folder


def remove_stale_siblings(out: Path, where: Path | None = None) -> list[Path]:
    """Remove the staging folders of ``out`` (beside it, or in ``where``) whose writer is gone (an interrupted run's:
    its process no longer alive); a live writer's are kept. Returns those removed."""
    removed = []
    for folder, _role, _pid in _dead_writers_folders(out, where or out.parent):
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _dead_writers_folders(out: Path, parent: Path) -> list[tuple[Path, str, int]]:
    """The hidden folders (:func:`new_sibling_dir`) of ``out``'s writers that are no longer alive, in ``parent``: each
    with its role (``stage``, ``old``) and its writer's pid."""
    found = []
    for folder in sorted(parent.iterdir()) if parent.is_dir() else []:
        match = _SIBLING.match(folder.name)
        if not match or match["name"] != out.name or folder.is_symlink() or not folder.is_dir():
            continue
        pid = int(match["pid"])
        if pid != os.getpid() and not _alive(pid):
            found.append((folder, match["role"], pid))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or a pid this system cannot have: keep its folder
    return True


def swap_dir(stage: Path, out: Path) -> None:
    """Put the folder ``stage`` where ``out`` is; the previous ``out`` is removed once the new one
    is in place, and put back if the swap fails."""
    if not out.exists():
        os.rename(stage, out)
        return
    old = new_sibling_dir(out, "old")
    os.rename(out, old)  # onto the empty folder just made: a name no other writer can have taken
    try:
        os.rename(stage, out)
    except BaseException:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def is_mount_point(out: Path) -> bool:
    """Whether ``out`` is a folder another file system is mounted on: it cannot be renamed, only its entries can."""
    return out.is_dir() and not out.is_symlink() and os.path.ismount(out)


def swap_entries(stage: Path, out: Path) -> None:
    """:func:`swap_dir` for an ``out`` that cannot be renamed (a mount point), with ``stage`` inside it: its entries
    are moved aside into a hidden folder in it, the stage's moved in, and the old ones removed; put back if a move
    fails. Each move is a rename within ``out``'s file system; a reader may see the folder half-swapped meanwhile."""
    old = new_sibling_dir(out, "old", where=out)
    ours = f".{out.name}.{STAGING}-"  # this writer's and other writers' stages, old folders and lock stay where they are
    aside = [entry for entry in sorted(out.iterdir()) if not entry.name.startswith(ours)]
    for entry in aside:
        os.rename(entry, old / entry.name)
    moved_in: list[Path] = []
    try:
        for entry in sorted(stage.iterdir()):
            os.rename(entry, out / entry.name)
            moved_in.append(out / entry.name)
    except BaseException:
        for entry in moved_in:
            os.rename(entry, stage / entry.name)
        for entry in aside:
            os.rename(old / entry.name, entry)
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)
    stage.rmdir()


@contextmanager
def staged_dir(out: str | Path, writer: str | None = None) -> Iterator[Path]:
    """A new folder beside ``out`` to fill; swapped in for ``out`` whole when the block ends, removed
    (``out`` untouched) when it raises. ``writer`` (say ``muon-repro analyze``) is recorded in the folder's
    :data:`OUTPUT_MARKER`, so that the next writer knows the folder is its own to replace (:func:`check_replaceable`).
    A swap a killed writer of ``out`` left half done is finished first (:func:`finish_interrupted_swaps`), and the
    staging folders it left removed. A mount point cannot be renamed: the stage, the lock and the swap
    (:func:`swap_entries`) are then inside it, on its own file system."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    where = out if is_mount_point(out) else out.parent
    with output_lock(out, where):
        recover_interrupted(out, where)
        stage = new_sibling_dir(out, "stage", where)
        try:
            if writer is not None:
                (stage / OUTPUT_MARKER).write_text(marker_text(writer), encoding="utf-8")
            yield stage
            if where == out:
                swap_entries(stage, out)
            else:
                swap_dir(stage, out)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise


@contextmanager
def staged_files(out: str | Path, writer: str, suffixes: tuple[str, ...]) -> Iterator[Path]:
    """A new hidden folder beside ``out`` to fill with a command's whole set of files (``muon-repro figures``'
    PNG and SVG files, ``report``'s report.md/.html/.pdf); once the block ends they are moved into ``out`` by
    :func:`put_files_in_place`. When the block raises (an error, Ctrl-C) ``out`` is untouched and the stage removed.

    Unlike :func:`staged_dir`, ``out`` is not replaced whole: it may hold what its user put there, or be a
    repository's committed ``figures/`` with one subfolder per profile, and swapping the folder would drop those
    (or need them copied into the stage first, and fail on a mount point). So every file of the new set is complete
    before any old file is touched, the old ones are moved aside (never deleted) until every new one is in, and any
    failure of that swap puts them back: a reader finds the old set or the new one. A hard kill while the files are
    moved (a few renames) leaves a mix until the next writer of ``out`` starts: it finishes that swap from the
    journal the killed one kept (:func:`finish_interrupted_swaps`), then removes the hidden folders left."""
    out = Path(out)
    out = out.resolve() if out.is_symlink() else out  # write into the folder the link points at, keep the link
    out.parent.mkdir(parents=True, exist_ok=True)
    where = out if is_mount_point(out) else out.parent  # a rename never crosses file systems
    with output_lock(out, where):
        recover_interrupted(out, where)
        stage = new_sibling_dir(out, "stage", where)
        try:
            yield stage
            put_files_in_place(stage, out, writer, suffixes, where)
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def files_manifest(writer: str) -> str:
    """The hidden file in which ``writer`` (say ``muon-repro figures``) lists the files it put in its output folder."""
    return f".{writer.replace(' ', '-')}.files"


def _manifest_text(writer: str, files: list[str]) -> str:
    head = f"# the files {writer} wrote here (its next run replaces them, or removes those it no longer writes)\n"
    return head + "".join(f"{rel}\n" for rel in files)


def _previous_files(out: Path, writer: str, suffixes: tuple[str, ...]) -> list[str]:
    """The files ``writer``'s previous run in ``out`` listed in its manifest, as far as they are plainly its own: a
    relative path inside ``out`` (no ``..``, nothing hidden) ending in one of ``suffixes``. None without a manifest:
    files of unknown origin are left alone."""
    path = out / files_manifest(writer)
    if not path.is_file():
        return []
    listed = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    return [rel for rel in listed if not rel.startswith("#") and rel.endswith(suffixes) and _plain_relative(rel)]


def _plain_relative(rel: object, *, hidden_file: bool = False) -> bool:
    """Whether ``rel`` is a relative path that stays inside its folder and names nothing hidden (but the file itself
    when ``hidden_file``: a writer's manifest)."""
    if not isinstance(rel, str) or not rel or rel.startswith("/"):
        return False
    parts = rel.split("/")
    hidden = [p.startswith(".") for p in parts]
    return not any(p in ("", ".", "..") for p in parts) and not any(hidden[:-1] if hidden_file else hidden)


# What a swap of files (put_files_in_place) is about to do, kept in its folder of old files until the swap is done:
# the next writer of the same output finishes a swap a hard kill interrupted (finish_interrupted_swaps).
SWAP_JOURNAL = ".muon-repro-swap.json"


def put_files_in_place(stage: Path, out: Path, writer: str, suffixes: tuple[str, ...], where: Path | None = None) -> None:
    """Move every file under ``stage`` to the same place under ``out``, replacing the old versions, and remove the
    files ``writer``'s previous run listed (:func:`files_manifest`) that the new set no longer has; anything else in
    ``out`` stays. The old files are moved aside first and put back if any move fails (see :func:`staged_files`)."""
    manifest = files_manifest(writer)
    new = [rel for rel in list_files(stage) if rel != manifest]
    stale = sorted(set(_previous_files(out, writer, suffixes)) - set(new))
    (stage / manifest).write_text(_manifest_text(writer, new), encoding="utf-8")
    entries = [*new, manifest]
    for rel in entries:  # refused before anything is moved
        for place in [out / rel, *(out / rel).parents]:
            if place == out:
                break
            if place == out / rel and place.is_dir() and not place.is_symlink():
                raise ValueError(f"{place} is a folder where {writer} writes a file: move it elsewhere, or choose another --out")
            if place != out / rel and place.exists() and not place.is_dir():
                raise ValueError(f"{place} is a file where {writer} writes a folder: move it elsewhere, or choose another --out")
    if not out.exists():  # nothing to keep: the stage becomes the folder, in one rename
        os.rename(stage, out)
        return
    aside = new_sibling_dir(out, "old", where or out.parent)
    journal = {"out": out.name, "stage": stage.name, "stale": stale, "entries": entries}
    write_atomic(aside / SWAP_JOURNAL, json.dumps(journal, indent=1))  # before any move: the swap can be finished
    moved_aside: list[str] = []
    moved_in: list[str] = []
    made: list[Path] = []
    try:
        for rel in [*stale, *entries]:
            if (out / rel).is_file() or (out / rel).is_symlink():
                (aside / rel).parent.mkdir(parents=True, exist_ok=True)
                moved_aside.append(rel)  # noted first: an interruption right after the rename still puts it back
                os.rename(out / rel, aside / rel)
        for rel in entries:
            missing = [p for p in (out / rel).parents if p.is_relative_to(out) and p != out and not p.exists()]
            for folder in reversed(missing):
                made.append(folder)
                folder.mkdir()
            moved_in.append(rel)
            os.rename(stage / rel, out / rel)
    except BaseException:
        for rel in reversed(moved_in):
            if not (stage / rel).exists():  # moved in before the failure
                os.rename(out / rel, stage / rel)
        for rel in reversed(moved_aside):
            if (aside / rel).exists() or (aside / rel).is_symlink():
                os.rename(aside / rel, out / rel)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        (aside / SWAP_JOURNAL).unlink()  # put back: nothing left to finish (a kill before this finishes the swap)
        _remove_empty_folders(aside)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    _remove_emptied_folders(out, stale)


def _remove_emptied_folders(out: Path, stale: list[str]) -> None:
    """The folders of a previous run's files (a profile's) that now hold nothing."""
    for rel in stale:
        for folder in (out / rel).parents:
            if folder == out or not folder.is_relative_to(out):
                break
            try:
                folder.rmdir()
            except OSError:
                break


def finish_interrupted_swaps(out: Path, where: Path | None = None) -> list[Path]:
    """Finish each swap into ``out`` whose writer was killed midway, so that ``out`` holds the new set whole, as if
    the swap had not been interrupted (the new set was complete in the writer's stage before the first move):

    - a swap of files (:func:`put_files_in_place`), from the journal in its folder of old files: every new file still
      in the stage moved in, every file the new set no longer has removed;
    - a swap of the whole folder (:func:`swap_dir`) killed between its two renames, ``out`` missing: the stage
      renamed to ``out`` (the old folder back when the stage is gone).

    Returns the folders of old files of the swaps finished; they, and the stages, are removed with the rest of a
    dead writer's folders by :func:`remove_stale_siblings`."""
    finished = []
    dead = _dead_writers_folders(out, where or out.parent)
    for folder, _role, pid in (entry for entry in dead if entry[1] == "old"):
        stages = [stage for stage, role, stage_pid in dead if role == "stage" and stage_pid == pid]
        if (folder / SWAP_JOURNAL).is_file():
            done = _finish_file_swap(out, folder, stages)
        elif not out.exists() and not out.is_symlink():
            os.rename(stages[0] if stages else folder, out)
            done = True
        else:
            done = False
        if done:
            finished.append(folder)
    return finished


def recover_interrupted(out: Path, where: Path | None = None) -> None:
    """What a writer of ``out`` does first: finish a swap into it a killed writer left half done
    (:func:`finish_interrupted_swaps`: the old folder put back when neither ``out`` nor a stage of it is there), then
    remove the hidden folders dead writers left (:func:`remove_stale_siblings`)."""
    finish_interrupted_swaps(out, where)
    remove_stale_siblings(out, where)


def _finish_file_swap(out: Path, old_folder: Path, stages: list[Path]) -> bool:
    """:func:`finish_interrupted_swaps` for one swap of files; False (nothing done) unless its journal and stage are
    what :func:`put_files_in_place` left."""
    try:
        journal = json.loads((old_folder / SWAP_JOURNAL).read_text(encoding="utf-8"))
        stage_name, stale, entries = journal["stage"], journal["stale"], journal["entries"]
        stage = next(s for s in stages if s.name == stage_name)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return False  # not a journal this code wrote, or its stage is gone: the folder is removed, out left as it is
    if journal.get("out") != out.name or not isinstance(stale, list) or not isinstance(entries, list):
        return False
    if not all(_plain_relative(rel) for rel in stale) or not all(_plain_relative(r, hidden_file=True) for r in entries):
        return False
    try:
        for rel in entries:
            if (stage / rel).is_file():
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(stage / rel, out / rel)
        for rel in stale:
            (out / rel).unlink(missing_ok=True)
    except OSError:
        return False  # out changed since (a file where a folder was): the writer about to run replaces the set whole
    _remove_emptied_folders(out, stale)
    (old_folder / SWAP_JOURNAL).unlink()
    return True


def _remove_empty_folders(root: Path) -> None:
    for dirpath, _, _ in sorted(os.walk(root), key=lambda walked: -len(walked[0])):
        with contextlib.suppress(OSError):
            Path(dirpath).rmdir()


@contextmanager
def output_lock(out: Path, where: Path | None = None) -> Iterator[None]:
    """Hold the lock of the folder ``out`` (``.<out>.muon-repro-lock`` beside it, an advisory ``flock`` the system
    releases when the process ends) while it is replaced; a second writer is refused at once, naming the first's
    pid, instead of swapping folders under it. The file is removed on release; a writer that locked a file another
    just removed sees the inode change and tries the new one."""
    import fcntl

    path = (where or out.parent) / f".{out.name}.{STAGING}-lock"
    for _ in range(8):
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise ValueError(
                f"{out} is being written by another muon-repro (pid {holder}): wait for it to finish, or write elsewhere"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed this file as we locked it: lock the current one
    else:
        raise ValueError(f"{out}: could not take its lock {path} (other writers keep replacing it); try again")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)  # closing releases the lock


def marker_text(writer: str) -> str:
    """What :data:`OUTPUT_MARKER` holds in a folder ``writer`` wrote."""
    return f"written by {writer}, which replaces this folder whole; anything else put here is lost then\n"


def check_replaceable(
    out: str | Path,
    writer: str,
    label: str,
    *,
    ours: Callable[[Path], bool] | None = None,
    force: bool = False,
    why_not_ours: str = f"it holds no {OUTPUT_MARKER} of its own",
    force_option: str | None = "--force",
) -> None:
    """Refuse to replace the folder ``out`` (named ``label``, say ``--out dist/dataset``) unless it is empty, or
    ``writer`` wrote it (its :data:`OUTPUT_MARKER` says so, or ``ours(out)`` recognizes one written before the
    marker), or ``force``. A folder holding ``.git`` is never replaced, ``force`` or not: it is someone's checkout."""
    out = Path(out)
    if not out.is_dir() or not any(out.iterdir()):
        return
    if (out / ".git").exists():
        raise ValueError(f"{label} holds .git: a repository checkout is never replaced; choose another folder")
    marker = out / OUTPUT_MARKER
    if marker.is_file() and marker.read_text(encoding="utf-8", errors="replace") == marker_text(writer):
        return
    if force or (ours is not None and ours(out)):
        return
    or_force = f", or pass {force_option} to replace it" if force_option else ""
    raise ValueError(
        f"{label} is a folder {writer} did not write ({why_not_ours}), and it would be replaced whole: nothing in it "
        f"was touched; choose an empty or new folder{or_force}"
    )


def check_apart(out: str | Path, label: str, inputs: Iterable[tuple[str, str | Path]]) -> None:
    """Refuse an output folder (named ``label``) that is, holds or lies inside one of the ``inputs`` (option, path):
    what is written would mix with what is read, and a later read would find it."""
    resolved = Path(out).resolve()
    for option, path in inputs:
        source = Path(path).resolve()
        if resolved == source or source in resolved.parents or resolved in source.parents:
            raise ValueError(f"{label} overlaps the source {path} ({option}); choose another folder")


def check_out_folder(out: str | Path, label: str, *, replaced_whole: bool = False) -> None:
    """Refuse ``out`` (named ``label`` in the messages, say ``--out metrics``) when it is a file, or
    when it cannot be made or written: a folder is created in it, or in its nearest existing parent,
    and removed. ``replaced_whole``: the folder is swapped for a sibling, so its parent must be
    writable too."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{label} is a file, not a folder: choose a folder (it is created if missing)")
    target = (out.parent if replaced_whole and out.is_dir() and not is_mount_point(out) else out).absolute()
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"{label} cannot be created: {existing} is a file, not a folder; choose another place")
    try:
        tempfile.TemporaryDirectory(prefix=".muon-repro-probe-", dir=existing).cleanup()
    except OSError as exc:
        raise ValueError(
            f"{label}: no permission to write in {existing}, so it cannot be written ({exc.strerror}); "
            "choose a folder you can write"
        ) from exc


def check_out_file(out: str | Path, label: str) -> None:
    """Refuse the file ``out`` (named ``label``) when it is a folder, or its folder cannot be made or written."""
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"{label} is a folder: give a file name, such as {out / 'dataset_card.md'}")
    folder = out.parent
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{label} cannot be created: {folder} is a file, not a folder; choose another place")
    check_out_folder(folder, label)


def with_block(text: str, begin_line: str, end_line: str, block: str, what: str) -> str:
    """``text`` with whatever stands between its lines ``begin_line`` and ``end_line`` replaced by ``block``
    (README.md's claims, docs/architecture.md's module map); a ValueError naming ``what`` without both lines."""
    head, begin, rest = text.partition(begin_line)
    _, end, tail = rest.partition(end_line)
    if not begin or not end:
        raise ValueError(f"no {begin_line!r} ... {end_line!r} lines to put {what} between")
    return f"{head}{begin_line}{block}{end_line}{tail}"


def write_block(path: str | Path, markers: tuple[str, str], block: str, what: str) -> None:
    """Replace the block between ``markers`` in the file at ``path`` by ``block`` (atomically), as the docs'
    generated tables are written (:func:`with_block`'s ValueError names ``what`` when the markers are missing)."""
    path = Path(path)
    write_atomic(path, with_block(path.read_text(encoding="utf-8"), *markers, f"\n{block}\n", what))


class NotARegularFile(OSError):
    """A path to read that holds a pipe, socket or device, not a file: read, a pipe would wait for a writer forever."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(errno.EINVAL, "not a regular file (a pipe, socket or device): replace it with the file", str(path))


def open_regular(path: str | Path, mode: str = "rb", **kwargs: Any) -> IO:
    """``open(path, mode)`` for reading, refusing anything but a regular file with :class:`NotARegularFile` (an
    OSError naming it). Opened without blocking, so that a pipe with no writer is refused at once, not waited on."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotARegularFile(path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def sha256_file(path: str | Path) -> tuple[int, str]:
    """(size in bytes, sha256 hex) of a regular file (:func:`open_regular`), read in chunks."""
    h = hashlib.sha256()
    size = 0
    with open_regular(path) as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def list_files(root: str | Path) -> list[str]:
    """Every regular file under ``root`` as a sorted POSIX path relative to it. ``root`` may itself be a link, and so
    may a file (a Hub cache snapshot links its files to blobs); a link to a folder inside the tree is refused with a
    ValueError naming it, never followed: it could lead out of the tree, or around a loop forever."""
    root = Path(root)
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in dirnames:
            if (Path(dirpath) / name).is_symlink():
                link = Path(dirpath) / name
                raise ValueError(
                    f"{link}: a link to a folder ({os.readlink(link)}), which is not followed (it could leave {root} or "
                    "loop); replace it with the folder itself or remove it"
                )
        for name in filenames:
            full = Path(dirpath) / name
            if full.is_file():
                out.append(full.relative_to(root).as_posix())
    return sorted(out)


def human_size(n: int) -> str:
    """Bytes for people: 512 B, 2.0 kB, 3.4 MB (powers of 1000, as the Hub shows sizes)."""
    if n < 1000:
        return f"{n} B"
    for unit in ("kB", "MB", "GB", "TB"):
        n /= 1000  # type: ignore[assignment]
        if n < 1000 or unit == "TB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")
