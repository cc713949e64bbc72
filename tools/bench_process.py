"""Measuring a child process for the benchmarks: its wall time and the peak resident memory of its
whole process tree (Linux ``/proc``), sampled every 10 ms while the parent waits for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (Linux /proc)."""
    total = 0
    stack = [root]
    seen = set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    stack.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def _high_water(pid: int) -> int:
    """The process's own peak resident bytes so far (``VmHWM``), 0 if unreadable.

    Unlike ``ru_maxrss``, which survives ``exec`` and so starts at the forking parent's size,
    ``VmHWM`` belongs to the process's current address space.
    """
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclass
class Measurement:
    wall_s: float
    peak_rss_bytes: int
    result: dict


@dataclass
class _Finished:
    wall_s: float  # from just before the process started to its exit
    peak_rss_bytes: int  # sampled tree RSS, or the root process's own VmHWM if higher
    returncode: int
    stdout: str
    stderr: str


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This checkout first on the path, so children import the code being measured; ``extra`` on top."""
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def run_sampled(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> _Finished:
    """Run ``argv`` to completion; its wall time and the peak resident set of its process tree.

    A thread samples the tree every 10 ms while this one blocks in ``waitpid``, so the wall time
    ends when the process exits, not at the next sample. Output goes to temporary files (a
    full pipe cannot stall the child).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=_child_env(env))
        peak = 0
        done = threading.Event()
        timed_out = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _tree_rss(proc.pid), _high_water(proc.pid))
                done.wait(0.01)

        def kill() -> None:
            if proc.returncode is None:
                timed_out.set()
                proc.kill()

        sampler = threading.Thread(target=sample, daemon=True)
        killer = threading.Timer(timeout, kill)
        sampler.start()
        killer.start()
        try:
            _, status = os.waitpid(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: tell Popen
        except BaseException:  # interrupted: leave no child behind
            proc.kill()
            proc.wait()
            raise
        finally:
            wall = time.perf_counter() - t0
            done.set()
            killer.cancel()
            sampler.join()
        if timed_out.is_set():
            raise TimeoutError(f"{' '.join(argv[:4])} ... did not finish within {timeout:.0f} s")
        out.seek(0)
        err.seek(0)
        return _Finished(
            wall_s=wall,
            peak_rss_bytes=peak,
            returncode=proc.returncode,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


def measure(python: str, script: str, args: list[str], timeout: float, env: dict[str, str] | None = None) -> Measurement:
    """Run ``script`` in a fresh interpreter; wall time as it reports, peak RSS of its tree."""
    done = run_sampled([python, "-c", script, *args], timeout, env)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return Measurement(wall_s=result["wall"], peak_rss_bytes=done.peak_rss_bytes, result=result)
