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
