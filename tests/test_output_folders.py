"""Nothing a user points an output at is lost (issue 45, item 1): a folder is replaced whole only when the command
that replaces it wrote it; a checkout never; the staging folders an interrupted run left are removed by the next."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from support.pids import dead_pid

from muon_repro.tables import files as files_module
from muon_repro.tables.files import (
    OUTPUT_MARKER,
    check_replaceable,
    finish_interrupted_swaps,
    new_sibling_dir,
    put_files_in_place,
    remove_stale_siblings,
    staged_dir,
    staged_files,
)
from muon_repro.tables.io import write_tables
from muon_repro.tables.schemas import SCHEMAS


def _tables() -> dict[str, pd.DataFrame]:
    return {"environment": SCHEMAS["environment"].empty()}


def test_analyze_refuses_a_folder_of_someone_elses_tables_and_touches_nothing(tmp_path):
    theirs = tmp_path / "results"
    theirs.mkdir()
    (theirs / "survey.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"results is a folder muon-repro analyze did not write.*--force"):
        write_tables(_tables(), theirs)
    assert (theirs / "survey.csv").read_text() == "a,b\n1,2\n"
    write_tables(_tables(), theirs, force=True)  # asked for: replaced
    assert not (theirs / "survey.csv").exists() and (theirs / "environment.parquet").is_file()


def test_analyze_replaces_its_own_tables_marked_or_written_before_the_marker(tmp_path):
    out = tmp_path / "metrics"
    write_tables(_tables(), out)
    assert (out / OUTPUT_MARKER).is_file()
    write_tables(_tables(), out)  # its own marker
    (out / OUTPUT_MARKER).unlink()
    write_tables(_tables(), out)  # stamped tables of this package, from before the marker
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "environment.csv", "environment.parquet"]


def test_a_checkout_is_never_replaced_even_when_forced(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "MANIFEST.sha256").write_text("# a bundle's manifest, committed\n")
    for force in (False, True):
        with pytest.raises(ValueError, match="holds .git: a repository checkout is never replaced"):
            check_replaceable(checkout, "muon-repro bundle", f"--out {checkout}", force=force)
    assert (checkout / ".git").is_dir() and (checkout / "MANIFEST.sha256").is_file()


def test_bundle_out_on_a_checkout_refuses_before_copying_anything(tmp_path):
    from muon_repro.dataset.bundle import Sources, build_bundle
    from muon_repro.dataset.meta import BundleMeta

    checkout = tmp_path / "someone" / "muon_repro"
    (checkout / ".git").mkdir(parents=True)
    for name in ("MANIFEST.sha256", "README.md", "CITATION.cff"):
        (checkout / name).write_text(name)
    sources = Sources(*(tmp_path / "src" / n for n in ("traces", "metrics", "figures", "report", "a", "d")), code=None)
    with pytest.raises(ValueError, match="holds .git"):
        build_bundle(sources, BundleMeta(), checkout)
    assert sorted(p.name for p in checkout.iterdir()) == [".git", "CITATION.cff", "MANIFEST.sha256", "README.md"]


def test_a_marker_of_another_command_is_not_this_ones(tmp_path):
    out = tmp_path / "out"
    with staged_dir(out, "muon-repro analyze") as stage:
        (stage / "x.parquet").write_bytes(b"x")
    check_replaceable(out, "muon-repro analyze", "--out out")
    with pytest.raises(ValueError, match="muon-repro bundle did not write"):
        check_replaceable(out, "muon-repro bundle", "--out out")


def test_staging_folders_of_a_dead_writer_are_removed_and_a_live_ones_kept(tmp_path):
    out = tmp_path / "dataset"
    dead = dead_pid()
    stale = [tmp_path / f".dataset.stage-{dead}-0123abcd", tmp_path / f".dataset.muon-repro-old-{dead}-89abcdef"]
    live = tmp_path / ".dataset.muon-repro-stage-1-00000000"  # pid 1 is alive
    other = tmp_path / f".datasets.muon-repro-stage-{dead}-00000000"  # another output's
    for folder in (*stale, live, other):
        (folder / "part").mkdir(parents=True)
    with staged_dir(out, "muon-repro bundle") as stage:
        (stage / "file").write_text("x")
    assert not any(p.exists() for p in stale) and live.is_dir() and other.is_dir()
    assert remove_stale_siblings(out) == []


def test_staging_folders_say_whose_they_are(tmp_path):
    out = tmp_path / "metrics"
    with staged_dir(out) as stage:
        assert stage.name.startswith(".metrics.muon-repro-stage-") and stage.parent == tmp_path
    assert Path(out).is_dir()


# ---------------------------------------------------------------- links (issue 45, item 6)


def test_a_link_to_a_folder_is_refused_by_name_never_walked(tmp_path):
    from muon_repro.tables.files import list_files

    (tmp_path / "traces" / "run").mkdir(parents=True)
    (tmp_path / "traces" / "run" / "rank0.json").write_text("{}")
    (tmp_path / "traces" / "run" / "loop").symlink_to(tmp_path / "traces", target_is_directory=True)
    with pytest.raises(ValueError, match=r"traces/run/loop: a link to a folder .*not followed"):
        list_files(tmp_path / "traces")  # it hung on the loop


def test_verify_refuses_a_looping_bundle_instead_of_hanging(tmp_path):
    from muon_repro.dataset.verify import verify_bundle

    (tmp_path / "MANIFEST.sha256").write_text("")
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "again").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ValueError, match="traces/again: a link to a folder"):
        verify_bundle(tmp_path)


def test_bundle_refuses_a_link_that_leads_out_of_its_folder(tmp_path):
    from muon_repro.dataset.bundle import _folder_files

    secret = tmp_path / "home" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not for publishing")
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "rank0.json.gz").symlink_to(secret)
    with pytest.raises(ValueError, match=r"rank0.json.gz: a link to .*secret.txt, outside --traces"):
        _folder_files("traces", traces)
    (traces / "rank0.json.gz").unlink()
    (traces / "real.json.gz").write_text("x")
    (traces / "rank0.json.gz").symlink_to(traces / "real.json.gz")  # inside: the folder's own file
    assert sorted(_folder_files("traces", traces)) == ["traces/rank0.json.gz", "traces/real.json.gz"]


def test_a_second_writer_of_one_folder_is_refused_with_the_first_ones_pid(tmp_path):
    """Two `analyze --out` on one folder ended in OSError tracebacks and left old folders behind."""
    out = tmp_path / "metrics"
    with staged_dir(out, "muon-repro analyze") as stage:
        (stage / "runs.parquet").write_bytes(b"x")
        with pytest.raises(ValueError, match=rf"{out} is being written by another muon-repro \(pid {os.getpid()}\)"):
            with staged_dir(out, "muon-repro analyze"):
                pass
    with staged_dir(out, "muon-repro analyze") as stage:  # released: the next writer goes ahead
        (stage / "runs.parquet").write_bytes(b"y")
    assert (out / "runs.parquet").read_bytes() == b"y"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics"]  # the lock went with its holder


# ---------------------------------------------------------------- odd places


def _tables_in(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_a_folder_that_cannot_be_renamed_is_replaced_entry_by_entry(tmp_path, monkeypatch):
    """A mount point: the stage, the lock and the swap are inside it; the folder itself stays where it is."""
    from muon_repro.tables import files

    out = tmp_path / "metrics"
    out.mkdir()
    monkeypatch.setattr(files, "is_mount_point", lambda path: Path(path) == out)
    monkeypatch.setattr(files.os, "rename", _refusing_to_rename(out, files.os.rename))
    write_tables({"runs": SCHEMAS["runs"].empty()}, out)
    inode = out.stat().st_ino
    write_tables({"steps": SCHEMAS["steps"].empty()}, out)
    assert out.stat().st_ino == inode
    assert _tables_in(out) == {OUTPUT_MARKER, "steps.parquet", "steps.csv"}  # the old set gone, nothing hidden left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics"]


def _refusing_to_rename(folder: Path, rename):
    def guarded(src, dst, *args, **kwargs):
        if Path(src) == folder or Path(dst) == folder:
            raise OSError(16, "Device or resource busy", str(src))  # what renaming a mount point gives
        return rename(src, dst, *args, **kwargs)

    return guarded


def test_a_failed_swap_inside_a_mount_point_puts_the_old_entries_back(tmp_path, monkeypatch):
    from muon_repro.tables import files

    out = tmp_path / "metrics"
    write_tables({"runs": SCHEMAS["runs"].empty()}, out)
    before = _tables_in(out)
    monkeypatch.setattr(files, "is_mount_point", lambda path: Path(path) == out)
    rename = files.os.rename

    def failing(src, dst, *args, **kwargs):
        if Path(dst).parent == out and Path(dst).name == "steps.parquet":
            raise OSError(28, "No space left on device", str(dst))
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(files.os, "rename", failing)
    with pytest.raises(OSError, match="No space left"):
        write_tables({"steps": SCHEMAS["steps"].empty()}, out)
    assert _tables_in(out) == before


@pytest.mark.parametrize("command", ["bundle --out {file}/x", "card --out {file}/x.md", "figures --out {file}/x"])
def test_a_place_under_a_file_is_refused_in_one_line_before_any_work(tmp_path, capsys, command):
    from muon_repro.cli import main

    file = tmp_path / "notes.txt"
    file.write_text("mine")
    code = main(command.format(file=file).split())
    err = capsys.readouterr().err
    assert code == 2 and f"{file} is a file, not a folder" in err and "Traceback" not in err
    assert file.read_text() == "mine"


def test_download_refuses_a_local_dir_under_a_file_before_asking_the_hub(tmp_path):
    from muon_repro.hub.download import download

    file = tmp_path / "notes.txt"
    file.write_text("mine")

    class NoHub:
        def __getattr__(self, name):
            raise AssertionError(f"the Hub was asked {name}")

    with pytest.raises(ValueError, match="is a file, not a folder"):
        download("org/name", "v1.0.0", file / "x", api=NoHub())


@pytest.mark.slow
def test_analyze_writes_into_a_real_mount_point(tmp_path):
    """On a tmpfs mounted for the test (root only): the tables land in it, twice, and it stays mounted."""
    import subprocess

    out = tmp_path / "mounted"
    out.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "none", str(out)], capture_output=True).returncode:
        pytest.skip("needs root and mount to make a mount point")
    try:
        assert os.path.ismount(out)
        write_tables({"runs": SCHEMAS["runs"].empty()}, out)
        write_tables({"steps": SCHEMAS["steps"].empty()}, out)
        assert os.path.ismount(out) and _tables_in(out) == {OUTPUT_MARKER, "steps.parquet", "steps.csv"}
    finally:
        subprocess.run(["umount", str(out)], check=False)


@pytest.mark.slow
def test_a_read_only_place_is_refused_in_one_line_naming_it(tmp_path, capsys):
    """A read-only tmpfs (root only: chmod does not stop root) under each command that writes a folder or a file."""
    import subprocess

    from muon_repro.cli import main

    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "none", str(ro)], capture_output=True).returncode:
        pytest.skip("needs root and mount to make a read-only place")
    try:
        for command in (f"bundle --out {ro}/x", f"figures --out {ro}/x", f"card --out {ro}/x.md", f"report --out {ro}"):
            code = main(command.split())
            err = capsys.readouterr().err
            assert code == 2 and f"no permission to write in {ro}" in err and "Traceback" not in err, (command, err)
    finally:
        subprocess.run(["umount", str(ro)], check=False)


# ---------------------------------------------------------------- a writer of files killed while moving them in

WRITER, SUFFIXES = "muon-repro figures", (".png",)
OLD_SET = {"a.png": b"old a", "b.png": b"old b", "sub/c.png": b"old c"}
NEW_SET = {"a.png": b"new a", "d.png": b"new d", "prof/e.png": b"new e"}


def _files_under(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _write_set(out: Path, files: dict[str, bytes]) -> None:
    with staged_files(out, WRITER, SUFFIXES) as stage:
        for rel, data in files.items():
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            (stage / rel).write_bytes(data)


class _Killed(BaseException):
    """A kill -9 as the swap sees it: no handler of the writer's runs to completion."""


