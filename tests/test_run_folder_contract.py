"""The run folder's contract (muon_repro.rundir) and the job's resume paths (muon_repro.job), on small folders built
here: a trial is recorded in a hidden ``.trial<k>.partial`` sibling and exists under its name only once complete; every
reader leaves hidden folders and the study's protocol runs out; a folder's name says its trial; ``--from`` a stage
checks what that stage reads, and a recording option it would ignore is refused even when it reads as false."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from muon_repro import job, rundir
from muon_repro.run_records import RankMetrics

PROFILE = "cpu-2c-gloo"


def _trial(folder: Path, key: str = "g/run", **config) -> Path:
    """A trial folder with the side files a reader needs: config.json (its key) and environment.json (the profile)."""
    rundir.RunDir(folder).write({"key": key, **config}, {"profile": PROFILE}, [], "")
    return folder


# ---------------------------------------------------------------- where a trial is recorded, and which folders count


def test_a_trial_is_recorded_in_a_hidden_sibling_that_readers_leave_out(tmp_path):
    """The partial folder is hidden (a leading dot), beside the final one; a config file under it, at any depth, is
    hidden under the root, so trial_folders reads the complete trial only."""
    final = tmp_path / "g" / "run" / "trial1"
    partial = rundir.partial_dir(final)
    assert partial == tmp_path / "g" / "run" / ".trial1.partial"
    assert rundir.is_hidden_under(partial / rundir.CONFIG_FILE, tmp_path)
    assert rundir.is_hidden_under(partial / "sub" / rundir.CONFIG_FILE, tmp_path)
    assert not rundir.is_hidden_under(final / rundir.CONFIG_FILE, tmp_path)
    _trial(rundir.trial_dir(tmp_path / "g" / "run", 0))
    _trial(partial)
    _trial(tmp_path / ".staging" / "g" / "run" / "trial2")
    assert rundir.trial_folders(tmp_path) == {f"{PROFILE}/g/run": [tmp_path / "g" / "run" / "trial0"]}


def test_the_study_protocols_runs_are_not_read_as_benchmark_runs(tmp_path):
    """A trial whose config.json names the study's protocol is muon_repro.study's to read, not the analysis'."""
    _trial(tmp_path / "g" / "run" / "trial0")
    for protocol in rundir.STUDY_PROTOCOLS:
        _trial(tmp_path / "study_protocol" / protocol / "trial0", key=f"study_protocol/{protocol}", protocol=protocol)
    assert list(rundir.trial_folders(tmp_path)) == [f"{PROFILE}/g/run"]


@pytest.mark.parametrize("name", ["trial1x", "trial1.partial", "trial", "xtrial1"])
def test_only_a_folder_named_trial_and_a_number_holds_a_trial(name):
    assert rundir.trial_of(Path(name)) is None
    assert rundir.trial_of(Path("trial12")) == 12


def test_a_folders_name_says_its_trial_even_trial0(tmp_path):
    """A contributor renumbers a trial by renaming its folder: trial0 is trial 0 whatever config.json says."""
    assert rundir.RunDir(_trial(tmp_path / "trial0", trial=2)).trial == 0
    assert rundir.RunDir(_trial(tmp_path / "trial3", trial=2)).trial == 3
    assert rundir.RunDir(_trial(tmp_path / "single", trial=2)).trial == 2


def test_a_folder_without_a_key_is_keyed_by_its_path_below_the_root(tmp_path):
    """config.json's key names the run; without one the folder's path below the root does, whole."""
    _trial(tmp_path / "g" / "run" / "trial0", key="")
    assert rundir.trial_folders(tmp_path) == {f"{PROFILE}/g/run/trial0": [tmp_path / "g" / "run" / "trial0"]}


def test_a_folder_whose_environment_describes_no_profile_is_left_out_and_the_others_are_read(tmp_path):
    _trial(tmp_path / "g" / "run" / "trial0")
    rundir.RunDir(tmp_path / "g" / "bad" / "trial0").write({"key": "g/bad"}, {"profile": 1.5}, [], "")  # no profile id
    rundir.RunDir(tmp_path / "g" / "none" / "trial0").write({"key": "g/none"}, {}, [], "")  # no environment: unknown
    assert rundir.trial_folders(tmp_path) == {
        f"{PROFILE}/g/run": [tmp_path / "g" / "run" / "trial0"],
        "unknown/g/none": [tmp_path / "g" / "none" / "trial0"],
    }


def test_an_unreadable_side_file_of_each_kind_is_named_and_an_absent_one_is_not(tmp_path):
    folder = tmp_path / "trial0"
    folder.mkdir()
    for name in (rundir.CONFIG_FILE, rundir.ENVIRONMENT_FILE, rundir.METRICS_FILE):
        (folder / name).write_text("{")
    run = rundir.RunDir(folder)
    assert sorted(run.unreadable_side_files()) == ["config.json", "environment.json", "metrics.json"]
    assert run.ranks == [] and run.environment == {}  # read as empty besides
    (folder / rundir.METRICS_FILE).unlink()
    assert sorted(rundir.RunDir(folder).unreadable_side_files()) == ["config.json", "environment.json"]


