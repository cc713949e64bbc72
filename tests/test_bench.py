"""The benchmark driver: traces, metrics, resume and errors, on tiny configs with gloo."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_sweep import copy_of

from muon_repro.bench.configs import CONFIGS, STUDY_CONFIGS, BenchConfig, from_dict, resolve
from muon_repro.bench.environment import recording_profile
from muon_repro.bench.sweep import is_complete, plan_recordings, record_local, run_dir_for
from muon_repro.phases import OPTIMIZER_COMM_PHASES as OPTIMIZER_PHASES
from muon_repro.rundir import RunDir, trial_dir

PHASES = (
    "forward",
    "backward",
    "optimizer",
    "dp_reduce_scatter",
    "momentum",
    "dp_gather",
    "tp_gather",
    "newton_schulz",
    "tp_shard",
    "dp_shard",
    "update",
    "dp_all_gather",
)
METRIC_FIELDS = (
    "step_ms",
    "optimizer_ms",
    "loss",
    "ledger",
    "state_bytes",
    "transient_bytes",
    "peak_memory_bytes",
    "update_rms",
    "ns_calls",
    "ns_flops",
    "optimizer_op_calls",
)
CONFIG = "layout_ablation/muon_dp2_tp2_bucketed"  # bucketed: every phase, dp_gather included, occurs


def bench(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "muon_repro", "bench", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
        **kw,
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, tiny_sweep) -> Path:
    out = tmp_path_factory.mktemp("traces")
    run_dir = copy_of(tiny_sweep[resolve(CONFIG, "tiny").key], out)
    assert run_dir == trial_dir(run_dir_for(out, resolve(CONFIG, "tiny"), recording_profile("gloo")), 0)
    return run_dir


@pytest.mark.slow
def test_every_rank_writes_a_complete_trace(recorded):
    for rank in range(4):
        with gzip.open(recorded / f"rank{rank}.json.gz", "rt") as f:
            trace = json.load(f)
        info = trace["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, 4, "gloo")
        names = {e.get("name") for e in trace["traceEvents"]}
        assert any(str(n).startswith("ProfilerStep#") for n in names)
        assert set(PHASES) <= names, set(PHASES) - names


@pytest.mark.slow
def test_a_profiled_step_holds_the_training_step_not_the_batch_it_trains_on(recorded):
    """Each step's batch was built inside its ProfilerStep window (a Python loop, 2 to 5 ms a step at the cpu scale), so a
    profiled step paid it and the timed one did not: the profiler's overhead and each window read high."""
    with gzip.open(recorded / "rank0.json.gz", "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name")).startswith("ProfilerStep#")]
    assert len(windows) >= 2
    built = [e for e in events if e["name"] == "aten::randint"]  # the batch's first tokens; no step draws any
    assert not [e for e in built if any(start <= e["ts"] < end for start, end in windows)]


