"""Start ``nprocs`` workers on this machine with torch's elastic launcher and collect results.

``torchrun --standalone`` semantics (c10d rendezvous on a free port chosen at run time), driven
from Python so commands and tests can launch a world without a shell. Each worker initializes
``torch.distributed`` from the launcher's environment, runs ``fn(*args)``, and tears down.

Ctrl-C (or SIGTERM) stops the workers at once: they die on the signal instead of unwinding
through collectives their peers will never join, the launcher waits at most
:data:`SHUTDOWN_TIMEOUT_S` before killing them, and :func:`launch` raises
:class:`LaunchInterrupted` rather than torch elastic's ``SignalException`` and its traceback.
A worker (and the server it forks from) starts with SIGINT blocked, so that a Ctrl-C while torch
is imported waits until :func:`_worker` lets it kill the worker, rather than printing a traceback
of the import.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from multiprocessing import forkserver, resource_tracker
from multiprocessing.process import BaseProcess
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

# The workers hold nothing worth a graceful shutdown (a run is written to a .partial folder that
# the caller removes), so the launcher kills them if they have not exited this soon after a signal.
SHUTDOWN_TIMEOUT_S = 2
# The signals torch elastic turns into SignalException while the workers run.
HANDLED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name))
# torch elastic's loggers that warn once per worker while shutting down (each sets its own level).
CHATTY_LOGGERS = ("torch.distributed.elastic.agent.server.api", "torch.distributed.elastic.multiprocessing.api")


class LaunchInterrupted(KeyboardInterrupt):
    """The launch was stopped by a signal (Ctrl-C: SIGINT); every worker is gone."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process killed by this signal: 128 + its number (130 for Ctrl-C)."""
        return 128 + self.signum


# What a worker needs before it trains, imported once by the server the workers fork from: torch, and torch._dynamo,
# which torch imports as a process builds its first optimizer (torch.optim's add_param_group). Imported by each of 4
# workers on 2 cores, they took 10.8 s of a launch before the workers ran; forked, 0.4 s after the first launch.
WORKER_PRELOAD = ("torch", "torch._dynamo", "torch.distributed", "muon_repro.bench.runner")
# The environment the running forkserver started in (its workers inherit it, and torch reads some of it as it is
# imported): a launch in another environment starts a new server. The one variable torch elastic sets in the launching
# process itself (on its first launch) does not count.
_forkserver_environ: dict[str, str] | None = None
LAUNCHERS_OWN_VARIABLES = ("TORCHELASTIC_SIGNALS_TO_HANDLE",)

# Worker processes one launch starts on this machine: 8 GPUs, or a large CPU node's cores (as calibrate's limit).
# A larger world is a typo here, or a job for torchrun across nodes; without a limit it starts them all.
MAX_LOCAL_WORKERS = 64


def default_backend(local_workers: int | None = None) -> str:
    """NCCL when every local worker can have its own GPU, else gloo.

    ``local_workers`` defaults to ``LOCAL_WORLD_SIZE`` (set by torchrun), else 1.
    """
    local = local_workers or int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local else "gloo"


def init_worker(backend: str) -> None:
    """Initialize ``torch.distributed`` from RANK/WORLD_SIZE/MASTER_* (set by torchrun or us)."""
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ValueError("backend 'nccl' needs CUDA GPUs and none is visible; use --backend gloo")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)


def _shutdown_timeout(launch_config: type) -> dict[str, int]:
    """``shutdown_timeout`` where this torch's ``LaunchConfig`` has it (2.13 does, 2.11 does not: its workers then
    get torch's own grace period after a signal)."""
    names = getattr(launch_config, "__dataclass_fields__", {})
    return {"shutdown_timeout": SHUTDOWN_TIMEOUT_S} if "shutdown_timeout" in names else {}


