"""The storage behind :mod:`tests.support.fake_hub`: repositories as git-like commit graphs, in memory.

A test double, not a git implementation: a commit stores its whole tree (path -> blob) so that
any revision can be listed and served without walking history. Object ids look like git's:
a regular file's oid is its git blob sha1, an LFS file's oid is the git blob sha1 of its LFS
pointer (as on the Hub), directories and commits get sha1s of their content.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone

# Files the Hub stores through LFS whatever their content: the initial `.gitattributes` of a new
# repository lists them (a subset of the Hub's default list, enough for this project's bundles).
DEFAULT_LFS_PATTERNS = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.gz", "*.h5", "*.npy", "*.npz", "*.onnx",
    "*.parquet", "*.pickle", "*.pkl", "*.pt", "*.pth", "*.safetensors", "*.tar", "*.tar.*", "*.tgz",
    "*.xz", "*.zip", "*.zst", "*.jpg", "*.jpeg", "*.png", "*.webp", "*.gif", "*.mp3", "*.wav",
)  # fmt: skip
REGULAR_MAX_BYTES = 5 * 2**20  # larger files must go through LFS (huggingface_hub assumes <= 5 MB regular)
COMMIT_OID = re.compile(r"[0-9a-f]{40}")


def git_blob_oid(data: bytes) -> str:
    """git's object id for a blob holding ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def default_gitattributes() -> bytes:
    return "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in DEFAULT_LFS_PATTERNS).encode()


def lfs_patterns(gitattributes: bytes) -> list[str]:
    patterns = []
    for line in gitattributes.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) >= 2 and not parts[0].startswith("#") and "filter=lfs" in parts[1:]:
            patterns.append(parts[0])
    return patterns


def matches_any(path: str, patterns: list[str]) -> bool:
    # gitattributes: a pattern without "/" matches the file name at any depth
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(path if "/" in p else name, p.lstrip("/")) for p in patterns)


@dataclass(frozen=True)
class Blob:
    """One file version. ``data`` is the content; ``sha256`` is set for LFS files only."""

    data: bytes
    sha256: str | None = None

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def is_lfs(self) -> bool:
        return self.sha256 is not None

    @property
    def pointer(self) -> bytes:
        assert self.sha256 is not None
        return lfs_pointer(self.sha256, self.size)

    @property
    def oid(self) -> str:
        """What the Hub calls the file's oid: the git blob id of what git stores."""
        return git_blob_oid(self.pointer if self.is_lfs else self.data)

    @property
    def etag(self) -> str:
        """The ETag of ``resolve``: the sha256 for LFS files, the git blob id otherwise."""
        return self.sha256 if self.sha256 is not None else self.oid


@dataclass
class Commit:
    oid: str
    parents: list[str]
    title: str
    message: str
    tree: dict[str, Blob]
    date: str
    author: str


@dataclass
class PullRequest:
    """A pull request: its commits live on the branch ``refs/pr/<num>``; ``base`` is the branch it targets."""

    num: int
    title: str
    description: str
    author: str
    created_at: str
    base: str  # a branch name, e.g. "main"
    base_commit: str  # the commit the pull request started from (its merge base)
    status: str = "open"  # open | closed | merged
    merge_commit: str | None = None
    commits: list[str] = field(default_factory=list)  # the pull request's commits, oldest first

    @property
    def ref(self) -> str:
        return f"refs/pr/{self.num}"


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    created_at: str
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit oid; PRs are "refs/pr/N"
    tags: dict[str, str] = field(default_factory=dict)
    pull_requests: dict[int, PullRequest] = field(default_factory=dict)

    def resolve(self, revision: str) -> Commit | None:
        """Branch, tag, ``refs/pr/N``, full or abbreviated (>= 7) commit id -> commit."""
        oid = self.branches.get(revision) or self.tags.get(revision)
        if oid is None and revision.startswith("refs/heads/"):
            oid = self.branches.get(revision[len("refs/heads/") :])
        if oid is None and revision.startswith("refs/tags/"):
            oid = self.tags.get(revision[len("refs/tags/") :])
        if oid is None and re.fullmatch(r"[0-9a-f]{7,40}", revision):
            found = [c for c in self.commits if c.startswith(revision)]
            oid = found[0] if len(found) == 1 else None
        return self.commits.get(oid) if oid else None

    def history(self, commit: Commit) -> list[Commit]:
        """``commit`` and its first-parent ancestors, newest first."""
        out = [commit]
        while out[-1].parents:
            out.append(self.commits[out[-1].parents[0]])
        return out


