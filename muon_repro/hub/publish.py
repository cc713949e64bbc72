"""``muon-repro publish``: put a bundle on the Hub as one commit and one version tag.

Order of events, each a reason to stop:

1. the repository id, the version, the token and offline mode (``HF_HUB_OFFLINE``) are checked (no request before that);
2. the bundle must match its manifest, have been built for this repository and version, and pass
   every check of ``muon-repro verify`` (a bundle whose tables do not load is never tagged);
3. the remote head and tags are read, and the plan (add, change, delete, unchanged) is
   computed against that head and printed;
4. an existing tag ``vX.Y.Z`` is an error (versions never move), except when it already points
   at the head and the plan is empty: then the bundle is already published and nothing is done;
   ``--dry-run`` stops after this check;
5. one commit with ``parent_commit`` = the head planned against, so that a push by someone
   else in between fails instead of being overwritten; an empty plan makes no commit. Each uploaded file is read
   and hashed against the verified manifest first, and the commit's files are read back before the tag: a file
   written on disk after the checks stops the publish, and one written while it uploaded is never tagged;
6. the tag on that commit, or on the unchanged head (with ``--create-pr`` and changes: no tag
   yet; publishing again after the merge finds nothing to commit and tags the merged head).

The token is whatever ``huggingface_hub`` finds (``HF_TOKEN``, ``hf auth login``); it is never printed.
Every request waits at most ``timeout`` seconds for the Hub (connecting, sending, each read;
``huggingface_hub`` itself retries uploads a few times): a Hub that stops answering ends the
publish with a message saying what was being done and in what state the remote is left.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muon_repro.dataset.citation import CFF_NAME, bibtex, read_citation
from muon_repro.dataset.manifest import MANIFEST_NAME, FileEntry, check_manifest, read_manifest
from muon_repro.dataset.meta import BundleMeta
from muon_repro.dataset.naming import check_repo_id, check_token, dataset_url, tag_for
from muon_repro.hub.errors import offline_refusal, shown_endpoint
from muon_repro.hub.interrupts import PublishInterrupted, PublishStage
from muon_repro.hub.plan import Plan, RemoteFile, compute_plan, format_plan, list_remote
from muon_repro.tables.files import human_size, sha256_file
from muon_repro.terminal import first_line

DEFAULT_TIMEOUT_S = 60.0
TIMEOUT_KINDS = ("connect", "read", "write", "pool")  # httpx's timeouts, each per operation
SHOWN_FAILURES = 10  # verify failures listed when a bundle is refused


class PublishError(ValueError):
    """The Hub refused, did not answer, or the remote changed under us; the message says what state it is left in."""


# ---------------------------------------------------------------------- talking to the Hub (publish and download)


# The timeout of the current hub_timeout block, read by the request hook below (None: no block, hook idle).
_timeout_s: float | None = None


def _fill_in_timeouts(request: Any) -> None:
    """Request hook: every timeout the request leaves unset (None: wait forever) becomes ``_timeout_s``."""
    if _timeout_s is None:
        return
    given = request.extensions.get("timeout") or {}
    timeouts = {kind: _timeout_s if given.get(kind) is None else given[kind] for kind in TIMEOUT_KINDS}
    request.extensions = {**request.extensions, "timeout": timeouts}


def _hook_current_session() -> None:
    """Put the hook on ``huggingface_hub``'s shared client (it makes a new one after a connection error)."""
    from huggingface_hub.utils import get_session

    session = get_session()
    hooks = session.event_hooks
    if _fill_in_timeouts not in hooks["request"]:
        session.event_hooks = {**hooks, "request": [*hooks["request"], _fill_in_timeouts]}


