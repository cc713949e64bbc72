"""The whole command line, pointed at hostile places and inputs, ends cleanly (tools.cli_fuzz): 1,000 cases of
output folders, hardware descriptions, rank sets, names, links, tables and run shapes, 0 failed.

Each case runs its ``muon-repro`` commands in a child forked from one warmed process, under ``RLIMIT_AS`` and
``RLIMIT_CPU``; :func:`tools.cli_fuzz.judge` lists whatever is wrong with how it ended. The 1,000 cases run in
two halves so that CI's two workers share them; each prints its summary (outcomes, the longest case, the
largest memory).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.cli_cases import KINDS, PRECIOUS, make_case
from tools.cli_fuzz import LIMITS, Result, judge, run_cases

CASES = 1000


@pytest.mark.slow
@pytest.mark.parametrize("half", [0, 1])
def test_a_thousand_hostile_command_lines_end_cleanly(half):
    seeds = range(half * CASES // 2, (half + 1) * CASES // 2)
    lines: list[str] = []
    results = run_cases([make_case(seed) for seed in seeds], echo=lines.append)
    print("\n".join(lines))
    assert [f"{r.case.describe()}: {r.failures}" for r in results if r.failures] == []
    assert {r.case.kind for r in results} == set(KINDS)
    assert all(r.seconds < LIMITS.wall_s and r.max_rss_bytes < LIMITS.memory_bytes for r in results)
    assert {r.outcome for r in results} >= {"passed", "refused", "error"}


def test_cases_are_reproducible_and_cover_every_kind():
    assert make_case(7).describe() == make_case(7).describe() and make_case(7).files == make_case(7).files
    assert {make_case(seed).kind for seed in range(200)} == set(KINDS)
    for kind in KINDS:
        case = make_case(3, kind)
        assert case.commands and case.allowed, case.describe()


def _result(case, outcome: str, stdout: str = "", stderr: str = "") -> Result:
    return Result(case, outcome, 0.1, 2**20, stdout, stderr)


def test_the_judge_catches_each_way_a_case_can_go_wrong(tmp_path):
    folder, outside = tmp_path / "case", tmp_path / "case-outside"
    case = make_case(0, "output folders")
    while case.variant != "foreign":  # a case with a file that must come out unchanged
        case = make_case(case.seed + 1, "output folders")
    (folder / "results").mkdir(parents=True)
    (folder / "results" / "survey.csv").write_bytes(PRECIOUS)
    refused = _result(case, "refused", stderr="muon-repro analyze: results is a folder it did not write\n")
    assert judge(refused, folder, outside) == []
    wrong = {
        "ended passed": _result(case, "passed"),
        "Traceback in the output": _result(case, "refused", stderr="Traceback (most recent call last):\nKeyError: 'x'\n"),
        "control characters printed raw: '\\x1b'": _result(case, "refused", "\x1b[2Jok\n"),
        "exit 2 without a 'muon-repro <command>: error:' line": _result(case, "error", stderr="KeyError\n"),
        "ended hang": _result(case, "hang"),
    }
    for said, result in wrong.items():
        assert any(said in f for f in judge(result, folder, outside)), (said, judge(result, folder, outside))
    (folder / "results" / "survey.csv").write_bytes(b"changed")
    assert any("results/survey.csv was changed" in f for f in judge(refused, folder, outside))


def test_the_judge_finds_a_file_written_where_a_path_escape_leads(tmp_path):
    case = make_case(1, "hardware descriptions")
    folder = tmp_path / "fuzz" / "cases" / "case1"
    folder.mkdir(parents=True)
    assert judge(_result(case, "refused"), folder, tmp_path / "x") == []
    (tmp_path / "fuzz" / Path(case.escape)).mkdir()
    assert any("a path escaped its folder" in f for f in judge(_result(case, "refused"), folder, tmp_path / "x"))
