"""What a contribution's pull request may change, checked on its file lists and manifests (no requests here).

A contribution adds files under ``traces/<profile>/<group>/<name>/trial<k>/`` (the run's side files
and ``rank<r>.json.gz`` traces) and changes ``MANIFEST.sha256`` by appending one line per added
file; it deletes nothing and changes nothing else. Every path and size is checked on the file list
alone, before anything is downloaded: each part of a path follows the name rules
(:mod:`muon_repro.contrib.untrusted`), each file is of a known kind and within its size, and the
pull request within :data:`~muon_repro.contrib.limits.MAX_PR_FILES` and ``MAX_PR_BYTES``. Each rule
broken is one message naming the file (escaped: the name is the contributor's). Once downloaded, no added
measurement may be a published or another added one: byte for byte (:func:`copied_problems`), or once its traces
are decompressed and its step times read (:func:`recorded_again_problems`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from muon_repro.contrib.limits import MAX_FILE_BYTES, MAX_TRIAL, MAX_WORLD_SIZE, binary_size, file_limit
from muon_repro.contrib.run_check import TRACES_ROOT
from muon_repro.contrib.untrusted import name_problem, profile_problem, run_name_problem, shown
from muon_repro.dataset.manifest import MANIFEST_NAME, FileEntry, kept_manifest, parse_manifest
from muon_repro.hub.plan import REMOTE_ONLY, RemoteFile
from muon_repro.rundir import METRICS_FILE, RUN_FILES, TRIAL_PREFIX, read_json, trace_rank
from muon_repro.tables.files import human_size

ALLOWED = f"{TRACES_ROOT}/<profile>/<group>/<name>/{TRIAL_PREFIX}<k>/<{'|'.join(RUN_FILES)}|rank<r>.json.gz>"
# Numbers as the recorder writes them: no sign, no leading zero, at most as many digits as the limits need.
_TRIAL = re.compile(rf"{TRIAL_PREFIX}(0|[1-9][0-9]{{0,{len(str(MAX_TRIAL)) - 1}}})")
_TRACE = re.compile(rf"rank(0|[1-9][0-9]{{0,{len(str(MAX_WORLD_SIZE)) - 1}}})\.json\.gz")
_PARTS = 6  # traces, profile, group, name, trial<k>, file


@dataclass(frozen=True)
class RunPath:
    """An added file's place: ``traces/<profile>/<group>/<name>/trial<k>/<file>``."""

    profile: str
    group: str
    name: str
    trial: int
    file: str

    @property
    def folder(self) -> str:
        return f"{TRACES_ROOT}/{self.profile}/{self.group}/{self.name}/{TRIAL_PREFIX}{self.trial}"


def _file_problem(name: str) -> str | None:
    if name in RUN_FILES:
        return None
    match = _TRACE.fullmatch(name)
    if match and int(match[1]) < MAX_WORLD_SIZE:
        return None
    return f"file {shown(name)} is not a run file: a run folder holds {', '.join(RUN_FILES)} and rank<r>.json.gz"


def parse_run_path(path: str) -> RunPath | str:
    """``path`` as a run file's place, or why it is not one (the message does not repeat the path)."""
    parts = path.split("/")
    if len(parts) != _PARTS or parts[0] != TRACES_ROOT:
        return f"added outside a run folder; a contribution adds only {ALLOWED}"
    _, profile, group, name, trial, file = parts
    problems = [
        profile_problem(profile, "the profile"),
        name_problem(group, "the group"),
        run_name_problem(name, group, "the run name"),
        None if _TRIAL.fullmatch(trial) else f"the folder {shown(trial)} is not trial<k> with k from 0 to {MAX_TRIAL}",
        _file_problem(file),
    ]
    found = [p for p in problems if p is not None]
    if found:
        return "; ".join(found)
    return RunPath(profile, group, name, int(trial[len(TRIAL_PREFIX) :]), file)


@dataclass(frozen=True)
class TreeChanges:
    """A pull request's head against the commit it started from."""

    base: str
    head: str
    before: dict[str, RemoteFile]  # every file at ``base``
    after: dict[str, RemoteFile]  # every file at ``head``
    added: dict[str, RemoteFile]
    changed: list[str]
    deleted: list[str]

    def trial_folders(self) -> dict[str, list[str]]:
        """The ``traces/<profile>/<group>/<name>/trial<k>`` folders the added run files lie in, by profile."""
        folders: dict[str, dict[str, None]] = {}  # profile -> its folders, in path order without repeats
        for path in sorted(self.added):
            if isinstance(place := parse_run_path(path), RunPath):
                folders.setdefault(place.profile, {})[place.folder] = None
        return {profile: list(found) for profile, found in folders.items()}


