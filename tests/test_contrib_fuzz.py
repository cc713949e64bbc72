"""Hostile contributions end in a clear refusal or a clean pass, within bounded time and memory (tools.contrib_fuzz).

A fixed set of seeds covers every kind of case (tools/contrib_cases.py): each runs ``muon-repro review``
(or ``contribute``) in a forked child under RLIMIT_AS and RLIMIT_CPU against the fake Hub, and
:func:`tools.contrib_fuzz.judge` lists whatever is wrong with how it ended. ``python -m
tools.contrib_fuzz --cases 1000`` runs many more.
"""

from __future__ import annotations

import pytest

from tools.contrib_cases import KINDS, make_case
from tools.contrib_fuzz import MEMORY_LIMIT_BYTES, WALL_LIMIT_S, Result, judge, run_cases

SEEDS_PER_KIND = 2


@pytest.mark.slow
def test_every_kind_of_hostile_contribution_ends_cleanly():
    cases = [make_case(seed, kind) for kind in sorted(KINDS) for seed in range(SEEDS_PER_KIND)]
    lines: list[str] = []
    results = run_cases(cases, echo=lines.append)
    print("\n".join(lines))
    assert [f"{r.case.describe()}: {r.failures}" for r in results if r.failures] == []
    assert {r.case.kind for r in results} == set(KINDS)
    assert all(r.seconds < WALL_LIMIT_S and r.max_rss_bytes < MEMORY_LIMIT_BYTES for r in results)
    ended = {r.case.kind: r.outcome for r in results}
    assert ended["good"] == "passed" and ended["symlinks"] == "error" and ended["gzip bomb"] == "refused"


def _result(kind: str, outcome: str, stdout: str = "", stderr: str = "") -> Result:
    return Result(make_case(0, kind), outcome, 0.1, 2**20, stdout, stderr)


def test_the_judge_catches_each_way_a_case_can_go_wrong():
    assert judge(_result("names", "refused", "1 check(s) FAILED:\n  - x\n"), []) == []
    wrong = {
        "ended passed, expected refused or error": _result("names", "passed", "Checks passed: 6 file(s)\n"),
        "Traceback in the output": _result("names", "refused", stderr="Traceback (most recent call last):\nMemoryError\n"),
        "control characters printed raw: '\\x1b'": _result("names", "refused", "\x1b[32mok\n"),
        "1 line(s) start with 'Checks passed' on a case that refused": _result("names", "refused", "Checks passed: 1\n"),
        "stderr is not one line": _result("not found", "error", stderr="muon-repro review: error: a\nsecond line\n"),
        "ended hang": _result("good", "hang"),
    }
    for said, result in wrong.items():
        assert any(said in f for f in judge(result, [])), (said, judge(result, []))
    bad_name = make_case(0, "names")
    fetched = [("GET", f"/datasets/x/y/resolve/abc/{bad_name.never_downloaded[0]}")]
    result = Result(bad_name, "refused", 0.1, 2**20, "", "")
    assert any("downloaded a refused file" in f for f in judge(result, fetched))
    links = Result(make_case(0, "symlinks"), "error", 0.1, 2**20, "", "muon-repro contribute: error: 1 problem(s)\n")
    assert any("0 symbolic link(s) named" in f for f in judge(links, [("POST", "/api/datasets/x/y/commit/main")]))
    assert any("uploaded after a refusal" in f for f in judge(links, [("POST", "/api/datasets/x/y/commit/main")]))
