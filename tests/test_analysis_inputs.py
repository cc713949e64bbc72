"""What ``muon-repro analyze`` (and the figures and report commands) accept as input and output:
complete runs only, valid options, a clear word for a folder without traces, an output folder
checked before any work.

The traces here are synthetic but complete (steps, phases, a gloo collective, side files), so
every table gets rows; :func:`write_run` is shared with ``tests/test_verify_recompute.py``.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from muon_repro import stages
from muon_repro.analysis import batch_read
from muon_repro.analysis.batch_read import analyze_paths
from muon_repro.cli import main
from muon_repro.phases import DP_REDUCE_SCATTER, UPDATE
from muon_repro.rundir import CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE, trace_name
from muon_repro.table_set import build_tables

BASE_TIME_NS = 1_700_000_000_000_000_000
STEPS = 3


def _span(name: str, ts: float, dur: float, tid: int = 1, cat: str = "user_annotation", **args) -> dict:
    event = {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def _events(rank: int, optimizer: str) -> list[dict]:
    """Profiled steps with forward, backward and optimizer scopes (two optimizer phases), one matmul, one gloo all-reduce."""
    optimizer_us = 400.0 if optimizer == "muon" else 150.0
    events = [{"ph": "M", "name": "thread_name", "pid": 100, "tid": 1, "ts": 0, "args": {"name": "thread 1 (python)"}}]
    for step in range(STEPS):
        t0 = 2000.0 * step + 5.0 * rank
        events += [
            _span(f"ProfilerStep#{step}", t0, 1000.0 + optimizer_us),
            _span("forward", t0 + 10, 300.0 + 7 * rank),
            _span("aten::mm", t0 + 20, 250.0, cat="cpu_op"),
            _span("backward", t0 + 320, 400.0),
            _span("optimizer", t0 + 730, optimizer_us),
            _span(DP_REDUCE_SCATTER, t0 + 735, optimizer_us / 2 + 10),
            _span("gloo:all_reduce", t0 + 740, optimizer_us / 2, **{"Input Dims": [[4096]], "Input type": ["float"]}),
            _span(UPDATE, t0 + 750 + optimizer_us / 2, optimizer_us / 4),
        ]
    return events


def _rank_metrics(rank: int, optimizer: str) -> dict:
    state = {"muon": 2000, "adamw": 4000} if optimizer == "muon" else {"muon": 0, "adamw": 8000}
    loss = [4.0 - 0.1 * s - 0.01 * rank for s in range(STEPS)]
    muon = optimizer == "muon"
    shard = {"layout": "contiguous", "buckets": 1, "shard_elems": 1000, "muon_matrices": 2 * muon, "ns_matrices": int(muon)}
    shard |= {"dp_gathered_matrices": 0, "muon_elems": 500 * muon}
    held = {"held_state_bytes": sum(state.values()), "held_buffer_bytes": 4000 + 4 * muon}  # the storage census
    return {"rank": rank, "loss": loss, "state_bytes": state, "peak_memory_bytes": 10**6, "shard": shard, **held} | {
        "peak_memory_source": "process_max_rss"
    }


def write_run(folder: Path, *, optimizer: str = "muon", dp: int = 2, tp: int = 1, ranks: list[int] | None = None) -> Path:
    """A trial folder as the benchmark writes it (``<group>/<name>/trial0``), with the traces of ``ranks``
    (default: all ``dp * tp``) and config.json, metrics.json and environment.json for all of them."""
    world = dp * tp
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(world) if ranks is None else ranks:
        doc = {
            "traceEvents": _events(rank, optimizer),
            "baseTimeNanoseconds": BASE_TIME_NS,
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
        }
        (folder / trace_name(rank)).write_bytes(gzip.compress(json.dumps(doc).encode()))
    name, group = folder.parent.name, folder.parent.parent.name
    config = {
        "group": group,
        "name": name,
        "optimizer": optimizer,
        "layout": "contiguous",
        "dp": dp,
        "tp": tp,
        "world_size": world,
        "backend": "gloo",
        "device": "cpu",
        "trial": 0,
        "steps": STEPS,
    }
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    metrics = {"config": f"{group}/{name}", "ranks": [_rank_metrics(r, optimizer) for r in range(world)]}
    (folder / METRICS_FILE).write_text(json.dumps(metrics))
    (folder / ENVIRONMENT_FILE).write_text(
        json.dumps({"backend": "gloo", "host_cpu_cores": 2, "recorded_at": "2026-01-02T03:04:05"})
    )
    return folder


def write_pair(traces: Path, dp: int = 2, tp: int = 1) -> tuple[Path, Path]:
    """A Muon run and its AdamW twin (same dp, tp, backend, device): one comparison."""
    muon = write_run(traces / "g" / f"muon_dp{dp}_tp{tp}" / "trial0", optimizer="muon", dp=dp, tp=tp)
    adamw = write_run(traces / "g" / f"adamw_dp{dp}_tp{tp}" / "trial0", optimizer="adamw", dp=dp, tp=tp)
    return muon, adamw


# ---------------------------------------------------------------- a run folder that lacks a rank


def test_a_complete_pair_is_compared_and_claimed(tmp_path):
    write_pair(tmp_path / "traces", dp=2, tp=2)
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert not analysis.failures and not analysis.incomplete
    tables = build_tables([tmp_path / "traces"], workers=1)
    assert tables["runs"].set_index("run").loc["cpu-2c-gloo/g/muon_dp2_tp2", "ranks"] == 4
    assert len(tables["comparisons"]) == 1
    conditions = set(tables["claims"]["conditions"].dropna())
    assert "cpu-2c-gloo/g/muon_dp2_tp2; times from the profiled steps" in {c.split(" (a run")[0] for c in conditions}
    from muon_repro.analysis.costmodel_tables import COSTMODEL_TABLES

    # every trace table has rows; the cost model's and convergence's come from records this folder does not have,
    # the timed steps from runs recorded with steps timed without the profiler (these traces have none)
    from muon_repro.study.tables import TABLES as STUDY_TABLES

    # the study tables come from the original study's imported traces (muon-repro study import)
    from_records = (
        *COSTMODEL_TABLES,
        "convergence",
        "convergence_runs",
        "leading_steps",
        "leading_summary",
        "budget_match",
        "timed_steps",
        *STUDY_TABLES,
    )
    pipeline_only = ("stages",)  # one row per pipeline stage: these runs have none
    assert all(len(df) for name, df in tables.items() if name not in (*from_records, *pipeline_only)), {
        name: len(df) for name, df in tables.items()
    }
    assert not any(len(tables[name]) for name in (*from_records, *pipeline_only))


def test_a_run_missing_a_rank_is_not_pooled_compared_or_claimed(tmp_path):
    muon, _ = write_pair(tmp_path / "traces", dp=2, tp=2)
    (muon / trace_name(3)).unlink()
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert [p.path for p in analysis.incomplete] == [str(muon)]
    message = analysis.incomplete[0].message
    assert message.startswith(f"{muon}: rank 3 of 4 has no trace (rank3.json.gz missing)"), message
    # a command bench runs: its config name (no profile), the folder above the profile's, the trial (it said
    # `muon-repro bench cpu-2c-gloo/g/muon_dp2_tp2`, which bench refuses, and recorded into ./traces)
    traces = tmp_path / "traces"
    assert message.endswith(
        f"delete {muon} and record it again (`muon-repro bench g/muon_dp2_tp2 --out {traces} --trials 1 --profile "
        "cpu-2c-gloo` records only the trials missing)"
    ), message
    with pytest.warns(UserWarning, match="rank 3 of 4 has no trace"):
        tables = build_tables([tmp_path / "traces"], workers=1)
    runs = tables["runs"].set_index("run")
    assert "cpu-2c-gloo/g/muon_dp2_tp2" not in runs.index  # no row averages ranks 0-2 as if they were the run
    lone = runs[runs.index.str.startswith("cpu-2c-gloo/g/muon_dp2_tp2/")]
    assert list(lone.index) == [f"cpu-2c-gloo/g/muon_dp2_tp2/trial0/rank{r}" for r in range(3)] and (lone["ranks"] == 1).all()
    assert lone["optimizer"].isna().all()  # without the folder's configuration, no comparison or claim picks them
    assert tables["comparisons"].empty
    assert not any("muon" in text for text in tables["claims"]["conditions"].dropna())
    assert set(tables["steps"]["run"]) >= set(lone.index)  # each trace is still analyzed


@pytest.mark.parametrize("group, scale", [("g", "gpu"), ("custom", "cpu")])
def test_the_command_to_record_a_trial_again_is_one_bench_runs_as_recorded(tmp_path, group, scale):
    """`bench NAME` alone records the cpu scale (another model), and a custom run's name is no name bench knows."""
    muon = write_run(tmp_path / "traces" / group / "muon_dp2_tp1" / "trial0")
    config = json.loads((muon / CONFIG_FILE).read_text())
    (muon / CONFIG_FILE).write_text(json.dumps(config | {"scale": scale}))
    (muon / trace_name(1)).unlink()
    message = analyze_paths([tmp_path / "traces"], workers=1).incomplete[0].message
    if group == "custom":
        assert message.endswith(
            "run again the `muon-repro bench custom` command that recorded it (config.json's `command`): "
            "it records only the trials missing"
        ), message
        assert "bench custom/" not in message
    else:
        assert f"`muon-repro bench g/muon_dp2_tp1 --out {tmp_path / 'traces'} --trials 1 --scale gpu --profile" in message


