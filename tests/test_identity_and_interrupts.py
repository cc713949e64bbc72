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
import re
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
    return _write_trial(rec.final, cfg, **recorded)


def _write_trial(final: Path, cfg: BenchConfig, **recorded) -> Path:
    """The files a recording of ``cfg`` leaves in ``final`` (its traces too when ``cfg`` is profiled)."""
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


def test_a_trial_recorded_with_another_backend_is_not_reused_by_a_sweep_on_this_one(tmp_path):
    """The backend is part of a trial's identity: a gloo trial is no nccl trial, and the sweep says so."""
    cfg = resolve(KEY, "tiny")
    _complete_trial(tmp_path, cfg)  # recorded with gloo
    plan = sweep.plan_recordings([cfg], tmp_path, 1, profile=PROFILE)
    assert sweep._reuse_problem(plan, "gloo") is None
    refusal = sweep._reuse_problem(plan, "nccl")
    assert refusal is not None and "other settings" in refusal
    assert f"{KEY}/trial0 (1 of 1) (backend: recorded 'gloo', asked 'nccl')" in refusal


def test_each_world_size_is_recorded_in_a_launch_of_its_own_the_smaller_first(tmp_path, launches):
    """One launch of dp*tp*pp workers per world size: a sweep over 4- and 8-rank configurations launches twice."""
    small, large = resolve(KEY, "tiny"), resolve("scale_out/muon_dp8", "tiny")
    assert (small.world_size, large.world_size) == (4, 8)
    results = sweep.record_local([large, small], tmp_path, "gloo", trials=2, progress=False, profile=PROFILE)
    assert [sorted(batch) for batch in launches] == [
        [f"{KEY}/trial0 (1 of 2)", f"{KEY}/trial1 (2 of 2) (timed only)"],
        ["scale_out/muon_dp8/trial0 (1 of 2)", "scale_out/muon_dp8/trial1 (2 of 2) (timed only)"],
    ]
    assert sorted((r.key, r.trial, r.status) for r in results) == [
        (KEY, 0, "recorded"),
        (KEY, 1, "recorded"),
        ("scale_out/muon_dp8", 0, "recorded"),
        ("scale_out/muon_dp8", 1, "recorded"),
    ]


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


def test_a_record_of_an_older_format_is_trained_again_and_never_refused_for_its_settings(tmp_path, trainings, capsys):
    """An older record lacks what this version records (converge.sweep.FORMAT_VERSION): it is trained again, whatever
    it was trained with, while the complete run beside it is reused."""
    corpus = _write_corpus(tmp_path / "texts", "to be or not to be")
    out = tmp_path / "traces"
    assert _converge(corpus, out, *CONVERGE_FLAGS) == 0
    path = out / PROFILE / CONVERGENCE_GROUP / "adamw_lr0.001_steps6_seed0" / CONVERGENCE_FILE
    record = json.loads(path.read_text())
    record["format"] = converge_sweep.FORMAT_VERSION - 1
    record["corpus"] = {**record["corpus"], "spec": str(tmp_path / "another corpus"), "sha256": "0" * 64}
    path.write_text(json.dumps(record))
    trainings.clear()
    assert _converge(corpus, out, *CONVERGE_FLAGS) == 0, capsys.readouterr().err
    assert trainings == ["adamw_lr0.001_steps6_seed0"]
    assert json.loads(path.read_text())["format"] == converge_sweep.FORMAT_VERSION


