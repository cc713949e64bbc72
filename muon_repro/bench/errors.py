"""What a sweep raises: a failed run, and an interrupted sweep (with the exit status a shell expects)."""

from __future__ import annotations


class BenchError(RuntimeError):
    """A run failed, or the sweep cannot go on; the message names the config and says why."""


class BenchInterrupted(BenchError):
    """Ctrl-C (or SIGTERM) stopped the sweep; the message says what was dropped and what was kept."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # as a shell reports a process killed by the signal: 130 for Ctrl-C
