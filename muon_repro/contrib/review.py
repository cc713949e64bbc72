"""``muon-repro review --repo-id ORG/NAME --pr N``: a maintainer's check of a pull request and what it does to the claims.

1. the pull request (title, author, status, ``refs/pr/N``, the branch it targets) and the commit it
   started from (the newest commit of its history that the target branch also has);
2. its changes against that commit (:mod:`muon_repro.contrib.pr_checks`), first on the file list alone:
   only run files added under ``traces/<profile>/<group>/<name>/trial<k>/``, every part of every path
   within the name rules, every file within its size and the pull request within ``max_files`` and
   ``max_bytes`` (:mod:`muon_repro.contrib.limits`); then only the files that passed are downloaded,
   and ``MANIFEST.sha256`` must keep main's lines and add one per added file whose sha256 and size
   match the file as downloaded; no added path that main has meanwhile, and no added trace or metrics.json that is
   a copy of a published or another added one (:func:`~muon_repro.contrib.pr_checks.copied_problems`; once main's
   runs are downloaded, nor a trial whose step times are another's to the last digit:
   :func:`~muon_repro.contrib.pr_checks.recorded_again_problems`);
3. every added run verified as ``contribute`` does (:func:`muon_repro.contrib.run_check.check_run`),
   and filed where its own files say (environment.json's profile, config.json's group and name);
4. per profile, main's runs of that profile (by their environment.json) analyzed again together
   with the pull request's (the analysis, in a temporary folder; a trial it leaves out, such as one of
   another configuration than its run's, is a failed check), and the claims
   printed before (main's ``metrics/claims.parquet``, that profile's rows) and after, with what changed.

Nothing is written to the Hub; merging is the maintainer's decision (the Hub's page, or
``HfApi.merge_pull_request``). The result says whether every check passed. Everything the pull
request names (paths, title, author) is printed escaped (:func:`muon_repro.contrib.untrusted.shown`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muon_repro.contrib.claims_diff import compare_claims, format_comparison
from muon_repro.contrib.limits import MAX_PR_BYTES, MAX_PR_FILES, MAX_SHOWN_PROBLEMS
from muon_repro.contrib.pr_checks import (
    TreeChanges,
    copied_problems,
    downloadable,
    manifest_downloadable,
    manifest_problems,
    path_problems,
    recorded_again_problems,
    size_problems,
    total_problems,
    tree_changes,
)
from muon_repro.contrib.pr_lookup import pull_request_details
from muon_repro.contrib.run_check import TRACES_ROOT, check_run
from muon_repro.contrib.untrusted import guarded_echo, shown
from muon_repro.dataset.manifest import MANIFEST_NAME, FileEntry
from muon_repro.dataset.naming import check_repo_id
from muon_repro.hardware import profile_from_environment, rows_of_profile
from muon_repro.hub import remote
from muon_repro.hub.publish import DEFAULT_TIMEOUT_S, check_timeout, hub_step, hub_timeout
from muon_repro.rundir import CONFIG_FILE, CONVERGENCE_GROUP, COSTMODEL_DIR, ENVIRONMENT_FILE, read_json
from muon_repro.tables.files import human_size, sha256_file
from muon_repro.values import is_count

CLAIMS_PATH = "metrics/claims.parquet"


MAX_PROBLEM_CHARS = 1000  # one problem printed at most this long: a message may quote a contributor's line


class ReviewError(ValueError):
    """The pull request cannot be reviewed at all (not a pull request, no history shared with its target)."""


@dataclass
class ReviewResult:
    problems: list[str] = field(default_factory=list)
    claims: dict[str, list[tuple[str, str, str, str]]] = field(default_factory=dict)  # profile -> (claim, before, after, change)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class _Context:
    api: Any
    repo_id: str
    scratch: Path
    echo: Callable[[str], None]


def _merge_base(ctx: _Context, ref: str, target: str) -> str:
    """The newest commit of ``ref``'s history that ``target``'s history also has: where the pull request started."""
    on_target = {c.commit_id for c in ctx.api.list_repo_commits(ctx.repo_id, repo_type="dataset", revision=target)}
    for commit in ctx.api.list_repo_commits(ctx.repo_id, repo_type="dataset", revision=ref):
        if commit.commit_id in on_target:
            return str(commit.commit_id)
    raise ReviewError(f"{ref} of {ctx.repo_id} shares no commit with {target}: it is not a pull request against {target}")


def _pr_changes(ctx: _Context, num: int) -> tuple[Any, str, str, TreeChanges]:
    """(the pull request's details, its target branch, the target's head now, its changes)."""
    details = pull_request_details(ctx.api, ctx.repo_id, num)
    if not details.is_pull_request:
        raise ReviewError(f"#{num} of {ctx.repo_id} is a discussion, not a pull request")
    target = (details.target_branch or "refs/heads/main").removeprefix("refs/heads/")
    ref = details.git_reference or f"refs/pr/{num}"
    head, main_head = remote.head_commit(ctx.api, ctx.repo_id, ref), remote.head_commit(ctx.api, ctx.repo_id, target)
    base = _merge_base(ctx, ref, target)
    changes = tree_changes(
        base, head, remote.list_remote(ctx.api, ctx.repo_id, base), remote.list_remote(ctx.api, ctx.repo_id, head)
    )
    moved = "it has not moved since" if main_head == base else f"{target} has moved since, to {main_head[:12]}"
    ctx.echo(
        f"Pull request #{num} on {ctx.repo_id}: {ascii(details.title)} by {shown(details.author)}, "
        f"{shown(details.status)}; {shown(ref)} at {head[:12]}, started from {shown(target)} at {base[:12]} ({moved})."
    )
    if details.status != "open":
        ctx.echo(f"Note: the pull request is {shown(details.status)}; reviewing it anyway.")
    return details, target, main_head, changes


def _manifest_text(ctx: _Context, files: dict[str, Any], revision: str) -> str | None:
    """The manifest at ``revision`` (None when it has none); a manifest that is not UTF-8 reads with its bad
    bytes replaced, so that it fails the line checks rather than the review."""
    if MANIFEST_NAME not in files:
        return None
    folder = remote.download(ctx.api, ctx.repo_id, [MANIFEST_NAME], revision, ctx.scratch / f"manifest-{revision}")
    return (folder / MANIFEST_NAME).read_bytes().decode("utf-8", errors="replace")


def _check_added(
    ctx: _Context, changes: TreeChanges, main_now: dict[str, Any], target: str, limits: tuple[int, int]
) -> list[str]:
    """Check the added files' paths and sizes on the file list, download those that passed into ``ctx.scratch / "pr"``,
    then check them: main's tree now, the manifest, every run. Returns the problems."""
    problems = path_problems(changes)
    if not changes.added:
        problems.append("the pull request adds no file; a contribution adds run folders")
    problems += [
        f"{shown(p)}: {target} now has this file too (added after the pull request started); the contributor renumbers the trial"
        for p in sorted(changes.added)
        if p in main_now
    ]
    if too_many := total_problems(changes, *limits):
        return [*problems, *too_many, "nothing was downloaded: the checks of the files themselves wait until it is split"]
    problems += size_problems(changes)
    wanted = downloadable(changes)
    size = sum(changes.added[p].size for p in wanted)
    left = f"; {len(changes.added) - len(wanted)} refused above are not" if len(wanted) < len(changes.added) else ""
    ctx.echo(f"Downloading the {len(wanted)} added file(s) ({human_size(size)}) of the pull request{left}...")
    root = remote.download(ctx.api, ctx.repo_id, wanted, changes.head, ctx.scratch / "pr")
    downloaded: dict[str, FileEntry | None] = {p: None for p in changes.added}
    downloaded.update({p: FileEntry(p, *sha256_file(root / p)) for p in wanted})
    if manifest_downloadable(changes):
        base_manifest = _manifest_text(ctx, changes.before, changes.base)
        problems += manifest_problems(base_manifest, _manifest_text(ctx, changes.after, changes.head), downloaded)
        problems += copied_problems(base_manifest, downloaded)
    complete = {p.rsplit("/", 1)[0] for p in wanted} - {p.rsplit("/", 1)[0] for p in changes.added if p not in wanted}
    for folder in (f for folders in changes.trial_folders().values() for f in folders if f in complete):
        run, run_problems = check_run(root / folder)
        problems += [f"{shown(p.path.relative_to(root).as_posix())}: {p.problem}" for p in run_problems]
        if run is not None and run.dest != folder:
            problems.append(
                f"{folder}: its own files file it under {shown(run.dest)} (environment.json's profile, config.json's group "
                "and name, the folder's trial); the contributor moves it there"
            )
    return problems