def test_converge_refuses_runs_trained_with_another_backend(tmp_path, trainings):
    """The backend is part of a run's identity: runs trained with gloo are not reused by a converge asking for nccl
    (refused before anything trains, so no GPU is needed to say so)."""
    corpus = _write_corpus(tmp_path / "texts", "to be or not to be")
    plan = converge_sweep.ConvergePlan(ConvergeConfig("muon", 1e-3, steps=6), {"muon": (1e-3,), "adamw": (1e-3,)}, seeds=1)
    kwargs = {"corpus": str(corpus), "vocab_size": 300, "progress": False, "profile": PROFILE}
    converge_sweep.converge(plan, tmp_path / "traces", backend="gloo", **kwargs)
    assert len(trainings) == 2
    converge_sweep.converge(plan, tmp_path / "traces", backend="gloo", **kwargs)
    assert len(trainings) == 2  # the same backend: reused
    with pytest.raises(converge_sweep.RunMismatch) as refused:
        converge_sweep.converge(plan, tmp_path / "traces", backend="nccl", **kwargs)
    assert set(refused.value.mismatched) == set(trainings)
    assert all(diffs == ["backend: recorded 'gloo', asked 'nccl'"] for diffs in refused.value.mismatched.values())
    assert len(trainings) == 2


def test_converge_says_which_runs_it_trained_and_which_it_found_complete(tmp_path, trainings):
    """Seed 0 at the full length is the sweep's own run (sweep_steps == steps): trained once, then found complete."""
    corpus = _write_corpus(tmp_path / "texts", "to be or not to be")
    plan = converge_sweep.ConvergePlan(ConvergeConfig("muon", 1e-3, steps=6), {"muon": (1e-3,), "adamw": (1e-3,)}, seeds=2)
    kwargs = {"corpus": str(corpus), "vocab_size": 300, "progress": False, "profile": PROFILE}
    first = converge_sweep.converge(plan, tmp_path / "traces", **kwargs)
    sweep_runs = ["muon_lr0.001_steps6_seed0", "adamw_lr0.001_steps6_seed0"]
    assert first["ran"] == [*sweep_runs, "muon_lr0.001_steps6_seed1", "adamw_lr0.001_steps6_seed1"] == trainings
    assert first["skipped"] == sweep_runs and first["best_lr"] == {"muon": 1e-3, "adamw": 1e-3}
    again = converge_sweep.converge(plan, tmp_path / "traces", **kwargs)
    assert again["ran"] == [] and again["skipped"] == [*sweep_runs, *first["ran"]]


@pytest.mark.parametrize(
    "trained_otherwise",
    ["adamw_lr0.01_steps6_seed0", "muon_lr0.001_steps6_seed1", "adamw_lr0.001_steps12_seed0", "adamw_lr0.001_steps12_seed1"],
    ids=["the-sweeps-second-pair", "a-seed", "a-budgets-sweep", "a-budgets-seed"],
)
def test_every_stage_of_converge_refuses_a_complete_run_trained_otherwise(tmp_path, trainings, trained_otherwise):
    """Not the sweep's first pair alone: the whole sweep, the seeds, AdamW's sweep at a longer budget and that budget's
    seeds are each checked before they train, and a run of any of them trained on another text is refused by name, not reused."""
    corpus = _write_corpus(tmp_path / "texts", "to be or not to be")
    base = ConvergeConfig("muon", 1e-3, steps=6)
    lrs = {"muon": (1e-3, 1e-2), "adamw": (1e-3, 1e-2)}  # every run the same loss: the first of each list is best
    plan = converge_sweep.ConvergePlan(base, lrs, seeds=2, adamw_budgets=(2.0,))
    kwargs = {"corpus": str(corpus), "vocab_size": 300, "progress": False, "profile": PROFILE}
    converge_sweep.converge(plan, tmp_path / "traces", **kwargs)
    assert trained_otherwise in trainings
    trained = list(trainings)
    path = tmp_path / "traces" / PROFILE / CONVERGENCE_GROUP / trained_otherwise / CONVERGENCE_FILE
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "corpus": {**record["corpus"], "sha256": "0" * 64}}))
    with pytest.raises(converge_sweep.RunMismatch) as refused:
        converge_sweep.converge(plan, tmp_path / "traces", **kwargs)
    assert list(refused.value.mismatched) == [trained_otherwise]
    ((said,),) = refused.value.mismatched.values()
    assert said.startswith("corpus_sha256: recorded 000000000000, asked ")
    assert trainings == trained  # nothing trained


