"""A fake Hugging Face Hub on 127.0.0.1 for tests: a test double, not a Hub to keep data in.

It speaks just enough of the Hub's HTTP API for the real clients (``huggingface_hub.HfApi``,
``hf download``, ``datasets.load_dataset`` through ``HfFileSystem``) to publish, list, tag and
download dataset repositories, and to open, read and merge pull requests, with no network and no
account. Point them at it with ``HF_ENDPOINT=<url>`` and ``HF_HUB_DISABLE_XET=1`` (Xet uploads
would bypass it). Everything
lives in memory (routes in :mod:`~tests.support.fake_hub_app`, storage in
:mod:`~tests.support.fake_hub_store`) and is gone when it stops. Any non-empty
bearer token is accepted; writes and private repositories need one.

Endpoints (paths as ``huggingface_hub`` 2.x builds them; ``{t}`` is models/datasets/spaces):

====================================================  ====================================
``POST /api/repos/create``                            create a repository (409 if it exists)
``POST /api/validate-yaml``                           check a README's YAML front matter
``GET  /api/whoami-v2``                               the (fake) user
``GET  /api/{t}/{repo}[/revision/{rev}]``             repo info: sha, siblings, cardData
``GET  /api/{t}/{repo}/refs``                         branches, tags, pull requests
``GET  /api/{t}/{repo}/tree/{rev}[/{path}]``          listing (``recursive``, ``expand``, paginated)
``POST /api/{t}/{repo}/paths-info/{rev}``             info about given paths
``GET  /api/{t}/{repo}/commits/{rev}``                first-parent history
``POST /api/{t}/{repo}/preupload/{rev}``              regular or LFS, per file
``POST /api/{t}/{repo}/commit/{rev}``                 NDJSON commit; ``parentCommit``; ``create_pr``
``GET  /api/{t}/{repo}/discussions[/{num}]``          pull requests: list, details (title, author, refs)
``POST /api/{t}/{repo}/discussions/{num}/merge``      merge a pull request into its base (409 on conflict)
``POST /api/{t}/{repo}/discussions/{num}/status``     close or reopen one
``POST|DELETE /api/{t}/{repo}/tag/{rev|tag}``         create a tag (409 if it exists) / delete one
``POST|DELETE /api/{t}/{repo}/branch/{branch}``       create / delete a branch
``POST /{prefix}{repo}.git/info/lfs/objects/batch``   LFS batch API, "basic" transfer
``PUT  /_fake/lfs/{sha256}``, ``POST /_fake/lfs-verify``  where the batch API sends uploads
``GET|HEAD /{prefix}{repo}/resolve/{rev}/{path}``      file content; ETag, X-Repo-Commit, Range
====================================================  ====================================

Run one by hand with ``python -m tests.support.fake_hub [--port N]``; in tests use
``with FakeHub() as hub: ... hub.url ...``. ``hub.requests`` records every (method, path),
``hub.add_hook`` runs a function before a matching request (to inject a concurrent push), and
``hub.stop_answering(method, path_regex)`` makes it a Hub that hangs: matching requests are
read and never answered (nor applied) until ``hub.resume_answering()`` or ``hub.stop()``.
"""

from __future__ import annotations

import argparse
import ipaddress
import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .fake_hub_app import FakeHubApp, card_metadata_errors
from .fake_hub_store import Blob, HubStore, Repo

__all__ = ["FakeHub", "FakeHubApp", "card_metadata_errors", "main"]


class _Handler(WSGIRequestHandler):
    def get_environ(self) -> dict:
        env = super().get_environ()
        env["RAW_PATH"] = self.path.split("?", 1)[0]  # PATH_INFO is percent-decoded: "%2F" would become "/"
        return env

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read hub.requests instead
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class FakeHub:
    """A fake Hub served from a background thread; ``with FakeHub() as hub:`` starts and stops it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"the fake Hub listens on loopback addresses only, not {host!r}; use 127.0.0.1")
        self.app = FakeHubApp()
        self.store = self.app.store
        self._server = make_server(host, port, self.app, server_class=_ThreadingServer, handler_class=_Handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        return self.app.requests

    def add_hook(self, method: str, path_regex: str, fn: Callable[[], None], *, once: bool = True) -> None:
        self.app.add_hook(method, path_regex, fn, once=once)

    def stop_answering(self, method: str = "", path_regex: str = "") -> None:
        """Matching requests (every one by default) are accepted, read, and never answered nor applied."""
        self.app.stop_answering(method, path_regex)

    def resume_answering(self) -> None:
        self.app.resume_answering()

    def start(self) -> FakeHub:
        # A short poll interval: stopping waits for it, and tests start and stop many hubs.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.app.resume_answering()  # let the threads of unanswered requests end
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------- direct access, for tests

    def get_repo(self, repo_id: str, repo_type: str = "dataset") -> Repo:
        return self.store.repo(repo_type, repo_id, authorized=True)

    def files(self, repo_id: str, revision: str = "main", repo_type: str = "dataset") -> dict[str, bytes]:
        """Path -> content at ``revision``."""
        commit = HubStore.commit_at(self.get_repo(repo_id, repo_type), revision)
        return {p: b.data for p, b in commit.tree.items()}

    def push(self, repo_id: str, files: dict[str, bytes | None], message: str = "push", repo_type: str = "dataset") -> str:
        """Commit straight to ``main`` as another client would (None deletes); returns the commit id."""
        repo = self.get_repo(repo_id, repo_type)
        changes = {p: None if d is None else Blob(d) for p, d in files.items()}
        return self.store.commit(repo, "main", changes, [], message, "", author="someone-else").oid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fake_hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    parser.add_argument("--unresponsive", action="store_true", help="accept connections, never answer (to try timeouts)")
    args = parser.parse_args(argv)
    hub = FakeHub(args.host, args.port)
    if args.unresponsive:
        hub.stop_answering()
    print(f"fake Hub (a test double, in memory) at {hub.url}", flush=True)
    print(f"use it with: HF_ENDPOINT={hub.url} HF_HUB_DISABLE_XET=1 HF_TOKEN=anything ...", flush=True)
    try:
        hub._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        hub._server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
