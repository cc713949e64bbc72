"""``muon-repro bench custom``: one run the flags describe, recorded like a named one."""

from __future__ import annotations

import argparse
import json

import pytest

from muon_repro.bench.custom import add_run_shape_arguments, config_from_args
from muon_repro.cli import main


def test_tokens_that_do_not_divide_are_refused_before_anything_starts(tmp_path, capsys):
    argv = [
        "bench",
        "custom",
        "--optimizer",
        "muon",
        "--dp",
        "2",
        "--tp",
        "2",
        "--preset",
        "small",
        "--tokens-per-step",
        "1000",
        "--seq-len",
        "128",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "tokens_per_step=1000 does not divide into dp=2 x micro-batches of seq_len=128" in err
    assert not any(tmp_path.iterdir())


def test_cross_entropy_flag_sets_the_loss_but_not_the_name(capsys):
    parser = argparse.ArgumentParser()
    add_run_shape_arguments(parser)
    shape = ["--optimizer", "muon", "--dp", "2", "--tp", "2", "--preset", "tiny", "--tokens-per-step", "64", "--seq-len", "16"]
    default = config_from_args(parser.parse_args(shape))
    gathered = config_from_args(parser.parse_args([*shape, "--cross-entropy", "gathered"]))
    assert (default.cross_entropy, gathered.cross_entropy) == ("vocab_parallel", "gathered")
    assert gathered.key == default.key
    with pytest.raises(SystemExit):
        parser.parse_args([*shape, "--cross-entropy", "full"])
    assert "invalid choice: 'full'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["custom", "comparison"], "name no other CONFIG"),
        (["comparison", "--optimizer", "muon"], "use CONFIG 'custom'"),
        (["custom", "--optimizer", "muon", "--dp", "2"], "the run shape needs --tp, --tokens-per-step, --seq-len"),
    ],
)
def test_custom_and_named_configs_do_not_mix(argv, message, tmp_path, capsys):
    assert main(["bench", *argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_a_custom_run_is_recorded_with_its_shape(tmp_path, capsys):
    argv = [
        "bench",
        "custom",
        "--optimizer",
        "muon",
        "--dp",
        "2",
        "--tp",
        "1",
        "--hidden",
        "32",
        "--layers",
        "1",
        "--heads",
        "4",
        "--vocab",
        "128",
        "--tokens-per-step",
        "64",
        "--seq-len",
        "16",
        "--overlap",
        "pipelined",
        "--layout",
        "bucketed",
        "--scale",
        "tiny",
        "--trials",
        "1",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--profile",
        "test-cpu",
    ]
    assert main(argv) == 0
    (run,) = [p for p in (tmp_path / "test-cpu" / "custom").iterdir() if p.is_dir()]
    config = json.loads((run / "trial0" / "config.json").read_text())
    assert (config["dp"], config["tp"], config["hidden"], config["n_layers"], config["tokens_per_step"]) == (2, 1, 32, 1, 64)
    assert (config["overlap"], config["layout"]) == ("pipelined", "bucketed")
    assert sorted(p.name for p in (run / "trial0").glob("rank*.json.gz")) == ["rank0.json.gz", "rank1.json.gz"]
    # the runs table carries the shape's own width beside its base preset's name: equal work and the claims'
    # tokens per d_model read it (muon_repro.analysis.claim_inputs.SAME_WORK)
    from muon_repro.analysis.batch_read import analyze_paths
    from muon_repro.table_set import tables_of

    (row,) = tables_of(analyze_paths([tmp_path], workers=1))["runs"].to_dict("records")
    assert (row["preset"], row["d_model"]) == ("small", 32)


@pytest.mark.parametrize("flag", ["--seq-len", "--tokens-per-step", "--dp", "--micro-batches"])
def test_a_zero_size_is_refused_by_flag_before_anything_starts(tmp_path, capsys, flag):
    shape = {"--optimizer": "muon", "--dp": "2", "--tp": "2", "--preset": "tiny", "--tokens-per-step": "64", "--seq-len": "16"}
    argv = ["bench", "custom", *(x for kv in {**shape, flag: "0"}.items() for x in kv), "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert f"{flag} must be a positive integer, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_world_past_one_machine_is_refused_before_any_folder_or_process(tmp_path, capsys):
    shape = ["--optimizer", "muon", "--dp", "500", "--tp", "1", "--preset", "tiny", "--tokens-per-step", "8000"]
    argv = ["bench", "custom", *shape, "--seq-len", "16", "--scale", "tiny", "--backend", "gloo", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs 500 ranks" in err and "at most 64 worker processes" in err and "torchrun" in err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("nprocs", [0, 65])
def test_the_launcher_refuses_a_world_it_should_not_start(nprocs):
    from muon_repro.parallel.launch import launch

    with pytest.raises(ValueError, match=f"{nprocs} worker processes on one machine: the launcher starts 1 to 64"):
        launch(print, nprocs)


def test_more_traced_rounds_than_rounds_is_refused_before_anything_is_recorded(tmp_path, capsys):
    argv = ["bench", "comparison/muon_dp2_tp2", "--trials", "2", "--traced-trials", "5", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "--traced-trials 5 is more than --trials 2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_equivalence_check_refuses_an_empty_bucket_instead_of_taking_the_default():
    from muon_repro.optim.equivalence import EquivalenceConfig

    with pytest.raises(ValueError, match="bucket_elems must be a positive integer, got 0"):
        EquivalenceConfig(layout="bucketed", bucket_elems=0)


def test_a_shape_without_a_preset_names_the_missing_flags_once():
    parser = argparse.ArgumentParser()
    add_run_shape_arguments(parser)
    work = ["--optimizer", "muon", "--dp", "2", "--tp", "2", "--tokens-per-step", "64", "--seq-len", "16"]
    with pytest.raises(ValueError) as raised:
        config_from_args(parser.parse_args([*work, "--hidden", "64"]))
    assert str(raised.value) == (
        "give --preset NAME, or the model's shape with --hidden, --layers and --heads (--layers, --heads are missing)"
    )