def _print_problems(echo: Callable[[str], None], problems: list[str]) -> None:
    """The problems, at most MAX_SHOWN_PROBLEMS of them, each at most MAX_PROBLEM_CHARS long."""
    echo(f"{len(problems)} check(s) FAILED:")
    for problem in problems[:MAX_SHOWN_PROBLEMS]:
        clipped = problem if len(problem) <= MAX_PROBLEM_CHARS else problem[:MAX_PROBLEM_CHARS] + "... (cut)"
        echo(f"  - {clipped}")
    if len(problems) > MAX_SHOWN_PROBLEMS:
        echo(f"  - and {len(problems) - MAX_SHOWN_PROBLEMS} more (ReviewResult.problems holds them all)")


def _main_runs_by_profile(ctx: _Context, main_head: str, files: dict[str, Any]) -> dict[str, list[str]]:
    """Main's trial folders (those with config.json) by the profile their environment.json gives."""
    folders = sorted({p.rsplit("/", 1)[0] for p in files if p.startswith(f"{TRACES_ROOT}/") and p.endswith(f"/{CONFIG_FILE}")})
    with_env = [f for f in folders if f"{f}/{ENVIRONMENT_FILE}" in files]
    env_paths = [f"{f}/{ENVIRONMENT_FILE}" for f in with_env]
    envs = remote.download(ctx.api, ctx.repo_id, env_paths, main_head, ctx.scratch / "environments")
    by_profile: dict[str, list[str]] = {}
    for folder in with_env:
        try:
            profile = profile_from_environment(read_json(envs / folder / ENVIRONMENT_FILE) or {})
        except ValueError:
            continue  # a published run without a usable profile belongs to no profile's comparison
        by_profile.setdefault(profile, []).append(folder)
    return by_profile


