"""Bad input to bench, run, converge and equivalence: refused by name before any work, never a traceback.

converge holds its sizes to predict's and bench's limits (docs/limits.md, run shapes) before any worker starts;
bench and run hold --trials and --traced-trials to one limit before any folder is made; bench skips a complete
trial only when its files can be read, and names the file of one that cannot; run refuses recording options that
its --from stage would ignore; the options of equivalence and run say their defaults. Nothing here launches a
worker (the one recording is marked slow).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from muon_repro.bench import sweep
from muon_repro.bench.configs import BenchConfig, resolve
from muon_repro.bench.errors import BenchError
from muon_repro.cli import main
from muon_repro.rundir import CONFIG_FILE, ENVIRONMENT_FILE, LOG_FILE, METRICS_FILE

PROFILE = "test-box"
KEY = "comparison/adamw_dp2_tp2"
TOO_MANY_ROUNDS = 10_001  # one past MAX_TRIALS: small enough that a sweep without the limit plans it in a blink


def _refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"muon-repro {argv[0]}: error: ") and "Traceback" not in err
    return err


@pytest.fixture
def launches(monkeypatch) -> list[list[str]]:
    """What a sweep launched (each batch's labels); nothing is really recorded."""
    batches: list[list[str]] = []
    monkeypatch.setattr(sweep, "_record_batch", lambda batch, *a: batches.append([rec.label for rec in batch]))
    return batches


# ---------------------------------------------------------------- 1. converge: the run shapes' limits


@pytest.fixture
def no_training(monkeypatch):
    """converge must refuse before it reads the corpus or starts a worker: training fails the test at once."""
    from muon_repro.converge import sweep as converge_sweep

    def trained(*args, **kwargs):
        raise AssertionError("converge started before its limits were checked")

    monkeypatch.setattr(converge_sweep, "converge", trained)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--eval-windows", "1000000000000"], "--eval-windows=1,000,000,000,000 x --seq-len=64 = 64,000,000,000,000 tokens"),
        (["--hidden", "1000000000000"], "--hidden=1,000,000,000,000 is past the limit of 131,072 (docs/limits.md"),
        (["--seq-len", "1000000000000"], "--seq-len=1,000,000,000,000 is past the limit of 4,194,304"),
        (["--batch", "1000000000000"], "--batch=1,000,000,000,000 x --seq-len=64"),
        (["--layers", "1000000000000"], "--layers=1,000,000,000,000 is past the limit of 1,024"),
        (["--heads", "8192"], "--heads=8,192 is past the limit of 4,096"),
        (["--ffn", "1000000000000"], "--ffn=1,000,000,000,000 is past the limit of 524,288"),
        (["--steps", "1000000000000"], "--steps=1,000,000,000,000 is past the limit of 1,000,000 steps"),
        (["--sweep-steps", "1000000000000"], "--sweep-steps=1,000,000,000,000 is past the limit of 1,000,000 steps"),
        (["--adamw-budgets", "1e9"], "--adamw-budgets: 1e+09 x 1,000 steps = 1,000,000,000,000 steps is past the limit"),
        (["--seeds", "1000000000000"], "--seeds=1,000,000,000,000 is past the limit of 10,000"),
        (["--dp", "128", "--batch", "128"], "--dp x --tp = 128 worker processes on one machine: converge starts 1 to 64"),
        (["--threads", "100000"], "--threads 100,000 is past the limit of 1,024"),
        (["--weight-decay", "inf"], "--weight-decay must be a finite number >= 0, got inf"),
        (["--adamw-lrs", "inf"], "--adamw-lrs must be a non-empty list of positive, finite learning rates"),
    ],
)
def test_converge_refuses_sizes_past_the_limits_before_any_worker(tmp_path, capsys, no_training, flags, said):
    """`converge --eval-windows 10**12` crashed every worker asking for 4 TB and left a .partial folder."""
    out = tmp_path / "out"
    argv = ["converge", "--out", str(out), "--no-progress", "--muon-lrs", "1e-2", "--adamw-lrs", "1e-2", *flags]
    err = _refused(argv, capsys)
    assert said in err and "ConvergeConfig" not in err and "ConvergePlan" not in err
    assert list(tmp_path.iterdir()) == []


