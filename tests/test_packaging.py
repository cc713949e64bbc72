"""What the wheel ships: the package and its templates, and no development tool (the fake Hub,
the benchmarks, the trace fuzzer live in tests/support/ and tools/)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_holds_the_package_and_no_development_tool(tmp_path):
    # built from a copy: setuptools writes build/ and *.egg-info into the folder it builds, and would pack a
    # build/lib an earlier build left
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "muon_repro", source / "muon_repro", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("muon_repro-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"muon_repro"}, top
    assert not [n for n in names if any(word in n for word in ("fake_hub", "fuzz", "benchmark", "testing/"))]
    for shipped in (
        "muon_repro/tables/io.py",
        "muon_repro/dataset/templates/dataset_card.md.j2",
        "muon_repro/dataset/authors.txt",  # the project's authors, whom the citation names by default
        "muon_repro/report/templates/report.md.j2",
    ):
        assert shipped in names


def test_no_module_of_the_package_imports_the_tests_or_the_tools():
    found = []
    for path in sorted((REPO / "muon_repro").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for word in ("import tests", "from tests", "import tools", "from tools", "sys.path.insert"):
            if word in text:
                found.append(f"{path.relative_to(REPO)}: {word}")
    assert found == []
