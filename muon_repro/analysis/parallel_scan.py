"""Decode an uncompressed trace file with several processes, this one included.

The events array is planned into byte ranges of about a piece each, cut at the first event
separator after each nominal offset (:func:`_plan_pieces`). Worker processes take ranges from
the front and decode them with :func:`muon_repro.analysis.decode.decode_file_range` (each reads
its own bytes); this process reads the tail, trailer included, with the sequential
:class:`~muon_repro.analysis.scan.Scanner`, then takes ranges from the back. A cut the
decoders reject, a worker that fails or dies, or a platform without shared memory makes
:func:`scan_parallel` return ``None``, and the caller reads the file sequentially: the
reference behaviour.

Worker processes are spawned and import this module for :func:`_decode_ranges`: it must
stay free of pandas (see :mod:`muon_repro.analysis`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from muon_repro.analysis import decode
from muon_repro.analysis.byte_source import OffsetSource
from muon_repro.analysis.decode import decode_file_range
from muon_repro.analysis.errors import TraceLimitError
from muon_repro.analysis.limits import EventBudget, TraceLimits
from muon_repro.analysis.piece_columns import PieceColumns
from muon_repro.analysis.scan import EVENT_SEPARATOR, HEADER_LIMIT, Scanner, find_events_start

_WINDOW = 2**20  # bytes read around a nominal cut point when planning pieces (and of the header, first)


def _plan_pieces(path: Path, start: int, size: int, piece_bytes: int) -> tuple[list[tuple[int, int]], int]:
    """Byte ranges of whole events (without separators) from ``start``, each ~``piece_bytes``,
    and the offset where the events after the last range start.

    Cut points are the first event separator (``}``, ``,``, ``{"``) after each nominal
    offset; they are checked by the decoders (a failure sends the whole file down the
    sequential path). The last range ends a piece or more before the end of the file; the
    sequential scanner reads what follows it, trailer included.
    """
    ranges = []
    lo = start
    with open(path, "rb") as fh:
        nominal = start + piece_bytes
        while nominal < size - piece_bytes:
            fh.seek(nominal)
            window = fh.read(_WINDOW)
            match = EVENT_SEPARATOR.search(window)
            if match is not None:
                cut = nominal + match.start() + 1  # exclusive end of the range: just after "}"
                ranges.append((lo, cut))
                lo = nominal + window.index(b",", match.start()) + 1  # just after ","
            nominal += piece_bytes
    return ranges, lo


def reads_in_parallel(file_bytes: int, gzipped: bool, workers: int, piece_bytes: int) -> bool:
    """Whether a trace is read by several processes: more than one asked, a plain file (a gzip stream is inflated by
    one process), and more than two pieces of it."""
    return workers > 1 and not gzipped and file_bytes > 2 * piece_bytes


def default_workers() -> int:
    """Reader processes by default: one per CPU, at most 8."""
    return max(1, min(os.cpu_count() or 1, 8))


class _Prestarted:
    """Reader processes started before their file is known, waiting for it on a pipe each, with the range counter
    they will share: their start (a new interpreter importing numpy and msgspec, ~0.27 s on 2 cores) overlaps what
    the caller does meanwhile (its own imports) instead of the read."""

    def __init__(self, count: int) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.bounds = ctx.Array("q", [0, 0])  # nothing to take until a file's ranges are handed out
        self.workers: list[tuple] = []  # (process, its job pipe's sending end, its pieces' reading end)
        for _ in range(count):
            jobs_reader, jobs_writer = ctx.Pipe(duplex=False)
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_wait_for_ranges, args=(self.bounds, jobs_reader, writer), daemon=True)
            proc.start()
            writer.close()
            jobs_reader.close()
            self.workers.append((proc, jobs_writer, reader))


_prestarted: _Prestarted | None = None


def prestart_workers(count: int) -> None:
    """Start ``count`` reader processes now for the next :func:`scan_parallel` (one file), so that their start
    overlaps the caller's own work; unused ones end when this process does (their job pipe closes). No-op for 0,
    or where processes cannot share memory (the read then spawns its own, or goes sequential)."""
    global _prestarted
    if count < 1 or _prestarted is not None:
        return
    try:
        _prestarted = _Prestarted(count)
    except (OSError, ImportError):
        _prestarted = None


def _take_prestarted() -> _Prestarted | None:
    global _prestarted
    pool, _prestarted = _prestarted, None
    return pool


def _wait_for_ranges(bounds, jobs, conn) -> None:
    """Prestarted worker process: wait for a file and its ranges, then read as :func:`_decode_ranges`; leave quietly
    if none comes (the job pipe closes with the process that started it)."""
    try:
        path, ranges = jobs.recv()
    except (EOFError, OSError):
        os._exit(0)
    _decode_ranges(path, ranges, bounds, conn)


def scan_parallel(
    path: Path, piece_bytes: int, workers: int, sink: Callable[[PieceColumns], None], limits: TraceLimits | None = None
) -> dict | None:
    """Decode an uncompressed file with ``workers`` processes, this one included; ``None`` if
    it cannot be done (the caller then reads the file sequentially).

    The planned ranges are shared out from both ends of one counter in shared memory:
    ``workers - 1`` worker processes take them one at a time from the front, while this
    process first decodes the tail (after the last range, trailer included) and then takes
    ranges from the back, until the two meet. Nobody waits for work while some is left, and
    this process never hands work out or collects it while it decodes: each worker sends its
    pieces down a pipe of its own (from a thread, so it goes on decoding), and they are read
    here once this process is done with its own share.

    ``limits``: the events are counted as they arrive and the stretch between two events is
    bounded (the file's size was checked by the caller); a limit passed raises its
    :class:`~muon_repro.analysis.errors.TraceLimitError` rather than falling back.
    """
    import multiprocessing as mp

    size = path.stat().st_size
    found, header = _find_header(path, size)
    if found is None or found[1]:
        return None
    start = found[0]
    ranges, resume = _plan_pieces(path, start, size, piece_bytes)
    if len(ranges) < 2 or workers < 2:
        return None
    if any(stop - begin > 2 * piece_bytes + _WINDOW for begin, stop in ranges):
        return None  # a window with no event boundary (a huge string?): the sequential reader bounds it
    ctx = mp.get_context("spawn")  # safe in a process that has started threads
    pool = _take_prestarted()
    try:
        # [next from the front, one past the next from the back], shared with the workers (a prestarted pool's own)
        bounds = pool.bounds if pool is not None else ctx.Array("q", [0, len(ranges)])
    except (OSError, ImportError):  # no shared memory or semaphores here
        return None
    if pool is not None:
        with bounds.get_lock():
            bounds[0], bounds[1] = 0, len(ranges)
    limits = limits or TraceLimits()
    budget = EventBudget(path, limits)
    results: list[PieceColumns | None] = [None] * len(ranges)
    procs: dict = {}  # reading end of its pipe -> worker process
    collected = False
    try:
        ready = pool.workers[: workers - 1] if pool is not None else []
        for proc, jobs, reader in ready:  # started already: hand them the file
            jobs.send((str(path), ranges))
            jobs.close()
            procs[reader] = proc
        for proc, jobs, reader in pool.workers[workers - 1 :] if pool is not None else []:
            jobs.close()  # more than this read uses: they leave on the closed pipe
            reader.close()
        for _ in range(workers - 1 - len(ready)):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_decode_ranges, args=(str(path), ranges, bounds, writer), daemon=True)
            procs[reader] = proc
            proc.start()
            writer.close()  # the worker's copy is its own: end of file here when it is gone
        tail: list[PieceColumns] = []

        def add_tail(piece: PieceColumns) -> None:
            budget.take(piece.n_events)
            tail.append(piece)

        with OffsetSource(path, resume, header) as src:
            meta = Scanner(path, add_tail, piece_bytes, limits).scan(src)
        while (i := _take(bounds, front=False)) is not None:
            results[i] = piece = decode_file_range(str(path), *ranges[i])
            budget.take(piece.n_events)
        collected = _collect(dict(procs), results, budget)
    except TraceLimitError:
        raise  # no fallback: the sequential reader would stop at the same limit
    except (ValueError, OSError):
        pass
    finally:
        _take_all(bounds)  # nothing more for the workers, whatever happened
        for reader, proc in procs.items():
            # done with: exiting, still starting (if it took nothing), or blocked on a pipe no
            # one reads any more (after a failure)
            if proc.pid is not None and proc.exitcode is None:
                proc.terminate()
            if proc.pid is not None:
                proc.join()
            reader.close()
    if not collected:
        return None
    for piece in results:
        sink(piece)
    for piece in tail:
        sink(piece)
    return meta


def _take(bounds, *, front: bool) -> int | None:
    """The next range index from the front or the back of ``bounds``, ``None`` when all are taken.

    Raises ``OSError`` if the lock stays taken (a process died holding it)."""
    lock = bounds.get_lock()
    if not lock.acquire(timeout=_LOCK_TIMEOUT_S):
        raise OSError("a reading process died holding the shared range counter")
    try:
        lo, hi = bounds[0], bounds[1]
        if lo >= hi:
            return None
        if front:
            bounds[0] = lo + 1
            return lo
        bounds[1] = hi - 1
        return hi - 1
    finally:
        lock.release()


def _take_all(bounds) -> None:
    """Leave no range to take (after a failure, or once done)."""
    lock = bounds.get_lock()
    if lock.acquire(timeout=_LOCK_TIMEOUT_S):
        bounds[0] = bounds[1]
        lock.release()


_LOCK_TIMEOUT_S = 10.0  # the lock is held for a few instructions; longer means its holder died


def _decode_ranges(path: str, ranges: list[tuple[int, int]], bounds, conn) -> None:
    """Worker process: decode ranges from the front until none is left, and send each piece
    down ``conn`` as ``(index, piece, None)``, or a failure as ``(index, None, message)``
    (then stop). A thread sends, so decoding goes on while the reader is busy elsewhere."""
    import queue
    import threading

    outbox: queue.SimpleQueue = queue.SimpleQueue()

    def send() -> None:
        while (item := outbox.get()) is not None:
            conn.send(item)
        conn.close()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    while (i := _take(bounds, front=True)) is not None:
        try:
            piece = decode.decode_file_range(path, *ranges[i])
        except Exception as exc:  # noqa: BLE001 - reported to the reading process, which falls back
            _take_all(bounds)  # the file is read sequentially instead: no one need go on
            outbox.put((i, None, f"{type(exc).__name__}: {exc}"))
            break
        outbox.put((i, piece, None))
    outbox.put(None)
    sender.join()
    # everything sent: exit without tearing the interpreter down (numpy, the decoded objects)
    os._exit(0)


def _collect(procs: dict, results: list, budget: EventBudget) -> bool:
    """Read the workers' pieces into ``results`` until every range is in; ``False`` if a worker
    failed, or ended with a range it had taken. Workers that took nothing (this process was
    faster than their start) are not waited for. ``procs``: reading end -> process. Each piece's
    events are taken from ``budget`` (which raises past the limit)."""
    from multiprocessing.connection import wait

    missing = sum(piece is None for piece in results)
    while missing:
        if not procs:
            return False
        sentinels = {proc.sentinel: reader for reader, proc in procs.items()}
        for ready in wait([*procs, *sentinels]):
            reader = sentinels.get(ready, ready)
            if reader not in procs:
                continue
            if ready is not reader and reader.poll():
                continue  # exited with pieces still in the pipe: read them first
            if ready is not reader:  # exited and nothing left to read (e.g. died starting)
                del procs[reader]
                continue
            try:
                i, piece, error = reader.recv()
            except (EOFError, OSError):  # the worker is gone, all it sent read
                del procs[reader]
                continue
            if error is not None:
                return False
            budget.take(piece.n_events)
            results[i] = piece
            missing -= 1
    return True


def _find_header(path: Path, size: int) -> tuple[tuple[int, bool] | None, bytes]:
    """Where the events array starts (see :func:`find_events_start`) and the bytes before it."""
    with open(path, "rb") as fh:
        head = fh.read(min(size, _WINDOW))
        found = find_events_start(head, path)
        if found is None and len(head) < min(size, HEADER_LIMIT):
            head += fh.read(min(size, HEADER_LIMIT) - len(head))
            found = find_events_start(head, path)
    return found, (head[: found[0]] if found is not None else b"")
