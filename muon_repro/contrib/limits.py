"""The limits on a contribution: how many files and bytes a pull request may add, how large each file may
be, and the integer range of each number in ``config.json`` that a check sizes anything by.

Each is checked before anything is downloaded or allocated in proportion to it (a pull request's
file list gives every size), so a hostile pull request costs a review one listing, not a full disk
or a ``MemoryError``. The values are generous against what the project records (numbers in the
comments); docs/contributing.md's "Limits" section lists them. A trace's decompressed size is the
trace reader's own limit (:mod:`muon_repro.analysis`), not one of these.
"""

from __future__ import annotations

from muon_repro.dataset.manifest import MANIFEST_NAME

# config.json's integer fields and their ranges are the run records' own: the analysis refuses a run folder by the
# rules a review refuses a contribution by.
from muon_repro.run_records import MAX_TRIAL as MAX_TRIAL
from muon_repro.run_records import MAX_WORLD_SIZE as MAX_WORLD_SIZE
from muon_repro.run_records import RECORD_INT_RANGES
from muon_repro.rundir import CONFIG_FILE, ENVIRONMENT_FILE, LOG_FILE, METRICS_FILE, trace_rank

CONFIG_INT_RANGES = RECORD_INT_RANGES  # (smallest, largest) of each integer field; a field may be absent
KIB, MIB, GIB = 2**10, 2**20, 2**30

# Files one pull request may add: a full benchmark of one 8-rank profile is ~340 trials of 12 files (~4,000);
# this dataset holds 1,444 files in all. Each file is one download request, so this also bounds a review's requests.
MAX_PR_FILES = 20_000
# Bytes one pull request may add: review downloads all of them into a temporary folder. This dataset is 251 MB; a
# full 8-GPU sweep is a few GB of compressed traces (the largest recorded trace is 4.5 MB).
MAX_PR_BYTES = 16 * GIB

# Largest size of each kind of file (bytes), against the largest recorded here.
MAX_FILE_BYTES = {
    CONFIG_FILE: 64 * KIB,  # largest recorded: 1.3 KB (the command line is its longest field)
    ENVIRONMENT_FILE: 1 * MIB,  # 6 KB: pip freeze grows with the environment
    METRICS_FILE: 16 * MIB,  # 942 KB: one entry per rank with per-step numbers
    LOG_FILE: 16 * MIB,  # 10.1 KB: losses and step times, worker stderr; stored, never parsed
    MANIFEST_NAME: 64 * MIB,  # one ~110-byte line per file of the dataset: room for ~600,000 files
}
# A trace, compressed: the largest recorded is 4.5 MB (72 MB decompressed, one H200 rank); a long multi-GPU trace
# with every kernel is a few hundred MB. Its decompressed size is bounded by the trace reader.
MAX_TRACE_BYTES = 2 * GIB

# What a contributed trace may decompress to, checked as it is read (the trace reader's max_trace_bytes): at most
# 64 times its compressed size (recorded traces: 16 times, 72 MB from 4.5 MB; gzip of JSON events rarely passes 20),
# and never less than 64 MiB. A gzip bomb (2 GiB of whitespace in 2 MB) stops after 128 MiB instead of at the reader's
# general limit (4 GiB, ~20 s and ~1 GB of decoded events per file).
MAX_TRACE_EXPANSION = 64
MIN_TRACE_ALLOWANCE = 64 * MIB

# Problems a review prints in full before "and N more": the count says how many there are, the first ones say why.
MAX_SHOWN_PROBLEMS = 100


def binary_size(n: int) -> str:
    """A limit as it is written here: ``64 KiB``, ``16 MiB``, ``2 GiB`` (bytes when it is no whole unit)."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def trace_allowance(compressed_bytes: int) -> int:
    """The decompressed bytes a contributed trace of ``compressed_bytes`` may hold (see MAX_TRACE_EXPANSION)."""
    return max(MIN_TRACE_ALLOWANCE, MAX_TRACE_EXPANSION * compressed_bytes)


def file_limit(name: str) -> int | None:
    """The largest size allowed for a run file (or the manifest) called ``name``; None for a name no run has."""
    if name in MAX_FILE_BYTES:
        return MAX_FILE_BYTES[name]
    return MAX_TRACE_BYTES if trace_rank(name) is not None else None