def test_a_rank_that_cannot_be_read_leaves_its_run_incomplete(tmp_path):
    muon, _ = write_pair(tmp_path / "traces")
    (muon / trace_name(1)).write_bytes(b"\x1f\x8bnot gzip")
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert [f.path for f in analysis.failures] == [str(muon / trace_name(1))]
    assert "rank1.json.gz could not be analyzed" in analysis.incomplete[0].message
    assert "cpu-2c-gloo/g/muon_dp2_tp1" not in {info.key for info, _ in analysis.runs}


def test_one_file_of_a_run_says_to_name_the_folder(tmp_path):
    muon, _ = write_pair(tmp_path / "traces")
    analysis = analyze_paths([muon / trace_name(0)], workers=1)
    message = analysis.incomplete[0].message
    assert "rank 1 of 2 has no trace (rank1.json.gz not among the paths given)" in message
    assert f"name the folder {muon} to analyze the run whole" in message
    assert [info.key for info, _ in analysis.runs] == ["cpu-2c-gloo/g/muon_dp2_tp1/trial0/rank0"]


def test_the_cli_warns_and_exits_1_for_an_incomplete_run(tmp_path, capsys):
    muon, _ = write_pair(tmp_path / "traces")
    (muon / trace_name(1)).unlink()
    assert main(["analyze", str(tmp_path / "traces"), "--out", str(tmp_path / "metrics"), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert f"muon-repro analyze: warning: {muon}: rank 1 of 2 has no trace (rank1.json.gz missing)" in err
    assert (tmp_path / "metrics" / "runs.parquet").is_file()  # what could be analyzed is still written


def test_a_run_with_fewer_trials_than_its_sweep_asked_for_is_noted_not_failed(tmp_path, capsys):
    """An interrupted sweep left complete trials that read like a finished run: analyze said nothing and exited 0."""
    muon, _ = write_pair(tmp_path / "traces")
    for trial in (muon, muon.parent / "trial2"):  # trial1 of 3 never recorded
        if trial != muon:
            shutil.copytree(muon, trial)
        config = json.loads((trial / "config.json").read_text())
        (trial / "config.json").write_text(json.dumps(config | {"trial": int(trial.name[5:]), "trials": 3}))
    argv = ["analyze", str(tmp_path / "traces"), "--out", str(tmp_path / "metrics"), "--workers", "1"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    said = "/g/muon_dp2_tp1 has 2 of the 3 rounds its sweep asked for (config.json trials; missing trial1)"
    assert "muon-repro analyze: note: run " in err and said in err and "adamw" not in err
    assert main(["analyze", str(muon), "--out", str(tmp_path / "one"), "--workers", "1"]) == 0  # a trial chosen by hand
    assert "note:" not in capsys.readouterr().err


def test_the_analyze_stage_refuses_an_incomplete_run(tmp_path):
    muon, _ = write_pair(tmp_path / "traces")
    (muon / trace_name(0)).unlink()
    with pytest.raises(stages.StageError, match=r"rank 0 of 2 has no trace \(rank0.json.gz missing\)"):
        stages.analyze([tmp_path / "traces"], tmp_path / "metrics", workers=1)
    assert not (tmp_path / "metrics").exists()


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--rank", "-5", "argument --rank: expected a global rank, 0 or more, got -5"),
        ("--workers", "0", "argument --workers: expected a number of processes, 1 or more, got 0"),
        ("--workers", "-2", "argument --workers: expected a number of processes, 1 or more, got -2"),
        ("--workers", "many", "argument --workers: expected a number of processes, 1 or more, got 'many'"),
    ],
)
def test_bad_rank_or_workers_is_an_argparse_error(tmp_path, capsys, option, value, expected):
    write_pair(tmp_path / "traces")
    with pytest.raises(SystemExit) as exit_info:
        main(["analyze", str(tmp_path / "traces"), "--no-write", option, value])
    assert exit_info.value.code == 2
    assert f"muon-repro analyze: error: {expected}" in capsys.readouterr().err


def test_the_api_refuses_bad_rank_or_workers(tmp_path):
    with pytest.raises(ValueError, match="workers must be 1 or more.*got 0"):
        analyze_paths([tmp_path], workers=0)
    with pytest.raises(ValueError, match="rank must be 0 or more.*got -1"):
        stages.analyze([tmp_path], None, rank=-1)


# ---------------------------------------------------------------- a folder without traces


def test_a_folder_without_traces_is_named_with_what_was_looked_for(tmp_path, capsys):
    empty = tmp_path / "traces" / "g" / "x" / "trial0"
    empty.mkdir(parents=True)
    (empty / CONFIG_FILE).write_text("{}")
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    message = analysis.failures[0].message
    assert message.startswith(f"{tmp_path / 'traces'}: no trace files found: looked for *.json and *.json.gz files"), message
    assert "config.json" in message and "hidden" in message
    assert main(["analyze", str(tmp_path / "traces"), "--out", str(tmp_path / "metrics")]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'traces'}: no trace files found" in err and not (tmp_path / "metrics").exists()


def test_a_path_without_traces_beside_one_with_traces_is_named(tmp_path):
    write_pair(tmp_path / "traces")
    (tmp_path / "empty").mkdir()
    analysis = analyze_paths([tmp_path / "traces", tmp_path / "empty"], workers=1)
    assert [f.path for f in analysis.failures] == [str(tmp_path / "empty")]
    assert len(analysis.runs) == 2


# ---------------------------------------------------------------- --out, checked before any work


@pytest.fixture
def no_analysis(monkeypatch):
    """Fail the test if a trace is analyzed: the output folder must be refused first."""

    def refuse(*args, **kwargs):
        raise AssertionError("traces were analyzed before --out was checked")

    monkeypatch.setattr(batch_read, "analyze_file", refuse)


@pytest.mark.parametrize("out", ["a_file", "a_file/metrics"])
def test_analyze_refuses_an_out_that_is_or_is_under_a_file(tmp_path, capsys, no_analysis, out):
    write_pair(tmp_path / "traces")
    (tmp_path / "a_file").write_text("mine")
    assert main(["analyze", str(tmp_path / "traces"), "--out", str(tmp_path / out)]) == 2
    err = capsys.readouterr().err
    assert f"muon-repro analyze: error: --out {tmp_path / out}" in err and "is a file" in err
    assert (tmp_path / "a_file").read_text() == "mine"


def test_analyze_refuses_an_out_holding_other_files(tmp_path, capsys, no_analysis):
    write_pair(tmp_path / "traces")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "notes.txt").write_text("mine")
    assert main(["analyze", str(tmp_path / "traces"), "--out", str(tmp_path / "metrics")]) == 2
    err = capsys.readouterr().err
    assert "holds what is not a table (notes.txt)" in err and (tmp_path / "metrics" / "notes.txt").read_text() == "mine"