class HubError(Exception):
    """An HTTP error the fake Hub answers with (status, Hub error code, message)."""

    def __init__(self, status: int, message: str, code: str | None = None, **body: object) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.body = body  # more fields for the JSON body


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class HubStore:
    """All repositories and LFS objects of one fake Hub; every method is thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lfs_objects: dict[str, bytes] = {}  # sha256 -> content, uploaded but maybe not committed yet
        self._counter = itertools.count()

    # ------------------------------------------------------------------ repositories

    def create_repo(self, repo_type: str, repo_id: str, *, private: bool = False) -> Repo:
        with self.lock:
            if (repo_type, repo_id) in self.repos:
                raise HubError(409, f"You already created this {repo_type} repo", None)
            repo = Repo(repo_type, repo_id, private, _now())
            self.repos[(repo_type, repo_id)] = repo
            # The Hub starts every repository with one commit holding `.gitattributes`.
            self._commit(repo, None, {".gitattributes": Blob(default_gitattributes())}, "initial commit", "", "system")
            return repo

    def repo(self, repo_type: str, repo_id: str, *, authorized: bool) -> Repo:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and not authorized):
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    @staticmethod
    def commit_at(repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    # ------------------------------------------------------------------ writes

    def upload_mode(self, repo: Repo, revision: str, path: str, size: int, sample: bytes) -> str:
        """ "lfs" or "regular", decided as the Hub does: `.gitattributes`, then size and binary content."""
        commit = repo.resolve(revision)
        attrs = commit.tree.get(".gitattributes") if commit else None
        patterns = lfs_patterns(attrs.data) if attrs else list(DEFAULT_LFS_PATTERNS)
        if size > 0 and (matches_any(path, patterns) or size > REGULAR_MAX_BYTES or b"\0" in sample):
            return "lfs"
        return "regular"

    def commit(
        self,
        repo: Repo,
        branch: str,
        changes: dict[str, Blob | None],
        deleted_folders: list[str],
        title: str,
        message: str,
        *,
        parent_commit: str | None = None,
        author: str = "fake-user",
    ) -> Commit:
        """Apply ``changes`` (path -> blob, or None to delete) on top of ``branch``; create it from main if new."""
        with self.lock:
            head_oid = repo.branches.get(branch)
            if head_oid is None:
                raise HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            if parent_commit is not None:
                parent = repo.resolve(parent_commit)
                if parent is None or parent.oid != head_oid:
                    # What the Hub answers when the branch moved since the client looked.
                    raise HubError(412, "A commit has happened since. Please refresh and try again.")
            tree = dict(repo.commits[head_oid].tree)
            for folder in deleted_folders:
                prefix = folder.rstrip("/") + "/"
                gone = [p for p in tree if p.startswith(prefix)]
                if not gone:
                    raise HubError(404, f"A folder with this name doesn't exist: {folder}", "EntryNotFound")
                for p in gone:
                    del tree[p]
            for path, blob in changes.items():
                if blob is None:
                    if path not in tree:
                        raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                    del tree[path]
                else:
                    tree[path] = blob
            return self._commit(repo, branch, tree, title, message, author)

    def _commit(self, repo: Repo, branch: str | None, tree: dict[str, Blob], title: str, message: str, author: str) -> Commit:
        parents = [repo.branches[branch or "main"]] if (branch or "main") in repo.branches else []
        date = _now()
        body = "\n".join([*(f"{p} {b.oid}" for p, b in sorted(tree.items())), *parents, title, message, date])
        oid = hashlib.sha1(f"{body}\n{next(self._counter)}".encode()).hexdigest()
        commit = Commit(oid, parents, title, message, tree, date, author)
        repo.commits[oid] = commit
        repo.branches[branch or "main"] = oid
        return commit

    def open_pull_request(self, repo: Repo, base: str, start: Commit, title: str, description: str, author: str) -> PullRequest:
        """A new pull request against branch ``base``: the branch ``refs/pr/N`` starting at ``start``."""
        with self.lock:
            # As on the Hub, discussions and pull requests share one numbering.
            pr = PullRequest(len(repo.pull_requests) + 1, title, description, author, _now(), base, start.oid)
            repo.pull_requests[pr.num] = pr
            repo.branches[pr.ref] = start.oid
            return pr

    def pull_request(self, repo: Repo, num: int) -> PullRequest:
        pr = repo.pull_requests.get(num)
        if pr is None:
            raise HubError(404, f"Discussion #{num} not found", "EntryNotFound")
        return pr

    def merge_pull_request(self, repo: Repo, num: int, author: str) -> Commit:
        """Apply the pull request's changes (its head against its start) onto its base branch, refusing conflicts."""
        with self.lock:
            pr = self.pull_request(repo, num)
            if pr.status != "open":
                raise HubError(400, f"Pull request #{num} is {pr.status}, not open")
            start, head = repo.commits[pr.base_commit].tree, repo.commits[repo.branches[pr.ref]].tree
            target = repo.commits[repo.branches[pr.base]].tree
            changed = {p for p in {*start, *head} if start.get(p) != head.get(p)}
            conflicts = sorted(p for p in changed if target.get(p) != start.get(p) and target.get(p) != head.get(p))
            if conflicts:
                raise HubError(409, f"Merge conflict in {', '.join(conflicts)}", filesWithConflicts=conflicts)
            changes = {p: head.get(p) for p in changed}
            merged = self.commit(repo, pr.base, changes, [], f"Merge pull request #{num}: {pr.title}", "", author=author)
            pr.status, pr.merge_commit = "merged", merged.oid
            return merged

    def create_tag(self, repo: Repo, tag: str, revision: str) -> None:
        with self.lock:
            commit = self.commit_at(repo, revision)
            if tag in repo.tags:
                raise HubError(409, f"Tag reference refs/tags/{tag} already exists")
            repo.tags[tag] = commit.oid

    def create_branch(self, repo: Repo, branch: str, revision: str) -> None:
        with self.lock:
            commit = self.commit_at(repo, revision)
            if branch in repo.branches:
                raise HubError(409, f"Reference refs/heads/{branch} already exists")
            repo.branches[branch] = commit.oid

    # ------------------------------------------------------------------ reads

    @staticmethod
    def directories(tree: dict[str, Blob]) -> set[str]:
        return {p.rsplit("/", i)[0] for p in tree for i in range(1, p.count("/") + 1)}

    @staticmethod
    def tree_oid(tree: dict[str, Blob], folder: str) -> str:
        prefix = folder + "/"
        listing = "".join(f"{p} {b.oid}\n" for p, b in sorted(tree.items()) if p.startswith(prefix))
        return hashlib.sha1(listing.encode()).hexdigest()

    def last_commit(self, repo: Repo, commit: Commit, path: str) -> Commit:
        """The newest commit in ``commit``'s first-parent history that changed ``path`` (file or folder)."""

        def view(c: Commit) -> dict[str, str]:
            return {p: b.oid for p, b in c.tree.items() if p == path or p.startswith(path + "/")}

        history = repo.history(commit)
        for newer, older in itertools.pairwise(history):
            if view(newer) != view(older):
                return newer
        return history[-1]