def _killed_after(renames: int, tmp_path: Path, monkeypatch) -> Path:
    """``figures`` with the old set, then a writer of the new set killed after ``renames`` renames of its swap, as
    a dead process (another pid) leaves it: its stage and folder of old files beside ``figures``."""
    out = tmp_path / "figures"
    _write_set(out, OLD_SET)
    real_rename, done = os.rename, []

    def rename(src, dst):
        if len(done) >= renames:
            raise _Killed  # every later rename too: the handler that would put the old files back dies as well
        done.append(dst)
        real_rename(src, dst)

    stage = new_sibling_dir(out, "stage")
    for rel, data in NEW_SET.items():
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_bytes(data)
    dead = dead_pid()
    dead_stage = stage.rename(tmp_path / stage.name.replace(f"-{os.getpid()}-", f"-{dead}-"))
    with monkeypatch.context() as patch:
        patch.setattr(files_module.os, "getpid", lambda: dead)
        patch.setattr(files_module.os, "rename", rename)
        with pytest.raises(_Killed):
            put_files_in_place(dead_stage, out, WRITER, SUFFIXES)
    return out


def _whole_sets(tmp_path: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The folder with the old set and with the new one, manifest included, as uninterrupted writers leave it."""
    out = tmp_path / "reference" / "figures"
    _write_set(out, OLD_SET)
    old = _files_under(out)
    _write_set(out, NEW_SET)
    return old, _files_under(out)


def test_a_swap_killed_midway_is_finished_by_the_next_writer(tmp_path, monkeypatch):
    old_whole, new_whole = _whole_sets(tmp_path)
    renames = 8  # b.png, sub/c.png, a.png and the manifest moved aside; a.png, d.png, prof/e.png and the manifest in
    for k in range(renames):
        root = tmp_path / f"kill{k}"
        out = _killed_after(k, root, monkeypatch)
        if k == 0:  # killed at its first rename: nothing had moved, the handler put nothing back and ended the swap
            assert _files_under(out) == old_whole and finish_interrupted_swaps(out) == []
        else:
            assert _files_under(out) not in (old_whole, new_whole), k  # a mix, as the kill left it
            assert len(finish_interrupted_swaps(out)) == 1, k
            assert _files_under(out) == new_whole, k
        remove_stale_siblings(out)
        assert [p.name for p in root.iterdir()] == ["figures"], k  # no stage, no folder of old files
        _write_set(out, OLD_SET)  # and the next writer works as ever, removing what its set no longer has
        assert _files_under(out) == old_whole, k


def test_a_swap_that_put_the_old_files_back_is_not_finished_later(tmp_path, monkeypatch):
    out = tmp_path / "figures"
    _write_set(out, OLD_SET)
    before = _files_under(out)
    real_rename, moved_in = os.rename, []

    def rename(src, dst):
        if ".muon-repro-stage-" in str(src):
            moved_in.append(dst)
            if len(moved_in) == 2:
                raise KeyboardInterrupt
        real_rename(src, dst)

    dead = dead_pid()
    with monkeypatch.context() as patch:
        patch.setattr(files_module.os, "getpid", lambda: dead)
        patch.setattr(files_module.os, "rename", rename)
        with pytest.raises(KeyboardInterrupt):
            _write_set(out, NEW_SET)
    assert _files_under(out) == before
    assert finish_interrupted_swaps(out) == []
    assert _files_under(out) == before


@pytest.mark.parametrize("stage_left", [True, False])
def test_a_folder_swap_killed_between_its_renames_is_finished(tmp_path, stage_left):
    out, dead = tmp_path / "metrics", dead_pid()
    old = tmp_path / f".metrics.muon-repro-old-{dead}-0123abcd"  # the previous folder, renamed aside; out missing
    stage = tmp_path / f".metrics.muon-repro-stage-{dead}-89abcdef"  # the complete new one, not yet renamed in
    old.mkdir()
    (old / "runs.csv").write_text("old")
    if stage_left:
        stage.mkdir()
        (stage / "runs.csv").write_text("new")
    with pytest.raises(ValueError, match="a failing writer"), staged_dir(out, "muon-repro analyze"):
        assert (out / "runs.csv").read_text() == ("new" if stage_left else "old")
        raise ValueError("a failing writer")
    assert (out / "runs.csv").read_text() == ("new" if stage_left else "old")  # nothing lost: a whole set is there
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics"]
