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