def check_timeout(seconds: float) -> float:
    """A positive, finite number of seconds (``--timeout``)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
        raise ValueError(f"--timeout must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


@contextlib.contextmanager
def hub_timeout(seconds: float) -> Iterator[None]:
    """Every request ``huggingface_hub`` sends in this block waits at most ``seconds`` per operation.

    ``huggingface_hub`` 2.x sends most API calls with no timeout at all (its client has none and
    ``repo_info`` passes ``timeout=None``), so a Hub that accepts the connection and never answers
    is waited for forever. A request hook on its shared client fills in every missing timeout;
    explicit ones (its download timeouts, ``HF_HUB_DOWNLOAD_TIMEOUT``) are kept.
    """
    global _timeout_s
    previous, _timeout_s = _timeout_s, check_timeout(seconds)
    _hook_current_session()
    try:
        yield
    finally:
        _timeout_s = previous


def check_online(api: Any) -> None:
    """Offline mode (``HF_HUB_OFFLINE``) refuses every request ``api`` would send: say so before any work that needs
    the Hub after it."""
    from huggingface_hub import constants

    if constants.is_offline_mode():
        raise PublishError(f"{offline_refusal(api.endpoint)}; no request was sent to the Hub")


def token_source(api: Any) -> str:
    """Where the token ``api`` sends comes from, as ``huggingface_hub`` looks for it (for messages)."""
    from huggingface_hub import constants

    if isinstance(api.token, str):
        return "HfApi(token=...)"
    if os.environ.get("HF_OIDC_RESOURCE"):
        return "the OIDC token exchange (HF_OIDC_RESOURCE)"
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if (os.environ.get(name) or "").strip():
            return name
    return f"the cached login in {constants.HF_TOKEN_PATH} (hf auth login)"


def token_in_use(api: Any) -> str | None:
    """The token ``api``'s requests will carry, checked before any is sent; None if there is none."""
    from huggingface_hub import get_token

    if api.token is False:  # anonymous on purpose
        return None
    token = api.token if isinstance(api.token, str) else get_token()
    return check_token(token, token_source(api)) if token else None


@contextlib.contextmanager
def hub_step(endpoint: str, timeout: float, doing: str, state: str | Callable[[], str]) -> Iterator[None]:
    """Turn a Hub that does not answer (or cannot be reached) during ``doing`` into a PublishError saying ``state``;
    in offline mode (``HF_HUB_OFFLINE``), one saying so. ``endpoint`` is the client's address, shown as
    :func:`~muon_repro.hub.errors.shown_endpoint` shows it (no credentials).

    ``state`` says what is left on the remote; a callable is asked only on failure (it may look).
    """
    import httpx2
    from huggingface_hub.errors import OfflineModeIsEnabled

    _hook_current_session()
    endpoint = shown_endpoint(endpoint)
    try:
        yield
    except httpx2.TimeoutException:
        what = f"the Hub at {endpoint} did not answer within {timeout:g} s while {doing}"
    except httpx2.TransportError as exc:  # refused, reset, DNS...
        what = f"the Hub at {endpoint} could not be reached while {doing} ({first_line(exc)})"
    except OfflineModeIsEnabled:
        # HF_HUB_OFFLINE is read once, at import: the client has refused every request of this process, not just this one.
        raise PublishError(f"{offline_refusal(endpoint, doing)}; no request was sent to the Hub") from None
    else:
        return
    raise PublishError(f"{what}; {state() if callable(state) else state}") from None


@dataclass(frozen=True)
class PublishResult:
    plan: Plan
    commit: str | None  # the tagged commit (None for a dry run or an unmerged pull request)
    committed: bool
    tagged: bool
    pr_url: str | None = None


def bundle_files(root: Path) -> list[FileEntry]:
    """The bundle's files (manifest included) after checking them against the manifest."""
    problems = check_manifest(root)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ValueError(f"the bundle {root} does not match its {MANIFEST_NAME} ({shown}); rebuild it with `muon-repro bundle`")
    size, sha = sha256_file(root / MANIFEST_NAME)
    return [*read_manifest(root), FileEntry(MANIFEST_NAME, size, sha)]