def test_analyze_refuses_an_out_it_cannot_write(tmp_path, capsys, no_analysis, monkeypatch):
    from support.unwritable import make_unwritable

    write_pair(tmp_path / "traces")
    locked = tmp_path / "locked"
    locked.mkdir()
    make_unwritable(locked, monkeypatch)
    try:
        assert main(["analyze", str(tmp_path / "traces"), "--out", str(locked / "metrics")]) == 2
    finally:
        locked.chmod(0o700)
    assert "cannot be written" in capsys.readouterr().err


def test_the_analyze_stage_checks_out_before_analyzing(tmp_path, no_analysis):
    write_pair(tmp_path / "traces")
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        stages.analyze([tmp_path / "traces"], tmp_path / "a_file")


@pytest.mark.parametrize("command", [["figures"], ["report", "--format", "md"]])
def test_figures_and_report_refuse_an_out_that_is_a_file_before_reading(tmp_path, capsys, command):
    (tmp_path / "a_file").write_text("mine")
    # No metrics folder at all: the output folder is checked first, so this is the error shown.
    code = main([*command, "--metrics", str(tmp_path / "no_metrics"), "--out", str(tmp_path / "a_file")])
    err = capsys.readouterr().err
    assert code == 2 and f"muon-repro {command[0]}: error: --out {tmp_path / 'a_file'} is a file, not a folder" in err, err


