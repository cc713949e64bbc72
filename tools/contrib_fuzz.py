"""``python -m tools.contrib_fuzz --cases N``: hostile contributions end in a clear refusal or a clean pass.

Each case (:mod:`tools.contrib_cases`: a seed, a kind of attack, a variant) is a pull request opened
on a fake Hub on 127.0.0.1 against a small published dataset (or a runs folder for ``contribute``),
and ``muon-repro review`` (or ``contribute``) run on it in a child process under ``resource``
limits: ``RLIMIT_AS`` (address space) and ``RLIMIT_CPU``, and a wall-clock limit. Every case must
end within them as the case allows: a refusal (exit 1 with the problems, or exit 2 with one
``error:`` line), a clean pass (exit 0, one "Checks passed" line), or Ctrl-C's one line and exit
130, never a traceback, a ``MemoryError``, a hang or a signal; with nothing but printable text
(names escaped, no terminal control); and without downloading a file its checks refused, nor
uploading anything when ``contribute`` refuses. Prints how the cases ended, the longest one, the
largest memory and every failure with its seed; exits 1 if any case failed. Needs a checkout of
the repository (the fake Hub lives in tests/support/).

The children are forked from one process that has imported everything once (``--zygote``, internal),
so that a case costs the review, not Python's start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from muon_repro.dataset.manifest import HEADER
from tools.contrib_cases import KINDS, PROFILE, Case, good_run, make_case, manifest_lines
from tools.forked import Limits, Result, add_case_options, cases_of, control_characters, outcome_of, serve, summarize

REPO_ROOT = Path(__file__).resolve().parents[1]
REPO = "fuzz-org/muon-traces"
TOKEN = "hf_fuzz_token_0123456789"
MEMORY_LIMIT_BYTES = 2 * 2**30  # RLIMIT_AS of a case: a review of a small pull request needs a few hundred MB
CPU_LIMIT_S = 60  # RLIMIT_CPU of a case: SIGXCPU past it
WALL_LIMIT_S = 90  # a case still running then is a hang: killed
OUTCOMES = {0: "passed", 1: "refused", 2: "error", 130: "interrupted"}
LIMITS = Limits(MEMORY_LIMIT_BYTES, CPU_LIMIT_S, WALL_LIMIT_S)


# ---------------------------------------------------------------------- the child side (internal: --zygote)


def _zygote() -> int:
    """Import what a review needs, then per request line fork a child that runs one command, and report it."""
    from huggingface_hub.utils import _detect_agent

    import muon_repro.analysis.batch_read  # noqa: F401 - imported once here, not in each child
    import muon_repro.analysis.tables  # noqa: F401
    import muon_repro.contrib.contribute  # noqa: F401
    import muon_repro.contrib.review  # noqa: F401
    from muon_repro.cli import main

    _detect_agent._registry = _detect_agent._EMPTY_REGISTRY  # else each child asks the Hub for it
    _warm_up(main)
    return serve(main, LIMITS)


def _warm_up(main) -> None:  # noqa: ANN001 - muon_repro.cli.main
    """One review here first (of the pull request the harness opened for it), so that each child starts with what it
    loads on first use loaded; then the Hub client is closed, so that no child shares a connection of it."""
    import contextlib
    import io

    from huggingface_hub.utils import close_session

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["review", "--repo-id", REPO, "--pr", os.environ["CONTRIB_FUZZ_WARM_UP_PR"], "--workers", "1"])
    close_session()


# ---------------------------------------------------------------------- the parent side


class Harness:
    """The fake Hub with the published dataset, and the zygote that runs each case's command."""

    def __init__(self, scratch: Path) -> None:
        sys.path.insert(0, str(REPO_ROOT / "tests"))
        from support.fake_hub import FakeHub

        self.scratch = scratch
        self.hub = FakeHub().start()
        self.repo = self.hub.store.create_repo("dataset", REPO)
        published = good_run(f"traces/{PROFILE}/comparison/adamw_dp2_tp1/trial0", name="adamw_dp2_tp1")
        published["README.md"] = b"# data\n"
        self.main_manifest = HEADER.encode() + manifest_lines(published)
        self.hub.push(REPO, {**published, "MANIFEST.sha256": self.main_manifest})
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
        warm_up = self.open_pull_request(make_case(0, "good"))
        env.update(
            CONTRIB_FUZZ_WARM_UP_PR=str(warm_up),
            HF_ENDPOINT=self.hub.url,
            HF_HUB_DISABLE_XET="1",
            HF_HOME=str(scratch / "hf_home"),
            HF_TOKEN=TOKEN,
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            MALLOC_ARENA_MAX="2",  # glibc reserves 64 MB of address space per thread's arena otherwise
            PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        )
        self.zygote = subprocess.Popen(
            [sys.executable, "-m", "tools.contrib_fuzz", "--zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=REPO_ROOT,
            text=True,
        )

    def close(self) -> None:
        self.zygote.stdin.close()  # type: ignore[union-attr]
        self.zygote.wait(timeout=30)
        self.hub.stop()

    def open_pull_request(self, case: Case) -> int:
        from support.fake_hub_store import Blob

        main = self.repo.commits[self.repo.branches["main"]]
        pr = self.hub.store.open_pull_request(self.repo, "main", main, case.title, "fuzz", "fuzz-user")
        manifest = case.manifest
        if manifest is None:
            manifest = self.main_manifest + manifest_lines(case.files)
        elif manifest.startswith(b"MAIN\n"):
            manifest = self.main_manifest + manifest[len(b"MAIN\n") :]
        changes: dict[str, Blob | None] = {p: Blob(d) for p, d in case.files.items()}
        changes["MANIFEST.sha256"] = Blob(manifest)
        changes.update({p: None for p in case.deleted})
        commit = self.hub.store.commit(self.repo, pr.ref, changes, [], case.title, "")
        pr.commits.append(commit.oid)
        return pr.num

    def run(self, case: Case, folder: Path) -> Result:
        if case.command == "contribute":
            assert case.runs is not None
            case.runs(folder / "runs")
            argv = ["contribute", "--repo-id", REPO, "--runs", str(folder / "runs"), "--timeout", "20"]
        else:
            num = self.open_pull_request(case)
            argv = ["review", "--repo-id", case.repo or REPO, "--pr", str(case.pr or num), "--workers", "1", "--timeout", "20"]
        argv += list(case.args)
        request = {
            "argv": argv,
            "stdout": str(folder / "stdout"),
            "stderr": str(folder / "stderr"),
            "interrupt_after_s": case.interrupt_after_s,
        }
        seen = len(self.hub.requests)
        self.zygote.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
        self.zygote.stdin.flush()  # type: ignore[union-attr]
        report = json.loads(self.zygote.stdout.readline())  # type: ignore[union-attr]
        out, err = (Path(request[k]).read_text(errors="replace") for k in ("stdout", "stderr"))
        result = Result(case, outcome_of(report, OUTCOMES), report["seconds"], report["max_rss_bytes"], out, err)
        result.failures = judge(result, self.hub.requests[seen:])
        return result


def judge(result: Result, requests: list[tuple[str, str]]) -> list[str]:
    """Everything that is wrong with how a case ended (nothing for a clear refusal or a clean pass)."""
    case, out, err = result.case, result.stdout, result.stderr
    failures = []
    if result.outcome not in case.allowed:
        failures.append(f"ended {result.outcome}, expected {' or '.join(case.allowed)}")
    for word in ("Traceback", "MemoryError", "RecursionError"):
        if word in out + err:
            failures.append(f"{word} in the output: {(err or out).strip().splitlines()[-1][:200]}")
    if bad := control_characters(out + err):
        failures.append(f"control characters printed raw: {', '.join(bad[:5])}")
    passed_lines = [ln for ln in out.splitlines() if ln.startswith("Checks passed")]
    expected = {"passed": (1,), "interrupted": (0, 1)}.get(result.outcome, (0,)) if case.command == "review" else (0,)
    if len(passed_lines) not in expected:
        failures.append(f"{len(passed_lines)} line(s) start with 'Checks passed' on a case that {result.outcome}")
    lines = err.strip().splitlines()
    if result.outcome in ("error", "interrupted") and case.command == "review":
        prefix = "muon-repro review: error:" if result.outcome == "error" else "muon-repro review: interrupted;"
        if len(lines) != 1 or not lines[0].startswith(prefix):
            failures.append(f"stderr is not one line starting {prefix!r}: {err[:300]!r}")
    if case.command == "contribute":
        named = sum("is a symbolic link" in ln for ln in lines)
        if named != case.links:
            failures.append(f"{named} symbolic link(s) named, the runs folder holds {case.links}")
        if sent := [p for m, p in requests if m in ("POST", "PUT") and ("/commit/" in p or "/preupload/" in p or "lfs" in p)]:
            failures.append(f"uploaded after a refusal: {sent[0]}")
    fetched = {p for m, p in requests if m in ("GET", "HEAD") and "/resolve/" in p}
    if leaked := [p for p in case.never_downloaded if any(f.endswith("/" + p) for f in fetched)]:
        failures.append(f"downloaded a refused file: {leaked[0]!r}")
    return failures


def run_cases(cases: list[Case], *, echo=print) -> list[Result]:  # noqa: ANN001
    """Run ``cases``; print the summary; return every result."""
    results = []
    with tempfile.TemporaryDirectory(prefix="contrib-fuzz-") as tmp:
        harness = Harness(Path(tmp))
        started = time.perf_counter()
        try:
            for i, case in enumerate(cases):
                folder = Path(tmp) / f"case{i}"
                folder.mkdir()
                results.append(harness.run(case, folder))
        finally:
            harness.close()
        total = time.perf_counter() - started
    summarize(results, total, echo)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.contrib_fuzz", description=__doc__.split("\n\n")[0])
    add_case_options(parser, KINDS)
    parser.add_argument("--zygote", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.zygote:
        return _zygote()
    cases = cases_of(parser, args, make_case)
    return 1 if any(r.failures for r in run_cases(cases)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