def check_bundle_target(root: Path, repo_id: str, version: str, authors: Sequence[str] | None = None) -> BundleMeta:
    """The bundle's CITATION.cff must name this repository and version (the card says the same), and the
    ``authors`` if given (``--author``: the card is in the manifest, so publish checks them, it cannot
    change them); returns its metadata."""
    meta = read_citation(root / CFF_NAME)
    if (meta.repo_id, meta.version) != (repo_id, version):
        raise ValueError(
            f"the bundle {root} was built for {meta.url} version {meta.version}, not {repo_id} {version}; "
            f"render the report for it and rebuild it: muon-repro report --repo-id {repo_id} --version {version} && "
            f"muon-repro bundle --repo-id {repo_id} --version {version} --out {root}"
        )
    if authors and tuple(authors) != meta.authors:
        flags = " ".join(f"--author {shlex.quote(a)}" for a in authors)
        raise ValueError(
            f"the bundle {root} cites {'; '.join(meta.authors)}, not {'; '.join(authors)}; rebuild it (and the report) "
            f"with those authors: muon-repro report --repo-id {repo_id} --version {version} {flags} && "
            f"muon-repro bundle --repo-id {repo_id} --version {version} {flags} --out {root}"
        )
    return meta


def check_bundle_verifies(root: Path, echo: Callable[[str], None]) -> None:
    """Every check of ``muon-repro verify`` must pass: a tag is forever, a bundle that does not load must not get one."""
    from muon_repro.dataset.verify import verify_bundle

    result = verify_bundle(root)
    if not result.ok:
        shown = [f"  - {line}" for line in result.failed[:SHOWN_FAILURES]]
        if len(result.failed) > SHOWN_FAILURES:
            shown.append(f"  - and {len(result.failed) - SHOWN_FAILURES} more (muon-repro verify {root} lists them all)")
        raise ValueError(
            f"the bundle {root} fails {len(result.failed)} of the checks of `muon-repro verify`; nothing was sent to the Hub. "
            "Fix the sources, rebuild it (muon-repro bundle) and check it (muon-repro verify):\n" + "\n".join(shown)
        )
    echo(f"Verified {root}: all {len(result.passed)} checks passed.")


def _remote_state(api: Any, repo_id: str) -> tuple[str | None, dict[str, str]]:
    """(head commit of main, tag -> commit), or (None, {}) when the repository does not exist."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        head = api.repo_info(repo_id, repo_type="dataset", revision="main").sha
        refs = api.list_repo_refs(repo_id, repo_type="dataset")
    except RepositoryNotFoundError:
        return None, {}
    return head, {t.name: t.target_commit for t in refs.tags}


@dataclass(frozen=True)
class _Target:
    """Where a publish goes, for the requests and for the messages about them."""

    api: Any
    repo_id: str
    tag: str
    timeout: float

    @property
    def endpoint(self) -> str:
        """The Hub's address as messages and citations show it (no credentials)."""
        return shown_endpoint(self.api.endpoint)

    def step(self, doing: str, state: str | Callable[[], str]) -> contextlib.AbstractContextManager[None]:
        return hub_step(self.endpoint, self.timeout, doing, state)


def _read_remote(target: _Target, root: Path, local: list[FileEntry]) -> tuple[Plan, dict[str, str]]:
    """The plan against the remote head as it is now, and the remote's tags."""
    with target.step(f"reading the head, tags and files of {target.repo_id}", "nothing was changed on the Hub"):
        head, tags = _remote_state(target.api, target.repo_id)
        remote = list_remote(target.api, target.repo_id, head) if head else {}
    return compute_plan(root, local, remote, head), tags