@pytest.mark.parametrize("stage", [stages.figures, stages.report])
def test_the_figures_and_report_stages_check_out_first(tmp_path, stage):
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        stage(tmp_path / "no_metrics", out=tmp_path / "a_file")


def test_the_tables_of_a_complete_pair_read_back(tmp_path):
    write_pair(tmp_path / "traces")
    tables = stages.analyze([tmp_path / "traces"], tmp_path / "metrics", workers=1)
    back = pd.read_parquet(tmp_path / "metrics" / "runs.parquet", dtype_backend="numpy_nullable")
    assert sorted(back["run"]) == sorted(tables["runs"]["run"]) == ["cpu-2c-gloo/g/adamw_dp2_tp1", "cpu-2c-gloo/g/muon_dp2_tp1"]


def test_a_folder_of_runs_timed_without_traces_alone_is_analyzed(tmp_path, capsys):
    """Runs whose every round was untraced (a step too large to trace) make runs-table rows of their own: a folder
    holding only them was refused as holding no trace, and nothing was written."""
    import shutil

    run = Path(__file__).resolve().parents[1] / "traces" / "1xH200-nccl" / "single_device" / "muon_t256k"
    shutil.copytree(run, tmp_path / "traces" / "1xH200-nccl" / "single_device" / "muon_t256k")
    assert main(["analyze", str(tmp_path / "traces"), "--out", str(tmp_path / "metrics"), "--workers", "1"]) == 0
    assert "no trace" not in capsys.readouterr().err
    runs = pd.read_parquet(tmp_path / "metrics" / "runs.parquet")
    assert runs["run"].tolist() == ["1xH200-nccl/single_device/muon_t256k"] and runs["timed_step_ms"].notna().all()


