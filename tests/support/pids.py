"""Process ids: one for a writer that is gone (the hidden folders of a killed writer name its pid), and the
children of a process (the workers a command started)."""

from __future__ import annotations

from pathlib import Path


def dead_pid() -> int:
    """A pid no process has: the system's pid_max (pids stay below it), without starting a process."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return 2**22 + 1


LINUX_PROC = Path("/proc/self/stat").is_file()
"""Whether :func:`children_of` can list children (Linux's /proc)."""


def children_of(pid: int, running: str = "") -> list[int]:
    """The processes whose parent is ``pid`` (Linux: /proc/<pid>/stat's fourth field), those whose command line
    holds ``running`` when given (``"spawn_main"``: multiprocessing's workers, not its resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == pid and running in command:
            found.append(int(stat.parent.name))
    return found