def worker_server() -> str:
    """Start the server :func:`launch`'s workers fork from, if it is not running, and wait until it has imported
    :data:`WORKER_PRELOAD`; return the start method for the workers: ``"forkserver"``, or ``"spawn"`` where this
    Python has no forkserver. A server that started in another environment than this process's is replaced.

    Waiting here (it forks one process that exits at once) keeps the workers' own start as short as a spawn's: a
    Ctrl-C then reaches every worker of a launch, or none, rather than the workers forked before it and not those
    forked after, which would wait for peers that never come. Call it with SIGINT blocked for the processes started
    (:func:`started_with_sigint_blocked`): the server's workers inherit its mask."""
    global _forkserver_environ
    server = getattr(forkserver, "_forkserver", None)
    if "forkserver" not in multiprocessing.get_all_start_methods() or not hasattr(server, "_stop"):
        return "spawn"
    environ = {name: value for name, value in os.environ.items() if name not in LAUNCHERS_OWN_VARIABLES}
    if environ != _forkserver_environ:
        server._stop()  # none running: a no-op
        forkserver.set_forkserver_preload(list(WORKER_PRELOAD))
        _forkserver_environ = environ
    # Started first if not running: starting it, multiprocessing unblocks SIGINT in this process, and the server
    # started next would take a Ctrl-C while its interpreter starts, with a traceback.
    resource_tracker.ensure_running()
    ready = multiprocessing.get_context("forkserver").Process(target=os.getpid, name="muon-repro-forkserver-ready")
    ready.start()  # returns once the server has imported WORKER_PRELOAD and forked it
    ready.join()
    return "forkserver"


@record  # writes the worker's traceback where the launcher's ChildFailedError reports it
def _worker(fn: Callable[..., Any], backend: str, threads: int | None, args: tuple) -> Any:
    # Ctrl-C kills a worker at once, even inside a collective: a KeyboardInterrupt would unwind
    # into collectives (and the final barrier) that the other, dying workers never join. One
    # pressed while the worker started (SIGINT blocked, see started_with_sigint_blocked) kills it here.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if threads:
        torch.set_num_threads(threads)
    init_worker(backend)
    try:
        result = fn(*args)
        dist.barrier()  # only after success: a failed rank's peers are stopped by the launcher
        return result
    finally:
        dist.destroy_process_group()


def describe_failure(exc: BaseException) -> str:
    """The failing rank and its error, from torch elastic's ``ChildFailedError``: the cause first, then the details."""
    try:
        rank, failure = exc.get_first_failure()  # type: ignore[attr-defined]
    except Exception:
        return str(exc)
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", message)
    if isinstance(message, dict):
        message = message.get("message", str(message))
    text = str(message).strip() or f"exit code {failure.exitcode}"
    return f"rank {rank} failed: {text.splitlines()[-1]}\n{text}"