# ---------------------------------------------------------------- trials of one run recorded differently


def second_trial(first: Path, **config) -> Path:
    """A copy of trial folder ``first`` as its run's trial1, its config.json changed by ``config``."""
    import shutil

    trial = first.parent / "trial1"
    shutil.copytree(first, trial)
    recorded = json.loads((trial / CONFIG_FILE).read_text())
    (trial / CONFIG_FILE).write_text(json.dumps(recorded | {"trial": 1} | config))
    return trial


@pytest.mark.parametrize(
    "changed, shown",
    [
        ({"tokens_per_step": 4096}, "tokens_per_step=4096 (trial0: None)"),
        ({"backend": "nccl", "device": "cuda"}, "backend='nccl' (trial0: 'gloo'), device='cuda' (trial0: 'cpu')"),
        ({"layout": "bucketed"}, "layout='bucketed' (trial0: 'contiguous')"),
    ],
)
def test_a_trial_recorded_with_another_configuration_is_left_out_by_name(tmp_path, changed, shown):
    muon, _ = write_pair(tmp_path / "traces")
    other = second_trial(muon, **changed)
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert [f.path for f in analysis.failures] == [str(other)]
    message = analysis.failures[0].message
    assert message.startswith(f"{other}: recorded with {shown}, unlike the first trial of run cpu-2c-gloo/g/muon_dp2_tp1")
    assert "record it into a folder of its own (another --out)" in message
    trials = [info.trial for info, _ in analysis.runs if info.key == "cpu-2c-gloo/g/muon_dp2_tp1"]
    assert trials == [0]  # the first trial stands for the run alone


