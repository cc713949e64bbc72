"""The default tier's wall (tests/conftest.py): every way of starting Python from a test not marked slow is refused
before the process starts; a small native tool runs."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
from conftest import StartsAProcess

PYTHON = sys.executable


@pytest.mark.parametrize(
    "start",
    [
        lambda: subprocess.run([PYTHON, "-c", "pass"]),
        lambda: subprocess.run(["env", PYTHON, "-c", "pass"]),
        lambda: subprocess.run(f"{shlex.quote(PYTHON)} -c pass", shell=True),
        lambda: subprocess.run(["bash", "-c", f"{shlex.quote(PYTHON)} -c pass"]),
        lambda: subprocess.run(["anything"], executable=PYTHON),
        lambda: os.system(f"{shlex.quote(PYTHON)} -c pass"),
        os.fork,
    ],
    ids=["argv", "env", "shell", "bash -c", "executable=", "os.system", "os.fork"],
)
def test_starting_python_in_the_default_tier_is_refused(start):
    with pytest.raises(StartsAProcess, match="test_starting_python_in_the_default_tier_is_refused.*mark it @pytest.mark.slow"):
        start()


def test_a_native_tool_runs():
    assert subprocess.run(["true"]).returncode == 0