def _commit_outcome(target: _Target, head: str, files: int) -> str:
    """What is known of a commit whose answer never came: the commit is one atomic call, so look at main."""
    try:
        with target.step("checking whether the commit landed", ""):
            now, _ = _remote_state(target.api, target.repo_id)
    except PublishError:
        return (
            f"whether it landed is unknown: the commit is one atomic call, so main is either still at {head[:12]} "
            f"or holds all {files} files; nothing was tagged. Run publish again when the Hub answers: it plans against "
            "the head it finds, and tags the commit if it landed"
        )
    if now == head:
        return "nothing was committed or tagged (the commit is one atomic call, and main has not moved); run publish again"
    return (
        f"main moved from {head[:12]} to {(now or '?')[:12]}, so the commit may have landed (or someone else pushed); "
        "nothing was tagged. Run publish again: it finds nothing to commit if the commit landed, and tags it"
    )


@dataclass(frozen=True)
class _Upload:
    """What a file held when it was read for the commit, checked against the manifest: how the Hub must then hold it
    (an LFS file by its sha256, a regular one by its git blob id)."""

    path: str
    sha256: str
    blob_id: str


def _operations(root: Path, plan: Plan, local: list[FileEntry]) -> tuple[list[Any], list[_Upload]]:
    """The commit's operations, and what each uploaded file held as it was read: a file that no longer holds what the
    verified manifest says (changed on disk after the checks) stops the publish before anything is sent."""
    import hashlib

    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.utils.sha import git_hash

    listed = {e.path: e.sha256 for e in local}
    uploads = []
    for item in (i for i in plan.items if i.action in ("add", "change")):
        data = (root / item.path).read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        if sha256 != listed[item.path]:
            raise PublishError(
                f"{root / item.path} changed after the bundle was verified (sha256 {sha256[:12]}..., its "
                f"{MANIFEST_NAME} says {listed[item.path][:12]}...); nothing was sent to the Hub. Rebuild the bundle "
                "(muon-repro bundle) and publish it while nothing writes to it"
            )
        uploads.append(_Upload(item.path, sha256, git_hash(data)))
    ops = [CommitOperationAdd(path_in_repo=u.path, path_or_fileobj=str(root / u.path)) for u in uploads]
    return ops + [CommitOperationDelete(path_in_repo=i.path) for i in plan.of("delete")], uploads


def _check_landed(target: _Target, commit: str, uploads: list[_Upload]) -> None:
    """Before a tag makes it forever: the commit holds every uploaded file as it was read and checked (a file rewritten
    on disk while it was uploading would otherwise be published unlike the manifest that lists it)."""
    with target.step(f"reading the files of commit {commit[:12]}", f"commit {commit[:12]} exists; nothing was tagged"):
        landed = list_remote(target.api, target.repo_id, commit)
    differ = [u.path for u in uploads if not _holds(landed.get(u.path), u)]
    if differ:
        more = len(differ) - SHOWN_FAILURES
        shown = ", ".join(differ[:SHOWN_FAILURES]) + (f", and {more} more" if more > 0 else "")
        raise PublishError(
            f"commit {commit[:12]} on {target.repo_id} holds {len(differ)} file(s) unlike the bundle's {MANIFEST_NAME} "
            f"({shown}): written on disk while they were uploading? Nothing was tagged; rebuild the bundle and publish "
            "again (it commits what differs, then tags)"
        )


def _holds(remote: RemoteFile | None, upload: _Upload) -> bool:
    """Whether the Hub holds ``upload`` as it was read: an LFS file by its sha256, a regular one by its git blob id."""
    if remote is None:
        return False
    return remote.lfs_sha256 == upload.sha256 if remote.lfs_sha256 is not None else remote.blob_id == upload.blob_id