def test_trials_that_differ_only_in_their_round_seed_or_schedule_pool(tmp_path):
    muon, _ = write_pair(tmp_path / "traces")
    second_trial(muon, round_order=3, sweep="other", seed=7, lr=0.5, command=["muon-repro", "bench"], warmup=2)
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert not analysis.failures and not analysis.incomplete
    assert sorted(info.trial for info, _ in analysis.runs if info.key == "cpu-2c-gloo/g/muon_dp2_tp1") == [0, 1]


@pytest.mark.parametrize(
    "run, trial",
    [("cpu-2c-gloo/comparison/muon_dp2_tp2", "trial4"), ("1xH200-nccl/single_device/muon_t256k", "trial1")],
    ids=["timed-only-trial-of-a-traced-run", "trial-of-a-run-never-traced"],
)
def test_a_trial_timed_without_traces_is_held_to_its_runs_configuration(tmp_path, run, trial):
    import shutil

    copied = tmp_path / "traces" / run
    shutil.copytree(Path(__file__).resolve().parents[1] / "traces" / run, copied)
    config = json.loads((copied / trial / CONFIG_FILE).read_text())
    (copied / trial / CONFIG_FILE).write_text(
        json.dumps(config | {"precision": "bf16" if config.get("precision") == "fp32" else "fp32"})
    )
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert [f.path for f in analysis.failures] == [str(copied / trial)]
    assert "precision=" in analysis.failures[0].message
    kept = [*analysis.timed_only, *analysis.timed_runs, *(info for info, _ in analysis.runs)]
    assert kept and trial not in {info.path.name for info in kept}  # the others stand for the run


def test_a_renamed_trial_folder_is_numbered_by_its_name(tmp_path):
    """A contributor renumbers a trial by renaming its folder, its config.json still saying trial 0: numbered by
    config.json, the two trials would be one round, and a table keyed by round would keep one of them."""
    import shutil

    from muon_repro.rundir import RunDir

    muon, _ = write_pair(tmp_path / "traces")
    shutil.copytree(muon, muon.parent / "trial7")  # config.json: "trial": 0
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    assert sorted(info.trial for info, _ in analysis.runs if info.key == "cpu-2c-gloo/g/muon_dp2_tp1") == [0, 7]
    trials = [RunDir(muon), RunDir(muon.parent / "trial7")]
    assert [t.trial for t in trials] == [0, 7]


# ---------------------------------------------------------------- the runs, ranks, phases and losses tables' numbers


def _rewrite_json(path: Path, **changes) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_the_runs_table_reads_each_step_at_its_slowest_rank_and_pools_ranks_by_each_columns_rule(tmp_path):
    """Two ranks' steps set by hand (rank 0: 10, 20, 30 ms; rank 1: 14, 12, 50): a step is its slowest rank's, the
    run's step the median over steps (20 ms; the mean over ranks would give 16); p10 and p90 the steps' percentiles;
    the peak the largest rank's; the state the busiest rank's; the ring bytes per step summed over ranks; the loopback
    counter rank 0's alone (it sees every rank's traffic)."""
    from muon_repro.analysis.runs_table import runs_table
    from muon_repro.analysis.tables import tables_from_analysis

    folder = write_run(tmp_path / "traces" / "g" / "muon_dp2_tp1" / "trial0", dp=2)
    metrics = json.loads((folder / METRICS_FILE).read_text())
    metrics["ranks"][0] |= {"loopback_bytes": 6000, "loopback_steps": 3}
    metrics["ranks"][1] |= {"loopback_bytes": 9000, "loopback_steps": 3, "state_bytes": {"muon": 3000, "adamw": 4000}}
    _rewrite_json(folder / METRICS_FILE, ranks=metrics["ranks"])
    analysis = analyze_paths([tmp_path / "traces"], workers=1)
    tables = tables_from_analysis(analysis)
    steps = tables["steps"].sort_values(["rank", "step"], ignore_index=True)
    steps["step_ms"] = [10.0, 20.0, 30.0, 14.0, 12.0, 50.0]  # each step's slowest rank: 14, 20 and 50 ms
    steps["comm_bytes"] = [100, 100, 100, 300, 300, 300]
    steps["peak_mem_bytes"] = [100, 100, 100, 300, 300, 300]
    run = runs_table(analysis, steps, tables["timed_steps"]).set_index("run").loc["cpu-2c-gloo/g/muon_dp2_tp1"]
    assert run["step_ms"] == 20.0
    assert run["step_ms_p10"] == pytest.approx(15.2) and run["step_ms_p90"] == pytest.approx(44.0)  # linear
    assert (run["typical_trial"], run["typical_step"]) == (0, 1)
    assert run["peak_mem_bytes"] == 300 and run["peak_mem_source"] == "trace_allocator"
    assert run["state_bytes"] == 7000
    assert run["ring_bytes_per_step"] == 400.0
    assert run["loopback_bytes_per_step"] == 2000.0


