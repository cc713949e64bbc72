"""The exceptions the analysis raises for bad input (a limit passed among them), and the warning it gives for repaired data."""

from __future__ import annotations

from pathlib import Path


class TraceError(ValueError):
    """A trace file (or run directory) that cannot be analyzed.

    The message always starts with the file's path, then says what is wrong, so that one
    bad file among many can be reported and skipped without hiding the others.
    """

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):  # keep (path, problem) across process boundaries
        return (type(self), (self.path, self.problem))


class TraceLimitError(TraceError):
    """A trace past one of the reader's limits (:mod:`muon_repro.analysis.limits`): the message
    names the file, the limit and how to raise it. Reading stopped at the limit."""


class TraceWarning(UserWarning):
    """Data of a trace that the analysis repaired or left out (an event with a negative ``dur``,
    a step with no length...). The message starts with the file's path and names the event;
    filter on this class to silence or escalate them (``-W error::...TraceWarning``)."""