def _interrupting_signal(exc: BaseException) -> int | None:
    """The signal that stopped the launch, if ``exc`` says it was one; else None."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    if isinstance(exc, SignalException):
        return int(exc.sigval)
    if isinstance(exc, KeyboardInterrupt):
        return int(signal.SIGINT)
    failures = getattr(exc, "failures", None)  # ChildFailedError: Ctrl-C in a terminal reaches the workers too
    if failures and all(f.exitcode == -signal.SIGINT for f in failures.values()):
        return int(signal.SIGINT)
    return None


def _kill_workers_left(running_before: set[BaseProcess]) -> None:
    """Kill the launch's workers still alive after an interrupt: those a Ctrl-C caught while torch elastic started
    them. It is raised as a worker's start returns (:func:`started_with_sigint_blocked`), once multiprocessing has
    recorded the worker but before torch has recorded the workers it started, so its shutdown stops none of them.
    Killed here, while the interrupt's traceback still holds the semaphore their arguments name: a worker unpickling
    it once it is gone prints a traceback, and one past that waits minutes for its peers."""
    for worker in set(multiprocessing.active_children()) - running_before:
        worker.kill()
        worker.join()


def _not_a_worker_killed_by_ctrl_c(record: logging.LogRecord) -> bool:
    """False for torch elastic's traceback of a worker that SIGINT killed. A terminal's Ctrl-C kills the workers too,
    and when the launcher sees one dead before its own handler runs, it logs that as a failure, with a traceback;
    :func:`launch` reports it as the interrupt it is (:class:`LaunchInterrupted`)."""
    from torch.multiprocessing.spawn import ProcessExitedException

    exc = record.exc_info[1] if record.exc_info else None
    return not (isinstance(exc, ProcessExitedException) and exc.exit_code == -signal.SIGINT)


@contextlib.contextmanager
def _quiet_elastic_shutdown() -> Iterator[None]:
    """Keep torch elastic's shutdown warnings ("Closing process N via signal SIGINT", one per worker) and its
    traceback of a worker killed by Ctrl-C off the terminal; a worker's failure still reaches it."""
    loggers = [logging.getLogger(name) for name in CHATTY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
        logger.addFilter(_not_a_worker_killed_by_ctrl_c)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
            logger.removeFilter(_not_a_worker_killed_by_ctrl_c)


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """A Ctrl-C meanwhile is noted, not raised, and raised at the end (to the handler it was meant for): for code
    that must not stop half-way, such as starting a process. Blocking SIGINT would not do: another thread (the
    tokenizer's) may take it, and Python raises it in the main thread all the same. Outside the main thread, where
    no handler can be set, it holds nothing back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    handler = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        if held:
            signal.raise_signal(signal.SIGINT)


@contextlib.contextmanager
def started_with_sigint_blocked() -> Iterator[None]:
    """Every process multiprocessing starts meanwhile starts with SIGINT blocked: a spawned one (a blocked mask survives
    exec), a forkserver started then, and so every worker it forks later (a mask survives fork). A Ctrl-C that reaches
    a worker (a terminal's reaches the whole process group) before its own code runs stays pending, instead of
    interrupting torch's import with a traceback on the terminal; the worker unblocks SIGINT when it can take it
    (:func:`_worker`), and the server ignores it. This process holds a Ctrl-C back (:func:`sigint_held`) for the whole
    of a process's start: until the process has all of its pickled arguments (large ones fill the pipe and wait for
    the worker's imports; cut short, they would fail to unpickle there, with a traceback), and multiprocessing has
    recorded it among this process's children, where :func:`launch` finds it to kill after a Ctrl-C."""
    start_one = BaseProcess.start

    def start_blocked(process: BaseProcess) -> None:
        with sigint_held():
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                start_one(process)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    BaseProcess.start = start_blocked
    try:
        yield
    finally:
        BaseProcess.start = start_one


@contextlib.contextmanager
def _signal_handlers_restored() -> Iterator[None]:
    """Put back this process's handlers of the signals torch elastic takes over while the workers run."""
    if threading.current_thread() is not threading.main_thread():  # elastic leaves them alone there too
        yield
        return
    handlers = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)


def launch(
    fn: Callable[..., Any],
    nprocs: int,
    *args: Any,
    backend: str = "gloo",
    threads: int | None = 1,
    stderr_dir: str | None = None,
) -> list[Any]:
    """Run ``fn(*args)`` on ``nprocs`` fresh worker processes; return their results by rank.

    With ``stderr_dir`` each worker's stderr (C++ warnings, profiler chatter) goes to
    ``stderr_dir/.../<rank>/stderr.log`` instead of the terminal; stdout stays on the terminal.

    ``fn`` must be importable (a module-level function). A worker's exception stops the whole
    world and is raised here as ``torch.distributed.elastic``'s ``ChildFailedError``, which names
    the failing rank and carries its traceback (:func:`describe_failure` makes it a message).
    Ctrl-C or SIGTERM stops every worker within :data:`SHUTDOWN_TIMEOUT_S` and raises
    :class:`LaunchInterrupted`.
    """
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if not 1 <= nprocs <= MAX_LOCAL_WORKERS:
        raise ValueError(
            f"{nprocs} worker processes on one machine: the launcher starts 1 to {MAX_LOCAL_WORKERS} (docs/limits.md); "
            "for a larger world start each rank under torchrun"
        )
    if backend == "nccl" and torch.cuda.device_count() < nprocs:
        raise ValueError(
            f"backend 'nccl' needs one GPU per worker: {nprocs} workers, "
            f"{torch.cuda.device_count()} GPU(s) visible; use --backend gloo"
        )
    logs_specs = None
    if stderr_dir is not None:
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std

        logs_specs = DefaultLogsSpecs(log_dir=stderr_dir, redirects=Std.ERR, tee=Std.NONE)
    running_before = set(multiprocessing.active_children())
    with _quiet_elastic_shutdown(), _signal_handlers_restored(), started_with_sigint_blocked():
        try:  # from the server's start (a Ctrl-C while it imports torch is a LaunchInterrupted too)
            config = LaunchConfig(
                start_method=worker_server(),
                logs_specs=logs_specs,
                min_nodes=1,
                max_nodes=1,
                nproc_per_node=nprocs,
                run_id=f"muon-repro-{uuid.uuid4().hex[:8]}",
                rdzv_backend="c10d",
                rdzv_endpoint="127.0.0.1:0",
                max_restarts=0,
                monitor_interval=0.05,
                **_shutdown_timeout(LaunchConfig),
            )
            results = elastic_launch(config, _worker)(fn, backend, threads, args)
        except BaseException as exc:
            signum = _interrupting_signal(exc)
            if signum is None:
                raise
            _kill_workers_left(running_before)
            raise LaunchInterrupted(signum) from None
    return [results[r] for r in range(nprocs)]
