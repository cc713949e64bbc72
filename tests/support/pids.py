"""Processes: an id for a writer that is gone (the hidden folders of a killed writer name its pid), the children
of a process (the workers a command started), a child that takes Ctrl-C as a terminal's does, and waiting until a
command got somewhere."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def dead_pid() -> int:
    """A pid no process has: the system's pid_max (pids stay below it), without starting a process."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 2**22 + 1


LINUX_PROC = Path("/proc/self/stat").is_file()
"""Whether :func:`children_of` and :func:`session_members` can list processes (Linux's /proc)."""

# Fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses): state, ppid, pgrp, session.
PPID, SESSION = 1, 3


def _processes_with(field: int, value: int, running: str = "") -> list[int]:
    """The processes whose /proc/<pid>/stat ``field`` is ``value``, those whose command line holds ``running`` when
    given."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[field]) != value:
                continue
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") if running else ""
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if running in command:
            found.append(int(stat.parent.name))
    return found


def children_of(pid: int, running: str = "") -> list[int]:
    """The processes whose parent is ``pid``, those whose command line holds ``running`` when given
    (``"spawn_main"``: multiprocessing's workers, not its resource tracker)."""
    return _processes_with(PPID, pid, running)


def session_members(sid: int) -> list[int]:
    """The processes of session ``sid``: a terminal job's (``start_new_session``), its workers and their server too."""
    return _processes_with(SESSION, sid)


FORKSERVER = "multiprocessing.forkserver"
"""In the command line of a forkserver (the launcher's workers fork from one) and of every process it forked."""


def forkserver_of(pid: int) -> int | None:
    """The forkserver that ``pid`` started (it starts one, at its first launch), None while there is none."""
    servers = children_of(pid, FORKSERVER)
    return servers[0] if servers else None


def workers_of(pid: int) -> list[int]:
    """The launcher's workers that ``pid`` started: the processes its forkserver forked."""
    server = forkserver_of(pid)
    return [] if server is None else children_of(server, FORKSERVER)


def as_from_a_terminal() -> None:
    """``preexec_fn`` for a child that a test sends Ctrl-C: SIGINT as a terminal's process has it, default and
    unblocked. Both are inherited through fork and exec: a shell's background job (`pytest &`) ignores SIGINT, and a
    test worker that had picked up a mask blocking it (in the full slow tier) left the child deaf to the Ctrl-C."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _holds(condition: Callable[[], object]) -> bool:
    """``condition()``, False while a folder it scans vanishes under it: the bench's write probe
    (a ``.muon-repro-probe-*`` temporary folder) can be removed between a glob's listing and its scan."""
    try:
        return bool(condition())
    except FileNotFoundError:
        return False


def wait_for(condition: Callable[[], object], what: str, proc: subprocess.Popen, limit_s: float = 180) -> None:
    """Poll ``condition`` until it holds (the command got there); fail naming ``what`` if ``proc`` ended first
    or ``limit_s`` passed."""
    deadline = time.monotonic() + limit_s
    while not _holds(condition):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"{what} never happened (exit {proc.returncode}): {err[-2000:]}")
        time.sleep(0.05)
