"""``python -m tools.cli_fuzz --cases N``: the whole command line, pointed at hostile places and inputs, ends cleanly.

Each case (:mod:`tools.cli_cases`: a seed, a kind, a variant) is a workspace of files, links and tables, and
the ``muon-repro`` commands run in it one after another in a child forked from a process that imported
everything once (:mod:`tools.forked`), under ``RLIMIT_AS``, ``RLIMIT_CPU`` and a wall-clock limit. Every case
must end as it allows: a clean pass (exit 0) or a refusal (exit 1 with the problems, exit 2 with an error),
never a traceback, a ``MemoryError``, a hang or a signal; with nothing but printable text; with the files
it must not touch unchanged, no file created at a path escape's target, and an interrupted run's staging
gone. Prints how the cases ended, per kind, the longest one, the largest memory and every failure with its
seed; exits 1 if any case failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.cli_cases import KINDS, Case, make_case, tiny_run
from tools.forked import Limits, Result, add_case_options, cases_of, control_characters, outcome_of, serve, summarize

REPO_ROOT = Path(__file__).resolve().parents[1]
LIMITS = Limits(memory_bytes=3 * 2**30, cpu_s=60, wall_s=90)
OUTCOMES = {0: "passed", 1: "refused", 2: "error"}
GOOD = "good"  # the harness's folder of a valid run and its tables, copied into the cases that start from them


# ---------------------------------------------------------------------- the child side (internal: --zygote)


def _run_all(commands: list[list[str]]) -> int:
    """The commands of one case, in order, until one fails; its exit code."""
    from muon_repro.cli import main

    for argv in commands:
        code = main(argv)
        if code:
            return code
    return 0


def _zygote(scratch: Path) -> int:
    """Import what the commands need by running them once on the good run (its tables are the cases' base)."""
    import contextlib
    import io

    import muon_repro.report.build  # noqa: F401 - imported once here, not in each child

    good = scratch / GOOD
    os.chdir(good)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        _run_all([["analyze", "traces", "--out", "metrics", "--workers", "1"]])
        _run_all([["figures", "--metrics", "metrics", "--out", "figures"]])  # refuses: no benchmark run; imports
    os.chdir(scratch)
    return serve(_run_all, LIMITS)


# ---------------------------------------------------------------------- the parent side


class Harness:
    """The scratch folder with the good run, and the zygote that runs each case's commands."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        _write(scratch / GOOD, tiny_run())
        env = dict(os.environ)
        env.update(
            MALLOC_ARENA_MAX="2",
            PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            HF_HUB_OFFLINE="1",
        )
        self.zygote = subprocess.Popen(
            [sys.executable, "-m", "tools.cli_fuzz", "--zygote", str(scratch)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=REPO_ROOT,
            text=True,
        )
        self._many_rows: dict[str, Path] = {}

    def close(self) -> None:
        self.zygote.stdin.close()  # type: ignore[union-attr]
        self.zygote.wait(timeout=60)

    def run(self, case: Case, folder: Path) -> Result:
        outside = folder.parent / f"{folder.name}-outside"
        _write(folder, {p: d for p, d in case.files.items() if not p.startswith("outside/")})
        _write(outside, {p.removeprefix("outside/"): d for p, d in case.files.items() if p.startswith("outside/")})
        for link, target in case.links.items():
            (folder / link).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target.replace("{outside}", str(outside)), folder / link)
        if case.metrics:
            shutil.copytree(self.scratch / GOOD / "metrics", folder / "metrics")
            if "metrics.patch.json" in case.files:
                self._patch(folder / "metrics", json.loads(case.files["metrics.patch.json"]))
        request = {
            "argv": case.commands,
            "cwd": str(folder),
            "stdout": str(folder / ".stdout"),
            "stderr": str(folder / ".stderr"),
        }
        self.zygote.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
        self.zygote.stdin.flush()  # type: ignore[union-attr]
        report = json.loads(self.zygote.stdout.readline())  # type: ignore[union-attr]
        out, err = (Path(request[k]).read_text(errors="replace") for k in ("stdout", "stderr"))
        result = Result(case, outcome_of(report, OUTCOMES), report["seconds"], report["max_rss_bytes"], out, err)
        result.failures = judge(result, folder, outside)
        return result

    def _patch(self, metrics: Path, patch: dict) -> None:
        """Make one table of a copy of the good tables hostile, as the case says."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = metrics / f"{patch['table']}.parquet"
        variant = patch["variant"]
        if variant == "garbage":
            path.write_bytes(os.urandom(4096))
        elif variant == "truncated":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        elif variant == "empty file":
            path.write_bytes(b"")
        elif variant == "profile escape":
            table = pq.read_table(path)
            if "profile" in table.column_names and table.num_rows:
                column = pa.array([f"../../{patch['escape']}"] * table.num_rows, type=table.schema.field("profile").type)
                table = table.set_column(table.column_names.index("profile"), table.schema.field("profile"), column)
                pq.write_table(table, path)
            else:
                path.write_bytes(b"PAR1")
        elif variant == "many rows":
            from muon_repro.tables.limits import MAX_TABLE_ROWS

            if patch["table"] not in self._many_rows:
                big = self.scratch / f"{patch['table']}.many.parquet"
                repeat_first_row(path, big, MAX_TABLE_ROWS + 1)
                self._many_rows[patch["table"]] = big
            shutil.copyfile(self._many_rows[patch["table"]], path)


def repeat_first_row(source: Path, out: Path, rows: int, chunk: int = 100_000) -> None:
    """A Parquet file of ``rows`` copies of ``source``'s first row (its schema; empty if it has none), written a row
    group at a time so that making it costs one chunk of memory, not the whole table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    if not table.num_rows:
        pq.write_table(table, out)
        return
    block = table.slice(0, 1).take(pa.array([0] * chunk, type=pa.int32()))
    with pq.ParquetWriter(out, table.schema, compression="zstd") as writer:
        for start in range(0, rows, chunk):
            writer.write_table(block.slice(0, min(chunk, rows - start)))


def _write(root: Path, files: dict[str, bytes]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def judge(result: Result, folder: Path, outside: Path) -> list[str]:
    """Everything that is wrong with how a case ended (nothing for a clean pass or a clear refusal)."""
    case, out, err = result.case, result.stdout, result.stderr
    failures = []
    if result.outcome not in case.allowed:
        failures.append(f"ended {result.outcome}, expected {' or '.join(case.allowed)}")
    for word in ("Traceback", "MemoryError", "RecursionError"):
        if word in out + err:
            failures.append(f"{word} in the output: {(err or out).strip().splitlines()[-1][:200]}")
    if bad := control_characters(out + err):
        failures.append(f"control characters printed raw: {', '.join(bad[:5])}")
    if result.outcome == "error" and not err.strip().splitlines()[-1:][0].startswith("muon-repro"):
        failures.append(f"exit 2 without a 'muon-repro <command>: error:' line: {err[-300:]!r}")
    for rel in case.precious:
        where = outside / rel.removeprefix("outside/") if rel.startswith("outside/") else folder / rel
        if not where.is_file() or where.read_bytes() != case.files[rel]:
            failures.append(f"{rel} was changed or removed")
    for rel in case.gone:
        if (folder / rel).exists():
            failures.append(f"{rel} was left behind")
    if case.escape:  # the fuzz folder (cases are removed once judged, so it stays small) and the temporary folder
        found = [p for p in folder.parent.parent.rglob(f"*{case.escape}*") if case.escape in p.name]
        found += [p for p in Path(tempfile.gettempdir()).glob(f"*{case.escape}*")]
        if found:
            failures.append(f"a path escaped its folder: {found[0]}")
    return failures


def run_cases(cases: list[Case], *, echo=print, keep: Path | None = None) -> list[Result]:  # noqa: ANN001
    """Run ``cases``; print the summary; return every result. A failed case's folder is kept under ``keep``."""
    results = []
    with tempfile.TemporaryDirectory(prefix="cli-fuzz-") as tmp:
        scratch = Path(tmp)
        harness = Harness(scratch)
        started = time.perf_counter()
        try:
            for case in cases:
                folder = scratch / "cases" / f"case{case.seed}"
                result = harness.run(case, folder)
                results.append(result)
                if result.failures and keep is not None:
                    shutil.copytree(folder, keep / folder.name, symlinks=True, dirs_exist_ok=True)
                for done in (folder, folder.parent / f"{folder.name}-outside"):
                    shutil.rmtree(done, ignore_errors=True)
        finally:
            harness.close()
        total = time.perf_counter() - started
    summarize(results, total, echo)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.cli_fuzz", description=__doc__.split("\n\n")[0])
    add_case_options(parser, KINDS)
    parser.add_argument("--keep", type=Path, help="copy each failed case's folder here")
    parser.add_argument("--zygote", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.zygote:
        return _zygote(args.zygote)
    cases = cases_of(parser, args, make_case)
    return 1 if any(r.failures for r in run_cases(cases, keep=args.keep)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
