"""Job functions for tests/test_pool.py: importable by name in spawned workers."""

from __future__ import annotations

import os
import threading


def square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def unpicklable(x: int) -> threading.Lock:
    return threading.Lock()