def tree_changes(base: str, head: str, before: dict[str, RemoteFile], after: dict[str, RemoteFile]) -> TreeChanges:
    """Added, changed and deleted files between two file lists (the Hub's own files left out)."""
    added = {p: f for p, f in after.items() if p not in before and p not in REMOTE_ONLY}
    changed = sorted(p for p, f in after.items() if p in before and (f.blob_id, f.size) != (before[p].blob_id, before[p].size))
    deleted = sorted(p for p in before if p not in after and p not in REMOTE_ONLY)
    return TreeChanges(base, head, before, after, added, changed, deleted)


def path_problems(changes: TreeChanges) -> list[str]:
    """Every change a contribution may not make: deletions, changed files but the manifest, files outside run folders."""
    problems = [f"{shown(p)}: deleted by the pull request; a contribution only adds files" for p in changes.deleted]
    problems += [
        f"{shown(p)}: changed by the pull request; a contribution changes only {MANIFEST_NAME}"
        for p in changes.changed
        if p != MANIFEST_NAME
    ]
    for path in sorted(changes.added):
        place = parse_run_path(path)
        if isinstance(place, str):
            problems.append(f"{shown(path)}: {place}")
    return problems


def _within_size(path: str, size: int) -> bool:
    limit = file_limit(path.rsplit("/", 1)[-1])
    return limit is None or size <= limit


def downloadable(changes: TreeChanges) -> list[str]:
    """The added files that passed the checks of paths and sizes: the only ones a review downloads."""
    return [p for p, f in sorted(changes.added.items()) if isinstance(parse_run_path(p), RunPath) and _within_size(p, f.size)]


def manifest_downloadable(changes: TreeChanges) -> bool:
    manifest = changes.after.get(MANIFEST_NAME)
    return manifest is None or manifest.size <= MAX_FILE_BYTES[MANIFEST_NAME]


def size_problems(changes: TreeChanges) -> list[str]:
    """Every added file larger than its kind allows, and a manifest larger than a manifest may be."""
    problems = []
    for path, remote in sorted(changes.added.items()):
        limit = file_limit(path.rsplit("/", 1)[-1])
        if limit is not None and not _within_size(path, remote.size):
            problems.append(
                f"{shown(path)}: {human_size(remote.size)} ({remote.size} bytes), more than the {binary_size(limit)} "
                "a file of its kind may be (docs/contributing.md, Limits); record it again or leave it out"
            )
    manifest = changes.after.get(MANIFEST_NAME)
    if manifest is not None and not manifest_downloadable(changes):
        problems.append(
            f"{MANIFEST_NAME}: {human_size(manifest.size)}, more than the {binary_size(MAX_FILE_BYTES[MANIFEST_NAME])} "
            "a manifest may be; a contribution appends one line per added file"
        )
    return problems


def total_problems(changes: TreeChanges, max_files: int, max_bytes: int) -> list[str]:
    """Whether the pull request as a whole is within ``max_files`` added files and ``max_bytes`` added bytes."""
    problems = []
    if len(changes.added) > max_files:
        problems.append(
            f"the pull request adds {len(changes.added)} files, more than the {max_files} a review takes "
            "(--max-files); split the contribution into several pull requests"
        )
    size = sum(f.size for f in changes.added.values())
    if size > max_bytes:
        problems.append(
            f"the pull request adds {human_size(size)} ({size} bytes), more than the {binary_size(max_bytes)} a review "
            "takes (--max-bytes); split the contribution into several pull requests"
        )
    return problems


def manifest_problems(base_text: str | None, head_text: str | None, added: dict[str, FileEntry | None]) -> list[str]:
    """Whether the head's manifest is the base's, lines kept as they are, plus exactly one matching line per added file.

    ``added``: path -> size and sha256 of each added file as downloaded; None for one refused before download
    (its line is not compared).
    """
    if base_text is None or head_text is None:
        return [
            f"{MANIFEST_NAME}: missing {'at the base' if base_text is None else 'in the pull request'}; "
            "a contribution appends to the published manifest"
        ]
    kept = kept_manifest(base_text)
    if not head_text.startswith(kept):
        return [f"{MANIFEST_NAME}: the pull request rewrites main's lines; a contribution keeps them and only appends"]
    try:
        appended = {e.path: e for e in parse_manifest(head_text[len(kept) :], f"{MANIFEST_NAME}'s appended lines")}
    except ValueError as exc:
        return [str(exc)]
    unlisted = sorted(set(added) - set(appended))
    problems = [f"{shown(p)}: added but has no line in {MANIFEST_NAME}; append `<sha256>  <size>  {shown(p)}`" for p in unlisted]
    problems += [
        f"{MANIFEST_NAME}: lists {shown(p)}, which the pull request does not add" for p in sorted(set(appended) - set(added))
    ]
    for path in sorted(set(added) & set(appended)):
        got, listed = added[path], appended[path]
        if got is not None and (got.size, got.sha256) != (listed.size, listed.sha256):
            problems.append(
                f"{shown(path)}: {got.size} bytes, sha256 {got.sha256[:12]}...; {MANIFEST_NAME} says "
                f"{listed.size} bytes, {listed.sha256[:12]}..."
            )
    return problems


