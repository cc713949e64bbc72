"""What reaches the terminal: text from files, tables and the Hub (file names, run names, a stranger's fields) is
data, never terminal control. :class:`EscapingStream` writes every control or format character but newline and tab
as its escape (``\\x1b``, ``\\u202e``), so a downloaded dataset cannot clear the screen, move the cursor over what
was printed, reverse text with a bidi override or rewrite a line with a carriage return; the commands that print
such names (everything but the recorders, whose progress lines redraw themselves) run with their output through it.
"""

from __future__ import annotations

import re
import sys
import unicodedata
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


def _printable_ascii(text: str) -> bool:
    return all(" " <= c <= "~" for c in text)


def shown(text: object) -> str:
    """``text`` as it may be printed: itself if printable ASCII, else ``ascii(text)`` (quoted, escapes visible)."""
    text = str(text)
    return text if _printable_ascii(text) else ascii(text)


def _is_control(c: str) -> bool:
    # Cc: C0/C1 controls and DEL (ESC starts ANSI sequences); Cf: format characters (bidi overrides, zero width)
    return c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")


def escape_controls(line: str) -> str:
    """``line`` with every control or format character but newline and tab written as its escape (``\\x1b``)."""
    if all(" " <= c <= "~" or c in "\n\t" for c in line):
        return line
    return "".join(ascii(c)[1:-1] if _is_control(c) else c for c in line)


# Commands that draw progress (a carriage return redraws the line); what they print are their own configurations.
PROGRESS_COMMANDS = frozenset({"run", "bench", "converge", "regimes", "calibrate", "equivalence"})


class EscapingStream:
    """A text stream that writes through :func:`escape_controls`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(escape_controls(text))
        return len(text)

    def __getattr__(self, name: str):  # flush, fileno, isatty, encoding...: the stream's own
        return getattr(self._stream, name)


@contextmanager
def escaped_output(command: str | None) -> Iterator[None]:
    """stdout and stderr through :class:`EscapingStream` while ``command`` runs (not for :data:`PROGRESS_COMMANDS`)."""
    if command in PROGRESS_COMMANDS:
        yield
        return
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(out), EscapingStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


@contextmanager
def plain_warnings(command: str) -> Iterator[None]:
    """While ``command`` runs, a warning is said as one line, ``muon-repro <command>: warning: <message>``, not in
    Python's form (the warning's source file and line, then that line of code), which reads like a traceback."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ARG001 - showwarning's signature
        print(f"muon-repro {command}: warning: {message}", file=file or sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


# What a credential looks like in text a server sent back: a Hugging Face token, or an Authorization header's value.
_SECRET = re.compile(r"\bhf_[A-Za-z0-9_]{8,}|(?i:\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{8,}")


# A URL's credentials (``scheme://user:password@host``): an HF_ENDPOINT may carry them, and errors quote URLs.
_URL_CREDENTIALS = re.compile(r"(?<=://)[^\s/@]+@")


def redact(text: str) -> str:
    """``text`` with anything shaped like a token replaced: a server's error may echo the request's headers back,
    and a URL its credentials."""
    return _URL_CREDENTIALS.sub("[redacted]@", _SECRET.sub("[redacted]", text))


def after_a_bar(message: str) -> str:
    """``message`` on a line of its own where a recorder's step bar may be on the terminal (stdout a terminal): a
    worker stopped by Ctrl-C leaves its bar without ending the line."""
    return f"\n{message}" if sys.stdout.isatty() else message


def first_line(exc: BaseException) -> str:
    """An exception's first line (its type when it says nothing), credentials redacted: what a one-line error
    message quotes of a failed request."""
    text = str(exc).strip()
    return redact(text.splitlines()[0]) if text else type(exc).__name__
