"""tools/gpu_ingest against archives that must change nothing: a part missing or cut short, a member that cannot
be read, a CPU's results (the dry run's, or a calibration whose device is not CUDA); and a GPU's archive, brought
in whole. In process: small tar.gz archives built here, with the layout tools/gpu_session.sh packs."""

from __future__ import annotations

import gzip
import io
import json
import random
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.optim.polar_accuracy import GPU_MARKERS
from muon_repro.tables.io import write_table
from muon_repro.tables.schemas import SCHEMAS
from tools.gpu_ingest import DRY_RUN, archive_pieces, check_gzip
from tools.gpu_ingest import main as ingest_main

PROFILE = "1xH200-nccl"
P = f"traces/{PROFILE}"
OWN = {"profile": PROFILE, "machine": PROFILE, "device": "cuda", "backend": "nccl", "threads": 16}
ACCURACY_ROW = {
    "matrix": "random",
    "dtype": "bf16",
    "method": "quintic",
    "polar_error": 0.1,
    "sv_low": 0.7,
    "sv_high": 1.1,
    "off_range": 0.01,
    "vs_quintic": 0.0,
    "gflop": 1.0,
}


def _trace(seed: int, events: int = 3000) -> bytes:
    """A trace-like JSON, as compressible as a real one (so that a spliced gzip stream decodes garbage for a while)."""
    rng = random.Random(seed)
    ops = [{"name": f"op{rng.randrange(50)}", "ts": rng.randrange(10**9), "dur": rng.randrange(1000)} for _ in range(events)]
    return json.dumps({"traceEvents": ops}).encode()


