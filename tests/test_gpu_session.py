"""The GPU session's script (tools/gpu_session.sh) dry-run on the CPU, and its results brought in (tools/gpu_ingest):
what a session with a GPU will run, checked before it spends device time."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.optim.polar_accuracy import GPU_MARKERS, saved_rows
from tools.gpu_ingest import DRY_RUN, archive_bytes
from tools.gpu_ingest import main as ingest_main

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "gpu_session.sh"
USAGE = "usage: bash tools/gpu_session.sh OUT [--dry-run] [--only STAGE[,STAGE...]]"


def _archive(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_pieces_are_joined_in_order_and_a_folder_without_them_is_named(tmp_path):
    data = _archive({"traces/p/costmodel/x.txt": b"x" * 1000})
    for i, start in enumerate(range(0, len(data), 100)):
        (tmp_path / f"gpu_runs.tar.gz.part{i:02d}").write_bytes(data[start : start + 100])
    assert archive_bytes(tmp_path) == data
    with pytest.raises(ValueError, match="no gpu_runs.tar.gz"):
        archive_bytes(tmp_path / "nothing")


def test_an_archive_without_traces_changes_nothing(tmp_path, capsys):
    files = tmp_path / "files"
    files.mkdir()
    (files / "gpu_runs.tar.gz").write_bytes(_archive({"logs/session.log": b"hello"}))
    traces = tmp_path / "traces"
    assert ingest_main([str(files), "--traces", str(traces)]) == 1
    assert "no traces/ folder" in capsys.readouterr().err and not traces.exists()


def test_a_saved_accuracy_run_is_checked_by_field(tmp_path):
    path = tmp_path / "ns_accuracy.json"
    path.write_text(json.dumps({"device": "NVIDIA H200", "seed": 0, "rows": [{"matrix": "random"}]}))
    with pytest.raises(ValueError, match=r"rows\[0\] lacks fields"):
        saved_rows(path)
    path.write_text(json.dumps({"device": "NVIDIA H200", "rows": []}))
    with pytest.raises(ValueError, match="not a saved accuracy run"):
        saved_rows(path)


@pytest.mark.slow
def test_the_dry_run_records_every_stage_and_its_results_come_in(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", "tools/gpu_session.sh", str(out), "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    log = (out / "session.log").read_text()
    for stage in ("study", "calibrate", "accuracy", "gram", "bench"):
        assert f"{stage} exit 0" in log, log
    assert "muon_repro source sha256" in log
    assert len(list(out.iterdir())) <= 8  # what the device sends back: at most 8 files

    with tarfile.open(out / "gpu_runs.tar.gz") as tar:
        assert DRY_RUN in tar.getnames()  # the CPU's: gpu_ingest refuses it without --allow-cpu

    traces, docs = tmp_path / "traces", tmp_path / "gpu.md"
    docs.write_text(f"# On a GPU\n\n{GPU_MARKERS[0]}\n{GPU_MARKERS[1]}\n")
    assert ingest_main([str(out), "--traces", str(traces), "--docs", str(docs)]) == 1
    assert not traces.exists()
    assert ingest_main([str(out), "--traces", str(traces), "--docs", str(docs), "--allow-cpu"]) == 0
    profile = traces / "cpu-2c-gloo"
    muon_runs = ["muon_dp1_tp1", "muon_FULLSTEP_dp1_tp1", "muon_FULLSTEP_dp1_tp1_async"]
    adamw_runs = ["adamw", "adamw_FULLSTEP", "adamw_FULLSTEP_async"]
    assert sorted(p.name for p in (profile / "study_protocol_1rank").iterdir()) == sorted(muon_runs + adamw_runs)
    assert (profile / "costmodel" / "machine.json").is_file() and (profile / "costmodel" / "gpu_session.log").is_file()
    assert "| random | bf16 | quintic |" in docs.read_text()
    (run,) = (profile / "custom").iterdir()
    assert sorted(p.name for p in run.iterdir()) == [f"trial{k}" for k in range(5)]  # 5 rounds

    from muon_repro import stages

    tables = stages.analyze([traces], tmp_path / "metrics")
    assert set(tables["study_protocols"]["claim_id"]) == {"optimizer_share", "latency_overhead"}
    runs = tables["runs"]
    assert len(runs) == 1 and int(runs["rounds"].iloc[0]) == 5 and runs["optimizer_op_calls"].notna().all()
    assert not pd.read_parquet(tmp_path / "metrics" / "calibration.parquet").empty


def test_gram_rows_join_the_calibration_as_the_same_machines_kernels(tmp_path):
    from muon_repro.tables.io import write_table
    from muon_repro.tables.schemas import SCHEMAS
    from tools.gpu_ingest import join_gram_rows

    own = {"profile": "1xGPU-nccl", "machine": "1xGPU-nccl", "device": "cuda", "backend": "nccl", "threads": 16}
    write_table(
        [{**own, "kind": "kernel", "kernel": "matmul", "dtype": "bf16", "shape": "369m tp=1", "seconds": 1.0}],
        SCHEMAS["calibration"],
        tmp_path,
        "machine.calibration",
    )
    timed = {"kind": "kernel", "dtype": "bf16", "shape": "369m [1024,1024]", "seconds": 0.001, "tflops": 9.0, "first_call_s": 2.0}
    rows = [{**timed, "kernel": "ns_quintic"}, {**timed, "kernel": "gram_newton_schulz"}]
    (tmp_path / "gram_newton_schulz.json").write_text(json.dumps({"rows": rows, "notes": []}))
    assert join_gram_rows(tmp_path) == 2
    table = pd.read_parquet(tmp_path / "machine.calibration.parquet")
    joined = table[table["kernel"].isin(["ns_quintic", "gram_newton_schulz"])]
    assert len(joined) == 2 and (joined["profile"] == "1xGPU-nccl").all() and (joined["threads"] == 16).all()
    assert "first_call_s" not in table.columns and not (tmp_path / "gram_newton_schulz.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["OUT", "--dryrun"], "unknown argument '--dryrun' after OUT"),
        (["OUT", "--dry-run", "x"], "unknown argument 'x' after OUT"),
        (["OUT", "--only", "bench,studdy"], "--only: no stage 'studdy'; the stages are study calibrate accuracy gram bench"),
        (["OUT", "--only"], "--only takes a comma-separated list of stages"),
        (["OUT", "--only", "", "--dry-run"], "--only takes a comma-separated list of stages"),
        (["--dry-run", "OUT"], "OUT '--dry-run' starts with '-'"),
        ([], "give the folder for the session's results (OUT)"),
    ],
)
def test_the_session_refuses_arguments_it_does_not_take(tmp_path, args, said):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    done = subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and said in done.stderr and USAGE in done.stderr, done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "--dry-run").exists()  # nothing run, nothing made


def _fake_python(tmp_path: Path, body: str) -> dict[str, str]:
    """An environment whose python3 is a shell script: it notes its call in ``$FAKE_LOG``, then runs ``body``."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(f'#!/bin/sh\necho "$PWD|$PYTHONPATH|$*" >>"$FAKE_LOG"\n{body}')
    (fake / "python3").chmod(0o755)
    return {"PATH": f"{fake}:/usr/bin:/bin", "FAKE_LOG": str(tmp_path / "calls.log"), "HOME": str(tmp_path)}


