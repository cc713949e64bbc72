"""docs/publishing.md's commands, run exactly as written (ORG/NAME made a test repository) in a fresh tree of the
repository's files, against the fake Hub: bundle, verify, publish (planned, then done), download."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from hub_support import hf_command, hub_env, run
from support.fake_hub import FakeHub

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "publishing.md"
TEST_REPO = "test-org/muon-docs"
TREE = ("traces", "metrics", "figures", "report", "analysis_scripts", "docs", "muon_repro", "tests", "tools")
FILES = ("pyproject.toml", "constraints.txt")


def doc_commands(section: str) -> list[list[str]]:
    """The commands of the first ```bash block under ``section``'s heading, comments dropped, ORG/NAME the test repo."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(section)
    block = re.search(r"```bash\n(.*?)```", text[start:], flags=re.DOTALL)
    assert block, f"no bash block under {section!r} in {DOC}"
    lines = [line.split("#", 1)[0].strip() for line in block[1].splitlines()]
    return [shlex.split(line.replace("ORG/NAME", TEST_REPO)) for line in lines if line]


def _fresh_tree(root: Path) -> Path:
    """The repository's committed files as a clone has them (links: the traces alone are 85 MB; the report is
    copied, since the recipe renders it again)."""
    root.mkdir()
    for name in (*TREE, *FILES):
        if name == "report":
            shutil.copytree(REPO / name, root / name)
        else:
            (root / name).symlink_to(REPO / name, target_is_directory=(REPO / name).is_dir())
    return root


@pytest.mark.slow
def test_the_publishing_commands_work_as_written(tmp_path):
    commands = doc_commands("## Publishing the dataset, and loading it")
    assert [c[:2] for c in commands] == [["muon-repro", name] for name in ("report", "bundle", "verify", "verify")] + [
        ["muon-repro", "publish"]
    ] * 2
    download = doc_commands("To get a published version back")
    tree = _fresh_tree(tmp_path / "clone")
    with FakeHub() as hub:
        env = {**hub_env(tmp_path, hub.url), "PYTHONPATH": str(REPO)}
        for command in commands + download:
            program = [sys.executable, "-m", "muon_repro", *command[1:]] if command[0] == "muon-repro" else _hf(command)
            done = run(program, env, cwd=tree, timeout=600)
            assert done.returncode == 0, f"{shlex.join(command)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        repo = hub.get_repo(TEST_REPO)
        assert "v1.0.0" in repo.tags
    for local in ("muon-traces",):  # both downloads landed, verified by muon-repro download
        assert (tree / local / "MANIFEST.sha256").is_file()


def _hf(command: list[str]) -> list[str]:
    assert command[0] == "hf", f"unexpected command {command[0]!r} in {DOC}"
    return [hf_command(), *command[1:]]
