"""``muon-repro contribute``: offer runs recorded on your hardware to the dataset, as one Hub pull request.

Order of events, each a reason to stop before anything is sent:

1. the runs under ``--runs`` are found and checked (:mod:`muon_repro.contrib.run_check`): every
   problem is listed, naming the file and what to do;
2. the head of ``--revision`` (main) is read, with its file list and its ``MANIFEST.sha256``;
3. the plan: every run's files under ``traces/<profile>/<group>/<name>/trial<k>/``, and main's
   manifest with one line per added file appended (main's lines are kept as they are, so the
   manifest of the merged dataset checks every file). A run whose trial folder main already has
   is refused: contributions add, they never replace. ``--dry-run`` prints the plan and stops;
4. one commit, ``create_commit(..., create_pr=True, parent_commit=<head>)``: a pull request
   ``refs/pr/N`` from the head planned against; main does not move. Its URL is printed.

The token is whatever ``huggingface_hub`` finds (``HF_TOKEN``, ``hf auth login``); it is never printed.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from muon_repro.contrib.limits import MAX_PR_BYTES, MAX_PR_FILES, binary_size
from muon_repro.contrib.pr_lookup import said_plainly
from muon_repro.contrib.run_check import LocalRun, RunScan, scan_runs
from muon_repro.contrib.untrusted import guarded_echo, shown
from muon_repro.dataset.manifest import MANIFEST_NAME, FileEntry, check_bundle_path, kept_manifest, manifest_lines, parse_manifest
from muon_repro.dataset.naming import check_repo_id, check_revision
from muon_repro.hub.publish import DEFAULT_TIMEOUT_S, PublishError, check_timeout, hub_step, hub_timeout, token_in_use
from muon_repro.tables.files import human_size, sha256_file
from muon_repro.terminal import first_line
from muon_repro.values import counted

_TRIAL_IN_PATH = re.compile(r"/trial(\d+)/")


class ContributeError(ValueError):
    """The runs cannot be contributed as they are; the message lists every reason."""


class ContributeInterrupted(KeyboardInterrupt):
    """Ctrl-C while the pull request was being sent; the message says what may be left on the Hub."""


@dataclass(frozen=True)
class Addition:
    """One file the pull request adds: its path in the dataset, where it comes from, its size and sha256."""

    path: str
    source: Path
    size: int
    sha256: str


@dataclass(frozen=True)
class ContributionPlan:
    repo_id: str
    revision: str
    base_commit: str  # the head of ``revision`` planned against: the pull request starts there
    runs: tuple[LocalRun, ...]
    additions: tuple[Addition, ...]
    manifest: str  # the new MANIFEST.sha256: main's text, then ``appended``
    appended: str
    kept_lines: int  # main's manifest entries, kept as they are
    left_out: tuple[Path, ...]

    @property
    def upload_bytes(self) -> int:
        return sum(a.size for a in self.additions) + len(self.manifest.encode())

    @property
    def profiles(self) -> list[str]:
        return sorted({r.profile for r in self.runs})


@dataclass(frozen=True)
class ContributeResult:
    plan: ContributionPlan
    pr_url: str | None  # None for a dry run
    pr_num: int | None = None


def refusal(problems: list[str], what: str) -> ContributeError:
    """One error listing every problem, each on its own line."""
    lines = "\n".join(f"  - {p}" for p in problems)
    return ContributeError(f"{len(problems)} problem(s) keep {what}; nothing was sent to the Hub:\n{lines}")


def _next_free_trial(run: LocalRun, taken: set[str], local: list[LocalRun], proposed: set[str]) -> int:
    """The lowest trial number neither main, another local run, nor a rename already proposed (``proposed``: the
    trial folders the other conflicts were told to take) uses for ``run``'s configuration and profile."""
    prefix = run.dest.rsplit("/", 1)[0] + "/"
    used = {int(m[1]) for p in taken if p.startswith(prefix) and (m := _TRIAL_IN_PATH.search(p[len(prefix) - 1 :]))}
    used |= {r.trial for r in local if r.dest.startswith(prefix)}
    used |= {int(p[len(prefix) + len("trial") :]) for p in proposed if p.startswith(prefix + "trial")}
    return next(k for k in range(len(used) + 1) if k not in used)