def test_the_converge_config_holds_its_limits_in_python_too():
    from muon_repro.converge.config import ConvergeConfig

    with pytest.raises(ValueError, match=r"ConvergeConfig.layers=2,048 is past the limit of 1,024 \(docs/limits.md"):
        ConvergeConfig("muon", 1e-3, layers=2048)
    with pytest.raises(ValueError, match="ConvergeConfig.eval_windows=2,000,000,000 x ConvergeConfig.seq_len=64"):
        ConvergeConfig("muon", 1e-3, eval_windows=2 * 10**9)
    ConvergeConfig("muon", 1e-3, layers=1024, hidden=2**17, seq_len=2**22, batch=16)  # at the limits: accepted


def test_a_converge_plan_takes_as_many_seeds_as_bench_takes_rounds_and_not_one_more():
    from muon_repro.bench.configs import MAX_TRIALS
    from muon_repro.converge.config import ConvergeConfig
    from muon_repro.converge.sweep import ConvergePlan

    lrs = {"muon": (1e-3,), "adamw": (1e-3,)}
    assert ConvergePlan(ConvergeConfig("muon", 1e-3), lrs, seeds=MAX_TRIALS).seeds == MAX_TRIALS
    with pytest.raises(ValueError, match=f"ConvergePlan.seeds={MAX_TRIALS + 1:,} is past the limit of {MAX_TRIALS:,}"):
        ConvergePlan(ConvergeConfig("muon", 1e-3), lrs, seeds=MAX_TRIALS + 1)


def test_converge_into_an_out_that_is_a_file_is_refused_before_the_corpus_is_read(tmp_path, monkeypatch):
    from muon_repro.converge import sweep as converge_sweep
    from muon_repro.converge.config import ConvergeConfig

    monkeypatch.setattr(converge_sweep, "prepare_data", lambda *args: pytest.fail("the corpus was read"))
    target = tmp_path / "traces.txt"
    target.write_text("not a folder\n")
    plan = converge_sweep.ConvergePlan(ConvergeConfig("muon", 1e-3), {"muon": (1e-3,), "adamw": (1e-3,)})
    with pytest.raises(ValueError, match=f"--out {target} is a file, not a folder"):
        converge_sweep.converge(plan, target, progress=False, profile=PROFILE)
    assert target.read_text() == "not a folder\n" and sorted(tmp_path.iterdir()) == [target]


# ---------------------------------------------------------------- 2. bench and run: the rounds' limit


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--trials", str(TOO_MANY_ROUNDS)], "--trials 10,001 is past the limit of 10,000 rounds (docs/limits.md"),
        (["--trials", "3", "--traced-trials", str(TOO_MANY_ROUNDS)], "--traced-trials 10,001 is past the limit"),
    ],
)
def test_bench_refuses_too_many_rounds_before_it_makes_a_folder(tmp_path, capsys, launches, flags, said):
    """`bench comparison --trials 10**12` listed every recording up front until the OOM killer, leaving --out made."""
    out = tmp_path / "out"
    assert said in _refused(["bench", "comparison", "--out", str(out), "--no-progress", *flags], capsys)
    assert not out.exists() and launches == []


def test_the_study_protocol_and_run_refuse_too_many_rounds(tmp_path, capsys, monkeypatch):
    from muon_repro import job

    def ran(plan) -> None:
        raise AssertionError("run started its stages before checking --trials")

    monkeypatch.setattr(job, "run_job", ran)
    out = tmp_path / "out"
    said = "--trials 10,001 is past the limit of 10,000 rounds"
    assert said in _refused(["run", "--out", str(out), "--trials", str(TOO_MANY_ROUNDS), "--no-progress"], capsys)
    assert said in _refused(["bench", "--protocol", "study", "--trials", str(TOO_MANY_ROUNDS), "--out", str(out)], capsys)
    # regimes: before it calibrates this machine for a minute
    assert said in _refused(["regimes", "--out", str(out), "--trials", str(TOO_MANY_ROUNDS), "--no-progress"], capsys)
    assert not out.exists()
    with pytest.raises(ValueError, match="--trials 10,001 is past the limit"):
        sweep.plan_recordings([resolve(KEY, "tiny")], out, TOO_MANY_ROUNDS, profile=PROFILE)