def _commit(
    target: _Target, root: Path, plan: Plan, local: list[FileEntry], create_pr: bool
) -> tuple[str, str | None, str, list[_Upload]]:
    """One commit of the plan on top of the head planned against: (commit id, pull request URL, summary, what the
    uploaded files held)."""
    from huggingface_hub.errors import HfHubHTTPError

    head = plan.base_commit
    assert head is not None  # the repository exists by now
    summary = f"{len(plan.of('add'))} added, {len(plan.of('change'))} changed, {len(plan.of('delete'))} deleted"
    uploads = len(plan.of("add")) + len(plan.of("change"))
    doing = f"uploading {uploads} files ({human_size(plan.upload_bytes)}) and committing them to {target.repo_id}"
    operations, read = _operations(root, plan, local)
    try:
        with target.step(doing, lambda: _commit_outcome(target, head, uploads)):
            info = target.api.create_commit(
                target.repo_id,
                operations,
                commit_message=f"Publish {target.tag}",
                commit_description=f"muon_repro dataset {target.tag}: {summary} ({human_size(plan.upload_bytes)}).",
                repo_type="dataset",
                parent_commit=head,
                create_pr=create_pr,
            )
    except HfHubHTTPError as exc:
        with target.step(f"reading the head of {target.repo_id} after a refused commit", "nothing was tagged"):
            now, _ = _remote_state(target.api, target.repo_id)
        if now != head:
            raise PublishError(
                f"{target.repo_id} main moved from {head[:12]} to {(now or '?')[:12]} while publishing (someone else pushed); "
                "nothing was committed or tagged. Run publish again to plan against the new head."
            ) from exc
        raise PublishError(
            f"the Hub refused the commit to {target.repo_id}: {first_line(exc)}; nothing was committed or tagged"
        ) from exc
    return info.oid, info.pr_url, summary, read


def _tag(target: _Target, commit: str, committed: bool) -> None:
    from huggingface_hub.errors import HfHubHTTPError

    left = "the commit is on main" if committed else "nothing was committed"
    unknown = f"{left}, and the tag may or may not exist: run publish again (it tags the commit if needed)"
    try:
        with target.step(f"tagging {commit[:12]} as {target.tag} on {target.repo_id}", unknown):
            message = f"muon_repro dataset {target.tag}"
            target.api.create_tag(target.repo_id, tag=target.tag, revision=commit, repo_type="dataset", tag_message=message)
    except HfHubHTTPError as exc:
        untagged = "the commit is on main, untagged" if committed else "nothing was committed"
        raise PublishError(
            f"could not tag {commit[:12]} as {target.tag} on {target.repo_id}: {first_line(exc)} ({untagged})"
        ) from exc


def publish(
    bundle: str | Path,
    repo_id: str,
    version: str,
    *,
    dry_run: bool = False,
    create_pr: bool = False,
    private: bool = False,
    api: Any = None,
    echo: Callable[[str], None] = print,
    timeout: float = DEFAULT_TIMEOUT_S,
    authors: Sequence[str] | None = None,
    verbose: bool = False,
) -> PublishResult:
    """Publish the bundle at ``bundle`` as ``repo_id`` version ``version`` (one commit, tagged), then print its
    BibTeX entry: the card's, :func:`~muon_repro.dataset.citation.bibtex`, with the tagged commit. ``authors``
    (``--author``): the authors the bundle must cite. ``verbose``: the plan lists every file, not every folder."""
    check_repo_id(repo_id)
    tag = tag_for(version)
    timeout = check_timeout(timeout)
    root = Path(bundle)
    if not root.is_dir():
        said = "a file, not a bundle folder" if root.exists() else "no such bundle folder"
        raise FileNotFoundError(
            f"{root}: {said}; give --bundle the folder `muon-repro bundle` made, or make one with "
            f"`muon-repro report --repo-id {repo_id} --version {version} && muon-repro bundle --repo-id {repo_id} "
            f"--version {version}`"
        )
    stage = PublishStage()  # Ctrl-C: PublishInterrupted says what the step it stopped left on the Hub
    try:
        local = bundle_files(root)
        meta = check_bundle_target(root, repo_id, version, authors)

        from huggingface_hub import HfApi

        api = api if api is not None else HfApi()
        token = token_in_use(api)
        if not dry_run and not token:
            raise ValueError("no Hugging Face token found: set HF_TOKEN or run `hf auth login` (a write token is needed)")
        check_online(api)  # before verifying the bundle: a publish that cannot reach the Hub is said at once
        check_bundle_verifies(root, echo)
        with hub_timeout(timeout):
            target = _Target(api, repo_id, tag, timeout)
            return _publish_to(target, root, local, meta, dry_run, create_pr, private, echo, stage, verbose)
    except KeyboardInterrupt as exc:
        if isinstance(exc, PublishInterrupted):
            raise
        raise PublishInterrupted(stage.left) from None


