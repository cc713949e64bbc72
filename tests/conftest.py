"""Shared test set-up: single-threaded math, the fake Hub's fixtures, and the fast tier's wall.

The default tier (``python -m pytest -n 2``, ``-m "not slow"`` through pyproject's addopts) starts no
Python process: a test that does (the interpreter as a subprocess, a console script whose ``#!`` line names
Python, a multiprocessing worker, pool or helper such as its resource tracker, and so every process group) is
refused unless it is marked ``slow``, so that the default tier stays fast and ``-m slow`` holds everything that
launches. Small native tools (ruff, git, ldconfig, sha256sum) may run: libraries call some of them (ctypes finds a
library with ldconfig), and each takes milliseconds.
"""

import multiprocessing.process
import multiprocessing.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

# Single-threaded math in the test process: distributed tests start several workers on 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Fixtures shared by the hub tests (fake_hub, hub_api, sources).
pytest_plugins = ("hub_support",)


class StartsAProcess(RuntimeError):
    """A test of the default tier started a process."""


def _is_python(args) -> bool:
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    program = os.path.basename(os.fsdecode(argv[0])) if argv else ""
    if program.startswith("python") or program in ("muon-repro", "torchrun") or program == os.path.basename(sys.executable):
        return True
    return _python_script(os.fsdecode(argv[0])) if argv else False


def _python_script(program: str) -> bool:
    """Whether ``program`` is a console script run by Python (its ``#!`` line names it): cffconvert, pip, ..."""
    path = shutil.which(program)
    try:
        with open(path, "rb") as f:  # type: ignore[arg-type]
            first = f.readline(256)
    except (OSError, TypeError):
        return False
    return first.startswith(b"#!") and b"python" in first


def _refuse(nodeid: str):
    def refuse(*args, **kwargs):
        raise StartsAProcess(f"{nodeid} starts a Python process: mark it @pytest.mark.slow (the default tier starts none)")

    return refuse


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _no_process_unless_slow(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _no_process_unless_slow(item):
        yield


class _no_process_unless_slow:
    """Within a test that is not marked ``slow`` (its fixtures' set-up included), starting a process raises."""

    def __init__(self, item: pytest.Item):
        self.active = item.get_closest_marker("slow") is None
        self.refuse = _refuse(item.nodeid)
        self.popen_init = subprocess.Popen.__init__

    def _popen_init(self):
        refuse, popen_init = self.refuse, self.popen_init

        def init(popen, args, *rest, **kwargs):
            if _is_python(args):
                refuse()
            popen_init(popen, args, *rest, **kwargs)

        return init

    def __enter__(self) -> None:
        if self.active:
            self.saved = (
                subprocess.Popen.__init__,
                multiprocessing.process.BaseProcess.start,
                multiprocessing.util.spawnv_passfds,
            )
            subprocess.Popen.__init__ = self._popen_init()
            multiprocessing.process.BaseProcess.start = self.refuse
            multiprocessing.util.spawnv_passfds = self.refuse  # the resource tracker and forkserver start this way

    def __exit__(self, *exc) -> None:
        if self.active:
            subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start, multiprocessing.util.spawnv_passfds = self.saved


@pytest.fixture(scope="session", autouse=True)
def _one_report_bundle_analysis(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The synthetic runs of :mod:`report_bundle` analyzed once per test run, not once per xdist worker (~5 s)."""
    import report_bundle
    from run_once import shared_root

    report_bundle.SHARED_DIR = shared_root(tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The tiny sweep recorded once per test run (:mod:`tiny_sweep`): config key -> trial folder, read-only."""
    from tiny_sweep import record_once

    return record_once(tmp_path_factory)


@pytest.fixture
def quick_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every figure drawn as two tiny files (:func:`stand_in_figures`): what these tests check is where the files go,
    not what they show (drawing the real set takes ~8 s a run; tests/test_report.py's bundle checks the figures
    themselves)."""
    from fake_figures import stand_in_figures

    stand_in_figures(monkeypatch)
