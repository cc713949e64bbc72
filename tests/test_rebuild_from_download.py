"""The dataset rebuilds itself: the committed artifacts, bundled with the package's source, published to the fake
Hub, downloaded with ``hf download``, then the card's regeneration block followed line by line in the download
alone (its own ``muon_repro/`` on the path, no checkout beside it) writes every table frame for frame as the bundle
has it, records nothing, and leaves the download verifiable."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hub_support import DATE, hf_command, hub_env, muon_repro, run
from support.fake_hub import FakeHub

from muon_repro.dataset.bundle import CODE_PATHS, Sources, build_bundle
from muon_repro.dataset.meta import BundleMeta

REPO = Path(__file__).resolve().parents[1]
REPO_ID = "test-org/muon-rebuild"
DATA_FOLDERS = ("traces", "metrics", "figures", "report", "analysis_scripts", "docs")


@pytest.mark.slow
def test_a_download_rebuilds_every_table_from_its_own_code(tmp_path):
    """A dataset other than the project's (its own repository, version and date) rebuilds as itself: the card's
    recipe names them, so its card, CITATION.cff and report come out as published and the download verifies."""
    from muon_repro.stages import report

    meta = BundleMeta(repo_id=REPO_ID, version="1.0.0", date=DATE, license="Apache-2.0")
    # the report's links are relative to the tables, figures and docs it cites: laid out beside them as in the
    # repository, so that they are the bundle's links too (a report beside the repository's linked outside the bundle)
    src = tmp_path / "src"
    for name in ("metrics", "figures", "docs"):
        shutil.copytree(REPO / name, src / name)
    report(src / "metrics", src / "figures", src / "report", meta=meta)  # as published: it cites this dataset
    sources = [src / name if (src / name).is_dir() else REPO / name for name in DATA_FOLDERS]
    bundle = tmp_path / "bundle"
    build_bundle(Sources(*sources, code=REPO), meta, bundle)
    for name in CODE_PATHS:
        assert (bundle / name).exists(), f"the bundle lacks {name}"

    download = tmp_path / "download"
    with FakeHub() as hub:
        env = hub_env(tmp_path, hub.url)
        published = muon_repro(["publish", "--repo-id", REPO_ID, "--version", "1.0.0", "--bundle", str(bundle)], env)
        assert published.returncode == 0, published.stdout + published.stderr
        got = run([hf_command(), "download", REPO_ID, "--repo-type", "dataset", "--local-dir", str(download)], env, timeout=300)
        assert got.returncode == 0, got.stdout + got.stderr

    # Only the download's own code: its folder first on the path, the repository nowhere on it.
    alone = {**env, "PYTHONPATH": str(download)}
    where = run([sys.executable, "-c", "import muon_repro; print(muon_repro.__file__)"], alone, cwd=download)
    assert Path(where.stdout.strip()).is_relative_to(download), where.stdout + where.stderr

    # The card's regeneration block, line by line, as a reader follows it in the download.
    steps = regeneration_block((download / "README.md").read_text())
    assert steps[0].startswith('python -m pip install -c constraints.txt -e ".[dev]"'), steps
    said = f"--from analyze --repo-id {REPO_ID} --version 1.0.0 --date {DATE} --author muon-repro --license Apache-2.0"
    assert said in steps[1], steps
    assert not any("--force" in step or " /" in step for step in steps), "a step re-records or names an absolute path"
    (download / "muon_repro.egg-info").mkdir()  # what the set-up line leaves in the folder (pip install -e .)
    (download / "muon_repro.egg-info" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: muon-repro\n")
    installed = run([sys.executable, "-m", "muon_repro", "verify", "."], alone, cwd=download, timeout=600)
    assert installed.returncode == 0, "the set-up's by-products are not the dataset's files:\n" + installed.stdout[-3000:]
    for step in steps[1:]:
        args = shlex.split(step.split("#", 1)[0])
        assert args[0] == "muon-repro", step
        done = subprocess.run(
            [sys.executable, "-m", "muon_repro", *args[1:], *(["--no-progress"] if args[1] == "run" else [])],
            env=alone,
            cwd=download,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, step + "\n" + done.stdout[-3000:] + done.stderr[-3000:]
        assert "recorded" not in re.findall(r"^\S+/\S+\s+\d+\s+(\w+)\s", done.stdout, flags=re.MULTILINE)

    # The rebuild rewrote the download's files as they were and added only its card and bundle: still verifiable.
    rebuilt = run([sys.executable, "-m", "muon_repro", "verify", "."], alone, cwd=download, timeout=600)
    failed = "\n".join(line for line in rebuilt.stdout.splitlines() if not line.startswith("ok "))
    assert rebuilt.returncode == 0, "the rebuild changed or added dataset files:\n" + failed[-3000:]

    tables = sorted((bundle / "metrics").glob("*.parquet"))
    assert len(tables) >= 15
    for published_table in tables:
        again = download / "metrics" / published_table.name
        pd.testing.assert_frame_equal(pd.read_parquet(again), pd.read_parquet(published_table), obj=published_table.name)


def regeneration_block(card: str) -> list[str]:
    """The commands of the card's "How to regenerate" code block, one per line (comments kept)."""
    section = card.split("## How to regenerate", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block, "the card's regeneration section has no bash block"
    return [line for line in block[1].splitlines() if line.strip() and not line.lstrip().startswith("#")]


# ---------------------------------------------------------------- which code recorded each run


def _bundle_with_one_run(root: Path, environment: dict) -> Path:
    """The smallest tree check_sources reads: muon_repro/ (a copy of ours) and one run's environment.json."""
    shutil.copytree(REPO / "muon_repro", root / "muon_repro", ignore=shutil.ignore_patterns("__pycache__"))
    run_dir = root / "traces" / "p" / "g" / "r" / "trial0"
    run_dir.mkdir(parents=True)
    (run_dir / "environment.json").write_text(json.dumps(environment))
    return root


@pytest.mark.parametrize(
    ("environment", "ok", "said"),
    [
        ({"git_sha": "abc", "git_dirty": False}, True, "1 recorded from a clean commit"),
        ({"git_sha": "abc", "git_dirty": True, "source_sha256": "ours"}, True, "1 with this bundle's muon_repro/"),
        ({"git_sha": "abc", "git_dirty": True}, True, "is known: 0 recorded from a clean commit (git_sha), 0 with this"),
        ({"git_sha": "abc", "git_dirty": True}, True, "1 from a changed or unknown tree before runs recorded their source"),
        pytest.param(
            {"git_sha": "abc"},
            True,
            "0 recorded from a clean commit (git_sha), 0 with this bundle's muon_repro/, 1 from a changed or unknown tree",
            id="a-commit-not-said-to-be-clean-is-an-unknown-tree",
        ),
        ({"git_sha": None, "git_dirty": None, "source_sha256": "0" * 64}, False, "neither a commit nor this bundle's"),
    ],
)
def test_verify_knows_which_code_recorded_each_run(tmp_path, environment, ok, said):
    from muon_repro.dataset.verify import check_sources
    from muon_repro.provenance import source_digest

    if environment.get("source_sha256") == "ours":
        environment = {**environment, "source_sha256": source_digest(REPO / "muon_repro")}
    root = _bundle_with_one_run(tmp_path, environment)
    lines: list[tuple[str, bool]] = []
    check_sources(root, lambda line, passed: lines.append((line, passed)))
    assert len(lines) == 1 and lines[0][1] is ok and said in lines[0][0], lines


def test_the_source_digest_follows_every_byte_and_path_of_the_package(tmp_path):
    from muon_repro.provenance import source_digest

    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "b.py").write_text("y = 2\n")
    first = source_digest(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"cache")
    assert source_digest(package) == first  # caches are not source
    (package / "a.py").write_text("x = 2\n")
    assert source_digest(package) != first
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "b.py").rename(package / "b.py")
    assert source_digest(package) != first  # a move is a change
    with pytest.raises(FileNotFoundError, match="no such package folder"):
        source_digest(tmp_path / "missing")


def test_verify_judges_a_convergence_runs_code_as_a_trials(tmp_path):
    """A convergence run keeps its environment inside convergence.json: its code is judged as a trial's is."""
    from muon_repro.dataset.verify import check_sources

    root = _bundle_with_one_run(tmp_path, {"git_sha": "abc", "git_dirty": False})
    run = root / "traces" / "p" / "convergence" / "muon_seed0"
    run.mkdir(parents=True)
    (run / "convergence.json").write_text(json.dumps({"environment": {"git_sha": None, "source_sha256": "0" * 64}}))
    lines: list[tuple[str, bool]] = []
    check_sources(root, lambda line, passed: lines.append((line, passed)))
    assert len(lines) == 1 and lines[0][1] is False and "1 run(s) recorded from a changed tree" in lines[0][0], lines
    (run / "convergence.json").write_text(json.dumps({"environment": {"git_sha": None, "git_dirty": None}}))
    lines.clear()
    check_sources(root, lambda line, passed: lines.append((line, passed)))
    assert lines == [
        (
            "source: the code of every run that recorded its source is known: 1 recorded from a clean commit (git_sha), "
            "0 with this bundle's muon_repro/, 1 from a changed or unknown tree before runs recorded their source digest",
            True,
        )
    ]
