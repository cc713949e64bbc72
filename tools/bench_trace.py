"""The benchmark's large trace: a real trace's events repeated until the file reaches a size, and
its gzip copy. Built once and cached (``tools.analysis_benchmark`` explains the construction).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import sys
import zlib
from pathlib import Path

from muon_repro.tables.files import write_atomic

GZIP_LEVEL = 6  # zlib's default, what ``gzip -6`` and most tools write

_NUMBERS = re.compile(rb'("ts": ?|"External id": ?|"correlation": ?|"id": ?)(-?\d+(?:\.\d+)?)')
_ID_SHIFT = 10_000_000


def _events_span(text: bytes) -> tuple[int, int, dict, list]:
    """(start, end) of the events array's contents in ``text``, the top-level keys, the events."""
    from muon_repro.analysis.scan import find_events_start, parse_meta

    found = find_events_start(text, Path("source"))
    if found is None or found[1]:
        raise ValueError("the source trace must be a JSON object with a traceEvents array")
    start = found[0]
    doc = json.loads(text.decode("utf-8", "replace"), strict=False)
    events = doc["traceEvents"]
    p = len(text)
    while (p := text.rfind(b"]", start, p)) >= 0:
        if parse_meta(text[:start], text[p + 1 :]) is not None:
            try:
                body = json.loads(b"[" + text[start:p] + b"]", strict=False)
            except ValueError:
                continue
            if len(body) == len(events):
                return start, p, doc, events
    raise ValueError("could not find the end of the source's traceEvents array")


def build_trace(source: Path, out: Path, size_bytes: int) -> dict:
    """Write ``out`` by repeating ``source``'s events (see the module docstring); ValueError naming ``source`` when
    it is no Kineto trace to repeat (unreadable, a damaged gzip, no events with a pid and a time)."""
    try:
        raw = source.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        start, end, _, events = _events_span(text)
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        raise ValueError(f"--source {source}: not a readable Kineto trace ({exc}); give a .json or .json.gz trace") from None
    if not any(isinstance(e, dict) and isinstance(e.get("pid"), int) and isinstance(e.get("ts"), (int, float)) for e in events):
        raise ValueError(f"--source {source}: its traceEvents hold no event with a pid and a time stamp to repeat")
    body = text[start:end].strip()
    # no ProfilerStep inside the copies: three synthetic steps are appended instead
    body = re.sub(rb'"ProfilerStep#(\d+)"', rb'"Iteration#\1"', body)
    real = [e for e in events if isinstance(e.get("pid"), int) and isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in real)
    span = max(e["ts"] + e.get("dur", 0) for e in real) - t0 + 1000.0
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    main = steps[0] if steps else real[0]
    first_step = int(steps[0]["name"].split("#")[1]) if steps else 0

    parts = _NUMBERS.split(body)  # text, key, number, text, key, number, ..., text
    copies = max(1, math.ceil(size_bytes / len(body)))
    out.parent.mkdir(parents=True, exist_ok=True)
    n_steps = min(3, copies)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(text[:start] + b"\n  ")
            for k in range(copies):
                if k:
                    fh.write(b",\n  ")
                if k == 0:
                    fh.write(body)
                    continue
                shifted = list(parts)
                for i in range(1, len(parts), 3):
                    key, num = parts[i], parts[i + 1]
                    if key.startswith(b'"ts"'):
                        shifted[i + 1] = b"%.3f" % (float(num) + k * span)
                    elif b"." not in num:
                        shifted[i + 1] = b"%d" % (int(num) + k * _ID_SHIFT)
                fh.write(b"".join(shifted))
            per = copies / n_steps
            for s in range(n_steps):
                lo, hi = round(s * per), round((s + 1) * per)
                step = {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{first_step + s}",
                    "pid": main["pid"],
                    "tid": main["tid"],
                    "ts": round(t0 + lo * span, 3),
                    "dur": round((hi - lo) * span - 500.0, 3),
                    "args": {"External id": 0, "Record function id": 0},
                }
                fh.write(b",\n  " + json.dumps(step).encode())
            fh.write(b"\n" + text[end:])

    write_atomic(out, write)
    info = {
        "source": str(source),
        "source_bytes": len(raw),
        "size_bytes": out.stat().st_size,
        "copies": copies,
        "events": copies * len(events) + n_steps,
        "requested_bytes": size_bytes,
    }
    write_atomic(out.with_name(out.name + ".info.json"), json.dumps(info, indent=1))  # a cache a crash cannot cut
    return info


def ensure_trace(source: Path, out: Path, size_bytes: int, rebuild: bool) -> dict:
    info_path = out.with_name(out.name + ".info.json")
    if not rebuild and out.exists() and info_path.exists():
        try:
            info = json.loads(info_path.read_text())
        except ValueError:  # a damaged cache record: build again
            info = {}
        if (
            isinstance(info, dict)
            and info.get("source") == str(source)
            and info.get("requested_bytes") == size_bytes
            and info.get("size_bytes") == out.stat().st_size
        ):
            return info
    print(f"building {out} ({size_bytes / 1e6:.0f} MB) from {source.name} ...", file=sys.stderr, flush=True)
    return build_trace(source, out, size_bytes)


def ensure_gzip(plain: Path, info: dict, rebuild: bool) -> dict:
    """``plain`` gzipped at :data:`GZIP_LEVEL` beside it (``<plain>.gz``), cached like the plain trace;
    returns its info (the plain trace's, with the compressed size)."""
    out = plain.with_name(plain.name + ".gz")
    info_path = out.with_name(out.name + ".info.json")
    if not rebuild and out.exists() and info_path.exists():
        try:
            cached = json.loads(info_path.read_text())
        except ValueError:  # a damaged cache record: compress again
            cached = {}
        same_plain = isinstance(cached, dict) and cached.get("plain_bytes") == info["size_bytes"]
        if same_plain and cached.get("gzip_bytes") == out.stat().st_size:
            return {**info, **cached}
    print(f"compressing {plain} to {out} (gzip level {GZIP_LEVEL}) ...", file=sys.stderr, flush=True)

    def write(tmp: Path) -> None:
        with open(plain, "rb") as src, gzip.open(tmp, "wb", compresslevel=GZIP_LEVEL) as dst:
            shutil.copyfileobj(src, dst, 16 * 2**20)

    write_atomic(out, write)
    cached = {"plain_bytes": info["size_bytes"], "gzip_bytes": out.stat().st_size}
    write_atomic(info_path, json.dumps(cached, indent=1))
    return {**info, **cached}
