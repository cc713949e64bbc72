"""A stranger's hardware description (environment.json) is read by one set of rules (issue 45, items 2 and 3):
every field that makes the profile id is typed and ranged, the id it makes is checked like any other (so no field
turns it into a path), a bad folder is reported by name while the good ones are analyzed, and a table whose profile
column is no profile id is refused before any figure is drawn from it."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from test_profiles import RUNS, copy_run

from muon_repro.hardware import interconnect_from_topology, profile_from_environment

GOOD = {"backend": "gloo", "host_cpu_cores": 2}


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"backend": "x/../../../../tmp/escaped"}, "backend is 'x/../../../../tmp/escaped', not a backend name"),
        ({"host_cpu_cores": "two"}, "host_cpu_cores is 'two', not a count from 1 to 1,000,000"),
        ({"host_cpu_cores": math.inf}, "host_cpu_cores is inf"),  # what json reads 1e400 as
        ({"host_cpu_cores": 2.9}, "host_cpu_cores is 2.9"),
        ({"host_cpu_cores": 2**63}, "host_cpu_cores is 9223372036854775808"),
        ({"accelerator": "H100", "accelerator_count": [8]}, "accelerator_count is [8]"),
        ({"accelerator": "H100", "nodes": -1}, "nodes is -1"),
        ({"accelerator": "A.." * 3}, "is not a profile id"),
    ],
)
def test_a_field_that_cannot_make_a_profile_is_named(changes, said):
    with pytest.raises(ValueError, match="environment.json") as refused:
        profile_from_environment({**GOOD, **changes})
    assert said in str(refused.value)


@pytest.mark.parametrize("topology", [4, ["GPU0 NV4"], {"GPU0": "NV4"}, "", None])
def test_a_topology_that_is_not_text_reads_as_none(topology):
    assert interconnect_from_topology(topology) is None
    assert profile_from_environment({**GOOD, "accelerator": "H100", "accelerator_count": 2, "interconnect_topology": topology})


def test_well_formed_descriptions_keep_their_profiles():
    assert profile_from_environment(GOOD) == "cpu-2c-gloo"
    assert profile_from_environment({**GOOD, "host_cpu_cores": "2"}) == "cpu-2c-gloo"
    h100 = {"backend": "nccl", "accelerator": "NVIDIA H100 80GB HBM3", "accelerator_count": 8.0, "interconnect": "nvlink"}
    assert profile_from_environment(h100) == "8xH100-nvlink-nccl"


def test_a_bad_run_folder_is_reported_and_the_good_one_analyzed(tmp_path):
    from muon_repro.analysis.batch_read import analyze_paths
    from muon_repro.rundir import ENVIRONMENT_FILE

    traces = tmp_path / "traces"
    good, bad = (copy_run(run, traces) for run in RUNS)
    env = json.loads((bad / ENVIRONMENT_FILE).read_text())
    env.pop("profile", None)
    (bad / ENVIRONMENT_FILE).write_text(json.dumps({**env, "host_cpu_cores": "two"}))
    analysis = analyze_paths([traces], workers=1)
    assert [info.path for info, _ in analysis.runs] == [good]
    (failure,) = analysis.failures
    assert str(bad) in failure.message and "host_cpu_cores is 'two'" in failure.message


def test_a_table_whose_profile_is_a_path_is_refused(tmp_path):
    from muon_repro.hardware import profile_problems

    pd.DataFrame({"profile": ["cpu-2c-gloo", "../../escaped"], "x": [1, 2]}).to_parquet(tmp_path / "runs.parquet")
    (problem,) = profile_problems(tmp_path)
    assert "runs.parquet: profile '../../escaped' is not a profile id" in problem


def test_a_copy_of_a_ranks_trace_is_refused_naming_both(tmp_path):
    """rank0 (copy).json.gz beside rank0.json.gz was merged: three ranks in a world of two, steps 9x too long."""
    import shutil

    from muon_repro.analysis.batch_read import analyze_paths

    run = copy_run(RUNS[0], tmp_path / "traces")
    shutil.copyfile(run / "rank0.json.gz", run / "rank0 (copy).json.gz")
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert analysis.runs == []
    (failure,) = analysis.failures
    assert "2 traces of rank 0 (rank0 (copy).json.gz, rank0.json.gz)" in failure.message


def test_ranks_that_profiled_different_steps_are_refused():
    from types import SimpleNamespace

    from muon_repro.analysis.batch_read import _ranks_disagree

    def trace(rank: int, steps: list[int]):
        meta = SimpleNamespace(rank=rank, path=f"rank{rank}.json.gz")
        return SimpleNamespace(meta=meta, steps=pd.DataFrame({"step": steps}))

    info = SimpleNamespace(path="run", config=SimpleNamespace(world_size=2))
    assert _ranks_disagree(info, [trace(0, [3, 4, 5]), trace(1, [3, 4, 5])]) is None
    why = _ranks_disagree(info, [trace(0, [3, 4, 5]), trace(1, [4, 5])])
    assert why == "its ranks profiled different steps (rank 0: steps 3, 4, 5; rank 1: steps 4, 5): re-record the run"
    why = _ranks_disagree(info, [trace(0, [3]), trace(1, [3]), trace(2, [3])])
    assert why == "rank 2 (rank2.json.gz) is outside its world of 2 ranks (config.json world_size): remove it"


@pytest.mark.parametrize("value", [2.9, "2", -2, 0, 2**63, True])
def test_a_config_whose_world_is_no_whole_number_leaves_its_run_out_by_name(tmp_path, value):
    """world_size "2" read as absent let the traces' own count stand in: a broken config passed as a good run."""
    from muon_repro.analysis.batch_read import analyze_paths
    from tools.cli_cases import RUN, tiny_run

    for rel, data in tiny_run(world_size=value).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert analysis.runs == []
    (failure,) = analysis.failures
    assert "config.json: world_size is " in failure.message and RUN in failure.message


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("tokens_per_step", "1024", "tokens_per_step is '1024' (a str), not an integer"),
        ("tokens_per_step", -1024, "tokens_per_step is -1024, outside 1 to"),
        ("seq_len", None, "seq_len is None (null), not an integer"),
        ("optimizer", 5, "optimizer is 5, not one of muon, adamw"),
        ("layout", "diagonal", "layout is 'diagonal', not one of contiguous, bucketed, whole_matrix"),
    ],
)
def test_a_config_whose_work_is_no_valid_value_leaves_its_run_out_by_name(tmp_path, field, value, said):
    """tokens_per_step "1024" read as absent crashed the claims (int(None)); -1024 was divided by, and printed."""
    from muon_repro.analysis.batch_read import analyze_paths
    from tools.cli_cases import RUN, tiny_run

    for rel, data in tiny_run(**{field: value}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert analysis.runs == []
    (failure,) = analysis.failures
    assert said in failure.message and RUN in failure.message


def test_a_link_to_a_folder_in_the_traces_is_said_and_not_followed(tmp_path):
    from muon_repro.analysis.batch_read import analyze_paths
    from tools.cli_cases import tiny_run

    for rel, data in tiny_run().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "traces" / "cpu-2c-gloo" / "elsewhere").symlink_to(tmp_path / "elsewhere")
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert len(analysis.runs) == 1  # the good run is analyzed all the same
    (failure,) = analysis.failures
    assert "elsewhere: a link to a folder, not followed" in failure.message


