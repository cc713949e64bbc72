"""What a contribution's pull request may change, checked on its file lists and manifests (no requests here).

A contribution adds files under ``traces/<profile>/<group>/<name>/trial<k>/`` (the run's side files
and ``rank<r>.json.gz`` traces) and changes ``MANIFEST.sha256`` by appending one line per added
file; it deletes nothing and changes nothing else. Each rule broken is one message naming the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from muon_repro.contrib.run_check import TRACES_ROOT
from muon_repro.dataset.manifest import MANIFEST_NAME, FileEntry, kept_manifest, parse_manifest
from muon_repro.hardware import validate_profile_id
from muon_repro.hub.plan import REMOTE_ONLY, RemoteFile
from muon_repro.rundir import RUN_FILES, trace_rank

_RUN_FILE_PATH = re.compile(
    rf"^{TRACES_ROOT}/(?P<profile>[^/]+)/(?P<group>[^/]+)/(?P<name>[^/]+)/(?P<trial>trial\d+)/(?P<file>[^/]+)$"
)
ALLOWED = f"{TRACES_ROOT}/<profile>/<group>/<name>/trial<k>/<{'|'.join(RUN_FILES)}|rank<r>.json.gz>"


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
        """The ``traces/<profile>/<group>/<name>/trial<k>`` folders the added files lie in, by profile."""
        folders: dict[str, dict[str, None]] = {}  # profile -> its folders, in path order without repeats
        for path in sorted(self.added):
            if match := _RUN_FILE_PATH.match(path):
                folders.setdefault(match["profile"], {})[path.rsplit("/", 1)[0]] = None
        return {profile: list(found) for profile, found in folders.items()}


def tree_changes(base: str, head: str, before: dict[str, RemoteFile], after: dict[str, RemoteFile]) -> TreeChanges:
    """Added, changed and deleted files between two file lists (the Hub's own files left out)."""
    added = {p: f for p, f in after.items() if p not in before and p not in REMOTE_ONLY}
    changed = sorted(p for p, f in after.items() if p in before and (f.blob_id, f.size) != (before[p].blob_id, before[p].size))
    deleted = sorted(p for p in before if p not in after and p not in REMOTE_ONLY)
    return TreeChanges(base, head, before, after, added, changed, deleted)


def path_problems(changes: TreeChanges) -> list[str]:
    """Every change a contribution may not make: deletions, changed files but the manifest, files outside run folders."""
    problems = [f"{p}: deleted by the pull request; a contribution only adds files" for p in changes.deleted]
    problems += [
        f"{p}: changed by the pull request; a contribution changes only {MANIFEST_NAME}"
        for p in changes.changed
        if p != MANIFEST_NAME
    ]
    for path in sorted(changes.added):
        match = _RUN_FILE_PATH.match(path)
        name = match["file"] if match else ""
        if not match or (name not in RUN_FILES and trace_rank(name) is None):
            problems.append(f"{path}: added outside a run folder; a contribution adds only {ALLOWED}")
            continue
        try:
            validate_profile_id(match["profile"], source=f"the folder {TRACES_ROOT}/{match['profile']}/")
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
    return problems


def manifest_problems(base_text: str | None, head_text: str | None, added: dict[str, FileEntry]) -> list[str]:
    """Whether the head's manifest is the base's, lines kept as they are, plus exactly one matching line per added file.

    ``added``: path -> size and sha256 of each added file as downloaded.
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
    problems = [f"{p}: added but has no line in {MANIFEST_NAME}; append `<sha256>  <size>  {p}`" for p in unlisted]
    problems += [f"{MANIFEST_NAME}: lists {p}, which the pull request does not add" for p in sorted(set(appended) - set(added))]
    for path in sorted(set(added) & set(appended)):
        got, listed = added[path], appended[path]
        if (got.size, got.sha256) != (listed.size, listed.sha256):
            problems.append(
                f"{path}: {got.size} bytes, sha256 {got.sha256[:12]}...; {MANIFEST_NAME} says "
                f"{listed.size} bytes, {listed.sha256[:12]}..."
            )
    return problems
