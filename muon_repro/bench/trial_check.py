"""Whether a complete trial's files can be read, so that a sweep skips only trials the analysis will read.

A trial folder that has every file (:func:`muon_repro.rundir.missing_files` finds none) may still hold one that
was cut short or overwritten after it was recorded: a copy stopped halfway, a full disk, an edit. Skipping it
would say "skipped" and leave the damage to ``analyze``; so before a sweep skips a complete trial, its side
files (config.json, environment.json, metrics.json) are read as the analysis reads them
(:func:`muon_repro.rundir.load_json`, at most 16 MiB each) and each trace is checked as a whole gzip stream.

How a trace is checked: it is inflated in 1 MiB pieces that are counted and dropped, never parsed, so memory
stays constant and the cost is one pass of zlib over the file (0.16 s for the largest trace recorded here, 72 MB
decompressed from 4.5 MB, on one core). zlib then proves the deflate stream ends and checks the gzip trailer's
CRC-32 and length. Cheaper checks do not find the usual damage: a cut file's last 8 bytes are deflate data, not a
trailer, so reading the trailer alone cannot tell it from a whole one, and a bounded read from the start never
reaches a cut at the end. The pass stops once the trace has decompressed past the trace reader's default limit
(:data:`~muon_repro.analysis.limits.DEFAULT_MAX_TRACE_BYTES`, 4 GiB): what lies beyond is the analysis's to judge.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import BinaryIO

from muon_repro.analysis.limits import DEFAULT_MAX_TRACE_BYTES
from muon_repro.bench.identity import listed_trials
from muon_repro.rundir import CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE, SideFileError, load_json, trace_name

GZIP_MAGIC = b"\x1f\x8b"
PIECE_BYTES = 2**20  # read and inflated at a time
SIDE_FILES = (CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE)  # the JSON files of a trial (log.txt is text, never parsed)
RECORD_AGAIN = (
    "delete the trial folder and record it again: the same command records only the trials that are missing "
    "(--force records every trial again)"
)


def gzip_problem(path: Path, *, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> str | None:
    """Why ``path`` is no whole gzip file (cut short, corrupt, not gzip, unreadable), or None when it is, or when it
    decompresses past ``max_bytes`` before any problem shows (see the module's docstring)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            if head != GZIP_MAGIC:
                return "empty (0 bytes)" if not head else "not a gzip file (it does not start with gzip's magic bytes)"
            fh.seek(0)
            return _inflate_problem(fh, max_bytes)
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"


def _gzip_inflater() -> zlib._Decompress:
    return zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing: zlib checks the trailer's CRC-32 and length


def _inflate_problem(fh: BinaryIO, max_bytes: int) -> str | None:
    """Inflate every gzip member of the open file ``fh``, keeping nothing; None when each ends whole."""
    inflater = _gzip_inflater()
    produced = read = 0
    pending = b""
    while True:
        at_end = False
        if not pending:
            pending = fh.read(PIECE_BYTES)
            read += len(pending)
            at_end = not pending
        try:
            # at most a piece comes out of each call, so a bomb costs no memory; b"" at the end drains what zlib holds
            out = inflater.decompress(pending, PIECE_BYTES)
        except zlib.error as exc:
            return f"corrupt gzip data ({exc}) within its first {read:,} bytes"
        produced += len(out)
        if produced > max_bytes:
            return None
        if inflater.eof:  # a member ends whole: zeros may follow (gzip's padding), then another member or the end
            pending = inflater.unused_data.lstrip(b"\0")
            while not pending:
                piece = fh.read(PIECE_BYTES)
                read += len(piece)
                if not piece:
                    return None
                pending = piece.lstrip(b"\0")
            inflater = _gzip_inflater()
            continue
        pending = inflater.unconsumed_tail
        if at_end and not out:
            return f"cut short: its {read:,} bytes end inside the gzip stream (a copy or a write that did not finish)"


def trial_problems(run_dir: Path, world_size: int, profiled: bool) -> list[str]:
    """Why the complete trial in ``run_dir`` cannot be read, one ``file: why`` per file; empty when it can. A trial
    that was not profiled has no traces to check."""
    problems = []
    for name in SIDE_FILES:
        try:
            load_json(run_dir / name)
        except SideFileError as exc:
            problems.append(f"{name}: {exc.problem}")
    for rank in range(world_size if profiled else 0):
        if problem := gzip_problem(run_dir / trace_name(rank)):
            problems.append(f"{trace_name(rank)}: {problem}")
    return problems


def config_readable(run_dir: Path) -> bool:
    """Whether the trial's config.json reads as a record (else it is damaged, not recorded with other settings)."""
    try:
        load_json(run_dir / CONFIG_FILE)
    except SideFileError:
        return False
    return True


def damage_refusal(damaged: dict[Path, list[str]]) -> str:
    """The message that stops a sweep over complete trials holding a file that cannot be read (folder -> problems)."""
    listed = listed_trials(damaged)
    return (
        f"{len(damaged)} complete trial folder(s) hold a file that cannot be read, so they are neither skipped nor "
        f"recorded over: {listed}. For each, {RECORD_AGAIN}"
    )
