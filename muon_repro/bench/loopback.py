"""Bytes that crossed the loopback interface, from the kernel's own counters.

A byte source independent of every model in the package: when all ranks of a run share one
machine (every gloo benchmark here), their traffic goes through ``lo``, and Linux counts each
byte it transmits there in ``/proc/net/dev``. The counter is machine-wide (per network
namespace): it holds every rank's traffic at once, plus anything else that uses loopback at the
same time, and TCP/IP headers and ACKs on top of the payload. On a quiet machine the delta over
a block is the block's traffic. Where there is no such file (macOS, Windows) the readers
return ``None`` and never raise.

Torch-free: whoever measures a distributed block passes its own ``sync`` (e.g.
``torch.distributed.barrier``) so that every rank is at the same place when the counter is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

PROC_NET_DEV = Path("/proc/net/dev")
LOOPBACK = "lo"
# After "iface:" come 8 receive counters (bytes packets errs drop fifo frame compressed multicast), then transmit bytes.
_TX_BYTES_FIELD = 8


def parse_tx_bytes(text: str, interface: str = LOOPBACK) -> int | None:
    """Transmit bytes of ``interface`` in a ``/proc/net/dev`` text; ``None`` if it has no such line."""
    for line in text.splitlines():
        name, colon, counters = line.partition(":")
        if not colon or name.strip() != interface:
            continue
        fields = counters.split()  # large counters may touch the colon ("lo:1234 ..."): partition handles it
        try:
            return int(fields[_TX_BYTES_FIELD])
        except (IndexError, ValueError):
            return None
    return None


def loopback_tx_bytes(path: str | Path = PROC_NET_DEV) -> int | None:
    """The loopback interface's transmit byte counter now; ``None`` where it cannot be read."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return parse_tx_bytes(text)


def all_ranks_local(world_size: int) -> bool:
    """Whether every rank runs on this machine, so that this loopback carries the whole world's
    traffic (torchrun and our launcher set ``LOCAL_WORLD_SIZE``; unset: assume one machine)."""
    local = os.environ.get("LOCAL_WORLD_SIZE")
    return local is None or not local.isdigit() or int(local) == world_size


class LoopbackMeter:
    """Bytes transmitted on loopback between :meth:`start` and :meth:`stop` (or around a ``with``).

    ``sync`` runs before and after each read (a barrier, for a distributed block): before, so that
    every rank has finished what came earlier; after, so that no rank starts sending what comes
    next before the counter is read (with more ranks than cores, the reader may be descheduled
    for a while). ``read`` is the counter; ``bytes`` stays ``None`` if it is unavailable at either end.
    """

    def __init__(self, sync: Callable[[], object] | None = None, read: Callable[[], int | None] = loopback_tx_bytes) -> None:
        self._sync = sync
        self._read = read
        self._start: int | None = None
        self.bytes: int | None = None

    def _sync_and_read(self) -> int | None:
        if self._sync is not None:
            self._sync()
        value = self._read()
        if self._sync is not None:
            self._sync()
        return value

    def start(self) -> None:
        self._start = self._sync_and_read()
        self.bytes = None

    def stop(self) -> int | None:
        end = self._sync_and_read()
        self.bytes = end - self._start if end is not None and self._start is not None else None
        return self.bytes

    def __enter__(self) -> LoopbackMeter:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
