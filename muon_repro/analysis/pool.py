"""One function over many inputs in ``spawn`` worker processes, with this process as the fallback.

``spawn`` is safe from a process that has started threads (one that imported torch). The
function must catch its own errors and return them as values: a result is never lost to
another input's failure. Only a pool that cannot run at all (the calling script has no
``__main__`` guard, or a worker was killed) sends the inputs it left undone back to this process.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
from collections.abc import Callable, Sequence
from typing import TypeVar

R = TypeVar("R")


def map_in_processes(
    fn: Callable[..., R], jobs: Sequence[tuple], workers: int, *, on_error: Callable[[tuple, BaseException], R]
) -> list[R]:
    """``[fn(*job) for job in jobs]``, in order, over at most ``workers`` processes.

    ``on_error(job, exc)`` stands for a job whose result could not come back (say, it did not
    pickle); ``fn``'s own exceptions should not get that far.
    """
    if workers <= 1 or len(jobs) <= 1:
        return [fn(*job) for job in jobs]
    undone = object()
    results: list = []
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        for job, future in zip(jobs, futures):
            try:
                results.append(future.result())
            except cf.process.BrokenProcessPool:
                results.append(undone)
            except Exception as exc:  # noqa: BLE001 - one job's failure must not lose the others
                results.append(on_error(job, exc))
    return [fn(*job) if r is undone else r for job, r in zip(jobs, results)]
