"""Ctrl-C during ``publish`` or ``download``: one line on stderr saying what the Hub (or the disk) holds, exit 130.

A publish goes through steps that leave the Hub in different states (nothing sent; a repository
created empty; a commit that may have landed; a commit without its tag). :class:`PublishStage` is
told each step before it starts, so an interrupt can say which state it left.
"""

from __future__ import annotations

import sys

INTERRUPTED_EXIT = 130  # what a shell reports for a process stopped by Ctrl-C (128 + SIGINT)
NOTHING_SENT = "nothing was sent to the Hub: run the same command again"
DOWNLOAD_KEPT = "the files already fetched are kept: run the same command again to finish the download"


class PublishInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped ``publish``; the message says what the Hub holds and what to do."""


class PublishStage:
    """What an interrupt at the current step of a publish leaves on the Hub (:data:`NOTHING_SENT` at first)."""

    def __init__(self) -> None:
        self.left = NOTHING_SENT

    def at(self, left: str) -> None:
        """The step about to start would leave ``left`` if interrupted."""
        self.left = left


def say_interrupted(command: str, left: str, exit_code: int = INTERRUPTED_EXIT) -> int:
    """Print the one line an interrupted ``command`` ends with (``left``: what it leaves); the exit status."""
    print(f"muon-repro {command}: interrupted; {' '.join(left.split())}", file=sys.stderr)
    return exit_code