@pytest.mark.slow
def test_metrics_hold_every_field_and_match_the_analytic_model(recorded):
    from muon_repro.model import GPT, GPTConfig
    from muon_repro.optim.comm_model import optimizer_bytes, param_specs
    from muon_repro.parallel.comm import Group

    cfg = resolve(CONFIG, "tiny")
    metrics = json.loads((recorded / "metrics.json").read_text())
    config = json.loads((recorded / "config.json").read_text())
    env = json.loads((recorded / "environment.json").read_text())
    assert config["key"] == CONFIG and config["backend"] == "gloo" and config["command"]
    assert (config["trial"], config["trials"], config["tokens_per_step"]) == (0, 1, cfg.tokens_per_step)
    assert env["torch"] and env["host_cpu_cores"] and "pip_freeze" in env
    assert sum(line.startswith("step ") for line in (recorded / "log.txt").read_text().splitlines()) == cfg.steps
    # A new run computes the vocab-parallel loss: its TP ranks never all-gather the logits.
    assert config["cross_entropy"] == "vocab_parallel" and from_dict(recorded_fields(config)) == cfg
    assert not any(entry["phase"] == "tp_all_gather" for rank in metrics["ranks"] for entry in rank["ledger"])

    # TP-local shapes of a tp=2 model: building communicates nothing, so no process group is needed.
    model = GPT(
        GPTConfig.preset(cfg.preset), Group(name="tp", ranks=(0, 1), rank=0, process_group=None, ledger=Group.single("x").ledger)
    )
    specs = param_specs(model.named_parameters(), cfg.tp)
    for rank in metrics["ranks"]:
        assert set(METRIC_FIELDS) <= set(rank)
        assert len(rank["step_ms"]) == len(rank["loss"]) == cfg.steps
        assert rank["loss"][-1] < rank["loss"][0]
        # counted on one more step, after the recorded ones: none of its collectives is in the ledger
        assert rank["optimizer_op_calls"] > 20 and max(entry["step"] for entry in rank["ledger"]) < cfg.steps
        want = optimizer_bytes(
            specs,
            dp=cfg.dp,
            tp=cfg.tp,
            dp_rank=rank["dp_rank"],
            optimizer="muon",
            layout=cfg.layout,
            bucket_elems=cfg.bucket_elems,
        )
        for step in range(cfg.steps):
            got = dict.fromkeys(OPTIMIZER_PHASES, 0)
            for entry in rank["ledger"]:
                if entry["step"] == step and entry["phase"] in got:
                    got[entry["phase"]] += entry["bytes"]
            assert got == want, (rank["rank"], step)


