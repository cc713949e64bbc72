"""The code keeps the shape the project set in pyproject.toml: pyflakes clean, imports sorted, lines
within the limit, formatted by ruff (one `# fmt: skip` only where a table literal reads better)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CODE = ("muon_repro", "tests", "tools")
MARKER = "# fmt: " + "skip"  # spelled in two so that this file holds none


def _ruff(*args: str) -> subprocess.CompletedProcess:
    # the ruff binary itself, not `python -m ruff`: the default tier starts no Python process (conftest.py)
    from ruff.__main__ import find_ruff_bin

    return subprocess.run([find_ruff_bin(), *args, *CODE], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def ruff_available() -> None:
    try:
        import ruff  # noqa: F401
    except ImportError:
        pytest.fail("ruff is not installed: it is a dev dependency (pip install -c constraints.txt -e '.[dev]')")


def test_ruff_check_passes(ruff_available):
    done = _ruff("check", "--no-cache", "--output-format", "concise")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_the_code_is_formatted(ruff_available):
    done = _ruff("format", "--check", "--no-cache")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_fmt_skip_only_on_table_literals():
    markers = []
    for folder in CODE:
        for path in sorted((REPO / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if line.rstrip().endswith(MARKER) and not line.lstrip().startswith((")", "]", "}")):
                    markers.append(f"{path.relative_to(REPO)}:{number}")
    assert markers == [], "a `# fmt: skip` closes a table literal, nothing else"
