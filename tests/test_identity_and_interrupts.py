"""Cached work is never wrongly reused, and every command's Ctrl-C ends in one line and exit status 130.

Identity: a complete bench/regimes trial or converge run whose recorded settings differ from the
asked ones (scale, schedule, backend; corpus, vocabulary) is refused, naming the fields and
``--force``, before anything runs; the same settings are skipped; ``--force`` runs them again; a
checkpoint of another corpus is not resumed. ``migrate-layout`` checks every move first and moves
nothing when one would fail. Interrupts are simulated by raising KeyboardInterrupt inside each
command's work function (nothing is launched: these tests take seconds).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from muon_repro.bench import sweep
from muon_repro.bench.configs import BenchConfig, resolve
from muon_repro.bench.errors import BenchError
from muon_repro.bench.identity import trial_differences
from muon_repro.bench.regimes import regime_points
from muon_repro.cli import main
from muon_repro.converge import sweep as converge_sweep
from muon_repro.converge.config import ConvergeConfig
from muon_repro.migrate_layout import migrate, plan_migration
from muon_repro.rundir import CONFIG_FILE, CONVERGENCE_FILE, CONVERGENCE_GROUP, ENVIRONMENT_FILE

PROFILE = "test-box"  # named, so that no folder depends on the machine
KEY = "comparison/adamw_dp2_tp2"
SHIPPED_MACHINE = "h100-8x-nvlink"  # a shipped machine profile: regimes prices with it instead of calibrating


def _stderr_lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


# ---------------------------------------------------------------- bench and regimes: a trial's identity


def _complete_trial(out: Path, cfg: BenchConfig, **recorded) -> Path:
    """A complete trial 0 of ``cfg`` as a sweep leaves it, its config.json recorded with ``recorded`` changes."""
    (rec,) = sweep.plan_recordings([cfg], out, 1, profile=PROFILE)
    final = rec.final
    final.mkdir(parents=True)
    config = {**cfg.to_dict(), "trial": 0, "trials": 1, "backend": "gloo", "device": "cpu", "command": ["test"]}
    (final / CONFIG_FILE).write_text(json.dumps({**config, **recorded}))
    (final / ENVIRONMENT_FILE).write_text(json.dumps({"profile": PROFILE}))
    (final / "metrics.json").write_text("{}")
    (final / "log.txt").write_text("")
    for rank in range(cfg.world_size if cfg.profile else 0):
        (final / f"rank{rank}.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))  # whole: bench reads it
    return final


@pytest.fixture
def launches(monkeypatch) -> list[list[str]]:
    """What the sweep launched (the labels of each batch); nothing is really recorded."""
    batches: list[list[str]] = []
    monkeypatch.setattr(sweep, "_record_batch", lambda batch, *a: batches.append([rec.label for rec in batch]))
    return batches


def test_a_trial_recorded_at_another_scale_is_refused_naming_the_fields(tmp_path, launches):
    _complete_trial(tmp_path, resolve(KEY, "cpu"))
    with pytest.raises(BenchError) as refused:
        sweep.record_local([resolve(KEY, "tiny")], tmp_path, "gloo", trials=1, progress=False, profile=PROFILE)
    message = str(refused.value)
    assert message.startswith("1 complete trial(s) were recorded with other settings than this sweep asks for")
    assert f"{KEY}/trial0 (1 of 1) (scale: recorded 'cpu', asked 'tiny'; preset: recorded 'small', asked 'tiny'" in message
    assert "tokens_per_step: recorded 1024, asked 128" in message and "--force" in message
    assert launches == []  # refused before anything was recorded


def test_the_same_trial_is_skipped_and_force_records_it_again(tmp_path, launches):
    cfg = resolve(KEY, "tiny")
    _complete_trial(tmp_path, cfg)
    (result,) = sweep.record_local([cfg], tmp_path, "gloo", trials=1, progress=False, profile=PROFILE)
    assert result.status == "skipped" and launches == []
    _complete_trial(tmp_path / "other", resolve(KEY, "cpu"))
    (result,) = sweep.record_local([cfg], tmp_path / "other", "gloo", trials=1, force=True, progress=False, profile=PROFILE)
    assert result.status == "recorded" and launches == [[f"{KEY}/trial0 (1 of 1)"]]


def test_backend_unknown_fields_and_fields_older_files_lack_are_compared(tmp_path):
    cfg = resolve(KEY, "tiny")
    assert trial_differences(_complete_trial(tmp_path / "a", cfg), cfg, "gloo") == []
    assert trial_differences(_complete_trial(tmp_path / "b", cfg, backend="nccl"), cfg, "gloo") == [
        "backend: recorded 'nccl', asked 'gloo'"
    ]
    older = _complete_trial(tmp_path / "c", cfg)  # written before cross_entropy existed: its loss gathered the logits
    config = json.loads((older / CONFIG_FILE).read_text())
    del config["cross_entropy"]
    (older / CONFIG_FILE).write_text(json.dumps(config))
    assert trial_differences(older, cfg, "gloo") == ["cross_entropy: recorded 'gathered', asked 'vocab_parallel'"]
    newer = _complete_trial(tmp_path / "d", cfg, zero_stage=3)
    assert trial_differences(newer, cfg, "gloo") == ["zero_stage: recorded 3, a field this version does not know"]
    (newer / CONFIG_FILE).write_text("{not json")
    assert trial_differences(newer, cfg, "gloo")[0].startswith(f"{CONFIG_FILE} cannot be read (")


def test_the_regime_sweep_refuses_a_point_recorded_with_another_schedule(tmp_path, launches, capsys):
    point = regime_points(quick=True)[0]
    _complete_trial(tmp_path, point, active=point.active + 1)
    argv = ["regimes", "--quick", "--trials", "1", "--out", str(tmp_path), "--machine", SHIPPED_MACHINE]
    assert main([*argv, "--profile", PROFILE, "--no-progress"]) == 1
    (line,) = _stderr_lines(capsys)
    assert line.startswith("muon-repro regimes: error: 1 complete trial(s) were recorded with other settings")
    assert f"active: recorded {point.active + 1}, asked {point.active}" in line and "--force" in line
    assert launches == []


# ---------------------------------------------------------------- converge: corpus and vocabulary are the run's


def _write_corpus(folder: Path, words: str) -> Path:
    folder.mkdir(parents=True)
    for i in range(4):
        (folder / f"doc{i}.txt").write_text(" ".join(f"{words} {i} line {j}." for j in range(60)))
    return folder


@pytest.fixture
def trainings(monkeypatch) -> list[str]:
    """Every run ``converge`` trains (by name): the fake writes the record a real run writes, no training."""
    names: list[str] = []

    def fake_run(
        cfg, data, out, backend, command, *, threads, progress, profile=None, group=converge_sweep.CONVERGENCE_GROUP
    ) -> float:
        names.append(cfg.name)
        folder = converge_sweep.run_folder(out, cfg, group)
        folder.mkdir(parents=True, exist_ok=True)
        record = {
            "format": converge_sweep.FORMAT_VERSION,
            "config": cfg.to_dict(),
            "corpus": data.facts,  # as train_run records it
            "backend": backend,
            "environment": {"profile": profile},
            "curve": {"val_loss": [5.0, 4.0]},
        }
        (folder / CONVERGENCE_FILE).write_text(json.dumps(record))
        return 0.0

    monkeypatch.setattr(converge_sweep, "run_one", fake_run)
    return names


def _converge(corpus: Path, out: Path, *extra: str) -> int:
    argv = ["converge", "--out", str(out), "--corpus", str(corpus), "--muon-lrs", "1e-3", "--adamw-lrs", "1e-3"]
    return main([*argv, "--seeds", "1", "--steps", "6", "--sweep-steps", "6", "--vocab", "300", "--backend", "gloo", *extra])


CONVERGE_FLAGS = ("--no-progress", "--profile", PROFILE)


def test_converge_refuses_runs_of_another_corpus_or_vocabulary_and_force_retrains_them(tmp_path, trainings, capsys):
    iambs, other = _write_corpus(tmp_path / "iambs", "the quick brown fox"), _write_corpus(tmp_path / "other", "lorem ipsum")
    out = tmp_path / "traces"
    assert _converge(iambs, out, *CONVERGE_FLAGS) == 0
    assert trainings == ["muon_lr0.001_steps6_seed0", "adamw_lr0.001_steps6_seed0"]
    assert "converge: 2 run(s) trained" in capsys.readouterr().out

    assert _converge(other, out, *CONVERGE_FLAGS) == 2
    (line,) = _stderr_lines(capsys)
    assert line.startswith(f"muon-repro converge: error: 2 complete run(s) in {out / PROFILE / CONVERGENCE_GROUP} were trained")
    assert f"muon_lr0.001_steps6_seed0 (corpus: recorded {str(iambs)!r}, asked {str(other)!r}; corpus_sha256: recorded" in line
    assert "--force" in line

    assert _converge(iambs, out, *CONVERGE_FLAGS, "--vocab", "290") == 2
    (line,) = _stderr_lines(capsys)
    assert "vocab_size: recorded 300, asked 290" in line and "tokenizer_sha256: recorded" in line and "corpus:" not in line

    assert _converge(iambs, out, *CONVERGE_FLAGS, "--hidden", "64") == 2
    assert "config.hidden: recorded 128, asked 64" in capsys.readouterr().err
    assert len(trainings) == 2  # nothing trained by the refused requests

    assert _converge(iambs, out, *CONVERGE_FLAGS) == 0  # the same request: every run reused
    assert "converge: 0 run(s) trained, 4 already complete" in capsys.readouterr().out and len(trainings) == 2
    assert _converge(other, out, *CONVERGE_FLAGS, "--force") == 0
    assert len(trainings) == 4
    record = json.loads((out / PROFILE / CONVERGENCE_GROUP / trainings[0] / CONVERGENCE_FILE).read_text())
    assert record["corpus"]["spec"] == str(other)


def test_a_checkpoint_of_another_corpus_is_not_resumed(tmp_path):
    from muon_repro.converge.train import TokenData, train_run

    tiny = dict(steps=4, hidden=32, layers=1, heads=4, ffn=64, seq_len=16, batch=4, eval_every=2, eval_windows=4)
    cfg = ConvergeConfig("adamw", 3e-3, checkpoint_every=2, **tiny)
    rng = np.random.default_rng(0)
    tokens = {split: rng.integers(0, 64, size).astype(np.int32) for split, size in (("train", 3000), ("val", 400), ("test", 400))}

    def data(sha: str) -> TokenData:
        facts = {"spec": "test", "sha256": sha, "tokenizer": {"vocab_size": 64, "sha256": "f" * 64}}
        return TokenData(**tokens, vocab_size=64, facts=facts)

    first, again = tmp_path / "first", tmp_path / "again"
    first.mkdir(), again.mkdir()
    train_run(cfg, data("a" * 64), str(first), "gloo", {}, progress=False)
    checkpoint = next(first.glob("*.pt"))
    for corpus, resumed_from in (("b" * 64, 0), ("a" * 64, 2)):
        (again / checkpoint.name).write_bytes(checkpoint.read_bytes())
        train_run(cfg, data(corpus), str(again), "gloo", {}, progress=False)
        assert json.loads((again / CONVERGENCE_FILE).read_text())["resumed_from_step"] == resumed_from


# ---------------------------------------------------------------- Ctrl-C: one line, exit 130, complete work kept


def test_converge_interrupted_keeps_the_complete_run_and_resumes_the_rest(tmp_path, trainings, monkeypatch, capsys):
    corpus = _write_corpus(tmp_path / "texts", "to be or not to be")
    out = tmp_path / "traces"
    finish = converge_sweep.run_one

    def second_is_interrupted(cfg, *args, **kwargs) -> float:
        if trainings:
            raise KeyboardInterrupt
        return finish(cfg, *args, **kwargs)

    monkeypatch.setattr(converge_sweep, "run_one", second_is_interrupted)
    assert _converge(corpus, out, *CONVERGE_FLAGS) == 130
    (line,) = _stderr_lines(capsys)
    assert line.startswith("muon-repro converge: interrupted; complete runs are kept")
    assert (out / PROFILE / CONVERGENCE_GROUP / "muon_lr0.001_steps6_seed0" / CONVERGENCE_FILE).is_file()
    monkeypatch.setattr(converge_sweep, "run_one", finish)
    assert _converge(corpus, out, *CONVERGE_FLAGS) == 0
    assert trainings == ["muon_lr0.001_steps6_seed0", "adamw_lr0.001_steps6_seed0"]  # the complete one was not redone


def test_converge_puts_back_a_run_whose_swap_a_kill_cut_between_its_renames(tmp_path, trainings):
    """run_one's swap_dir renames the earlier run aside, then the new one in: a hard kill between the two left the
    complete run in a hidden folder, and converge trained it again."""
    corpus = _write_corpus(tmp_path / "texts", "to be or not to be")
    out = tmp_path / "traces"
    assert _converge(corpus, out, *CONVERGE_FLAGS) == 0
    run = out / PROFILE / CONVERGENCE_GROUP / "muon_lr0.001_steps6_seed0"
    from support.pids import dead_pid

    dead = dead_pid()
    aside = run.with_name(f".{run.name}.muon-repro-old-{dead}-0123abcd")
    run.rename(aside)
    trainings.clear()
    assert _converge(corpus, out, *CONVERGE_FLAGS) == 0
    assert trainings == [] and (run / CONVERGENCE_FILE).is_file() and not aside.exists()


def test_converge_stopped_by_sigterm_exits_143(tmp_path, monkeypatch, capsys):
    from muon_repro.parallel.launch import LaunchInterrupted

    def terminated(*args, **kwargs):
        raise LaunchInterrupted(signal.SIGTERM)

    monkeypatch.setattr(converge_sweep, "run_one", terminated)
    assert _converge(_write_corpus(tmp_path / "texts", "words"), tmp_path / "traces", *CONVERGE_FLAGS) == 143
    assert len(_stderr_lines(capsys)) == 1


def test_regimes_interrupted_outside_a_trial_is_one_line(tmp_path, monkeypatch, capsys):
    from muon_repro.costmodel import records

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(records, "write_records", interrupted)
    (tmp_path / PROFILE / "regimes" / "point").mkdir(parents=True)  # a run to price: --records-only needs one
    argv = ["regimes", "--records-only", "--out", str(tmp_path), "--machine", SHIPPED_MACHINE, "--profile", PROFILE]
    assert main(argv) == 130
    assert _stderr_lines(capsys) == [
        "muon-repro regimes: interrupted; what was complete is kept (every file is written whole): "
        "run the same command again to finish"
    ]


def test_regimes_interrupted_between_trials_is_one_line(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "_record_batch", interrupted)
    argv = ["regimes", "--quick", "--trials", "1", "--out", str(tmp_path), "--machine", SHIPPED_MACHINE]
    assert main([*argv, "--profile", PROFILE, "--no-progress"]) == 130
    assert len(_stderr_lines(capsys)) == 1
    assert not list(tmp_path.rglob(".lock"))  # the run folders' locks are let go


# ---------------------------------------------------------------- migrate-layout: every move checked first


def _old_layout(traces: Path, profile: str = PROFILE) -> None:
    """A run and a convergence record in the layout before profiles, both recorded on ``profile``."""
    trial = traces / "comparison" / "muon_dp2_tp2" / "trial0"
    trial.mkdir(parents=True)
    (trial / CONFIG_FILE).write_text(json.dumps({"key": "comparison/muon_dp2_tp2"}))
    (trial / ENVIRONMENT_FILE).write_text(json.dumps({"profile": profile}))
    run = traces / "convergence" / "muon_lr0.001_steps6_seed0"
    run.mkdir(parents=True)
    (run / CONVERGENCE_FILE).write_text(json.dumps({"environment": {"profile": profile}}))


def _tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def test_a_file_where_a_target_folder_belongs_stops_the_migration_before_any_move(tmp_path, capsys):
    traces = tmp_path / "traces"
    _old_layout(traces)
    (traces / PROFILE).mkdir()
    (traces / PROFILE / "convergence").write_text("in the way")  # where the convergence group's folder belongs
    (traces / PROFILE / "comparison" / "muon_dp2_tp2").mkdir(parents=True)  # a target that exists
    before = _tree(traces)
    with pytest.raises(ValueError) as refused:
        plan_migration(traces)
    message = str(refused.value)
    run = Path("comparison") / "muon_dp2_tp2"
    assert f"cannot move {traces / run}: {traces / PROFILE / run} exists already" in message
    assert f"{traces / PROFILE / 'convergence'} is a file where a folder of" in message
    assert message.endswith("; nothing was moved")
    assert main(["migrate-layout", "--traces", str(traces)]) == 2
    (line,) = _stderr_lines(capsys)
    assert line.startswith("muon-repro migrate-layout: error: cannot move") and "Traceback" not in line
    assert _tree(traces) == before


def test_a_move_that_fails_after_the_check_says_how_far_it_got(tmp_path, monkeypatch):
    traces = tmp_path / "traces"
    _old_layout(traces)
    moves = plan_migration(traces)
    rename = os.rename

    def second_fails(src, dst):
        if "convergence" in str(src):
            raise PermissionError(13, "Permission denied")
        rename(src, dst)

    monkeypatch.setattr(os, "rename", second_fails)
    with pytest.raises(ValueError, match=r"\(Permission denied\); 1 of 2 folder\(s\) were moved, each whole"):
        migrate(moves)
    monkeypatch.setattr(os, "rename", rename)
    migrate(plan_migration(traces))  # planning again picks up the rest
    assert sorted(p.name for p in traces.iterdir()) == [PROFILE]
