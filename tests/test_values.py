"""muon_repro.values: a count is an int >= 1 and an index an int >= 0, never a bool, a float or a string; counts said in
words agree in number; a recorded command and commit read the same in every table."""

from __future__ import annotations

import pandas as pd
import pytest

from muon_repro.analysis.claim_inputs import describe_runs
from muon_repro.values import command_line, counted, is_count, is_index, recorded_commit


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, 0, -1])
def test_is_count_refuses_what_is_not_a_whole_number_from_one(value):
    assert is_count(value) is False


@pytest.mark.parametrize("value", [1, 10**20])
def test_is_count_accepts_ints_from_one(value):
    assert is_count(value) is True


@pytest.mark.parametrize("value", [True, False, 0.0, "0", None, -1])
def test_is_index_refuses_what_is_not_a_whole_number_from_zero(value):
    assert is_index(value) is False


@pytest.mark.parametrize("value", [0, 1, 10**20])
def test_is_index_accepts_ints_from_zero(value):
    assert is_index(value) is True


@pytest.mark.parametrize(("count", "said"), [(0, "0 ranks"), (1, "1 rank"), (2, "2 ranks")])
def test_counted_says_one_thing_in_the_singular_and_others_in_the_plural(count, said):
    assert counted(count, "rank") == said


def test_a_one_rank_run_is_described_as_one_rank():
    run = pd.Series(
        {
            "run": "p/g/muon",
            "backend": "nccl",
            "device": "cuda",
            "ranks": 1,
            "trials": 1,
            "rounds": 1,
            "steps": 0,
            "tokens_per_step": 8192,
        }
    )
    assert (
        describe_runs(run)
        == "p/g/muon (nccl on cuda, 1 rank, 1 round timed without the profiler, no trace kept, 8192 tokens/step)"
    )


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (["muon-repro", "bench", "a b"], "muon-repro bench 'a b'"),
        ("muon-repro bench --protocol study", "muon-repro bench --protocol study"),
        ([], None),
        ("  ", None),
        (None, None),
        (3, None),
    ],
)
def test_a_recorded_command_is_one_shell_line_or_none(value, line):
    assert command_line(value) == line


@pytest.mark.parametrize(
    ("environment", "sha"),
    [
        ({"git_sha": "ed5842c0ffee"}, "ed5842c0ffee"),
        ({"git_sha": None}, None),
        ({"git_sha": " "}, None),
        ({"git_sha": 12}, None),
        ({}, None),
        (None, None),
        (["git_sha"], None),
    ],
)
def test_a_recorded_commit_is_a_string_or_none(environment, sha):
    assert recorded_commit(environment) == sha