def _published_claims(ctx: _Context, main_head: str, files: dict[str, Any]) -> Any:
    from muon_repro.tables.io import read_table

    if CLAIMS_PATH not in files:
        return None
    published = remote.download(ctx.api, ctx.repo_id, [CLAIMS_PATH], main_head, ctx.scratch / "published")
    return read_table(published / CLAIMS_PATH, "claims", check_set=False)  # downloaded alone: no set to check


def _claims_after(
    ctx: _Context,
    profile: str,
    main_folders: list[str],
    main_head: str,
    main_files: dict[str, Any],
    pr_root: Path,
    pr_folders: list[str],
    workers: int | None,
) -> tuple[Any, list[str]]:
    """Main's runs of ``profile`` with the pull request's, analyzed together: their claims table, or None and what
    kept them from being analyzed together (a trial of another configuration than its run's, an incomplete run),
    each a failed check naming the trial as the dataset has it. Main's convergence and cost-model records of the
    profile come along, so that the claims resting on them (leading steps; the regime figures in the
    explanations) are measured again too."""
    from muon_repro.analysis.batch_read import analyze_paths
    from muon_repro.table_set import tables_of

    root = ctx.scratch / f"profile-{profile}"
    # every convergence group (convergence, convergence-<configuration>) and the cost model's records
    records = (f"{TRACES_ROOT}/{profile}/{CONVERGENCE_GROUP}", f"{TRACES_ROOT}/{profile}/{COSTMODEL_DIR}/")
    paths = [p for p in main_files if any(p.startswith(f + "/") for f in main_folders) or p.startswith(records)]
    with_records = " and its convergence and cost-model records" if any(p.startswith(records) for p in paths) else ""
    ctx.echo(
        f"Profile {profile}: downloading main's {len(main_folders)} trial folder(s) of it{with_records} "
        f"({human_size(sum(main_files[p].size for p in paths))}), then analyzing them with the pull request's "
        f"{len(pr_folders)}..."
    )
    remote.download(ctx.api, ctx.repo_id, paths, main_head, root)
    for folder in pr_folders:
        shutil.copytree(pr_root / folder, root / folder)
    if copies := recorded_again_problems({f: root / f for f in pr_folders}, {f: root / f for f in main_folders}):
        return None, [f"profile {profile}: {problem}" for problem in copies]
    analysis = analyze_paths([root / TRACES_ROOT], workers=workers)
    problems = [p.message.replace(f"{root}/", "") for p in (*analysis.failures, *analysis.incomplete)]
    if problems:
        return None, [f"profile {profile}, analyzed with main's runs: {problem}" for problem in problems]
    return rows_of_profile(tables_of(analysis)["claims"], profile), []