@pytest.mark.parametrize(("value", "read"), [(2, 2), (2.0, 2), (2.9, None), (math.inf, None), (2**63, None), (True, None)])
def test_an_integer_field_is_never_rounded(value, read):
    """config.json's world_size 2.9 was read as 2."""
    from muon_repro.run_records import RunConfig

    assert RunConfig.from_dict({"world_size": value}).world_size == read


def test_a_time_that_is_no_time_reads_as_none_and_leaves_its_step_out(tmp_path):
    """metrics.json's timed_step_ms "abc" crashed the cost model's max(None, float); -100 ms was kept as a time."""
    import json

    from muon_repro.run_records import RankMetrics
    from muon_repro.rundir import RunDir

    entry = {"rank": 0, "step_ms": [10.0, -100.0, "abc"], "timed_step_ms": [5.0, -1.0, "abc", 7.0]}
    read = RankMetrics.from_dict(entry)
    assert read.step_ms == [10.0, None, None] and read.timed_step_ms == [5.0, None, None, 7.0]
    ranks = [
        {**entry, "timed_optimizer_ms": [1.0, 1.0, 1.0, 2.0]},
        {
            "rank": 1,
            **{k: entry[k] for k in ("step_ms",)},
            "timed_step_ms": [6.0, 6.0, 6.0, 6.0],
            "timed_optimizer_ms": [1.0, 1.0, 1.0, 1.0],
        },
    ]
    (tmp_path / "metrics.json").write_text(json.dumps({"ranks": ranks}))
    assert RunDir(tmp_path).timed_steps() == [(6.0, 1.0), (7.0, 1.5)]  # the steps a rank did not time are left out
