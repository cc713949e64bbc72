"""What a publish would change on the Hub: the local bundle against the remote tree at one commit.

There is no upload dry-run upstream, so the plan is computed here. A remote file is the same
as the local one when: for an LFS file, its LFS sha256 (and size) equals the manifest's sha256;
for a regular file, its git blob id equals ``git_hash`` of the local bytes (regular files are
small, so reading them is cheap, and a size difference decides without reading at all).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from muon_repro.dataset.manifest import FileEntry
from muon_repro.tables.files import human_size
from muon_repro.values import counted

if TYPE_CHECKING:  # imported where used: planning is read without huggingface_hub loaded
    from huggingface_hub import HfApi

# Files the Hub manages itself: never deleted by a publish, never compared.
REMOTE_ONLY = (".gitattributes",)
ACTIONS = ("add", "change", "delete", "unchanged")


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    blob_id: str  # git blob sha1 (of the LFS pointer for LFS files)
    lfs_sha256: str | None


@dataclass(frozen=True)
class PlanItem:
    path: str
    action: str  # one of ACTIONS
    local_size: int | None
    remote_size: int | None


@dataclass(frozen=True)
class Plan:
    base_commit: str | None  # the remote head planned against; None if the repository does not exist yet
    items: tuple[PlanItem, ...]

    def of(self, action: str) -> list[PlanItem]:
        return [i for i in self.items if i.action == action]

    @property
    def has_changes(self) -> bool:
        return any(i.action != "unchanged" for i in self.items)

    @property
    def upload_bytes(self) -> int:
        return sum(i.local_size or 0 for i in self.items if i.action in ("add", "change"))


def list_remote(api: HfApi, repo_id: str, revision: str) -> dict[str, RemoteFile]:
    """Every file of the dataset repository at ``revision`` (a commit id, to plan against a fixed tree)."""
    from huggingface_hub import RepoFile

    out = {}
    for entry in api.list_repo_tree(repo_id, repo_type="dataset", revision=revision, recursive=True):
        if isinstance(entry, RepoFile):
            lfs = entry.lfs.sha256 if entry.lfs is not None else None
            out[entry.path] = RemoteFile(entry.path, int(entry.size), entry.blob_id, lfs)
    return out


def _same(root: Path, local: FileEntry, remote: RemoteFile) -> bool:
    if local.size != remote.size:
        return False
    if remote.lfs_sha256 is not None:
        return local.sha256 == remote.lfs_sha256
    from huggingface_hub.utils.sha import git_hash

    return git_hash((root / local.path).read_bytes()) == remote.blob_id


def compute_plan(root: str | Path, local: list[FileEntry], remote: dict[str, RemoteFile], base_commit: str | None) -> Plan:
    """The plan to make the remote tree equal to ``local`` (the bundle's files, manifest included)."""
    root = Path(root)
    items = []
    local_paths = {e.path for e in local}
    for entry in sorted(local, key=lambda e: e.path):
        theirs = remote.get(entry.path)
        if theirs is None:
            items.append(PlanItem(entry.path, "add", entry.size, None))
        elif _same(root, entry, theirs):
            items.append(PlanItem(entry.path, "unchanged", entry.size, theirs.size))
        else:
            items.append(PlanItem(entry.path, "change", entry.size, theirs.size))
    for path, theirs in sorted(remote.items()):
        if path not in local_paths and path not in REMOTE_ONLY:
            items.append(PlanItem(path, "delete", None, theirs.size))
    order = {a: i for i, a in enumerate(ACTIONS)}
    return Plan(base_commit, tuple(sorted(items, key=lambda i: (order[i.action], i.path))))


def plan_folder(path: str) -> str:
    """Where a file is summarized: a run group's folder for traces (``traces/<profile>/<group>/``), the top folder
    for the rest, the file itself at the root."""
    parts = path.split("/")
    if parts[0] == "traces" and len(parts) > 3:
        return "/".join(parts[:3]) + "/"
    return parts[0] + "/" if len(parts) > 1 else path


def format_plan(plan: Plan, repo_id: str, tag: str, *, verbose: bool = False) -> str:
    """The plan as people read it: one line per action and folder (``verbose``: per file), then the totals."""
    if plan.base_commit is None:
        where = "a repository that does not exist yet (it will be created)"
    else:
        where = f"main at {plan.base_commit[:12]}"
    lines = [f"Plan for dataset {repo_id} {tag}, against {where}:"]
    if verbose:
        rows = [(i.action, i.path, _item_size(i)) for i in plan.items]
    else:
        grouped: dict[tuple[str, str], list[PlanItem]] = {}
        for item in plan.items:
            grouped.setdefault((item.action, plan_folder(item.path)), []).append(item)
        rows = []
        for (action, folder), items in grouped.items():
            files = counted(len(items), "file")
            what = folder if len(items) == 1 and not folder.endswith("/") else f"{folder} ({files})"
            size = human_size(sum((i.remote_size if action == "delete" else i.local_size) or 0 for i in items))
            rows.append((action, what, size))
    width = max((len(path) for _, path, _ in rows), default=0)
    size_width = max((len(size) for _, _, size in rows), default=0)
    for action, path, size in rows:
        lines.append(f"  {action:<9}  {path:<{width}}  {size:>{size_width}}")
    if not verbose and len(rows) < len(plan.items):
        lines.append("  (per folder; --verbose lists every file)")
    totals = []
    for action, label in zip(ACTIONS, ("added", "changed", "deleted", "unchanged")):
        chosen = plan.of(action)
        size = sum((i.remote_size if action == "delete" else i.local_size) or 0 for i in chosen)
        totals.append(f"{len(chosen)} {label} ({human_size(size)})")
    lines.append("Total: " + ", ".join(totals) + f"; {human_size(plan.upload_bytes)} to upload.")
    if not plan.has_changes:
        lines.append("Nothing to commit: the remote already has exactly these files.")
    return "\n".join(lines)


def _item_size(item: PlanItem) -> str:
    if item.action == "change":
        return f"{human_size(item.remote_size or 0)} -> {human_size(item.local_size or 0)}"
    return human_size(item.local_size if item.local_size is not None else item.remote_size or 0)