def test_the_typical_step_of_an_even_count_is_the_upper_of_the_two_middle_ones():
    from muon_repro.analysis.runs_table import typical_step

    index = pd.MultiIndex.from_tuples([(0, 0), (0, 1), (1, 0), (1, 1)], names=["trial", "step"])
    slowest = pd.Series([40.0, 10.0, 30.0, 20.0], index=index)
    assert typical_step(slowest) == (1, 0)  # 10, 20, 30, 40 ms: the third
    assert typical_step(slowest.iloc[:3]) == (1, 0)  # 10, 30, 40 ms: the middle
    assert typical_step(pd.Series(dtype=float)) is None


def test_the_optimizer_gpu_busy_share_is_its_gpu_time_over_its_host_span_over_ranks():
    from muon_repro.analysis.runs_table import with_optimizer_gpu_busy
    from muon_repro.phases import FORWARD, OPTIMIZER

    runs = pd.DataFrame({"run": ["gpu", "cpu"]})
    phases = pd.DataFrame(
        {
            "run": ["gpu", "gpu", "gpu", "cpu"],
            "phase": [OPTIMIZER, OPTIMIZER, FORWARD, OPTIMIZER],
            "gpu_ms_per_step": [2.0, 4.0, 50.0, float("nan")],
            "cpu_ms_per_step": [8.0, 8.0, 60.0, 5.0],
        }
    )
    out = with_optimizer_gpu_busy(runs, phases).set_index("run")
    assert out.loc["gpu", "optimizer_gpu_busy_ms"] == 3.0 and out.loc["gpu", "optimizer_gpu_busy_share"] == 0.375
    assert out.loc["cpu", ["optimizer_gpu_busy_ms", "optimizer_gpu_busy_share"]].isna().all()


def test_ranks_phases_and_losses_hold_each_ranks_record_per_profiled_step(tmp_path):
    """The ranks table's state by optimizer; the phases table's bytes per profiled step (each rank's trace has one
    all-reduce of 4096 floats a step, under the optimizer scope) and a pipeline stage's bubble, the sum of its
    receives and its flush; the losses at their training step, after the 2 + 5 steps timed without the profiler."""
    from muon_repro.phases import BUBBLE, PP_FLUSH, PP_RECV_ACTIVATION

    folder = write_run(tmp_path / "traces" / "g" / "muon_dp2_tp1" / "trial0", dp=2)
    _rewrite_json(folder / CONFIG_FILE, timed_warmup=2, timed_steps=5)
    for rank in range(2):
        doc = json.loads(gzip.decompress((folder / trace_name(rank)).read_bytes()))
        for step in range(STEPS):
            t0 = 2000.0 * step + 5.0 * rank
            doc["traceEvents"] += [_span(PP_RECV_ACTIVATION, t0 + 12, 100.0), _span(PP_FLUSH, t0 + 330, 50.0)]
        (folder / trace_name(rank)).write_bytes(gzip.compress(json.dumps(doc).encode()))
    tables = build_tables([tmp_path / "traces"], workers=1)
    ranks = tables["ranks"].set_index("rank")
    assert (ranks["muon_state_bytes"] == 2000).all() and (ranks["adamw_state_bytes"] == 4000).all()
    phases = tables["phases"][tables["phases"]["rank"] == 0].set_index("phase")
    assert phases.loc["optimizer", "trace_bytes"] == 4096 * 4  # one all-reduce of 4096 floats a step, 3 steps
    assert phases.loc[BUBBLE, "ms_per_step"] == pytest.approx(0.150)  # 100 + 50 us each step
    losses = tables["losses"][tables["losses"]["rank"] == 1].sort_values("step")
    assert losses["step"].tolist() == [7, 8, 9] and losses["loss"].tolist() == pytest.approx([3.99, 3.89, 3.79])
