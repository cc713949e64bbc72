"""A call that must return: run in a daemon thread and waited on, so that a test fails instead of hanging when the
code under test blocks (a Hub that never answers, a pipe that is never written)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest


def bounded(fn: Callable[[], Any], limit_s: float = 30) -> tuple[Any, BaseException | None, float]:
    """``fn()``'s result (or None), its exception (or None) and its duration; fails the test when ``fn`` has not
    returned after ``limit_s`` seconds."""
    outcome: dict = {}

    def call() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    started = time.monotonic()
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(limit_s)
    if worker.is_alive():
        pytest.fail(f"still waiting after {limit_s} s")
    return outcome.get("value"), outcome.get("error"), time.monotonic() - started