def _publish_to(
    target: _Target,
    root: Path,
    local: list[FileEntry],
    meta: BundleMeta,
    dry_run: bool,
    create_pr: bool,
    private: bool,
    echo: Callable[[str], None],
    stage: PublishStage,
    verbose: bool = False,
) -> PublishResult:
    repo_id, tag, version = target.repo_id, target.tag, meta.version
    plan, tags = _read_remote(target, root, local)
    head = plan.base_commit
    echo(format_plan(plan, repo_id, tag, verbose=verbose))
    if tag in tags:
        if tags[tag] == head and not plan.has_changes:
            echo(f"{repo_id} {tag} is already published at {head}: nothing to do.")
            echo(citation_text(meta, tags[tag], target.endpoint))
            return PublishResult(plan, head, committed=False, tagged=False)
        raise PublishError(
            f"tag {tag} already exists on {repo_id} (commit {tags[tag][:12]}) and versions never move; "
            "publish this bundle as a new version (muon-repro bundle/publish --version X.Y.Z)"
        )
    if dry_run:
        echo("Dry run: nothing was changed on the Hub.")
        echo(f"Once published, cite it as the card does, with the commit tagged {tag} as the revision:\n{bibtex(meta)}")
        return PublishResult(plan, None, committed=False, tagged=False)

    if head is None:
        state = "the repository may or may not exist now, empty; nothing was uploaded. Run publish again"
        stage.at(state)
        with target.step(f"creating the dataset repository {repo_id}", state):
            target.api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        echo(f"Created dataset repository {repo_id}{' (private)' if private else ''}.")
        stage.at(f"the repository {repo_id} exists, empty; nothing was uploaded. Run publish again")
        plan, tags = _read_remote(target, root, local)
        if plan.base_commit is None or tag in tags:
            raise PublishError(f"{repo_id} changed while it was being created; run publish again")

    commit, committed, pr_url = plan.base_commit, False, None
    if plan.has_changes:
        stage.at(
            "whether the pull request was opened is unknown (it is one atomic call); nothing was tagged. Look at the "
            "repository's pull requests before running publish again"
            if create_pr
            else f"whether the commit landed is unknown (it is one atomic call: main is either still at {(commit or '?')[:12]} "
            "or holds every file); nothing was tagged. Run publish again: it plans against the head it finds, and tags "
            "the commit if it landed"
        )
        commit, pr_url, summary, read = _commit(target, root, plan, local, create_pr)
        committed = True
        echo(f"Committed {summary} as {commit}.")
        _check_landed(target, commit, read)
    else:
        echo("No changes: no commit.")

    if create_pr and committed:
        echo(f"Opened {pr_url}. After it is merged, run publish again with --version {version} to tag it.")
        return PublishResult(plan, None, committed=True, tagged=False, pr_url=pr_url)
    assert commit is not None
    stage.at(f"{commit[:12]} is on main; the tag {tag} may or may not exist: run publish again (it tags the commit if needed)")
    _tag(target, commit, committed)
    stage.at(f"{repo_id} {tag} is published at {commit[:12]}")
    echo(f"Published {repo_id} {tag} at {commit}: {dataset_url(repo_id, tag, endpoint=target.endpoint)}")
    echo(citation_text(meta, commit, target.endpoint))
    return PublishResult(plan, commit, committed=committed, tagged=True, pr_url=pr_url)


def citation_text(meta: BundleMeta, commit: str, endpoint: str) -> str:
    """The card's BibTeX with the published commit as its revision, as the Hub's "Cite this dataset" gives it."""
    return f"Cite this version as:\n{bibtex(meta, commit, endpoint=endpoint)}"