def _conflicts(scan: RunScan, taken: set[str], revision: str) -> list[str]:
    """A message per run whose trial folder ``revision`` already has (its first file, and what to rename it to)."""
    problems: list[str] = []
    proposed: set[str] = set()  # each conflicting trial is told a folder of its own, not the same free one
    for run in scan.runs:
        existing = sorted(p for p in taken if p.startswith(run.dest + "/"))
        if existing:
            free = _next_free_trial(run, taken, scan.runs, proposed)
            proposed.add(f"{run.dest.rsplit('/', 1)[0]}/trial{free}")
            problems.append(
                f"{existing[0]}: {revision} already has this file ({counted(len(existing), 'file')} under {run.dest}/); "
                "contributions "
                f"never replace published runs: rename {shown(run.folder)} to {shown(run.folder.with_name(f'trial{free}'))} "
                "and contribute again"
            )
    return problems


def check_scan(scan: RunScan) -> None:
    """Refuse runs with problems (every one listed), or a folder without runs."""
    if scan.problems:
        raise refusal([str(p) for p in scan.problems], f"the runs under {shown(scan.root)} from being contributed")
    if not scan.runs:
        raise ContributeError(
            f"{shown(scan.root)}: no run folder found (a folder with config.json, or trial<k>); "
            "record runs with `muon-repro bench`"
        )


def _size_problems(scan: RunScan) -> list[str]:
    """Whether the runs fit one pull request as ``review`` takes it (MAX_PR_FILES, MAX_PR_BYTES)."""
    files = [run.folder / name for run in scan.runs for name in run.files]
    size = sum(f.stat().st_size for f in files)
    problems = []
    if len(files) > MAX_PR_FILES:
        problems.append(f"{len(files)} files to add, more than the {MAX_PR_FILES} one pull request may add")
    if size > MAX_PR_BYTES:
        problems.append(f"{human_size(size)} to add, more than the {binary_size(MAX_PR_BYTES)} one pull request may add")
    return [f"{p}: contribute the runs in parts (a --runs folder each), one pull request per part" for p in problems]


def plan_contribution(
    scan: RunScan, repo_id: str, revision: str, base_commit: str, remote_paths: set[str], manifest_text: str
) -> ContributionPlan:
    """The pull request's content: the runs' files and main's manifest with their lines appended (no request is made)."""
    check_scan(scan)
    main_entries = parse_manifest(manifest_text, f"{MANIFEST_NAME} of {repo_id} {revision}")
    taken = remote_paths | {e.path for e in main_entries}
    conflicts = _conflicts(scan, taken, revision) + _size_problems(scan)
    if conflicts:
        raise refusal(conflicts, f"the runs under {shown(scan.root)} from being contributed")
    additions = []
    for run in scan.runs:
        for name in run.files:
            size, sha = sha256_file(run.folder / name)
            additions.append(Addition(check_bundle_path(f"{run.dest}/{name}"), run.folder / name, size, sha))
    appended = manifest_lines([FileEntry(a.path, a.size, a.sha256) for a in additions])
    return ContributionPlan(
        repo_id,
        revision,
        base_commit,
        tuple(scan.runs),
        tuple(sorted(additions, key=lambda a: a.path)),
        kept_manifest(manifest_text) + appended,
        appended,
        len(main_entries),
        tuple(scan.left_out),
    )


def format_contribution(plan: ContributionPlan) -> str:
    """The plan as people read it: the runs, each file added with its size, the manifest lines appended, what is left out."""
    lines = [f"Contribution to dataset {plan.repo_id}, a pull request against {plan.revision} at {plan.base_commit[:12]}:"]
    for run in plan.runs:
        lines.append(f"  run {shown(run.folder)} -> {run.dest}/  (profile {run.profile})")
    width = max(len(a.path) for a in plan.additions)
    sizes = [human_size(a.size) for a in plan.additions]
    size_width = max(len(s) for s in sizes)
    for addition, size in zip(plan.additions, sizes):
        lines.append(f"  add     {addition.path:<{width}}  {size:>{size_width}}")
    appended = plan.appended.splitlines()
    lines.append(
        f"  append  {MANIFEST_NAME}: {len(appended)} line(s) after main's {plan.kept_lines}, which are kept as they are:"
    )
    lines += [f"            {line}" for line in appended]
    if plan.left_out:
        lines.append(f"  left out ({len(plan.left_out)} file(s) under the runs folder that belong to no run):")
        lines += [f"            {shown(path)}" for path in plan.left_out]
    lines.append(
        f"Total: {len(plan.runs)} run(s) of profile(s) {', '.join(plan.profiles)}, {len(plan.additions)} file(s) added "
        f"({human_size(sum(a.size for a in plan.additions))}), {MANIFEST_NAME} changed; {human_size(plan.upload_bytes)} to "
        "upload."
    )
    return "\n".join(lines)