def _calibration(device: str = "cuda") -> bytes:
    """A one-row calibration table's Parquet bytes, as the package writes it."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        row = {
            **OWN,
            "device": device,
            "kind": "kernel",
            "kernel": "matmul",
            "dtype": "bf16",
            "shape": "369m tp=1",
            "seconds": 1.0,
        }
        write_table([row], SCHEMAS["calibration"], Path(tmp), "machine.calibration")
        return (Path(tmp) / "machine.calibration.parquet").read_bytes()


def _members(device: str = "cuda", **replace: bytes) -> dict[str, bytes]:
    """A GPU session's archive: two run groups of 3 rounds, the calibration, Gram Newton-Schulz's rows, the
    accuracy rows; ``replace`` (member name under the profile's costmodel/ -> bytes) swaps one."""
    members: dict[str, bytes] = {}
    for g, group in enumerate(("single_device", "study_protocol_1rank")):
        for t in range(3):
            members[f"{P}/{group}/run/trial{t}/trace.json"] = _trace(10 * g + t)
    gram = {"kind": "kernel", "kernel": "gram_newton_schulz", "dtype": "bf16", "shape": "369m [1024,1024]", "seconds": 0.001}
    costmodel = {
        "machine.json": json.dumps({"name": PROFILE, "device": device, "backend": "nccl"}).encode(),
        "machine.calibration.parquet": _calibration(device),
        "gram_newton_schulz.json": json.dumps({"rows": [gram], "notes": []}).encode(),
        "ns_accuracy.json": json.dumps(
            {"device": "NVIDIA H200" if device == "cuda" else device, "seed": 0, "rows": [ACCURACY_ROW]}
        ).encode(),
    }
    costmodel.update(replace)
    members.update({f"{P}/costmodel/{name}": data for name, data in costmodel.items()})
    members["logs/session.log"] = b"[00:00:00] profile 1xH200-nccl\n"
    return members


def _targz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


@pytest.fixture
def place(tmp_path):
    """(files folder, traces with an earlier session's single_device group, docs/gpu.md with its block)."""
    files, traces, docs = tmp_path / "files", tmp_path / "traces", tmp_path / "gpu.md"
    files.mkdir()
    (traces / PROFILE / "single_device" / "earlier" / "trial0").mkdir(parents=True)
    docs.write_text(f"# On a GPU\n\n{GPU_MARKERS[0]}\n{GPU_MARKERS[1]}\n")
    return files, traces, docs


def _snapshot(*roots: Path) -> dict[str, bytes | None]:
    return {
        str(p): (p.read_bytes() if p.is_file() else None)
        for root in roots
        for p in sorted([root, *root.rglob("*")])
        if p.exists()
    }


def _refused(place, capsys, *flags: str) -> str:
    """Run the ingestion, expect exit 1 and nothing changed; returns what it said on stderr."""
    files, traces, docs = place
    before = _snapshot(traces, docs)
    assert ingest_main([str(files), "--traces", str(traces), "--docs", str(docs), *flags]) == 1
    assert _snapshot(traces, docs) == before, "a refused archive changed the traces or the docs"
    err = capsys.readouterr().err
    assert "Traceback" not in err and "gpu-ingest-" not in err, err  # no temporary path in the message
    return err


def _parts(files: Path, data: bytes, n: int = 5) -> list[Path]:
    size = -(-len(data) // n)
    paths = []
    for i in range(n):
        paths.append(files / f"gpu_runs.tar.gz.part{i:02d}")
        paths[-1].write_bytes(data[i * size : (i + 1) * size])
    return paths


def test_a_missing_middle_part_is_named_and_changes_nothing(place, capsys):
    files, _, _ = place
    parts = _parts(files, _targz(_members()))
    parts[2].unlink()
    err = _refused(place, capsys)
    assert "gpu_runs.tar.gz.part02 missing" in err, err


def test_a_spliced_stream_is_refused_by_its_gzip_check(place, capsys):
    # the parts renumbered, or joined by hand: tarfile alone reads the garbage after the gap as the archive's end
    files, _, _ = place
    data = _targz(_members())
    size = len(data) // 5
    (files / "gpu_runs.tar.gz").write_bytes(data[: 2 * size] + data[3 * size :])
    err = _refused(place, capsys)
    assert f"{files / 'gpu_runs.tar.gz'} is damaged" in err, err


def test_a_missing_last_part_is_a_clear_refusal(place, capsys):
    files, _, _ = place
    parts = _parts(files, _targz(_members()))
    parts[-1].unlink()
    err = _refused(place, capsys)
    assert "gpu_runs.tar.gz.part00-part03 ends early" in err and "last part missing" in err, err


def test_the_gzip_check_reads_the_whole_stream():
    data = _targz({"traces/x": b"x" * 10_000})
    check_gzip(data, "a")
    with pytest.raises(ValueError, match="a ends early"):
        check_gzip(data[:-8], "a")  # its CRC and length cut off
    with pytest.raises(ValueError, match="b is damaged"):
        check_gzip(data[:-8] + b"\0\0\0\0" + data[-4:], "b")  # a wrong CRC


def test_parts_are_taken_in_numeric_order(tmp_path):
    for n in (0, 1, 2, 10, 3, 4, 5, 6, 7, 8, 9):
        (tmp_path / f"gpu_runs.tar.gz.part{n:02d}").write_bytes(b"")
    (tmp_path / "gpu_runs.tar.gz.partial").write_bytes(b"")  # not a part
    assert [p.name[-2:] for p in archive_pieces(tmp_path)] == [f"{n:02d}" for n in range(11)]


@pytest.mark.parametrize(
    ("member", "data", "said"),
    [
        ("gram_newton_schulz.json", b'{"rows": "x"}', "costmodel/gram_newton_schulz.json: expected a list of calibration rows"),
        ("gram_newton_schulz.json", b"{not json", "costmodel/gram_newton_schulz.json: not JSON"),
        ("ns_accuracy.json", b'{"device": "NVIDIA H200", "rows": []}', "costmodel/ns_accuracy.json: not a saved accuracy run"),
        ("machine.calibration.parquet", b"PAR1 not parquet", "costmodel/machine.calibration.parquet: not a readable Parquet"),
    ],
)
def test_a_bad_member_is_named_in_the_archive_before_anything_moves(place, capsys, member, data, said):
    files, _, _ = place
    (files / "gpu_runs.tar.gz").write_bytes(_targz(_members(**{member: data})))
    err = _refused(place, capsys)
    assert f"{files / 'gpu_runs.tar.gz'}:{P}/{said}" in err, err


def test_docs_without_the_gpu_block_are_refused_before_anything_moves(place, capsys):
    files, _, docs = place
    (files / "gpu_runs.tar.gz").write_bytes(_targz(_members()))
    docs.write_text("# On a GPU, no block\n")
    err = _refused(place, capsys)
    assert f"--docs {docs}" in err and "GPU accuracy block" in err, err


def test_the_dry_runs_archive_is_refused_unless_allowed(place, capsys):
    files, traces, _ = place
    members = _members(device="cpu")
    members[DRY_RUN] = b"gpu_session.sh --dry-run\n"
    (files / "gpu_runs.tar.gz").write_bytes(_targz(members))
    err = _refused(place, capsys)
    assert "a dry run's archive" in err and "--allow-cpu" in err, err
    files_, _, docs = place
    assert ingest_main([str(files_), "--traces", str(traces), "--docs", str(docs), "--allow-cpu"]) == 0
    assert (traces / PROFILE / "study_protocol_1rank" / "run").is_dir()


@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_a_calibration_whose_device_is_not_cuda_is_refused(place, capsys, device):
    files, _, _ = place
    (files / "gpu_runs.tar.gz").write_bytes(_targz(_members(device=device)))
    err = _refused(place, capsys)
    assert f"machine.json says device '{device}'" in err and "not a GPU's" in err and "--allow-cpu" in err, err


def test_a_gpu_archive_comes_in_whole(place, capsys):
    files, traces, docs = place
    (files / "session.log").write_text("the session's log\n")
    _parts(files, _targz(_members()), n=3)
    assert ingest_main([str(files), "--traces", str(traces), "--docs", str(docs)]) == 0
    out = capsys.readouterr().out
    profile = traces / PROFILE
    assert [p.name for p in (profile / "single_device").iterdir()] == ["run"]  # the earlier group replaced, whole
    assert sorted(p.name for p in (profile / "study_protocol_1rank" / "run").iterdir()) == ["trial0", "trial1", "trial2"]
    table = pd.read_parquet(profile / "costmodel" / "machine.calibration.parquet")
    assert sorted(table["kernel"]) == ["gram_newton_schulz", "matmul"] and (table["device"] == "cuda").all()
    assert not (profile / "costmodel" / "gram_newton_schulz.json").exists()
    assert (profile / "costmodel" / "gpu_session.log").read_text() == "the session's log\n"
    assert "| random | bf16 | quintic |" in docs.read_text() and "1 Gram Newton-Schulz rows joined" in out


def test_a_copy_stopped_midway_leaves_the_earlier_group_and_calibration_whole(place, capsys, monkeypatch):
    """A full disk or Ctrl-C while the results move in: the earlier group was deleted before its replacement was
    copied, and the calibration's files were overwritten one by one (a new machine.json beside a cut table)."""
    import shutil

    import tools.gpu_ingest as gpu_ingest

    files, traces, docs = place
    costmodel = traces / PROFILE / "costmodel"
    costmodel.mkdir(parents=True)
    (costmodel / "machine.json").write_text("the earlier machine\n")
    (files / "gpu_runs.tar.gz").write_bytes(_targz(_members()))
    real_copytree, real_copyfile = shutil.copytree, shutil.copyfile

    nested = []

    def copytree_then_full(src, dst, *args, **kw):  # copytree calls itself for each subfolder: fail the outer call
        if nested:
            return real_copytree(src, dst, *args, **kw)
        nested.append(src)
        real_copytree(src, dst, *args, **kw)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gpu_ingest.shutil, "copytree", copytree_then_full)
    assert ingest_main([str(files), "--traces", str(traces), "--docs", str(docs)]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert [p.name for p in (traces / PROFILE / "single_device").iterdir()] == ["earlier"]
    monkeypatch.setattr(gpu_ingest.shutil, "copytree", real_copytree)
    copied = []

    def copyfile_then_full(src, dst, *args, **kw):  # the calibration's second file: the disk is full
        if Path(dst).parent == costmodel and copied:
            raise OSError(28, "No space left on device")
        copied.extend([dst] if Path(dst).parent == costmodel else [])
        return real_copyfile(src, dst, *args, **kw)

    monkeypatch.setattr(gpu_ingest.shutil, "copyfile", copyfile_then_full)
    assert ingest_main([str(files), "--traces", str(traces), "--docs", str(docs)]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert sorted(p.name for p in costmodel.iterdir()) == ["machine.json"]
    assert (costmodel / "machine.json").read_text() == "the earlier machine\n"


def _two_calls(files: Path) -> tuple[Path, Path]:
    """One session in two calls (gpu_session.sh --only bench, then the other stages): each call's folder."""
    members = _members()
    bench = {k: v for k, v in members.items() if "/single_device/" in k}
    rest = {k: v for k, v in members.items() if k not in bench}
    calls = (files / "call1", files / "call2")
    for call, part, said in zip(calls, (bench, rest), ("the bench's log\n", "the other stages' log\n")):
        call.mkdir()
        (call / "gpu_runs.tar.gz").write_bytes(_targz(part))
        (call / "session.log").write_text(said)
    return calls


def test_a_session_in_two_calls_comes_in_whole_with_both_logs(place, capsys):
    files, traces, docs = place
    bench, rest = _two_calls(files)
    assert ingest_main([str(bench), str(rest), "--traces", str(traces), "--docs", str(docs)]) == 0
    profile = traces / PROFILE
    assert sorted(p.name for p in (profile / "single_device" / "run").iterdir()) == ["trial0", "trial1", "trial2"]
    assert (profile / "study_protocol_1rank" / "run" / "trial2").is_dir()
    assert sorted(pd.read_parquet(profile / "costmodel" / "machine.calibration.parquet")["kernel"]) == [
        "gram_newton_schulz",
        "matmul",
    ]
    log = (profile / "costmodel" / "gpu_session.log").read_text()
    assert log == f"==> {bench / 'session.log'} <==\nthe bench's log\n==> {rest / 'session.log'} <==\nthe other stages' log\n"


def test_two_calls_bringing_the_same_group_or_a_bad_second_call_change_nothing(place, capsys):
    files, traces, docs = place
    bench, rest = _two_calls(files)
    (files / "gpu_runs.tar.gz").write_bytes(_targz(_members()))  # the whole session, beside a call that brought part
    err = _refused(place, capsys, str(bench))
    assert f"{files} and {bench} both bring {PROFILE}/single_device" in err and "give one of them" in err, err
    (rest / "gpu_runs.tar.gz").write_bytes(_targz(_members())[:-40])  # the second call's archive cut short
    before = _snapshot(traces, docs)
    assert ingest_main([str(bench), "--traces", str(traces), str(rest), "--docs", str(docs)]) == 1
    assert "ends early" in capsys.readouterr().err and _snapshot(traces, docs) == before
    assert ingest_main([str(bench), str(bench), "--traces", str(traces), "--docs", str(docs)]) == 1
    assert "a folder given twice" in capsys.readouterr().err and _snapshot(traces, docs) == before
