"""Nothing a user points an output at is lost (issue 45, item 1): a folder is replaced whole only when the command
that replaces it wrote it; a checkout never; the staging folders an interrupted run left are removed by the next."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.tables.files import OUTPUT_MARKER, check_replaceable, remove_stale_siblings, staged_dir
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
    dead = _dead_pid()
    stale = [tmp_path / f".dataset.stage-{dead}-0123abcd", tmp_path / f".dataset.muon-repro-old-{dead}-89abcdef"]
    live = tmp_path / ".dataset.muon-repro-stage-1-00000000"  # pid 1 is alive
    other = tmp_path / f".datasets.muon-repro-stage-{dead}-00000000"  # another output's
    for folder in (*stale, live, other):
        (folder / "part").mkdir(parents=True)
    with staged_dir(out, "muon-repro bundle") as stage:
        (stage / "file").write_text("x")
    assert not any(p.exists() for p in stale) and live.is_dir() and other.is_dir()
    assert remove_stale_siblings(out) == []


def _dead_pid() -> int:
    """A pid no process has: the system's pid_max (pids stay below it), without starting a process."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 2**22 + 1


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