def _read_main(api: Any, repo_id: str, revision: str, scratch: Path) -> tuple[str, set[str], str]:
    """(head commit, its file paths, its MANIFEST.sha256 text)."""
    from muon_repro.hub import remote

    with said_plainly(api, repo_id, revision):
        head = remote.head_commit(api, repo_id, revision)
    paths = set(remote.list_remote(api, repo_id, head))
    if MANIFEST_NAME not in paths:
        raise ContributeError(
            f"{repo_id} has no {MANIFEST_NAME} at {revision} ({head[:12]}): runs are contributed to a published dataset "
            "(muon-repro publish), whose manifest lists every file"
        )
    return head, paths, remote.read_text(api, repo_id, MANIFEST_NAME, head, scratch)


def _open_pull_request(api: Any, plan: ContributionPlan) -> Any:
    from huggingface_hub import CommitOperationAdd

    operations = [CommitOperationAdd(path_in_repo=a.path, path_or_fileobj=str(a.source)) for a in plan.additions]
    operations.append(CommitOperationAdd(path_in_repo=MANIFEST_NAME, path_or_fileobj=plan.manifest.encode()))
    runs = "\n".join(f"- {run.dest}/" for run in plan.runs)
    return api.create_commit(
        plan.repo_id,
        operations,
        commit_message=f"Contribute {len(plan.runs)} run(s) recorded on {', '.join(plan.profiles)}",
        commit_description=(
            f"Checked with `muon-repro contribute`; review: `muon-repro review --repo-id {plan.repo_id} --pr <N>`.\n\n{runs}\n"
        ),
        repo_type="dataset",
        revision=plan.revision,
        create_pr=True,
        parent_commit=plan.base_commit,
    )


def contribute(
    runs_dir: str | Path,
    repo_id: str,
    *,
    revision: str = "main",
    dry_run: bool = False,
    api: Any = None,
    echo: Callable[[str], None] = print,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> ContributeResult:
    """Check the runs under ``runs_dir``, plan them against ``revision`` of ``repo_id``, and open a pull request."""
    check_repo_id(repo_id)
    check_revision(revision)
    timeout = check_timeout(timeout)
    echo = guarded_echo(echo)
    scan = scan_runs(runs_dir)
    check_scan(scan)  # before any request: local problems need no Hub to be found
    from huggingface_hub import HfApi

    api = api if api is not None else HfApi()
    if not dry_run and not token_in_use(api):
        raise ValueError("no Hugging Face token found: set HF_TOKEN or run `hf auth login` (opening a pull request needs one)")
    with hub_timeout(timeout), tempfile.TemporaryDirectory(prefix="muon-contribute-") as scratch:
        with hub_step(api.endpoint, timeout, f"reading {revision} of {repo_id}", "nothing was sent to the Hub"):
            head, paths, manifest = _read_main(api, repo_id, revision, Path(scratch))
        plan = plan_contribution(scan, repo_id, revision, head, paths, manifest)
        echo(format_contribution(plan))
        if dry_run:
            echo("Dry run: nothing was sent to the Hub.")
            return ContributeResult(plan, None)
        state = "a pull request may or may not have been opened: look at the repository's pull requests before contributing again"
        doing = f"uploading {len(plan.additions)} files ({human_size(plan.upload_bytes)}) as a pull request to {repo_id}"
        from huggingface_hub.errors import HfHubHTTPError

        try:
            with hub_step(api.endpoint, timeout, doing, state):
                info = _open_pull_request(api, plan)
        except KeyboardInterrupt:
            raise ContributeInterrupted(f"{state} (stopped while {doing})") from None
        except HfHubHTTPError as exc:
            raise PublishError(f"the Hub refused the pull request to {repo_id}: {first_line(exc)}; main is unchanged") from exc
    echo(f"Opened pull request #{info.pr_num}: {info.pr_url}")
    echo(f"A maintainer checks it with: muon-repro review --repo-id {repo_id} --pr {info.pr_num}")
    return ContributeResult(plan, info.pr_url, info.pr_num)