def test_a_vocabulary_the_tokenizer_learned_too_small_stops_converge_before_any_run(tmp_path, trainings, monkeypatch):
    """The vocabulary asked for is checked before the corpus is read; the one the tokenizer learned, once it has."""
    from muon_repro.converge.train import TokenData

    tokens = np.zeros(64, dtype=np.int32)
    learned = TokenData(train=tokens, val=tokens, test=tokens, vocab_size=200, facts={"spec": "texts"})
    monkeypatch.setattr(converge_sweep, "prepare_data", lambda corpus, vocab_size: learned)
    plan = converge_sweep.ConvergePlan(ConvergeConfig("muon", 1e-3, steps=6), {"muon": (1e-3,), "adamw": (1e-3,)}, seeds=1)
    with pytest.raises(ValueError, match=r"^the tokenizer learned 200 tokens from this corpus: .*vocab_size must be"):
        converge_sweep.converge(plan, tmp_path / "traces", corpus="texts", vocab_size=300, progress=False, profile=PROFILE)
    assert trainings == []


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


# ---------------------------------------------------------------- bench: what a stopped or failed launch keeps

TWIN = "comparison/muon_dp2_tp2"  # KEY's twin: the same world size, so one launch records both


def _launch_that_stops(monkeypatch, stop: BaseException, *, finished: int, started: bool) -> list[list[sweep.Recording]]:
    """Replace the launcher: it records the first ``finished`` recordings of its batch whole (into their .partial
    folders, moved into place by the sweep's own _finalize), starts the next one when ``started``, then raises ``stop``."""
    from muon_repro.parallel import launch as launcher

    batches: list[list[sweep.Recording]] = []

    def launch(fn, world_size, batch, *args, **kwargs):
        batches.append(list(batch))
        for rec in batch[:finished]:
            _write_trial(rec.partial, rec.cfg)
            sweep._finalize(rec)
        if started:
            batch[finished].partial.mkdir(parents=True)
            (batch[finished].partial / "log.txt").write_text("half a run")
        raise stop

    monkeypatch.setattr(launcher, "launch", launch)
    return batches


def _sweep_of_two(out: Path, **kwargs) -> list[sweep.RunResult]:
    cfgs = [resolve(KEY, "tiny"), resolve(TWIN, "tiny")]
    return sweep.record_local(cfgs, out, "gloo", trials=1, progress=False, profile=PROFILE, **kwargs)


def test_a_sweep_stopped_in_a_trial_drops_that_trial_and_names_the_one_it_kept(tmp_path, monkeypatch):
    batches = _launch_that_stops(monkeypatch, KeyboardInterrupt(), finished=1, started=True)
    with pytest.raises(sweep.BenchInterrupted) as stopped:
        _sweep_of_two(tmp_path)
    ((first, second),) = batches
    assert str(stopped.value) == (
        f"interrupted, nothing kept for {second.label}; kept the 1 trial(s) completed before: {first.label}; "
        "run the same command again to record what is missing"
    )
    assert stopped.value.exit_code == 130
    assert sweep.is_complete(first.final, first.cfg)  # kept
    assert not second.partial.exists() and not second.final.exists()  # nothing of the interrupted trial is left


def test_a_sweep_stopped_between_two_trials_names_the_next_one_not_the_one_it_kept(tmp_path, monkeypatch):
    """No .partial folder yet: the workers were starting the next recording, which is the one that is missing."""
    batches = _launch_that_stops(monkeypatch, KeyboardInterrupt(), finished=1, started=False)
    with pytest.raises(sweep.BenchInterrupted) as stopped:
        _sweep_of_two(tmp_path)
    ((first, second),) = batches
    assert str(stopped.value).startswith(
        f"interrupted, nothing kept for {second.label}; kept the 1 trial(s) completed before: {first.label};"
    )


