"""The Setup and Method words say what the runs table and the environment recorded: a dirty tree and a single
device as they are, the per-DP-rank batch divided by DP, which rounds were traced, and the claims' rounds fewest
first. Small inputs made here, or the committed tables with a field changed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from muon_repro.report.data import load
from muon_repro.report.setup_section import (
    claim_rounds,
    environments,
    traced_rounds,
    workload,
)

METRICS = Path(__file__).resolve().parents[1] / "metrics"


def _environment_rows(**env: str) -> list[tuple[str, str]]:
    data = load(METRICS).of_profile("cpu-2c-gloo")
    run = data.runs.iloc[:1]
    base = {
        "hostname": "box",
        "os": "Linux",
        "python": "3.12",
        "torch": "2.5",
        "backend": "nccl",
        "host_cpu": "x86",
        "host_cpu_cores": "16",
        "host_memory_bytes": str(64 * 2**30),
        "world_size": "1",
    }
    environment = pd.DataFrame([{"run": run["run"].iloc[0], "trial": 0, "key": k, "value": v} for k, v in (base | env).items()])
    (said,) = environments(replace(data, runs=run, environment=environment))
    return said["rows"]


def test_the_environment_says_uncommitted_changes_only_of_a_dirty_tree():
    clean = dict(_environment_rows(git_dirty="False"))["muon_repro"]
    assert "(uncommitted changes)" not in clean
    assert dict(_environment_rows(git_dirty="True"))["muon_repro"].endswith("(uncommitted changes)")


def test_one_accelerator_has_no_interconnect_and_several_without_a_topology_are_not_recorded():
    """nvidia-smi's matrix of one GPU says nothing; four GPUs whose topology was not recorded are said so."""
    one = dict(_environment_rows(accelerator="NVIDIA H200", accelerator_count="1"))
    assert (one["accelerator"], one["interconnect"]) == ("1 × NVIDIA H200", "none (one device)")
    four = dict(_environment_rows(accelerator="NVIDIA H200", accelerator_count="4"))
    assert (four["accelerator"], four["interconnect"]) == ("4 × NVIDIA H200", "not recorded")


def test_the_batch_per_dp_rank_shrinks_with_dp_at_the_same_tokens_per_step():
    """The same tokens per step split over 4 DP ranks is a quarter of the batch TP4 gives its one DP rank."""
    data = load(METRICS).of_profile("cpu-2c-gloo")
    assert data.runs["tokens_per_step"].nunique() == 1
    said = dict(workload(data))["batch per DP rank × sequence length"].split(": ", 1)[1]
    batch = {grid: int(b) for grid, b, _, _ in (part.rsplit(" ", 3) for part in said.split(", "))}
    assert batch["TP4"] == 2 * batch["DP2·TP2"] == 4 * batch["DP4"]


def test_runs_traced_in_no_round_are_said_apart_from_the_traced_ones():
    runs = pd.DataFrame({"trials": [0, 2, 2]})
    assert traced_rounds(runs) == "only the first 2 also run the profiler and keep traces (none in some runs)"


def test_the_claims_rounds_leave_out_single_rounds_and_list_the_profiles_fewest_first():
    """A profile whose claims have 2 or 10 rounds comes before one with 5 (fewest first); a claim over one
    recording (the study's) or none has no rounds to say."""
    claims = pd.DataFrame(
        {
            "profile": ["many", "many", "some", "study", "study"],
            "rounds": pd.array([2, 10, 5, 1, None], dtype="Int64"),
        }
    )
    assert claim_rounds(claims) == "2 or 10 rounds on many and 5 on some"


def test_the_studys_runs_are_said_recorded_once_only_when_every_one_was():
    """One of the study's runs recorded in two trials: the runs are "recorded in 1 or 2 trials", not "each recorded
    once"."""
    from muon_repro.report.data import study_profile
    from muon_repro.report.setup_section import like_for_like

    everything = load(METRICS)
    study = study_profile(everything)
    own = everything.study_runs[everything.study_runs["profile"] == study]
    assert "each recorded once" in like_for_like(everything, everything.profiles[0])[-1]
    again = own.iloc[:1].assign(trial=1)
    twice = replace(everything, study_runs=pd.concat([everything.study_runs, again], ignore_index=True))
    said = like_for_like(twice, everything.profiles[0])[-1]
    assert "recorded in 1 or 2 trials" in said and "each recorded once" not in said