@pytest.mark.slow
def test_resume_skips_force_redoes_and_a_killed_run_leaves_nothing(tmp_path):
    key = "comparison/adamw_dp2_tp2"
    first = bench(key, "--scale", "tiny", "--out", str(tmp_path), "--no-progress", "--trials", "1", "--profile", "test-box")
    assert first.returncode == 0, first.stderr
    run_dir = (
        tmp_path / "test-box" / "comparison" / "adamw_dp2_tp2" / "trial0"
    )  # --profile names the folder and environment.json's field
    assert is_complete(run_dir, resolve(key, "tiny")) and RunDir(run_dir).environment["profile"] == "test-box"
    stamp = (run_dir / "metrics.json").stat().st_mtime_ns

    again = bench(key, "--scale", "tiny", "--out", str(tmp_path), "--no-progress", "--trials", "1", "--profile", "test-box")
    assert again.returncode == 0 and "skipped" in again.stdout
    assert (run_dir / "metrics.json").stat().st_mtime_ns == stamp

    forced = bench(
        key, "--scale", "tiny", "--out", str(tmp_path), "--no-progress", "--force", "--trials", "1", "--profile", "test-box"
    )
    assert forced.returncode == 0 and "recorded" in forced.stdout
    assert (run_dir / "metrics.json").stat().st_mtime_ns != stamp

    # Interrupt a run while its workers are training: no run directory, partial or final.
    other = tmp_path / "test-box" / "distributed_muon"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "muon_repro",
            "bench",
            "distributed_muon/muon_dp4",
            "--scale",
            "tiny",
            "--profile",
            "test-box",
            "--out",
            str(tmp_path),
            "--no-progress",
            "--trials",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not list(other.glob("*/.*.partial/*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(other.glob("*/.*.partial")), "the run never started"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert proc.returncode != 0
    assert not list(other.rglob("trial*")) and not list(other.rglob(".*.partial"))

    redo = bench(
        "distributed_muon/muon_dp4",
        "--scale",
        "tiny",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--trials",
        "1",
        "--profile",
        "test-box",
    )
    assert redo.returncode == 0 and "recorded" in redo.stdout, redo.stderr
    assert is_complete(other / "muon_dp4" / "trial0", resolve("distributed_muon/muon_dp4", "tiny"))


@pytest.mark.slow
def test_trials_are_interleaved_and_train_the_same_tokens(tmp_path):
    cfgs = [resolve("comparison/adamw_dp2_tp2", "tiny"), resolve("distributed_muon/adamw_dp4", "tiny")]
    results = record_local(cfgs, tmp_path, "gloo", trials=2, progress=False)
    assert [(r.key, r.trial, r.status) for r in results] == [
        ("comparison/adamw_dp2_tp2", 0, "recorded"),  # round 0 in its shuffled order (random.Random(0)): A B
        ("distributed_muon/adamw_dp4", 0, "recorded"),
        ("distributed_muon/adamw_dp4", 1, "recorded"),  # round 1, round 0's order reversed: B A
        ("comparison/adamw_dp2_tp2", 1, "recorded"),
    ]
    order = sorted(results, key=lambda r: json.loads((r.run_dir / "environment.json").read_text())["recorded_at"])
    assert [(r.key, r.trial) for r in order] == [(r.key, r.trial) for r in results]  # recorded A B B A, in that order
    sweeps = set()
    for r, round_order in zip(results, (0, 1, 0, 1)):
        config = RunDir(r.run_dir).config
        assert config.trial == r.trial and config.trials == 2 and config.tokens_per_step == 128
        assert config.round_order == round_order
        assert config.batch_per_dp * config.dp * config.seq_len == 128  # DP2 trains 4 sequences per rank, DP4 2
        sweeps.add(config.sweep)
    assert len(sweeps) == 1 and None not in sweeps  # one command: every round pairs


def test_tokens_per_step_must_divide_into_the_grid():
    with pytest.raises(
        ValueError,
        match=r"tokens_per_step=1000 does not divide into dp=2 x micro-batches of seq_len=128; use a positive multiple of 256",
    ):
        BenchConfig(group="g", name="n", optimizer="muon", dp=2, tp=2, tokens_per_step=1000, seq_len=128)
    assert (
        resolve("distributed_muon/muon_tp4", "cpu").batch_per_dp == 8
        and resolve("distributed_muon/muon_dp4", "cpu").batch_per_dp == 2
    )
    with pytest.raises(ValueError, match="trials must be a positive integer"):
        plan_recordings([resolve(CONFIG, "tiny")], Path("x"), trials=0, profile="p")


def recorded_fields(config: dict) -> dict:
    """A config.json's BenchConfig keys (and the derived ones from_dict drops), without the run-only ones."""
    names = {f.name for f in dataclasses.fields(BenchConfig)} | {"key", "steps", "world_size", "batch_per_dp"}
    return {k: v for k, v in config.items() if k in names}


def test_cross_entropy_is_validated_kept_out_of_the_key_and_read_as_gathered_from_older_runs():
    cfg = resolve(CONFIG, "tiny")
    gathered = dataclasses.replace(cfg, cross_entropy="gathered")
    assert cfg.cross_entropy == "vocab_parallel" and gathered.key == cfg.key  # one folder whichever the loss
    assert from_dict(cfg.to_dict()) == cfg and from_dict(gathered.to_dict()) == gathered
    assert from_dict({k: v for k, v in cfg.to_dict().items() if k != "cross_entropy"}) == gathered
    message = f"config {cfg.key}: unknown cross_entropy 'full'; choose one of vocab_parallel, gathered"
    with pytest.raises(ValueError, match=re.escape(message)):
        dataclasses.replace(cfg, cross_entropy="full")
    with pytest.raises(ValueError, match=re.escape(message)):
        from_dict({**cfg.to_dict(), "cross_entropy": "full"})


def test_a_committed_run_says_how_it_computed_its_loss_and_its_ledger_agrees():
    """The committed runs compute the vocab-parallel loss (no logits gather in the ledger); a config.json
    recorded before the field existed (the same dict without it) reads as "gathered"."""
    run = Path(__file__).parent.parent / "traces" / "cpu-2c-gloo" / "comparison" / "muon_dp2_tp2" / "trial0"
    if not (run / "config.json").is_file():
        pytest.fail(f"no committed run at {run}")
    config = RunDir(run).config_dict
    assert from_dict(recorded_fields(config)).cross_entropy == config["cross_entropy"] == "vocab_parallel"
    assert not any(entry["phase"] == "tp_all_gather" for entry in RunDir(run).ranks[0].ledger)
    older = {k: v for k, v in recorded_fields(config).items() if k != "cross_entropy"}
    assert from_dict(older).cross_entropy == "gathered"


@pytest.mark.slow
def test_unknown_config_names_the_closest_ones_and_where_the_rest_are():
    result = bench("comparison/sgd_dp2", "--scale", "tiny")
    assert result.returncode == 2
    assert "unknown benchmark config 'comparison/sgd_dp2'; did you mean comparison/" in result.stderr
    assert "`muon-repro bench --list` lists every name" in result.stderr and len(result.stderr) < 400


@pytest.mark.slow
def test_world_size_must_match_under_torchrun(tmp_path):
    env = {"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    result = bench("comparison/muon_dp2_tp2", "--scale", "tiny", "--out", str(tmp_path), env=env)
    assert result.returncode == 2
    assert "needs dp*tp*pp = 2*2*1 = 4 ranks, torchrun started 3: start 4 processes in all" in result.stderr


@pytest.mark.slow
def test_nccl_without_gpus_is_refused(tmp_path):
    result = bench("comparison/muon_dp2_tp2", "--scale", "tiny", "--out", str(tmp_path), "--backend", "nccl")
    assert result.returncode == 2
    assert "needs 4 GPUs, one per rank (dp*tp*pp = 2*2*1 = 4), and no GPU is visible" in result.stderr
    assert not (tmp_path / "comparison").exists() or not any((tmp_path / "comparison").iterdir())


@pytest.mark.slow
def test_list_shows_every_config():
    result = bench("--list")
    assert result.returncode == 0
    assert all(key in result.stdout for key in CONFIGS)
    assert set(STUDY_CONFIGS) <= set(CONFIGS)


def test_study_names_the_original_studys_runs_and_seed_stays_an_alias():
    from muon_repro.bench.configs import expand_config_names

    assert expand_config_names(["study"]) == list(STUDY_CONFIGS)
    assert expand_config_names(["seed"]) == list(STUDY_CONFIGS)  # the older name, kept for existing scripts
    assert set(expand_config_names(["reference"])) >= set(STUDY_CONFIGS)
    with pytest.raises(ValueError, match="'study'"):
        expand_config_names(["no_such_config"])


def test_the_step_bar_is_drawn_on_a_terminal_only(monkeypatch):
    """A log file got each redraw of the bar (lines of carriage-return frames): no bar where stdout is no terminal."""
    from muon_repro.bench import runner

    cfg = resolve(CONFIG, "tiny")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert runner._progress(cfg, True) is None
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    bar = runner._progress(cfg, True)
    try:
        assert bar is not None and bar.total == cfg.timed_total + cfg.profiled_steps
    finally:
        bar.close()
    assert runner._progress(cfg, False) is None


def test_the_console_reads_a_trial_as_the_tables_do():
    """The closing table printed rank 0's medians (and its warm-up loss as 'profiled'), which no table states: each
    trial is now read as the timed_steps table reads it, the slowest rank per step and the mean over ranks."""
    import pandas as pd

    from muon_repro.bench.sweep import Recording, _summary, format_results

    repo = Path(__file__).resolve().parents[1]
    folder = repo / "traces" / "cpu-2c-gloo" / "comparison" / "muon_dp2_tp2" / "trial0"
    cfg = resolve("comparison/muon_dp2_tp2", "cpu")
    result = _summary(Recording(cfg, 0, 1, folder), "skipped")
    timed = pd.read_parquet(repo / "metrics" / "timed_steps.parquet")
    mine = timed[(timed["run"] == "cpu-2c-gloo/comparison/muon_dp2_tp2") & (timed["trial"] == 0)]
    per_step = mine.groupby("step").agg(step_ms=("step_ms", "max"), optimizer_ms=("optimizer_ms", "mean"))
    assert result.timed_step_ms == pytest.approx(per_step["step_ms"].median(), rel=1e-9)
    losses = pd.read_parquet(repo / "metrics" / "losses.parquet")
    of_trial = losses[(losses["run"] == "cpu-2c-gloo/comparison/muon_dp2_tp2") & (losses["trial"] == 0)]
    mean = of_trial.groupby("step")["loss"].mean()
    assert (result.loss_first, result.loss_last) == pytest.approx((mean.iloc[0], mean.iloc[-1]), rel=1e-9)
    table = format_results([result])
    assert "slowest rank" in table and f"{result.timed_step_ms:.1f}" in table


def test_a_trials_summary_takes_the_medians_of_the_slowest_ranks_step_and_the_ranks_mean_optimizer_step(tmp_path):
    """Made-up steps of two ranks (after the profiler's warm-up step, left out): the slowest rank's step per step
    is 12, 30, 26 ms (median 26), the ranks' mean optimizer step 2, 3, 4 ms (median 3); timed steps likewise."""
    from muon_repro.bench.sweep import Recording, _summary
    from muon_repro.run_records import RankMetrics

    cfg = resolve(CONFIG, "tiny")
    assert (cfg.wait or 0) + (cfg.warmup or 0) == 1
    ranks = [
        RankMetrics(
            rank=0,
            step_ms=[99.0, 10.0, 30.0, 20.0],
            optimizer_ms=[99.0, 1.0, 2.0, 3.0],
            loss=[4.0, 3.5, 3.0, 2.0],
            timed_step_ms=[5.0, 7.0, 6.0],
            timed_optimizer_ms=[1.0, 1.0, 1.0],
        ),
        RankMetrics(
            rank=1,
            step_ms=[99.0, 12.0, 28.0, 26.0],
            optimizer_ms=[99.0, 3.0, 4.0, 5.0],
            loss=[4.2, 3.5, 3.0, 2.4],
            timed_step_ms=[6.0, 6.0, 9.0],
            timed_optimizer_ms=[1.0, 1.0, 1.0],
        ),
    ]
    RunDir(tmp_path / "trial0").write(cfg.to_dict(), {}, ranks, "")
    result = _summary(Recording(cfg, 0, 1, tmp_path / "trial0"), "recorded")
    assert (result.step_ms, result.optimizer_ms, result.timed_step_ms) == (26.0, 3.0, 7.0)
    assert (result.loss_first, result.loss_last) == pytest.approx((4.1, 2.2))


def test_the_closing_table_puts_each_value_under_its_column_and_a_dash_where_a_trial_has_none():
    from muon_repro.bench.sweep import RunResult, format_results

    traced = RunResult("g/traced", 0, Path("x"), "recorded", step_ms=45.61, optimizer_ms=7.94, timed_step_ms=12.34)
    traced.loss_first, traced.loss_last = 2.5, 2.25
    timed_only = RunResult("g/timed_only", 1, Path("y"), "skipped", timed_step_ms=8.0)
    header, columns, *rows = format_results([traced, timed_only]).splitlines()
    assert "slowest rank" in header
    assert columns.split()[:6] == ["config", "trial", "status", "timed", "ms", "step"]
    assert rows[0].split() == ["g/traced", "0", "recorded", "12.3", "45.6", "7.9", "2.500", "->", "2.250"]
    assert rows[1].split() == ["g/timed_only", "1", "skipped", "8.0", "-", "-", "-"]


def test_the_workers_stderr_is_kept_in_the_log_rank_by_rank_leaving_out_ranks_that_said_nothing(tmp_path):
    from muon_repro.bench.sweep import _append_worker_stderr

    said = {"0": "warning: zero\n", "2": "", "9": "nine", "10": "a profiler note"}  # rank 2 said nothing; 10 comes after 9
    for rank, text in said.items():
        (tmp_path / "stderr" / rank).mkdir(parents=True)
        (tmp_path / "stderr" / rank / "stderr.log").write_text(text)
    log = tmp_path / "log.txt"
    log.write_text("recorded\n")
    _append_worker_stderr(log, tmp_path / "stderr")
    sections = ["--- rank 0 stderr ---\nwarning: zero", "--- rank 9 stderr ---\nnine", "--- rank 10 stderr ---\na profiler note"]
    assert log.read_text() == "recorded\n" + "\n".join(sections) + "\n"
    _append_worker_stderr(tmp_path / "no trial" / "log.txt", tmp_path / "stderr")  # no log: nothing is made
    assert not (tmp_path / "no trial").exists()