# ---------------------------------------------------------------- 3 and 4. bench: a complete trial must be readable


def _complete_trial(out: Path, cfg: BenchConfig) -> Path:
    """A complete trial 0 of ``cfg`` as a sweep leaves it: readable side files, a whole gzip trace per rank."""
    (rec,) = sweep.plan_recordings([cfg], out, 1, profile=PROFILE)
    final = rec.final
    final.mkdir(parents=True)
    config = {**cfg.to_dict(), "trial": 0, "trials": 1, "backend": "gloo", "device": "cpu", "command": ["test"]}
    (final / CONFIG_FILE).write_text(json.dumps(config, indent=1))
    (final / ENVIRONMENT_FILE).write_text(json.dumps({"profile": PROFILE}))
    (final / METRICS_FILE).write_text(json.dumps({"config": cfg.key, "ranks": [{} for _ in range(cfg.world_size)]}))
    (final / LOG_FILE).write_text("")
    events = json.dumps({"traceEvents": [{"name": f"e{i}", "ph": "X", "ts": i, "dur": 1} for i in range(5000)]})
    for rank in range(cfg.world_size):
        (final / f"rank{rank}.json.gz").write_bytes(gzip.compress(events.encode()))
    return final


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _record(out: Path, cfg: BenchConfig):
    return sweep.record_local([cfg], out, "gloo", trials=1, progress=False, profile=PROFILE)


def test_a_whole_trial_is_skipped(tmp_path, launches):
    cfg = resolve(KEY, "tiny")
    _complete_trial(tmp_path, cfg)
    (result,) = _record(tmp_path, cfg)
    assert result.status == "skipped" and launches == []


def test_a_sweep_into_an_out_that_is_a_file_is_refused_before_anything_is_made(tmp_path, launches):
    target = tmp_path / "traces.txt"
    target.write_text("not a folder\n")
    with pytest.raises(ValueError, match=f"--out {target} is a file, not a folder"):
        _record(target, resolve(KEY, "tiny"))
    assert launches == [] and target.read_text() == "not a folder\n" and sorted(tmp_path.iterdir()) == [target]


def test_a_trial_without_a_ranks_trace_is_not_complete_and_is_recorded_again(tmp_path, launches):
    """A traced trial holds one trace per rank: without one it is not skipped as complete."""
    cfg = resolve(KEY, "tiny")
    final = _complete_trial(tmp_path, cfg)
    (final / "rank2.json.gz").unlink()
    assert not sweep.is_complete(final, cfg)
    (result,) = _record(tmp_path, cfg)
    assert result.status == "recorded" and launches == [[f"{KEY}/trial0 (1 of 1)"]]
    assert sweep.is_complete(final, cfg.untraced())  # a timed-only trial has no traces to miss


def test_a_trial_whose_swap_a_kill_cut_between_its_renames_is_put_back_not_recorded_again(tmp_path, launches):
    """swap_dir renames the earlier trial aside, then the new one in: a hard kill between the two left the trial in
    a hidden folder that nothing put back, and the sweep recorded it again."""
    cfg = resolve(KEY, "tiny")
    final = _complete_trial(tmp_path, cfg)
    from support.pids import dead_pid

    dead = dead_pid()
    aside = final.with_name(f".{final.name}.muon-repro-old-{dead}-0123abcd")
    final.rename(aside)
    (result,) = _record(tmp_path, cfg)
    assert result.status == "skipped" and launches == []
    assert (final / CONFIG_FILE).is_file() and not aside.exists()


