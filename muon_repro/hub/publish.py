"""``muon-repro publish``: put a bundle on the Hub as one commit and one version tag.

Order of events, each a reason to stop:

1. the repository id and version are checked (no request before that);
2. the bundle must match its manifest and have been built for this repository and version;
3. the remote head and tags are read, and the plan (add, change, delete, unchanged) is
   computed against that head and printed;
4. an existing tag ``vX.Y.Z`` is an error (versions never move), except when it already points
   at the head and the plan is empty: then the bundle is already published and nothing is done;
   ``--dry-run`` stops after this check;
5. one commit with ``parent_commit`` = the head planned against, so that a push by someone
   else in between fails instead of being overwritten; an empty plan makes no commit;
6. the tag on that commit, or on the unchanged head (with ``--create-pr`` and changes: no tag
   yet; publishing again after the merge finds nothing to commit and tags the merged head).

The token is whatever ``huggingface_hub`` finds (``HF_TOKEN``, ``hf auth login``); it is never printed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from muon_repro.hub.citation import CFF_NAME
from muon_repro.hub.fsutil import human_size, sha256_file
from muon_repro.hub.manifest import MANIFEST_NAME, FileEntry, check_manifest, read_manifest
from muon_repro.hub.naming import check_repo_id, dataset_url, tag_for
from muon_repro.hub.plan import Plan, compute_plan, format_plan, list_remote


class PublishError(ValueError):
    """The Hub refused or the remote changed under us; the message says what state it is left in."""


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


def check_bundle_target(root: Path, repo_id: str, version: str) -> None:
    """The bundle's CITATION.cff must name this repository and version (the card says the same)."""
    try:
        cff = yaml.safe_load((root / CFF_NAME).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{root / CFF_NAME}: unreadable ({exc}); rebuild the bundle with `muon-repro bundle`") from exc
    built = (cff or {}).get("version"), str((cff or {}).get("repository-artifact", ""))
    if built != (version, dataset_url(repo_id)):
        raise ValueError(
            f"the bundle {root} was built for {built[1] or '?'} version {built[0]}, not {repo_id} {version}; "
            f"rebuild it: muon-repro bundle --repo-id {repo_id} --version {version} --out {root}"
        )


def _remote_state(api: Any, repo_id: str) -> tuple[str | None, dict[str, str]]:
    """(head commit of main, tag -> commit), or (None, {}) when the repository does not exist."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        head = api.repo_info(repo_id, repo_type="dataset", revision="main").sha
        refs = api.list_repo_refs(repo_id, repo_type="dataset")
    except RepositoryNotFoundError:
        return None, {}
    return head, {t.name: t.target_commit for t in refs.tags}


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
) -> PublishResult:
    check_repo_id(repo_id)
    tag = tag_for(version)
    root = Path(bundle)
    if not root.is_dir():
        raise FileNotFoundError(
            f"{root}: no such bundle folder; make one with `muon-repro bundle --repo-id {repo_id} --version {version}`"
        )
    local = bundle_files(root)
    check_bundle_target(root, repo_id, version)

    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError

    api = api if api is not None else HfApi()
    if not dry_run and not (api.token or get_token()):
        raise ValueError("no Hugging Face token found: set HF_TOKEN or run `hf auth login` (a write token is needed)")

    head, tags = _remote_state(api, repo_id)
    plan = compute_plan(root, local, list_remote(api, repo_id, head) if head else {}, head)
    echo(format_plan(plan, repo_id, tag))
    if tag in tags:
        if tags[tag] == head and not plan.has_changes:
            echo(f"{repo_id} {tag} is already published at {head}: nothing to do.")
            return PublishResult(plan, head, committed=False, tagged=False)
        raise PublishError(
            f"tag {tag} already exists on {repo_id} (commit {tags[tag][:12]}) and versions never move; "
            "publish this bundle as a new version (muon-repro bundle/publish --version X.Y.Z)"
        )
    if dry_run:
        echo("Dry run: nothing was changed on the Hub.")
        return PublishResult(plan, None, committed=False, tagged=False)

    if head is None:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        echo(f"Created dataset repository {repo_id}{' (private)' if private else ''}.")
        head, tags = _remote_state(api, repo_id)
        if head is None or tag in tags:
            raise PublishError(f"{repo_id} changed while it was being created; run publish again")
        plan = compute_plan(root, local, list_remote(api, repo_id, head), head)

    commit, committed, pr_url = head, False, None
    if plan.has_changes:
        operations: list[Any] = [
            CommitOperationAdd(path_in_repo=i.path, path_or_fileobj=str(root / i.path))
            for i in plan.items
            if i.action in ("add", "change")
        ] + [CommitOperationDelete(path_in_repo=i.path) for i in plan.of("delete")]
        summary = f"{len(plan.of('add'))} added, {len(plan.of('change'))} changed, {len(plan.of('delete'))} deleted"
        try:
            info = api.create_commit(
                repo_id,
                operations,
                commit_message=f"Publish {tag}",
                commit_description=f"muon_repro dataset {tag}: {summary} ({human_size(plan.upload_bytes)}).",
                repo_type="dataset",
                parent_commit=head,
                create_pr=create_pr,
            )
        except HfHubHTTPError as exc:
            now, _ = _remote_state(api, repo_id)
            if now != head:
                raise PublishError(
                    f"{repo_id} main moved from {head[:12]} to {(now or '?')[:12]} while publishing (someone else pushed); "
                    "nothing was committed or tagged. Run publish again to plan against the new head."
                ) from exc
            raise PublishError(
                f"the Hub refused the commit to {repo_id}: {_first_line(exc)}; nothing was committed or tagged"
            ) from exc
        commit, committed, pr_url = info.oid, True, info.pr_url
        echo(f"Committed {summary} as {commit}.")
    else:
        echo("No changes: no commit.")

    if create_pr and committed:
        echo(f"Opened {pr_url}. After it is merged, run publish again with --version {version} to tag it.")
        return PublishResult(plan, None, committed=True, tagged=False, pr_url=pr_url)
    try:
        api.create_tag(repo_id, tag=tag, revision=commit, repo_type="dataset", tag_message=f"muon_repro dataset {tag}")
    except HfHubHTTPError as exc:
        raise PublishError(
            f"could not tag {commit[:12]} as {tag} on {repo_id}: {_first_line(exc)} "
            f"({'the commit is on main, untagged' if committed else 'nothing was committed'})"
        ) from exc
    echo(f"Published {repo_id} {tag} at {commit}: {dataset_url(repo_id, tag)}")
    return PublishResult(plan, commit, committed=committed, tagged=True, pr_url=pr_url)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
