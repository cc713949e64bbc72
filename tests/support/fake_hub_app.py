"""The HTTP side of :mod:`tests.support.fake_hub`: a WSGI application routing the Hub's endpoints onto a store.

Paths are matched *before* percent-decoding (``refs%2Fpr%2F1`` is one revision segment, as the
client quotes it), then each captured group is decoded. Errors are answered as the Hub answers
them: a status, ``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound) and
``X-Error-Message`` headers, and a JSON body with ``error``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote

import yaml

from .fake_hub_store import COMMIT_OID, Blob, Commit, HubError, HubStore, PullRequest, Repo

REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
PAGE_SIZE, EXPANDED_PAGE_SIZE = 1000, 50  # as the Hub: fewer entries per page when expanded

Response = tuple[int, dict[str, str], bytes]


@dataclass
class Request:
    method: str
    segments: list[str]  # the path, split on "/" *before* percent-decoding, then decoded
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    base_url: str

    @property
    def authorized(self) -> bool:
        auth = self.headers.get("authorization", "")
        return auth.lower().startswith("bearer ") and len(auth) > len("bearer ")

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError as exc:
            raise HubError(400, f"Invalid JSON body: {exc}") from exc

    def flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[-1].lower() in ("1", "true")


def _json(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(payload).encode()


def _need_auth(req: Request) -> None:
    if not req.authorized:
        raise HubError(401, "Invalid credentials in Authorization header")


class FakeHubApp:
    """The WSGI application: routes requests onto a :class:`HubStore`."""

    def __init__(self, store: HubStore | None = None) -> None:
        self.store = store or HubStore()
        self.requests: list[tuple[str, str]] = []
        self._hooks: list[tuple[str, re.Pattern[str], Callable[[], None]]] = []
        # Requests matching one of these get no answer until resume_answering() (see stop_answering).
        self._silenced: list[tuple[str, re.Pattern[str]]] = []
        self._resumed = threading.Event()
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., Response]]] = []
        repo = r"/(?P<t>models|datasets|spaces)/(?P<ns>[^/]+)/(?P<name>[^/]+)"  # under /api/
        git_repo = r"/(?:(?P<t>datasets|spaces)/)?(?P<ns>[^/]+)/(?P<name>[^/]+)"  # outside /api/: models have no prefix
        for method, pattern, handler in [
            ("POST", r"/api/repos/create", self.create_repo),
            ("POST", r"/api/validate-yaml", self.validate_yaml),
            ("GET", r"/api/whoami-v2", self.whoami),
            ("GET", rf"/api{repo}(?:/revision/(?P<rev>[^/]+))?", self.repo_info),
            ("GET", rf"/api{repo}/refs", self.refs),
            ("GET", rf"/api{repo}/tree/(?P<rev>[^/]+)(?P<path>/.*)?", self.tree),
            ("POST", rf"/api{repo}/paths-info/(?P<rev>[^/]+)", self.paths_info),
            ("GET", rf"/api{repo}/commits/(?P<rev>[^/]+)", self.commits),
            ("POST", rf"/api{repo}/preupload/(?P<rev>[^/]+)", self.preupload),
            ("POST", rf"/api{repo}/commit/(?P<rev>[^/]+)", self.commit),
            ("POST", rf"/api{repo}/tag/(?P<rev>[^/]+)", self.create_tag),
            ("DELETE", rf"/api{repo}/tag/(?P<tag>[^/]+)", self.delete_tag),
            ("POST", rf"/api{repo}/branch/(?P<branch>[^/]+)", self.create_branch),
            ("DELETE", rf"/api{repo}/branch/(?P<branch>[^/]+)", self.delete_branch),
            ("GET", rf"/api{repo}/discussions", self.discussions),
            ("GET", rf"/api{repo}/discussions/(?P<num>[1-9]\d*)", self.discussion_details),
            ("POST", rf"/api{repo}/discussions/(?P<num>[1-9]\d*)/merge", self.merge),
            ("POST", rf"/api{repo}/discussions/(?P<num>[1-9]\d*)/status", self.change_status),
            ("POST", rf"{git_repo}\.git/info/lfs/objects/batch", self.lfs_batch),
            ("PUT", r"/_fake/lfs/(?P<sha>[0-9a-f]{64})", self.lfs_upload),
            ("POST", r"/_fake/lfs-verify", self.lfs_verify),
            ("GET", rf"{git_repo}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", self.resolve),
        ]:
            self._routes.append((method, re.compile(pattern), handler))

    # ------------------------------------------------------------------ plumbing

    def add_hook(self, method: str, path_regex: str, fn: Callable[[], None], *, once: bool = True) -> None:
        """Run ``fn()`` before the next request (every one unless ``once``) matching ``method`` and ``path_regex``."""

        def hook() -> None:
            if once:
                self._hooks.remove(entry)
            fn()

        entry = (method.upper(), re.compile(path_regex), hook)
        self._hooks.append(entry)

    def stop_answering(self, method: str = "", path_regex: str = "") -> None:
        """From now on, a matching request (every one by default; ``method`` "" is any) gets no answer.

        The connection is accepted and the request read, then nothing is sent back and nothing is
        applied: a Hub that hangs. Each such request is still recorded in ``requests``.
        """
        if self._resumed.is_set():
            self._resumed = threading.Event()
        self._silenced.append((method.upper(), re.compile(path_regex)))

    def resume_answering(self) -> None:
        """Answer again; the requests left hanging get a 503 (they were not applied)."""
        self._silenced.clear()
        self._resumed.set()

    def _silenced_for(self, method: str, path: str) -> bool:
        return any(m in ("", method) and pattern.search(path) for m, pattern in self._silenced)

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        raw_path = environ.get("RAW_PATH", environ.get("PATH_INFO", "/"))
        segments = [unquote(s) for s in raw_path.split("/")]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        headers["content-type"] = environ.get("CONTENT_TYPE", "")
        host = environ.get("HTTP_HOST") or f"{environ['SERVER_NAME']}:{environ['SERVER_PORT']}"
        req = Request(
            method=environ["REQUEST_METHOD"].upper(),
            segments=segments,
            query=parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True),
            headers=headers,
            body=environ["wsgi.input"].read(length) if length else b"",
            base_url=f"http://{host}",
        )
        path = "/".join(segments)
        self.requests.append((req.method, path))
        if self._silenced_for(req.method, path):
            self._resumed.wait()  # the client times out long before, as against a Hub that hangs
            status, out_headers, body = _json(503, {"error": "the fake Hub was not answering"})
            start_response(f"{status} {_REASONS[status]}", [*out_headers.items(), ("Content-Length", str(len(body)))])
            return [body]
        try:
            for method, pattern, hook in list(self._hooks):
                if method == req.method and pattern.search(path):
                    hook()
            status, out_headers, body = self._dispatch(req, raw_path)
        except HubError as err:
            extra = {"X-Error-Message": err.message}
            if err.code:
                extra["X-Error-Code"] = err.code
            status, out_headers, body = _json(err.status, {"error": err.message, **err.body}, extra)
        if "Content-Length" not in out_headers:
            out_headers["Content-Length"] = str(len(body))
        start_response(f"{status} {_REASONS.get(status, 'Status')}", list(out_headers.items()))
        return [b"" if req.method == "HEAD" else body]

    def _dispatch(self, req: Request, raw_path: str) -> Response:
        # Match on the raw path, then decode each group: "refs%2Fpr%2F1" stays one revision.
        for method, pattern, handler in self._routes:
            if method == req.method or (method == "GET" and req.method == "HEAD"):
                match = pattern.fullmatch(raw_path)
                if match:
                    groups = {k: unquote(v) if v is not None else None for k, v in match.groupdict().items()}
                    return handler(req, **groups)
        raise HubError(404, f"Not found: {req.method} {raw_path}")

    def _repo(self, req: Request, t: str | None, ns: str, name: str) -> Repo:
        repo_type = REPO_TYPES.get(t or "models", "model")
        return self.store.repo(repo_type, f"{ns}/{name}", authorized=req.authorized)

    # ------------------------------------------------------------------ repositories and refs

    def create_repo(self, req: Request) -> Response:
        _need_auth(req)
        body = req.json() or {}
        name, org = body.get("name"), body.get("organization") or "fake-user"
        repo_type = body.get("type") or "model"
        if not name or repo_type not in URL_PREFIXES:
            raise HubError(400, "Invalid repo name or type")
        private = bool(body.get("private")) or body.get("visibility") == "private"
        repo_id = f"{org}/{name}"
        url = f"{req.base_url}/{URL_PREFIXES[repo_type]}{repo_id}"
        try:
            self.store.create_repo(repo_type, repo_id, private=private)
        except HubError as err:
            err.body["url"] = url  # as the Hub: a 409 still says where the repository is
            raise
        return _json(200, {"url": url, "name": repo_id})

    def validate_yaml(self, req: Request) -> Response:
        content = (req.json() or {}).get("content", "")
        errors = [{"message": m} for m in card_metadata_errors(content)]
        return _json(400 if errors else 200, {"errors": errors, "warnings": []})

    def whoami(self, req: Request) -> Response:
        _need_auth(req)
        return _json(200, {"type": "user", "name": "fake-user", "fullname": "Fake User", "orgs": [], "auth": {}})

    def refs(self, req: Request, t: str, ns: str, name: str) -> Response:
        repo = self._repo(req, t, ns, name)

        def ref(kind: str, name: str, oid: str) -> dict:
            full = name if name.startswith("refs/") else f"refs/{kind}/{name}"
            return {"name": name, "ref": full, "targetCommit": oid}

        out: dict[str, list] = {
            "branches": [ref("heads", n, o) for n, o in repo.branches.items() if not n.startswith("refs/pr/")],
            "converts": [],
            "tags": [ref("tags", n, o) for n, o in repo.tags.items()],
        }
        if req.flag("include_prs"):
            out["pullRequests"] = [ref("pr", n, o) for n, o in repo.branches.items() if n.startswith("refs/pr/")]
        return _json(200, out)

    def create_tag(self, req: Request, t: str, ns: str, name: str, rev: str) -> Response:
        _need_auth(req)
        repo = self._repo(req, t, ns, name)
        tag = (req.json() or {}).get("tag")
        if not tag:
            raise HubError(400, "Missing tag name")
        self.store.create_tag(repo, tag, rev)
        return _json(200, {"name": tag})

    def delete_tag(self, req: Request, t: str, ns: str, name: str, tag: str) -> Response:
        _need_auth(req)
        repo = self._repo(req, t, ns, name)
        with self.store.lock:
            if repo.tags.pop(tag, None) is None:
                raise HubError(404, f"Invalid rev id: {tag}", "RevisionNotFound")
        return _json(200, {})

    def create_branch(self, req: Request, t: str, ns: str, name: str, branch: str) -> Response:
        _need_auth(req)
        repo = self._repo(req, t, ns, name)
        start = (req.json() or {}).get("startingPoint") or "main"
        self.store.create_branch(repo, branch, start)
        return _json(200, {})

    def delete_branch(self, req: Request, t: str, ns: str, name: str, branch: str) -> Response:
        _need_auth(req)
        repo = self._repo(req, t, ns, name)
        with self.store.lock:
            if branch == "main" or repo.branches.pop(branch, None) is None:
                raise HubError(400 if branch == "main" else 404, f"Cannot delete branch {branch}")
        return _json(200, {})

    # ------------------------------------------------------------------ reads

    def _entry(self, repo: Repo, commit: Commit, path: str, *, expand: bool) -> dict:
        tree = commit.tree
        if path in tree:
            blob = tree[path]
            entry: dict[str, Any] = {"type": "file", "oid": blob.oid, "size": blob.size, "path": path}
            if blob.sha256 is not None:
                entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": len(blob.pointer)}
        else:
            entry = {"type": "directory", "oid": HubStore.tree_oid(tree, path), "size": 0, "path": path}
        if expand:
            last = self.store.last_commit(repo, commit, path)
            entry["lastCommit"] = {"id": last.oid, "title": last.title, "date": last.date}
            if entry["type"] == "file":
                entry["securityFileStatus"] = {"status": "safe"}
        return entry

    def repo_info(self, req: Request, t: str, ns: str, name: str, rev: str | None = None) -> Response:
        repo = self._repo(req, t, ns, name)
        commit = self.store.commit_at(repo, rev or "main")
        blobs = req.flag("blobs")
        siblings = []
        for path, blob in sorted(commit.tree.items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling.update(size=blob.size, blobId=blob.oid)
                if blob.sha256 is not None:
                    sibling["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": len(blob.pointer)}
            siblings.append(sibling)
        readme = commit.tree.get("README.md")
        card = _front_matter(readme.data.decode(errors="replace")) if readme else None
        return _json(
            200,
            {
                "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
                "id": repo.repo_id,
                "author": repo.repo_id.split("/")[0],
                "sha": commit.oid,
                "lastModified": commit.date,
                "createdAt": repo.created_at,
                "private": repo.private,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "cardData": card if isinstance(card, dict) else None,
                "siblings": siblings,
                "usedStorage": sum(b.size for b in commit.tree.values()),
            },
        )

    def tree(self, req: Request, t: str, ns: str, name: str, rev: str, path: str | None = None) -> Response:
        repo = self._repo(req, t, ns, name)
        commit = self.store.commit_at(repo, rev)
        folder = (path or "").strip("/")
        dirs = HubStore.directories(commit.tree)
        if folder and folder not in dirs:
            if folder in commit.tree:
                raise HubError(400, f"{folder} is a file, not a directory")
            raise HubError(404, f"{folder} does not exist on {rev}", "EntryNotFound")
        prefix = folder + "/" if folder else ""
        recursive, expand = req.flag("recursive"), req.flag("expand")
        paths = sorted(p for p in [*commit.tree, *dirs] if p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :]))
        start = int(req.query.get("cursor", ["0"])[-1])
        size = EXPANDED_PAGE_SIZE if expand else PAGE_SIZE
        page = [self._entry(repo, commit, p, expand=expand) for p in paths[start : start + size]]
        headers = {}
        if start + size < len(paths):
            query = f"recursive={recursive}&expand={expand}&cursor={start + size}"
            url = f"{req.base_url}/api/{t}/{ns}/{name}/tree/{quote(rev, safe='')}"
            headers["Link"] = f'<{url}{("/" + quote(folder, safe="")) if folder else ""}?{query}>; rel="next"'
        return _json(200, page, headers)

    def paths_info(self, req: Request, t: str, ns: str, name: str, rev: str) -> Response:
        repo = self._repo(req, t, ns, name)
        commit = self.store.commit_at(repo, rev)
        if req.headers.get("content-type", "").startswith("application/json"):
            body = req.json() or {}
            paths, expand = body.get("paths", []), bool(body.get("expand"))
        else:
            form = parse_qs(req.body.decode(), keep_blank_values=True)
            paths, expand = form.get("paths", []), form.get("expand", ["false"])[-1].lower() in ("1", "true")
        dirs = HubStore.directories(commit.tree)
        known = [p.strip("/") for p in paths if p.strip("/") in commit.tree or p.strip("/") in dirs]
        return _json(200, [self._entry(repo, commit, p, expand=expand) for p in known])

    def commits(self, req: Request, t: str, ns: str, name: str, rev: str) -> Response:
        repo = self._repo(req, t, ns, name)
        history = repo.history(self.store.commit_at(repo, rev))
        return _json(
            200,
            [
                {"id": c.oid, "title": c.title, "message": c.message, "date": c.date, "authors": [{"user": c.author}]}
                for c in history
            ],
        )

    def resolve(self, req: Request, t: str | None, ns: str, name: str, rev: str, path: str) -> Response:
        repo = self._repo(req, t, ns, name)
        commit = self.store.commit_at(repo, rev)
        blob = commit.tree.get(path)
        if blob is None:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
        headers = {
            "ETag": f'"{blob.etag}"',
            "X-Repo-Commit": commit.oid,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        data, status = blob.data, 200
        window = _byte_range(req.headers.get("range"), len(data))
        if window is not None:
            first, last = window
            headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
            data, status = data[first : last + 1], 206
        headers["Content-Length"] = str(len(data))
        return status, headers, data

    # ------------------------------------------------------------------ writes

    def preupload(self, req: Request, t: str, ns: str, name: str, rev: str) -> Response:
        _need_auth(req)
        repo = self._repo(req, t, ns, name)
        self.store.commit_at(repo, rev if not req.flag("create_pr") else "main")
        current = repo.resolve(rev)
        files = []
        for f in (req.json() or {}).get("files", []):
            sample = base64.b64decode(f.get("sample", ""))
            mode = self.store.upload_mode(repo, rev, f["path"], int(f["size"]), sample)
            existing = current.tree.get(f["path"]) if current else None
            # As the Hub: the remote oid in the form the client compares (sha256 for LFS, git sha1 otherwise).
            oid = None if existing is None else (existing.sha256 if mode == "lfs" else existing.oid)
            files.append({"path": f["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        return _json(200, {"files": files, "commitOid": current.oid if current else None})

    def lfs_batch(self, req: Request, t: str | None, ns: str, name: str) -> Response:
        _need_auth(req)
        self._repo(req, t, ns, name)
        body = req.json() or {}
        if body.get("operation") != "upload":
            raise HubError(400, "Only LFS uploads are supported by the fake Hub")
        objects = []
        for obj in body.get("objects", []):
            sha, size = obj["oid"], int(obj["size"])
            entry: dict[str, Any] = {"oid": sha, "size": size, "authenticated": True}
            if sha not in self.store.lfs_objects:
                entry["actions"] = {
                    "upload": {"href": f"{req.base_url}/_fake/lfs/{sha}"},
                    "verify": {"href": f"{req.base_url}/_fake/lfs-verify"},
                }
            objects.append(entry)
        return _json(200, {"transfer": "basic", "objects": objects}, {"Content-Type": "application/vnd.git-lfs+json"})

    def lfs_upload(self, req: Request, sha: str) -> Response:
        if hashlib.sha256(req.body).hexdigest() != sha:
            raise HubError(400, "Uploaded content does not match its sha256")
        with self.store.lock:
            self.store.lfs_objects[sha] = req.body
        return 200, {}, b""

    def lfs_verify(self, req: Request) -> Response:
        body = req.json() or {}
        data = self.store.lfs_objects.get(body.get("oid", ""))
        if data is None or len(data) != body.get("size"):
            raise HubError(404, "LFS object not found or of the wrong size")
        return _json(200, {"success": True})

    def commit(self, req: Request, t: str, ns: str, name: str, rev: str) -> Response:
        _need_auth(req)
        repo = self._repo(req, t, ns, name)
        lines = [json.loads(line) for line in req.body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "The first NDJSON line must be the header")
        header = lines[0]["value"]
        changes: dict[str, Blob | None] = {}
        deleted_folders: list[str] = []
        for line in lines[1:]:
            key, value = line.get("key"), line.get("value", {})
            path = str(value.get("path", "")).strip("/")
            if not path or ".." in path.split("/"):
                raise HubError(400, f"Invalid path: {value.get('path')!r}")
            if key == "file":
                changes[path] = Blob(base64.b64decode(value["content"]))
                if path == "README.md":
                    errors = card_metadata_errors(changes[path].data.decode(errors="replace"))  # type: ignore[union-attr]
                    if errors:
                        raise HubError(400, "Invalid metadata in README.md: " + "; ".join(errors))
            elif key == "lfsFile":
                data = self.store.lfs_objects.get(value["oid"])
                if data is None or len(data) != value.get("size"):
                    raise HubError(400, f"LFS object {value['oid']} for {path} was not uploaded")
                changes[path] = Blob(data, value["oid"])
            elif key == "deletedFile":
                changes[path] = None
            elif key == "deletedFolder":
                deleted_folders.append(path)
            else:
                raise HubError(400, f"Unsupported commit operation: {key!r}")
        parent = header.get("parentCommit")
        if parent is not None and not COMMIT_OID.fullmatch(parent):
            raise HubError(400, f"Invalid parentCommit: {parent}")
        title, description = header.get("summary") or "", header.get("description") or ""
        pr = None
        if req.flag("create_pr"):
            if rev not in repo.branches or rev.startswith("refs/pr/"):
                raise HubError(400, f"A pull request targets a branch; {rev} is not one")
            # As the Hub: the pull request starts from parentCommit when given, else from the branch's head.
            start = repo.resolve(parent) if parent else repo.commits[repo.branches[rev]]
            if start is None:
                raise HubError(404, f"Invalid rev id: {parent}", "RevisionNotFound")
            pr = self.store.open_pull_request(repo, rev, start, title, description, "fake-user")
            branch, parent = pr.ref, None
        elif rev in repo.branches:
            branch = rev
            pr = next((p for p in repo.pull_requests.values() if p.ref == rev), None)  # a push to refs/pr/N
        else:
            raise HubError(404 if repo.resolve(rev) is None else 400, f"Invalid rev id: {rev}", "RevisionNotFound")
        try:
            commit = self.store.commit(repo, branch, changes, deleted_folders, title, description, parent_commit=parent)
        except HubError:
            if pr is not None and not pr.commits:  # the commit that would have opened it failed: no pull request
                with self.store.lock:
                    del repo.pull_requests[pr.num], repo.branches[pr.ref]
            raise
        pr_url = None
        if pr is not None:
            pr.commits.append(commit.oid)
            pr_url = self._discussion_url(req, repo, pr.num)
        url = f"{req.base_url}/{URL_PREFIXES[repo.repo_type]}{repo.repo_id}/commit/{commit.oid}"
        return _json(200, {"success": True, "commitOid": commit.oid, "commitUrl": url, "pullRequestUrl": pr_url})

    # ------------------------------------------------------------------ pull requests (discussions)

    @staticmethod
    def _discussion_url(req: Request, repo: Repo, num: int) -> str:
        return f"{req.base_url}/{URL_PREFIXES[repo.repo_type]}{repo.repo_id}/discussions/{num}"

    def _discussion(self, repo: Repo, pr: PullRequest) -> dict[str, Any]:
        """A pull request as the discussions list shows it."""
        return {
            "num": pr.num,
            "title": pr.title,
            "status": pr.status,
            "isPullRequest": True,
            "author": {"name": pr.author, "type": "user"},
            "createdAt": pr.created_at,
            "pinned": False,
            "numComments": 1,
            "repo": {"name": repo.repo_id, "type": repo.repo_type},
        }

    def discussions(self, req: Request, t: str, ns: str, name: str) -> Response:
        repo = self._repo(req, t, ns, name)
        wanted = req.query.get("status", ["all"])[-1]
        if req.query.get("type", ["all"])[-1] == "discussion":
            wanted = "none"
        page = [self._discussion(repo, pr) for pr in repo.pull_requests.values() if wanted in ("all", pr.status)]
        return _json(200, {"discussions": page, "count": len(page), "start": 0, "numClosedDiscussions": 0})

    def discussion_details(self, req: Request, t: str, ns: str, name: str, num: str) -> Response:
        repo = self._repo(req, t, ns, name)
        pr = self.store.pull_request(repo, int(num))
        author = {"name": pr.author, "type": "user"}
        # The description is the first comment; then one event per commit (a merge adds a status change).
        events: list[dict[str, Any]] = [
            {
                "id": f"{pr.num:04d}c",
                "type": "comment",
                "createdAt": pr.created_at,
                "author": author,
                "data": {"edited": False, "hidden": False, "latest": {"raw": pr.description, "html": pr.description}},
            }
        ]
        for oid in pr.commits:
            commit = repo.commits[oid]
            events.append(
                {
                    "id": oid[:24],
                    "type": "commit",
                    "createdAt": commit.date,
                    "author": author,
                    "data": {"subject": commit.title, "oid": oid},
                }
            )
        if pr.status != "open":
            events.append(
                {
                    "id": f"{pr.num:04d}s",
                    "type": "status-change",
                    "createdAt": pr.created_at,
                    "author": author,
                    "data": {"status": pr.status},
                }
            )
        changes = {"base": f"refs/heads/{pr.base}"}
        if pr.merge_commit is not None:
            changes["mergeCommitId"] = pr.merge_commit
        return _json(
            200,
            {
                **self._discussion(repo, pr),
                "events": events,
                "changes": changes,
                "filesWithConflicts": [],
                "diff": None,
            },
        )

    def merge(self, req: Request, t: str, ns: str, name: str, num: str) -> Response:
        _need_auth(req)
        repo = self._repo(req, t, ns, name)
        self.store.merge_pull_request(repo, int(num), "fake-user")
        return _json(200, {})

    def change_status(self, req: Request, t: str, ns: str, name: str, num: str) -> Response:
        _need_auth(req)
        repo = self._repo(req, t, ns, name)
        pr = self.store.pull_request(repo, int(num))
        status = (req.json() or {}).get("status")
        if status not in ("open", "closed") or pr.status == "merged":
            raise HubError(400, f"Cannot set the status of #{pr.num} ({pr.status}) to {status!r}")
        pr.status = status
        event = {
            "id": f"{pr.num:04d}s",
            "type": "status-change",
            "createdAt": pr.created_at,
            "author": {"name": "fake-user", "type": "user"},
            "data": {"status": status},
        }
        return _json(200, {"newStatus": event})


_REASONS = {
    200: "OK",
    206: "Partial Content",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    409: "Conflict",
    412: "Precondition Failed",
    416: "Range Not Satisfiable",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``Range: bytes=a-b`` (one range) -> inclusive (first, last); None for no or unsupported ranges."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", (header or "").strip())
    if not match or (not match[1] and not match[2]):
        return None
    if match[1]:
        first = int(match[1])
        last = min(int(match[2]), size - 1) if match[2] else size - 1
    else:
        first, last = max(size - int(match[2]), 0), size - 1
    if first >= size or first > last:
        raise HubError(416, f"Range {header} is outside a file of {size} bytes")
    return first, last


def _front_matter(text: str) -> Any:
    match = re.match(r"---\s*\n(.*?)\n---\s*(\n|$)", text, re.DOTALL)
    return yaml.safe_load(match[1]) if match else None


def card_metadata_errors(text: str) -> list[str]:
    """What the Hub's validate-yaml would reject in a README, roughly: bad YAML, bad ``configs``."""
    try:
        meta = _front_matter(text)
    except yaml.YAMLError as exc:
        return [f"YAML front matter does not parse: {exc}"]
    if meta is None:
        return []
    if not isinstance(meta, dict):
        return ["YAML front matter must be a mapping"]
    errors = []
    if "license" in meta and not isinstance(meta["license"], (str, list)):
        errors.append('"license" must be a string or a list of strings')
    configs = meta.get("configs", [])
    if not isinstance(configs, list):
        return [*errors, '"configs" must be a list']
    names = [c.get("config_name") for c in configs if isinstance(c, dict)]
    if len(names) != len(configs) or not all(isinstance(n, str) and n for n in names):
        errors.append('every "configs" entry must be a mapping with a "config_name"')
    if len(set(names)) != len(names):
        errors.append('"config_name" values must be unique')
    if sum(1 for c in configs if isinstance(c, dict) and c.get("default")) > 1:
        errors.append("at most one config can be the default")
    for c in configs:
        if isinstance(c, dict) and "data_files" not in c:
            errors.append(f'config {c.get("config_name")!r} has no "data_files"')
    return errors