@pytest.mark.parametrize("damaged", [METRICS_FILE, CONFIG_FILE, ENVIRONMENT_FILE, "rank0.json.gz", "rank3.json.gz"])
def test_a_complete_trial_with_a_file_cut_short_is_refused_naming_it(tmp_path, launches, damaged):
    """A cut metrics.json or trace was reported 'skipped', exit 0: the damage showed only at analyze."""
    cfg = resolve(KEY, "tiny")
    final = _complete_trial(tmp_path, cfg)
    _cut(final / damaged)
    with pytest.raises(BenchError) as refused:
        _record(tmp_path, cfg)
    message = str(refused.value)
    assert f"{final} ({damaged}: " in message and "delete the trial folder and record it again" in message
    assert "other settings" not in message  # 4: an unreadable config.json is damage, not another run
    assert launches == []
    (result,) = sweep.record_local([cfg], tmp_path, "gloo", trials=1, force=True, progress=False, profile=PROFILE)
    assert result.status == "recorded"  # --force records it again


def test_bench_reports_a_damaged_trial_with_exit_status_1(tmp_path, launches, capsys):
    cfg = resolve(KEY, "tiny")
    final = _complete_trial(tmp_path, cfg)
    (final / CONFIG_FILE).write_text((final / CONFIG_FILE).read_text()[:40])
    argv = ["bench", KEY, "--scale", "tiny", "--trials", "1", "--out", str(tmp_path), "--profile", PROFILE]
    assert main([*argv, "--backend", "gloo", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("muon-repro bench: error: 1 complete trial folder(s) hold a file that cannot be read")
    assert f"{CONFIG_FILE}: not valid JSON" in err and "recorded with other settings" not in err
    assert launches == []


def test_settings_are_compared_before_damage_is_told(tmp_path, launches):
    """A trial of other settings is refused as such (--force records it, damaged or not); a damaged config.json is
    not counted among them."""
    asked = resolve(KEY, "tiny")
    other = _complete_trial(tmp_path, resolve(KEY, "cpu"))
    _cut(other / "rank1.json.gz")
    with pytest.raises(BenchError, match="were recorded with other settings"):
        _record(tmp_path, asked)
    _cut(other / CONFIG_FILE)
    with pytest.raises(BenchError, match=r"cannot be read.*config.json: not valid JSON.*rank1.json.gz: cut short"):
        _record(tmp_path, asked)


def test_the_gzip_check_finds_cuts_and_corruption_and_passes_whole_streams(tmp_path):
    from muon_repro.bench.trial_check import gzip_problem

    whole = gzip.compress(json.dumps({"traceEvents": list(range(200_000))}).encode())
    cases = {
        "whole": (whole, None),
        "two_members": (whole + gzip.compress(b"[]"), None),
        "padded": (whole + b"\0" * 64, None),
        "cut": (whole[: len(whole) // 2], "cut short"),
        "no_trailer": (whole[:-8], "cut short"),
        "one_byte_short": (whole[:-1], "cut short"),
        "bad_crc": (whole[:-8] + bytes(8), "corrupt gzip data"),
        "garbage_after": (whole + b"junk", "corrupt gzip data"),
        "empty": (b"", "empty"),
        "plain_json": (b"{}", "not a gzip file"),
    }
    for name, (data, said) in cases.items():
        path = tmp_path / f"{name}.json.gz"
        path.write_bytes(data)
        problem = gzip_problem(path)
        assert (problem is None) if said is None else (problem is not None and problem.startswith(said)), (name, problem)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (64 * 2**20)))
    assert gzip_problem(bomb, max_bytes=2**20) is None  # stops past the limit: the analysis judges what lies beyond


@pytest.mark.slow
def test_a_recorded_trial_cut_short_is_refused_on_the_next_sweep(tmp_path):
    """End to end: record the smallest custom run, cut its metrics.json, run the same command again."""
    argv = [sys.executable, "-m", "muon_repro", "bench", "custom", "--scale", "tiny", "--optimizer", "adamw", "--dp", "1"]
    argv += ["--tp", "1", "--preset", "tiny", "--tokens-per-step", "32", "--seq-len", "16", "--trials", "1"]
    argv += ["--out", str(tmp_path), "--no-progress", "--backend", "gloo", "--profile", PROFILE]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    (metrics,) = tmp_path.rglob(METRICS_FILE)
    _cut(metrics)
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "skipped" not in again.stdout
    assert f"{metrics.parent} ({METRICS_FILE}: not valid JSON" in again.stderr and "Traceback" not in again.stderr


# ---------------------------------------------------------------- 5. run: recording options --from a later stage


@pytest.mark.parametrize(
    ("stage", "flags", "named"),
    [
        (
            "analyze",
            ["--trials", "5", "--force", "--configs", "comparison", "--backend", "nccl"],
            "--configs, --backend, --trials, --force",
        ),
        ("figures", ["--scale", "gpu", "--traced-trials", "2", "--profile", PROFILE], "--scale, --traced-trials, --profile"),
        ("bundle", ["--trials", "3"], "--trials would be ignored: leave it out"),
    ],
)
def test_run_refuses_recording_options_its_first_stage_ignores(tmp_path, capsys, stage, flags, named):
    """`run --from analyze --trials 5 --force --configs comparison --backend nccl` ignored all four in silence."""
    (tmp_path / "traces").mkdir()
    (tmp_path / "metrics").mkdir()
    err = _refused(["run", "--out", str(tmp_path), "--from", stage, *flags], capsys)
    assert f"--from {stage} records nothing" in err and named in err


def test_run_fills_in_the_recording_defaults_when_none_is_given(tmp_path, monkeypatch):
    from muon_repro import job

    plans = []
    monkeypatch.setattr(job, "run_job", lambda plan: plans.append(plan) or {})
    monkeypatch.setattr(job, "_print_summary", lambda plan, seconds: None)
    assert main(["run", "--out", str(tmp_path), "--no-progress"]) == 0
    (plan,) = plans
    assert (plan.scale, plan.configs, plan.trials, plan.traced_trials, plan.force, plan.backend, plan.profile) == (
        "cpu",
        ("reference",),
        3,
        1,
        False,
        None,
        None,
    )


# ---------------------------------------------------------------- 6. help: every option says its default


def _help_of(command: str, option: str) -> str:
    from muon_repro.cli import build_parser

    parser = build_parser(command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    (action,) = [a for a in sub._actions if option in a.option_strings]
    return (action.help or "") % {"default": action.default}


@pytest.mark.parametrize(
    ("command", "option", "default"),
    [
        ("equivalence", "--steps", "5"),
        ("equivalence", "--optimizer", "muon"),
        ("equivalence", "--layout", "contiguous"),
        ("equivalence", "--ns-dtype", "fp32"),
        ("equivalence", "--backend", "gloo"),
        ("run", "--backend", "nccl on a machine with GPUs"),
    ],
)
def test_options_say_what_they_do_and_their_default(command, option, default):
    said = _help_of(command, option)
    assert f"(default: {default}" in said and len(said) > len(f"(default: {default})")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["comparison", "--layout", "bucketed", "--precision", "bf16"], "--layout, --precision: the run-shape flags"),
        (["comparison", "--dp", "4"], "--dp: the run-shape flags describe a custom run (CONFIG 'custom')"),
        (["--protocol", "study", "--force"], "--protocol study records the study's own six runs at their own sizes"),
        (
            ["--protocol", "study-both", "--trials", "2", "--traced-trials", "2", "--layout", "bucketed"],
            "--traced-trials, --layout",
        ),
    ],
)
def test_bench_refuses_flags_its_recording_would_ignore(tmp_path, capsys, launches, flags, said):
    """`bench comparison --layout bucketed` recorded the registry's contiguous runs, saying nothing; --force and
    --scale did nothing to the study's protocol."""
    out = tmp_path / "out"
    err = _refused(["bench", *flags, "--out", str(out), "--no-progress"], capsys)
    assert said in err and ("would be ignored" in err or "a named configuration records its own shape" in err)
    assert not out.exists() and launches == []


@pytest.mark.parametrize(
    ("flags", "dropped"),
    [
        (["--pipeline-scale-out", "--layout", "bucketed", "--unprofiled"], "drop --layout, --unprofiled"),
        (["--pipeline-scale-out", "--precision", "bf16", "--model-dtype", "bf16"], "drop --precision, --model-dtype"),
        (["--validate", "traces", "--machine", "h100-8x-nvlink", "--pp", "2"], "drop --pp"),
    ],
)
def test_predict_refuses_shape_flags_its_own_runs_would_ignore(capsys, flags, dropped):
    assert dropped in _refused(["predict", *flags], capsys)