def test_a_sweep_stopped_before_it_recorded_anything_keeps_nothing_not_even_a_trial_it_was_forced_to_redo(tmp_path, monkeypatch):
    """--force records a complete trial again: the one already there was not recorded by this sweep, so it is not
    among the trials the sweep says it kept."""
    _complete_trial(tmp_path, resolve(KEY, "tiny"))
    _complete_trial(tmp_path, resolve(TWIN, "tiny"))
    batches = _launch_that_stops(monkeypatch, KeyboardInterrupt(), finished=0, started=False)
    with pytest.raises(sweep.BenchInterrupted) as stopped:
        _sweep_of_two(tmp_path, force=True)
    ((first, _),) = batches
    assert str(stopped.value) == (
        f"interrupted, nothing kept for {first.label}; run the same command again to record what is missing"
    )


def test_a_sweep_stopped_by_sigterm_exits_143(tmp_path, monkeypatch):
    from muon_repro.parallel.launch import LaunchInterrupted

    _launch_that_stops(monkeypatch, LaunchInterrupted(signal.SIGTERM), finished=0, started=True)
    with pytest.raises(sweep.BenchInterrupted) as stopped:
        _sweep_of_two(tmp_path)
    assert (stopped.value.signum, stopped.value.exit_code) == (signal.SIGTERM, 143)


class ChildFailedError(Exception):
    """Named as torch elastic's: what a launch raises when a worker fails (the sweep tells it by its name)."""


def test_a_worker_that_fails_is_reported_against_the_trial_it_was_recording(tmp_path, monkeypatch):
    batches = _launch_that_stops(monkeypatch, ChildFailedError("rank 2 ran out of memory"), finished=1, started=True)
    with pytest.raises(BenchError) as failed:
        _sweep_of_two(tmp_path)
    ((first, second),) = batches
    assert not isinstance(failed.value, sweep.BenchInterrupted)
    assert str(failed.value) == f"{second.label}: rank 2 ran out of memory"
    assert sweep.is_complete(first.final, first.cfg) and not second.partial.exists()


def test_a_trial_is_moved_into_place_only_with_every_file_a_trial_holds(tmp_path):
    """A trial folder that exists is complete: a recording that ends without a rank's trace is dropped, not kept."""
    (rec,) = sweep.plan_recordings([resolve(KEY, "tiny")], tmp_path, 1, profile=PROFILE)
    _write_trial(rec.partial, rec.cfg)
    (rec.partial / "rank3.json.gz").unlink()
    with pytest.raises(BenchError, match=re.escape(f"{rec.label}: the run finished without writing rank3.json.gz")):
        sweep._finalize(rec)
    assert not rec.partial.exists() and not rec.final.exists()


def test_a_timed_only_trial_is_complete_without_traces(tmp_path):
    plan = sweep.plan_recordings([resolve(KEY, "tiny")], tmp_path, 2, profile=PROFILE, traced_trials=1)
    timed_only = plan[1]
    assert timed_only.cfg.timed_only
    _write_trial(timed_only.partial, timed_only.cfg)
    assert not list(timed_only.partial.glob("rank*"))
    sweep._finalize(timed_only)
    assert sweep.is_complete(timed_only.final, timed_only.cfg) and not timed_only.partial.exists()


def test_a_trial_recorded_again_replaces_the_earlier_one_whole(tmp_path):
    earlier = _complete_trial(tmp_path, resolve(KEY, "tiny"))
    (earlier / "notes.txt").write_text("of the earlier recording")
    (rec,) = sweep.plan_recordings([resolve(KEY, "tiny")], tmp_path, 1, profile=PROFILE)
    _write_trial(rec.partial, rec.cfg, command=["again"])
    sweep._finalize(rec)
    assert json.loads((rec.final / CONFIG_FILE).read_text())["command"] == ["again"]
    assert not (rec.final / "notes.txt").exists() and not rec.partial.exists()
    assert [p.name for p in rec.final.parent.iterdir()] == [rec.final.name]  # no earlier copy left aside


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