def review(
    repo_id: str,
    pr: int,
    *,
    api: Any = None,
    echo: Callable[[str], None] = print,
    workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_files: int = MAX_PR_FILES,
    max_bytes: int = MAX_PR_BYTES,
) -> ReviewResult:
    """Check pull request ``pr`` of ``repo_id`` and show, per profile, the claims before and after it."""
    check_repo_id(repo_id)
    if not is_count(pr):
        raise ValueError(f"--pr must be a pull request number (1, 2, ...), got {pr!r}")
    for flag, value in (("--max-files", max_files), ("--max-bytes", max_bytes)):
        if not is_count(value):
            raise ValueError(f"{flag} must be a positive whole number, got {value!r}")
    timeout = check_timeout(timeout)
    echo = guarded_echo(echo)
    from huggingface_hub import HfApi

    api = api if api is not None else HfApi()
    result = ReviewResult()
    with hub_timeout(timeout), tempfile.TemporaryDirectory(prefix="muon-review-", ignore_cleanup_errors=True) as scratch:
        ctx = _Context(api, repo_id, Path(scratch), echo)
        with hub_step(api.endpoint, timeout, f"reading pull request #{pr} of {repo_id}", "nothing was changed on the Hub"):
            _, target, main_head, changes = _pr_changes(ctx, pr)
            main_files = remote.list_remote(api, repo_id, main_head)
            result.problems = _check_added(ctx, changes, main_files, target, (max_files, max_bytes))
        if result.problems:
            _print_problems(echo, result.problems)
            return result
        pr_root = ctx.scratch / "pr"
        pr_by_profile = changes.trial_folders()
        echo(
            f"Checks passed on the files: {len(changes.added)} file(s) added in "
            f"{sum(map(len, pr_by_profile.values()))} trial folder(s), "
            f"{MANIFEST_NAME} appended to and matching them."
        )
        with hub_step(api.endpoint, timeout, f"reading main's runs and claims of {repo_id}", "nothing was changed on the Hub"):
            main_by_profile = _main_runs_by_profile(ctx, main_head, main_files)
            published = _published_claims(ctx, main_head, main_files)
            for profile, pr_folders in sorted(pr_by_profile.items()):
                main_folders = main_by_profile.get(profile, [])
                after, problems = _claims_after(ctx, profile, main_folders, main_head, main_files, pr_root, pr_folders, workers)
                if problems:
                    result.problems += problems
                    continue
                result.claims[profile] = compare_claims(rows_of_profile(published, profile), after)
                echo(
                    f"Claims on profile {profile}: before = main's {CLAIMS_PATH}; after = main's {len(main_folders)} "
                    f"trial folder(s) of {profile} with the pull request's {len(pr_folders)}:"
                )
                echo("\n".join(format_comparison(result.claims[profile])))
    if result.problems:
        _print_problems(echo, result.problems)
    return result
