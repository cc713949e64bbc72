"""Both gzip decoders (python-isal's igzip, the standard library's gzip) read a trace into the same
events, and a broken gzip file gets the same clear error from each."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.analysis import byte_source
from muon_repro.analysis.errors import TraceError
from muon_repro.analysis.reader import read_trace

HERE = Path(__file__).resolve().parent
TRACES = sorted((HERE.parent / "traces" / "cpu-2c-gloo" / "comparison").glob("*/trial0/rank0.json.gz"))
DECODERS = ["zlib", *(["isal"] if byte_source._igzip is not None else [])]


def _read(path: Path, decoder: str, monkeypatch) -> pd.DataFrame:
    monkeypatch.setenv(byte_source.FORCE_VARIABLE, decoder)
    assert byte_source.gzip_decoder() == decoder
    return read_trace(path).events


def test_isal_is_installed_where_the_project_is():
    """pyproject.toml depends on isal: a set-up that lost it would silently read at zlib's speed."""
    assert "isal" in DECODERS


@pytest.mark.parametrize("path", TRACES[:2], ids=lambda p: p.parent.parent.name)
def test_both_decoders_read_the_same_events(path, monkeypatch):
    frames = [_read(path, d, monkeypatch) for d in DECODERS]
    for other in frames[1:]:
        pd.testing.assert_frame_equal(frames[0], other)


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_broken_gzip_is_named_by_either_decoder(tmp_path, monkeypatch, decoder):
    data = gzip.compress(b'{"traceEvents": [' + b'{"ph": "X", "name": "a", "ts": 1, "dur": 1},' * 5000 + b"{}]}")
    truncated, corrupt = tmp_path / "truncated.json.gz", tmp_path / "corrupt.json.gz"
    truncated.write_bytes(data[: len(data) // 2])
    corrupt.write_bytes(data[:20] + bytes(200) + data[220:])
    monkeypatch.setenv(byte_source.FORCE_VARIABLE, decoder)
    with pytest.raises(TraceError, match="truncated gzip file"):
        read_trace(truncated)
    with pytest.raises(TraceError, match="corrupt gzip data") as caught:
        read_trace(corrupt)
    assert str(corrupt) in str(caught.value)
    stray = tmp_path / "stray.json.gz"  # a whole stream, then 4 bytes of something else: not called a cut-off file alone
    stray.write_bytes(data + b"junk")
    with pytest.raises(TraceError, match=r"a few bytes that are not gzip follow it|corrupt gzip data: Not a gzipped file"):
        read_trace(stray)
