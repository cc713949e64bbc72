"""A process id for a writer that is gone (the hidden folders of a killed writer name its pid)."""

from __future__ import annotations

from pathlib import Path


def dead_pid() -> int:
    """A pid no process has: the system's pid_max (pids stay below it), without starting a process."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 2**22 + 1