def copied_problems(base_text: str | None, added: dict[str, FileEntry | None]) -> list[str]:
    """Every added measurement (a rank's trace, a trial's metrics.json) whose bytes are those of a file main's manifest
    lists or of another added one: a copy of a recording adds no measurement, yet would be pooled as one, narrowing
    every interval it joins. ``added`` as for :func:`manifest_problems`."""
    try:
        published = {e.sha256: e.path for e in parse_manifest(kept_manifest(base_text or ""))}
    except ValueError:  # manifest_problems names what is wrong with it
        published = {}
    seen: dict[str, str] = {}
    problems = []
    for path, entry in sorted(added.items()):
        name = path.rsplit("/", 1)[-1]
        if entry is None or (name != METRICS_FILE and trace_rank(name) is None):
            continue
        original = published.get(entry.sha256) or seen.get(entry.sha256)
        if original is not None:
            problems.append(
                f"{shown(path)}: byte for byte {shown(original)} (sha256 {entry.sha256[:12]}...); a trial's traces and "
                "metrics are its own recording: contribute only what was recorded"
            )
        seen.setdefault(entry.sha256, path)
    return problems


def measured_steps(metrics: Mapping | None) -> tuple[str, ...] | None:
    """A trial's measurement as its recorder timed it: each rank's step times (profiled, and timed without the
    profiler) as JSON reads them, whatever the file's spacing; None when it times no step."""
    ranks = metrics.get("ranks") if isinstance(metrics, Mapping) else None
    if not isinstance(ranks, list):
        return None
    timed = [r for r in ranks if isinstance(r, Mapping) and (r.get("step_ms") or r.get("timed_step_ms"))]
    if not timed:
        return None
    return tuple(sorted(json.dumps([r.get("rank"), r.get("step_ms"), r.get("timed_step_ms")]) for r in timed))


def _gzip_trailer(path: Path) -> tuple[int, int]:
    """A gzip file's last member's CRC-32 and size of what it decompresses to (its last 8 bytes): what any gzip of
    the same content ends with, read without decompressing."""
    with path.open("rb") as stream:
        stream.seek(-8, 2)
        crc, size = struct.unpack("<II", stream.read(8))
    return crc, size


def _decompressed_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with gzip.open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _recordings(folder: Path) -> dict[object, Path]:
    """What gives a trial's recording away, whatever its compression or spacing, by the file holding it: its step
    times (metrics.json), and each rank's trace by what it decompresses to (its gzip trailer; confirmed whole
    where two agree)."""
    found: dict[object, Path] = {}
    if (steps := measured_steps(read_json(folder / METRICS_FILE))) is not None:
        found[steps] = folder / METRICS_FILE
    for trace in sorted(folder.glob("rank*.json.gz")):
        found[("trace", *_gzip_trailer(trace))] = trace
    return found


def recorded_again_problems(added: Mapping[str, Path], published: Mapping[str, Path]) -> list[str]:
    """Every added trial folder that holds a published or another added trial's recording past
    :func:`copied_problems`' byte check: a trace gzipped again (the same once decompressed), or a metrics.json
    written again (every step of every rank timed the same, to the last digit: two runs never agree to the
    microsecond). Folders by their dataset path. Reads 8 bytes of each trace, and decompresses only the pairs whose
    trailers agree."""
    first: dict[object, tuple[str, Path]] = {}
    problems = []
    for name, folder in [*sorted(published.items()), *sorted(added.items())]:
        for key, path in _recordings(folder).items():
            label = f"{name}/{path.name}"
            original = first.setdefault(key, (label, path))
            if name not in added or original[0] == label:
                continue
            trace = path.name != METRICS_FILE
            if trace and _decompressed_sha256(path) != _decompressed_sha256(original[1]):
                continue  # another trace of the same size and CRC-32: not a copy
            same = "is, once decompressed, the trace" if trace else "times every step of every rank as"
            problems.append(
                f"{shown(label)}: {same} {shown(original[0])}: the same recording (compressed or spaced again) adds no "
                "measurement, yet would be pooled as one; contribute only what was recorded"
            )
    return problems
