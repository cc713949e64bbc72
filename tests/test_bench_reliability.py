"""``muon-repro bench`` and ``equivalence`` under stress: Ctrl-C, two runs into one --out, a bad --out, a bad --tp."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest
from support.pids import LINUX_PROC, as_from_a_terminal, forkserver_of, session_members, wait_for, workers_of

from muon_repro.bench.sweep import LOCK_NAME, BenchError, BenchInterrupted, _lock_run_dir, check_out_folder, locked_run_dirs

CONFIG = "comparison/adamw_dp2_tp2"
PROFILE = "test-cpu-gloo"  # named, so the run folder does not depend on the machine
RUN = Path(PROFILE) / "comparison" / "adamw_dp2_tp2"


def _muon_repro(*args: str) -> list[str]:
    return [sys.executable, "-m", "muon_repro", *args]


def _bench(out: Path, *extra: str) -> list[str]:
    return _muon_repro("bench", CONFIG, "--scale", "tiny", "--out", str(out), "--no-progress", "--profile", PROFILE, *extra)


def _start_bench(out: Path, trials: int, *, own_session: bool = False) -> subprocess.Popen:
    """The bench recording ``trials`` rounds into ``out``, started as from a terminal; in a process group of its own
    (a terminal's foreground job) with ``own_session``."""
    return subprocess.Popen(
        _bench(out, "--trials", str(trials)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=own_session,
        preexec_fn=as_from_a_terminal,
    )


def _interrupt(proc: subprocess.Popen) -> tuple[float, str]:
    """SIGINT to the bench process (what Ctrl-C sends it); seconds until it exited, and its stderr."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return time.monotonic() - sent, err


# ---------------------------------------------------------------------- Ctrl-C


@pytest.mark.slow
def test_ctrl_c_stops_the_workers_at_once_and_keeps_nothing_of_the_trial(tmp_path):
    proc = _start_bench(tmp_path, 1)
    wait_for(lambda: list(tmp_path.glob("*/*/*/.*.partial/*")), "the workers writing a .partial trial", proc)
    seconds, err = _interrupt(proc)
    assert proc.returncode == 130, err
    assert "interrupted, nothing kept for comparison/adamw_dp2_tp2/trial0 (1 of 1)" in err
    assert "Traceback" not in err and "SignalException" not in err and "Closing process" not in err, err
    assert not list(tmp_path.rglob(".*.partial")) and not list(tmp_path.rglob("trial*"))
    assert not list(tmp_path.rglob(LOCK_NAME))
    assert seconds < 15, f"took {seconds:.1f} s to exit"


@pytest.mark.slow
def test_ctrl_c_keeps_the_trials_completed_before(tmp_path):
    proc = _start_bench(tmp_path, 2)
    wait_for(lambda: (tmp_path / RUN / ".trial1.partial").is_dir(), "trial 2 starting", proc)
    seconds, err = _interrupt(proc)
    assert proc.returncode == 130, err
    assert "nothing kept for comparison/adamw_dp2_tp2/trial1 (2 of 2)" in err
    assert "kept the 1 trial(s) completed before: comparison/adamw_dp2_tp2/trial0 (1 of 2)" in err
    assert (tmp_path / RUN / "trial0" / "metrics.json").is_file() and not (tmp_path / RUN / "trial1").exists()
    assert not list(tmp_path.rglob(".*.partial")) and "Traceback" not in err
    assert seconds < 15, f"took {seconds:.1f} s to exit"


@pytest.mark.slow
@pytest.mark.skipif(not LINUX_PROC, reason="finds the workers through Linux's /proc")
@pytest.mark.parametrize("moment", ["the server imports torch", "the workers run"])
def test_ctrl_c_in_a_terminal_while_the_workers_start_prints_no_traceback_and_leaves_no_process(tmp_path, moment):
    """A terminal's Ctrl-C reaches the whole process group: the server the workers fork from too, while it imports
    torch (about 5 s here), and the workers once forked. Both start with SIGINT blocked, the server ignores it and a
    worker dies of it once it can die quietly; the bench says what it kept, with no traceback of theirs above it, and
    no process of the job outlives it (a worker forked after the Ctrl-C would wait for its peers for minutes)."""
    proc = _start_bench(tmp_path, 1, own_session=True)
    if moment == "the server imports torch":
        wait_for(lambda: forkserver_of(proc.pid), "the forkserver starting", proc)
    else:
        wait_for(lambda: len(workers_of(proc.pid)) >= 4, "the 4 workers starting", proc)  # dp2 x tp2
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted, nothing kept for comparison/adamw_dp2_tp2/trial0 (1 of 1)" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert time.monotonic() - sent < 15
    deadline = time.monotonic() + 10
    while session_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not session_members(proc.pid), "processes of the job outlived it"


# A Ctrl-C held while the last worker starts is raised as its start returns, before torch elastic records the workers.
_CTRL_C_AS_THE_LAST_WORKER_STARTS = """
import os, signal
from multiprocessing import active_children, popen_forkserver
from muon_repro.parallel import launch

started = popen_forkserver.Popen._launch
workers = []

def start_then_ctrl_c(popen, process_obj):
    started(popen, process_obj)
    if process_obj.name != "muon-repro-forkserver-ready":
        workers.append(popen.pid)
        if len(workers) == 2:
            signal.raise_signal(signal.SIGINT)

popen_forkserver.Popen._launch = start_then_ctrl_c
try:
    launch.launch(os.getpid, 2)
except launch.LaunchInterrupted:
    print("interrupted", len(workers), "workers started,", len(active_children()), "alive")
"""


@pytest.mark.slow
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers live there")
def test_a_ctrl_c_before_torch_records_the_workers_leaves_none_behind():
    """Torch elastic stops only the workers it has recorded; a Ctrl-C raised as the last one starts comes before that:
    the launch kills them itself, before they read arguments that are gone or wait minutes for their peers."""
    proc = subprocess.run([sys.executable, "-c", _CTRL_C_AS_THE_LAST_WORKER_STARTS], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "interrupted 2 workers started, 0 alive", proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


# A worker that Ctrl-C killed, seen by the launcher before its own SIGINT handler runs (a race a terminal's Ctrl-C
# sometimes wins): here the worker raises SIGINT itself and the launcher gets none.
_A_WORKER_KILLED_BY_CTRL_C = """
import signal
from muon_repro.parallel import launch
try:
    launch.launch(signal.raise_signal, 2, {signal})
except launch.LaunchInterrupted as exc:
    print("interrupted", exc.exit_code)
except Exception as exc:
    print("failed", launch.describe_failure(exc).splitlines()[0])
"""


@pytest.mark.slow
@pytest.mark.parametrize(("signal_name", "said"), [("SIGINT", "interrupted 130"), ("SIGKILL", "failed rank ")])
def test_a_worker_killed_by_ctrl_c_is_an_interrupt_without_a_traceback(signal_name, said):
    """Torch elastic logs a worker's death by a signal as a failure, with its traceback. For SIGINT (a terminal's Ctrl-C
    reaches the workers) the launch says it was interrupted and nothing else; any other signal stays a failure, and
    its log stays on the terminal."""
    code = _A_WORKER_KILLED_BY_CTRL_C.format(signal=f"signal.{signal_name}")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(said), proc.stdout + proc.stderr
    assert ("Traceback" in proc.stderr) == (signal_name != "SIGINT"), proc.stderr


@contextlib.contextmanager
def sigint_handled_by(handler) -> Iterator[None]:
    """This process's SIGINT handler for a while: a shell starts a background job (`cmd &`) with SIGINT ignored, so
    a test of what Ctrl-C does sets the handler it assumes instead of inheriting whatever pytest was started with."""
    before = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers live there")
def test_a_launch_starts_its_workers_with_sigint_blocked_and_takes_a_ctrl_c_after(monkeypatch):
    """Blocked from the start until the worker has its pickled arguments and multiprocessing has recorded it (the whole
    of Process.start, whatever the start method); a Ctrl-C meanwhile is raised after that, and this process takes
    Ctrl-C again."""
    from muon_repro.parallel import launch

    started = []

    def start(self) -> None:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C while the worker starts
        started.append(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))

    monkeypatch.setattr(BaseProcess, "start", start)
    with sigint_handled_by(signal.default_int_handler), launch.started_with_sigint_blocked():
        with pytest.raises(KeyboardInterrupt):
            BaseProcess.start(None)
        assert started == [True]  # the start went to its end, SIGINT blocked, before the Ctrl-C was raised
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert BaseProcess.start is start


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers live there")
def test_a_launch_in_a_process_that_ignores_ctrl_c_goes_on_ignoring_it(monkeypatch):
    """Started in the background (`muon-repro run &`), the process ignores SIGINT: a Ctrl-C held back while a worker
    starts is then ignored too, and the process still ignores SIGINT afterwards."""
    from muon_repro.parallel import launch

    started = []

    def start(self) -> None:
        signal.raise_signal(signal.SIGINT)
        started.append(True)

    monkeypatch.setattr(BaseProcess, "start", start)
    with sigint_handled_by(signal.SIG_IGN), launch.started_with_sigint_blocked():
        BaseProcess.start(None)  # no KeyboardInterrupt
        assert started == [True]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_the_worker_server_preloads_modules_that_exist():
    """multiprocessing's server skips a preload it cannot import without a word, so a renamed module would silently
    cost every worker its import again: the names are checked here."""
    import importlib.util

    from muon_repro.parallel.launch import WORKER_PRELOAD

    missing = [name for name in WORKER_PRELOAD if importlib.util.find_spec(name) is None]
    assert not missing, f"WORKER_PRELOAD names modules that do not exist: {missing}"


# ---------------------------------------------------------------------- one sweep per run folder


def test_a_held_run_folder_is_refused_with_the_holders_pid(tmp_path):
    run_dir = tmp_path / RUN
    with locked_run_dirs([run_dir]):
        assert (run_dir / LOCK_NAME).read_text().strip() == str(os.getpid())
        with pytest.raises(BenchError, match=rf"{run_dir} is being recorded by another muon-repro bench \(PID {os.getpid()}\)"):
            _lock_run_dir(run_dir)
    assert not (run_dir / LOCK_NAME).exists()  # released: removed
    fd = _lock_run_dir(run_dir)  # and free again
    os.close(fd)


def test_a_lock_file_left_by_a_dead_process_does_not_block(tmp_path):
    run_dir = tmp_path / RUN
    run_dir.mkdir(parents=True)
    (run_dir / LOCK_NAME).write_text("999999999\n")  # no flock on it: its process is gone
    with locked_run_dirs([run_dir]):
        assert (run_dir / LOCK_NAME).read_text().strip() == str(os.getpid())


@pytest.mark.slow
def test_a_second_bench_into_the_same_out_stops_at_once_naming_the_first(tmp_path):
    """The first run holds the folder (here: this process); the second is refused before launching anything."""
    run_dir = tmp_path / RUN
    with locked_run_dirs([run_dir]):
        started = time.monotonic()
        done = subprocess.run(_bench(tmp_path, "--trials", "1"), capture_output=True, text=True, timeout=120)
        seconds = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert f"is being recorded by another muon-repro bench (PID {os.getpid()})" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.rglob(".*.partial")) and not list(tmp_path.rglob("trial*"))
    assert seconds < 60  # no worker was started (a recording takes longer than the import alone)


# ---------------------------------------------------------------------- --out checked before launching


@pytest.mark.slow
def test_out_that_is_a_file_is_refused_before_launching(tmp_path):
    target = tmp_path / "traces.txt"
    target.write_text("not a folder\n")
    done = subprocess.run(_bench(target, "--trials", "1"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"muon-repro bench: error: --out {target} is a file, not a folder" in done.stderr
    assert "Traceback" not in done.stderr and target.read_text() == "not a folder\n"


def test_out_below_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"--out .*file/traces cannot be created: .*file is a file, not a folder"):
        check_out_folder(tmp_path / "file" / "traces")


def test_out_in_an_unwritable_folder_is_refused(tmp_path, monkeypatch):
    from support.unwritable import make_unwritable

    locked = tmp_path / "locked"
    locked.mkdir()
    make_unwritable(locked, monkeypatch)
    try:
        with pytest.raises(ValueError, match=r"--out .*locked/traces: no permission to write in .*locked"):
            check_out_folder(locked / "traces")
    finally:
        locked.chmod(0o700)


# ---------------------------------------------------------------------- equivalence checks the grid before launching


@pytest.mark.slow
def test_equivalence_tp_that_does_not_divide_the_model_is_refused_before_launching():
    started = time.monotonic()
    done = subprocess.run(_muon_repro("equivalence", "--dp", "1", "--tp", "3"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "muon-repro equivalence: error: --tp 3 does not divide the tiny preset's hidden=32, n_heads=4, ffn_hidden=128, "
        "vocab_size=128 (tensor parallelism splits each of hidden, n_heads, ffn_hidden, vocab_size); use --tp 1, 2 or 4"
    ]
    assert time.monotonic() - started < 60


# ---------------------------------------------------------------------- muon-repro run: an interruption is a sentence


@pytest.mark.parametrize(
    "raised, code, said",
    [
        (KeyboardInterrupt(), 130, "muon-repro run: interrupted; every stage writes atomically"),
        (
            BenchInterrupted("interrupted, nothing kept for comparison/adamw_dp2_tp2/trial0 (1 of 1)", signal.SIGINT),
            130,
            "muon-repro run: interrupted, nothing kept for comparison/adamw_dp2_tp2/trial0 (1 of 1)",
        ),
        (
            BenchError("comparison/adamw_dp2_tp2/trial0 (1 of 1): rank 1 failed: boom"),
            1,
            "muon-repro run: error: comparison/adamw_dp2_tp2/trial0 (1 of 1): rank 1 failed: boom",
        ),
    ],
)
def test_run_reports_an_interrupted_or_failed_stage_without_a_traceback(raised, code, said, tmp_path, monkeypatch, capsys):
    from muon_repro import job
    from muon_repro.cli import main

    def stopped(plan) -> None:
        raise raised

    monkeypatch.setattr(job, "run_job", stopped)
    assert main(["run", "--out", str(tmp_path)]) == code
    assert capsys.readouterr().err.startswith(said)


def test_an_interruption_is_said_on_a_line_of_its_own_after_a_bar(monkeypatch):
    """A worker stopped by Ctrl-C leaves its step bar without ending the line: the message was glued to it."""
    from muon_repro.terminal import after_a_bar

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert after_a_bar("muon-repro run: interrupted") == "\nmuon-repro run: interrupted"
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)  # no bar is drawn into a file
    assert after_a_bar("muon-repro run: interrupted") == "muon-repro run: interrupted"
