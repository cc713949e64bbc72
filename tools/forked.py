"""One command of ``muon-repro`` per forked child, under limits: the machinery both fuzzers share
(:mod:`tools.contrib_fuzz`, :mod:`tools.cli_fuzz`).

A zygote process imports what the commands need once, then reads one JSON request per line on stdin
(``argv``, ``stdout`` and ``stderr`` file paths, optional ``cwd`` and ``interrupt_after_s``), forks a child
that runs ``main(argv)`` under ``RLIMIT_AS`` and ``RLIMIT_CPU`` with its output in those files, and writes
one JSON report per line: the exit code, the seconds, the child's peak memory, whether it was killed for
passing the wall-clock limit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Main = Callable[[list[str]], int]


@dataclass(frozen=True)
class Limits:
    memory_bytes: int  # RLIMIT_AS of a child
    cpu_s: int  # RLIMIT_CPU of a child: SIGXCPU past it
    wall_s: float  # a child still running then is a hang: killed


def serve(main: Main, limits: Limits) -> int:
    """The zygote's loop: per request line, fork a child that runs one command, and report it."""
    for line in sys.stdin:
        print(json.dumps(fork_one(main, json.loads(line), limits)), flush=True)
    return 0


def fork_one(main: Main, request: dict, limits: Limits) -> dict:
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(main, request, limits)
    interrupt_at = None if request.get("interrupt_after_s") is None else started + request["interrupt_after_s"]
    killed = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        now = time.monotonic()
        if interrupt_at is not None and now >= interrupt_at:
            os.kill(pid, signal.SIGINT)
            interrupt_at = None
        if now - started > limits.wall_s:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            killed = True
            break
        time.sleep(0.005)
    return {
        "code": os.waitstatus_to_exitcode(status),
        "seconds": time.monotonic() - started,
        "max_rss_bytes": usage.ru_maxrss * 1024,
        "killed": killed,
    }


def _child(main: Main, request: dict, limits: Limits) -> None:
    import resource
    import traceback

    code = 1
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
        if request.get("cwd"):
            os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        code = main(request["argv"])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - what the user would see: a traceback, exit 1
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def control_characters(text: str) -> list[str]:
    """The terminal control, format and line-separator characters in ``text`` (newline and tab aside), escaped."""
    return sorted({ascii(c) for c in text if c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")})


@dataclass
class Result:
    """How one case ended: its outcome word, time, peak memory, output, and what its fuzzer's judge found wrong."""

    case: Any  # the fuzzer's case: it has a kind and describe()
    outcome: str
    seconds: float
    max_rss_bytes: int
    stdout: str
    stderr: str
    failures: list[str] = field(default_factory=list)


def outcome_of(report: dict, outcomes: dict[int, str]) -> str:
    """A child's report as one word: an outcome by exit code, ``hang``, ``exit N`` or ``signal N``."""
    code = report["code"]
    return "hang" if report["killed"] else outcomes.get(code, f"exit {code}" if code >= 0 else f"signal {-code}")


def summarize(results: list[Result], seconds: float, echo: Callable[[str], None]) -> None:
    """How the cases ended, per kind, the longest and the largest, and every failure with its case."""
    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    failed = [r for r in results if r.failures]
    echo(
        f"{len(results)} cases in {seconds:.1f} s: "
        + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items()))
        + f"; {len(failed)} failed"
    )
    kinds = sorted({r.case.kind for r in results})
    echo("by kind: " + ", ".join(f"{k} {sum(r.case.kind == k for r in results)}" for k in kinds))
    if results:
        longest = max(results, key=lambda r: r.seconds)
        largest = max(results, key=lambda r: r.max_rss_bytes)
        echo(f"longest case: {longest.seconds:.2f} s ({longest.case.describe()})")
        echo(f"largest memory: {largest.max_rss_bytes / 2**20:.0f} MiB ({largest.case.describe()})")
    for r in failed:
        echo(f"FAILED {r.case.describe()}: {'; '.join(r.failures)}")


def add_case_options(parser: argparse.ArgumentParser, kinds: Iterable[str]) -> None:
    """The options every fuzzer takes: how many cases, the first seed, one kind only."""
    parser.add_argument("--cases", type=int, default=1000, help="number of cases (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first case (default: %(default)s)")
    parser.add_argument("--kind", choices=sorted(kinds), default=None, help="only cases of this kind")


def cases_of(parser: argparse.ArgumentParser, args: argparse.Namespace, make_case: Callable[[int, str | None], Any]) -> list:
    """The cases :func:`add_case_options`' options ask for (a parser error for fewer than one)."""
    if args.cases < 1:
        parser.error(f"--cases must be 1 or more, got {args.cases}")
    return [make_case(seed, args.kind) for seed in range(args.seed, args.seed + args.cases)]
