"""Shared test set-up: single-threaded math, the fake Hub's fixtures, and the fast tier's wall.

The default tier (``python -m pytest -n 2``, ``-m "not slow"`` through pyproject's addopts) starts no
Python process: a test that does (the interpreter as a subprocess, through a shell, ``env`` or ``executable=``,
os.system, a fork, a console script whose ``#!`` line names Python, a multiprocessing worker, pool or helper such
as its resource tracker, and so every process group) is refused unless it is marked ``slow``, in its set-up, call
and teardown alike, so that the default tier stays fast and ``-m slow`` holds everything that launches. Small
native tools (ruff, git, ldconfig, sha256sum) may run: libraries call some of them (ctypes finds a library with
ldconfig), and each takes milliseconds.
"""

import gc
import multiprocessing.process
import multiprocessing.util
import os
import shlex
import shutil
import sys
from collections.abc import Iterator

import pytest

# Single-threaded math in the test process: distributed tests start several workers on 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Fixtures shared by the hub tests (fake_hub, hub_api, sources).
pytest_plugins = ("hub_support",)


class StartsAProcess(RuntimeError):
    """A test of the default tier started a process."""


# Audit events (sys.audit) that start a process: the Python ones are refused in the default tier, whatever starts them
# (subprocess with or without a shell or `executable=`, os.system, os.posix_spawn, an exec; a fork is Python itself).
PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.spawn")
FORK_EVENTS = ("os.fork", "os.forkpty")
_running_fast: list[str] = []  # the node id of the default-tier test running in this process, if any


def _words(value: object) -> list[str]:
    """The words of a program and its arguments as an audit event gives them, a shell string split as a shell would."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, os.PathLike)):
        text = os.fsdecode(value)
        try:
            return shlex.split(text)
        except ValueError:
            return text.split()
    return [w for item in value for w in _words(item)] if isinstance(value, (list, tuple)) else []


def _is_python(words: list[str]) -> bool:
    """Whether any word names Python, this interpreter, a command that runs it, or a console script whose ``#!`` line
    names it (cffconvert, pip, ...): ``env python``, ``bash -c "python ..."`` and ``executable=`` included."""
    python = os.path.basename(sys.executable)
    for word in words:
        program = os.path.basename(word)
        if program.startswith("python") or program in ("muon-repro", "torchrun", python) or _python_script(word):
            return True
    return False


def _python_script(program: str) -> bool:
    path = shutil.which(program) if os.sep not in program else program
    if not path or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _refuse_python_processes(event: str, args: tuple) -> None:
    if not _running_fast:
        return
    if event in FORK_EVENTS or (event in PROCESS_EVENTS and _is_python(_words(list(args[:2])))):
        raise _refusal(_running_fast[-1], f" ({event})")


sys.addaudithook(_refuse_python_processes)  # for the whole session; it acts only while a default-tier test runs


def _refusal(nodeid: str, how: str = "") -> StartsAProcess:
    return StartsAProcess(f"{nodeid} starts a Python process{how}: mark it @pytest.mark.slow (the default tier starts none)")


def _refuse(nodeid: str):
    def refuse(*args, **kwargs):
        raise _refusal(nodeid)

    return refuse


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _no_process_unless_slow(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _no_process_unless_slow(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _no_process_unless_slow(item):
        yield


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, pandas, matplotlib, every test module) lives for the whole run: frozen, so
    that no full collection during the tests walks it again, and the youngest generation collected every 20,000 net
    allocations, not 700, so that the tests' short-lived frames die by reference count first. On five heavy test modules
    (test_report, test_converge, test_study, test_analysis_inputs, test_claims) the collector's time fell from 9.4 s
    to 1.8 s."""
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


def pytest_unconfigure(config: pytest.Config) -> None:
    """An xdist worker, its tests run and reported, freezes what the run built: the interpreter then exits without a
    last collection over all of it. The workers are torn down one after the other, and each took ~3 s to exit."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        gc.disable()
        gc.freeze()


class _no_process_unless_slow:
    """Within a test that is not marked ``slow`` (its fixtures' set-up and teardown included), starting a Python
    process raises: the audit hook sees subprocesses, os.system, spawns, execs and forks; multiprocessing's starts are
    patched too, as its helpers (the resource tracker, a forkserver) start without an audit event."""

    def __init__(self, item: pytest.Item):
        self.active = item.get_closest_marker("slow") is None
        self.nodeid = item.nodeid
        self.refuse = _refuse(item.nodeid)

    def __enter__(self) -> None:
        if self.active:
            _running_fast.append(self.nodeid)
            self.saved = (multiprocessing.process.BaseProcess.start, multiprocessing.util.spawnv_passfds)
            multiprocessing.process.BaseProcess.start = self.refuse
            multiprocessing.util.spawnv_passfds = self.refuse

    def __exit__(self, *exc) -> None:
        if self.active:
            _running_fast.pop()
            multiprocessing.process.BaseProcess.start, multiprocessing.util.spawnv_passfds = self.saved


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


@pytest.fixture
def kept_and_written(monkeypatch: pytest.MonkeyPatch) -> Iterator[list]:
    """The figures drawn during a test, kept open when the figure module closes them (closed at the end)."""
    import matplotlib.pyplot as plt

    drawn: list = []
    close = plt.close

    def keep(fig=None):
        if isinstance(fig, plt.Figure):
            drawn.append(fig)
            return None
        return close(fig)

    monkeypatch.setattr(plt, "close", keep)
    yield drawn
    for fig in drawn:
        close(fig)


@pytest.fixture
def kept(kept_and_written: list, monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures drawn during a test, kept open, their files written empty: what these tests read is the figure
    itself, not its rendering."""
    from fake_figures import written_empty

    written_empty(monkeypatch)
    return kept_and_written


@pytest.fixture
def svg_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Figures drawn in full and written as SVG, their PNGs empty: for tests that read a figure's SVG text."""
    from fake_figures import written_empty

    written_empty(monkeypatch, frozenset({"png"}))


@pytest.fixture(scope="session")
def report_data():
    """The report's view of the committed ``metrics/`` (every profile), read once per worker, read-only."""
    from pathlib import Path

    from muon_repro.report.data import load

    return load(Path(__file__).resolve().parents[1] / "metrics")


@pytest.fixture(scope="session")
def committed_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    """report.md rendered from the committed ``metrics/`` with stand-in figures, once per test run (~4 s): the first
    xdist worker to need it renders it, the others read its text, read-only."""
    from pathlib import Path

    from fake_figures import render_with_stand_ins
    from run_once import build_once, shared_root

    def render(folder: Path) -> str:
        folder.mkdir(parents=True)
        return render_with_stand_ins(Path(__file__).resolve().parents[1] / "metrics", folder)

    return build_once(shared_root(tmp_path_factory) / "committed_report", render)


@pytest.fixture(scope="session")
def figure_data(report_data):
    """The committed tables of the profile the main figures draw (the first)."""
    return report_data.of_profile(report_data.profiles[0])