# ---------------------------------------------------------------- what makes a trial complete


def test_a_complete_trial_has_every_side_file_and_each_ranks_trace_when_profiled(tmp_path):
    """A profiled run's trial needs rank<r>.json.gz of every rank, a timed-only one none; a folder named like a file
    is not that file."""
    assert rundir.expected_files(2) == [*rundir.RUN_FILES, "rank0.json.gz", "rank1.json.gz"]
    assert rundir.expected_files(2, profiled=False) == list(rundir.RUN_FILES)
    folder = _trial(tmp_path / "trial0")
    (folder / "rank0.json.gz").write_bytes(b"")
    (folder / "rank1.json.gz").mkdir()
    assert rundir.missing_files(folder, 2) == ["rank1.json.gz"]
    assert rundir.missing_files(folder, 2, profiled=False) == []


def test_recorded_steps_leave_out_the_profilers_wait_and_warm_up_steps(tmp_path):
    """Steps before wait + warmup are not recorded ones: with wait 1 and warmup 1 the first two steps are dropped."""
    ranks = [
        RankMetrics(rank=0, step_ms=[900.0, 800.0, 10.0, 20.0], optimizer_ms=[90.0, 80.0, 1.0, 2.0]),
        RankMetrics(rank=1, step_ms=[950.0, 850.0, 12.0, 18.0], optimizer_ms=[95.0, 85.0, 3.0, 4.0]),
    ]
    run = rundir.RunDir(tmp_path / "trial0")
    run.write({"key": "g/run", "wait": 1, "warmup": 1}, {"profile": PROFILE}, ranks, "")
    assert rundir.RunDir(run.path).recorded_steps() == [(12.0, 2.0), (20.0, 3.0)]


def test_a_step_that_any_rank_did_not_time_is_left_out_of_the_recorded_and_the_timed_steps(tmp_path):
    """A step lasts as long as its slowest rank, and its optimizer step is the mean over ranks: a step one rank has no
    time for (None) has neither, so it is left out, not taken from the ranks that timed it."""
    ranks = [
        RankMetrics(
            rank=0,
            step_ms=[10.0, None, 30.0],
            optimizer_ms=[1.0, 2.0, 3.0],
            timed_step_ms=[5.0, 6.0, None],
            timed_optimizer_ms=[1.0, 2.0, 3.0],
        ),
        RankMetrics(
            rank=1,
            step_ms=[12.0, 20.0, 28.0],
            optimizer_ms=[3.0, 4.0, 5.0],
            timed_step_ms=[7.0, 4.0, 9.0],
            timed_optimizer_ms=[3.0, None, 5.0],
        ),
    ]
    run = rundir.RunDir(tmp_path / "trial0")
    run.write({"key": "g/run"}, {"profile": PROFILE}, ranks, "")
    read = rundir.RunDir(run.path)
    assert read.recorded_steps() == [(12.0, 2.0), (30.0, 4.0)]
    assert read.timed_steps() == [(7.0, 2.0)]  # step 1: rank 1's optimizer untimed; step 2: rank 0's step


def test_a_run_that_one_rank_timed_without_the_profiler_has_no_timed_steps(tmp_path):
    ranks = [
        RankMetrics(rank=0, timed_step_ms=[5.0, 6.0], timed_optimizer_ms=[1.0, 2.0]),
        RankMetrics(rank=1),
    ]
    run = rundir.RunDir(tmp_path / "trial0")
    run.write({"key": "g/run"}, {"profile": PROFILE}, ranks, "")
    assert rundir.RunDir(run.path).timed_steps() == []


# ---------------------------------------------------------------- names and records beside the runs


def test_nested_environment_fields_are_keyed_by_their_whole_path():
    assert rundir.flatten({"a": {"b": {"c": 1}, "d": 2}, "e": 3}) == {"a.b.c": 1, "a.d": 2, "e": 3}


def test_a_trace_is_any_visible_json_file_but_the_records_beside_the_runs():
    for name in ("rank0.json.gz", "rank0.json", "trace_muon_rank1.json", "x.pt.trace.json.gz"):
        assert rundir.is_trace_file(name), name
    for name in (*rundir.NON_TRACE_FILES, ".rank0.json", ".rank0.json.gz", "log.txt", "rank0.json.gz.tmp"):
        assert not rundir.is_trace_file(name), name


def test_the_rank_of_a_trace_is_read_from_the_names_we_write_gzipped_or_not():
    assert [rundir.trace_rank(rundir.trace_name(r)) for r in (0, 3, 12)] == [0, 3, 12]
    assert rundir.trace_rank("rank3.json") == 3
    for name in ("rank3.json.gz.tmp", "xrank3.json", "rank.json", "rank3.jsonl"):
        assert rundir.trace_rank(name) is None, name


def test_a_measured_compute_machine_name_splits_back_into_its_links_and_device():
    name = rundir.measured_compute_machine("4xRTXA4000-pcie-nccl", "H100")
    assert rundir.split_measured_compute(name) == ("4xRTXA4000-pcie-nccl", "H100")
    assert rundir.split_measured_compute("4xRTXA4000-pcie-nccl") is None
    assert rundir.split_measured_compute("a+b") is None  # a plus without the suffix


