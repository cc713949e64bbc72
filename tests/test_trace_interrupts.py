"""An interrupt while a trace is decoded stays an interrupt: the decoder's half-built objects still hold the buffer's
view, and releasing it (BufferError) must not replace the KeyboardInterrupt. Replaced, `analyze` counted the trace as
broken, went on and swapped incomplete tables in for the good ones."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from muon_repro.analysis import batch_read, scan
from muon_repro.analysis.limits import TraceLimits


def _trace(path: Path) -> Path:
    events = [{"ph": "X", "name": f"aten::mm{i}", "ts": i, "dur": 1, "pid": 0, "tid": 0, "cat": "cpu_op"} for i in range(50)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _interrupted_decode(held: list):
    """A decoder interrupted halfway: it has taken a piece of the view (an export), then Ctrl-C arrives."""

    def decode(view, *args, **kwargs):
        held.append(msgspec.json.decode(view, type=list[msgspec.Raw]))  # Raw values hold the view, as args do
        raise KeyboardInterrupt

    return decode


def test_an_interrupted_decode_raises_the_interrupt_not_a_buffer_error(monkeypatch):
    held: list = []
    monkeypatch.setattr(scan, "decode_piece_fast", _interrupted_decode(held))
    buf = bytearray(b'[{"ph":"X"},{"ph":"X"}]')
    scanner = scan.Scanner(Path("t.json"), lambda piece: None, piece_bytes=1 << 20)
    with pytest.raises(KeyboardInterrupt):
        scanner._decode_span(buf, 1, len(buf) - 1, tolerant=False)
    assert held and bytes(buf) == b'[{"ph":"X"},{"ph":"X"}]'  # the brackets written for the call are put back


def test_analyze_lets_an_interrupt_through_instead_of_counting_a_broken_trace(tmp_path, monkeypatch):
    held: list = []
    monkeypatch.setattr(scan, "decode_piece_fast", _interrupted_decode(held))
    monkeypatch.setattr(scan, "decode_piece", _interrupted_decode(held))
    trace = _trace(tmp_path / "rank0.json")
    with pytest.raises(KeyboardInterrupt):
        batch_read._analyze_job(str(trace), None, {}, TraceLimits(), 1)
    assert held
