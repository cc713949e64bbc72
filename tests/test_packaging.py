"""What the wheel ships: the package and its templates, and no development tool (the fake Hub,
the benchmarks, the trace fuzzer live in tests/support/ and tools/)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_holds_the_package_and_no_development_tool(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
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