def test_a_costmodel_folder_takes_the_profile_of_the_machine_calibrated_beside_it(tmp_path):
    assert rundir.costmodel_profile(tmp_path) == "unknown"  # no machine.json
    machine = tmp_path / rundir.MACHINE_FILE
    rundir.write_json(machine, {"profile": PROFILE, "name": "other-machine"})
    assert rundir.costmodel_profile(tmp_path) == PROFILE  # its profile field wins over its name
    rundir.write_json(machine, {"name": "4xA100-pcie-nccl"})
    assert rundir.costmodel_profile(tmp_path) == "4xA100-pcie-nccl"
    rundir.write_json(machine, {"name": "../outside"})  # a name that is no profile id cannot become a folder
    assert rundir.costmodel_profile(tmp_path) == "unknown"


def test_a_convergence_record_takes_its_profile_from_its_environment_else_from_its_cores_and_backend():
    environment = {"profile": "4xH100-nvlink-nccl", "cpu_count": 2}
    assert rundir.convergence_profile({"environment": environment, "backend": "gloo"}) == "4xH100-nvlink-nccl"
    assert rundir.convergence_profile({"environment": {"cpu_count": 2}, "backend": "gloo"}) == "cpu-2c-gloo"


def test_the_study_folders_are_those_marked_by_its_provenance_file_and_none_hidden(tmp_path):
    study = tmp_path / "study"
    study.mkdir()
    (study / rundir.STUDY_PROVENANCE_FILE).write_text("{}")
    trace = study / "trace_muon_rank0.json"
    trace.write_text("{}")
    (study / "notes.json").write_text("{}")
    staging = tmp_path / ".staging" / "study"
    staging.mkdir(parents=True)
    (staging / rundir.STUDY_PROVENANCE_FILE).write_text("{}")
    assert rundir.study_folders([trace]) == [study]
    assert rundir.study_folders([study / "notes.json"]) == []  # a file beside it that is not one of the study's traces
    assert rundir.study_folders([tmp_path, trace]) == [study]  # each once; the staging copy is left out


def test_only_the_study_protocols_runs_are_protocol_folders(tmp_path):
    _trial(tmp_path / "g" / "run" / "trial0", protocol="other")
    for protocol in rundir.STUDY_PROTOCOLS:
        _trial(tmp_path / "protocols" / protocol / "trial0", protocol=protocol)
    assert rundir.protocol_of(tmp_path / "g" / "run" / "trial0") is None
    assert rundir.protocol_of(tmp_path / "protocols" / "study-equal-work" / "trial0") == "study-equal-work"
    assert rundir.protocol_folders([tmp_path]) == [tmp_path / "protocols" / p / "trial0" for p in ("study", "study-equal-work")]
    assert "g/run" in " ".join(rundir.trial_folders(tmp_path))  # a protocol of no study is a benchmark run


def test_a_compact_record_has_no_whitespace_and_the_default_one_indents_by_one():
    assert rundir.json_text({"a": [1, 2]}, compact=True) == '{"a":[1,2]}'
    assert rundir.json_text({"a": [1, 2]}) == '{\n "a": [\n  1,\n  2\n ]\n}'


# ---------------------------------------------------------------- the job: --from, and what it checks first


def test_run_from_a_later_stage_checks_the_folder_that_stage_reads(tmp_path):
    """--from analyze reads traces/ (metrics/ alone does not do), --from figures and later read metrics/; neither
    checks the recording's configuration names."""
    out = tmp_path / "out"
    (out / "metrics").mkdir(parents=True)
    with pytest.raises(ValueError, match="--from analyze rebuilds from the runs recorded under .*traces"):
        job.RunPlan(out=out, first_stage="analyze", configs=("no-such-config",)).check_input()
    for stage in job.STAGES[2:]:
        job.RunPlan(out=out, first_stage=stage, configs=("no-such-config",)).check_input()
    (out / "traces").mkdir()
    job.RunPlan(out=out, first_stage="analyze", configs=("no-such-config",)).check_input()


def test_as_many_traced_rounds_as_rounds_is_accepted(tmp_path):
    job.RunPlan(out=tmp_path / "out", trials=2, traced_trials=2).check_input()
    with pytest.raises(ValueError, match="--traced-trials must be a positive integer up to --trials 2, got 3"):
        job.RunPlan(out=tmp_path / "out", trials=2, traced_trials=3).check_input()


def _args(first_stage: str, **given) -> argparse.Namespace:
    return argparse.Namespace(first_stage=first_stage, **{dest: given.get(dest) for dest in job.RECORDING_OPTIONS})


@pytest.mark.parametrize("given", [{"trials": 0}, {"force": False}, {"configs": []}])
def test_a_recording_option_given_as_false_is_refused_after_the_bench_stage(given):
    """--trials 0 with --from analyze is a given option, ignored like any other: refused, not passed over for being 0."""
    with pytest.raises(ValueError, match="--from analyze records nothing"):
        job._refuse_unused_recording_options(_args("analyze", **given))
    job._refuse_unused_recording_options(_args("bench", **given))
