"""Gzip bombs for the trace reader's limits (tests/test_trace_limits.py, tests/test_contrib_rules.py): a small file
that decompresses to far more than it looks, made in a fraction of a second."""

from __future__ import annotations

import gzip
from pathlib import Path


def gzip_bomb(path: Path, head: bytes, block: bytes, copies: int, tail: bytes = b"") -> Path:
    """``head``, then ``block`` ``copies`` times, then ``tail``, as one gzip stream of members (as ``gzip -c a b``
    writes two files): the block is compressed once, so a GiB costs a second and a few MB of disk."""
    member = gzip.compress(block)
    with open(path, "wb") as fh:
        fh.write(gzip.compress(head))
        for _ in range(copies):
            fh.write(member)
        if tail:
            fh.write(gzip.compress(tail))
    return path