def _session(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """The session's script run from ``tmp_path`` with ``args`` after OUT, under ``env``."""
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_failed_stages_are_packed_and_the_exit_says_so_from_any_folder(tmp_path):
    # every python3 fails at once: the stages run in a second, from the script's own tree, whatever the folder
    env = _fake_python(tmp_path, "exit 3\n")
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    done = _session(tmp_path, env, "out", "--dry-run")
    assert done.returncode == 1, done.stdout + done.stderr
    log = (tmp_path / "out" / "session.log").read_text()
    for stage in ("study", "calibrate", "accuracy", "gram", "bench"):
        assert f"{stage} exit 3" in log, log
    assert "not complete: " in log and "bench (exit 3)" in log, log
    with tarfile.open(tmp_path / "out" / "gpu_runs.tar.gz") as tar:  # packed all the same
        assert {"logs/session.log", "logs/bench.log", DRY_RUN} <= set(tar.getnames())
    calls = [c.split("|", 2) for c in (tmp_path / "calls.log").read_text().splitlines()]
    assert calls and all(folder == str(REPO) for folder, _, _ in calls), calls  # the tree's folder, whatever ours
    # the tree is on PYTHONPATH, alone but for the gram stage (after the wheels the checkout may carry in .whl/)
    gram = [path for _, path, args in calls if args.startswith(f"{REPO}/tools/gram_ns_bench.py ")]
    assert len(gram) == 1 and gram[0].split(":")[-1] == str(REPO), calls
    assert all(path == str(REPO) for _, path, args in calls if "gram_ns_bench" not in args), calls
    assert list((tmp_path / "tmp").iterdir()) == []  # its WORK folder removed


@pytest.mark.slow
def test_only_the_stages_asked_for_run_and_none_else_counts_as_failed(tmp_path):
    # two calls on one warm machine: each runs its own stages, and a stage not asked for is neither run nor failed
    env = _fake_python(tmp_path, 'case "$*" in *recording_profile*) echo cpu-2c-gloo;; *--traced-trials*) exit 3;; esac\n')
    done = _session(tmp_path, env, "out", "--only", "accuracy,study", "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "out" / "session.log").read_text()
    assert "stages: accuracy study" in log and "study exit 0" in log and "accuracy exit 0" in log, log
    assert not any(f"] {stage} " in log for stage in ("calibrate", "gram", "bench")), log  # neither run nor skipped
    calls = (tmp_path / "calls.log").read_text()
    assert "polar_accuracy" in calls and "--protocol study" in calls and "calibrate" not in calls, calls
    with tarfile.open(tmp_path / "out" / "gpu_runs.tar.gz") as tar:
        assert {"logs/session.log", "logs/study.log", "logs/accuracy.log"} <= set(tar.getnames())
    done = _session(tmp_path, env, "out2", "--dry-run", "--only", "bench")
    assert done.returncode == 1 and "not complete: bench (exit 3)" in (tmp_path / "out2" / "session.log").read_text()
