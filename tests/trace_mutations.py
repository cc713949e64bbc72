"""Seeded mutations of profiler traces, for tests/test_trace_fuzz.py and ``python -m tools.fuzz_traces``.

A *case* is one source trace, one seed and one to three mutations drawn with that seed:
structural ones on the decoded document (drop, duplicate or reorder events; numbers to strings,
objects to lists; NaN, infinities, huge and negative values; fields deleted; ``args`` nested
deeply) and textual ones on the serialized bytes (truncation, a literal ``1e400``, a byte
overwritten). The same (source, seed) always gives the same bytes, so a failing case is
reproduced from the two numbers its description carries.

Also here, so that the command needs nothing from the tests: :func:`synthetic_trace`, a small
GPU trace (steps, phases, NCCL kernels with their launches and callers, memory events) written
with the standard library only, and :func:`check_outcome`, which decides whether the analysis of
a mutated file is acceptable.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import pickle
import random
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
DATA_TRACES = sorted((HERE / "data").rglob("*.json.gz"))  # small real traces kept with the tests

NUMERIC_FIELDS = ("ts", "dur", "pid", "tid")
ODD_NUMBERS: tuple[Any, ...] = (math.nan, math.inf, -math.inf, 1e30, -1e30, 1e300, 2**70, -(2**70), 0, -1, 1e-300)
NESTING_DEPTHS = (5, 200, 900, 3000)  # below and above the JSON decoders' recursion limit (~1000)


# ---------------------------------------------------------------- sources


def load_document(path: Path) -> dict | list:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def synthetic_trace(n_steps: int = 4, rank: int = 0) -> dict:
    """A small GPU trace in Kineto's shape: ProfilerStep windows with forward / backward /
    optimizer annotations, a matmul and an NCCL all-reduce per step (runtime launch with its
    correlation id, ``record_param_comms`` caller with sizes), ``[memory]`` events, metadata."""
    cpu, gpu, stream = 100, 0, 7
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": cpu, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": cpu, "tid": 1, "args": {"name": "thread 1 (python)"}},
        {"ph": "M", "name": "process_labels", "pid": gpu, "tid": 0, "args": {"labels": "GPU 0"}},
    ]

    def x(name: str, ts: float, dur: float, cat: str = "cpu_op", pid: int = cpu, tid: int = 1, **args: Any) -> dict:
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args:
            e["args"] = args
        return e

    for s in range(n_steps):
        t0 = 1_000_000.0 + 10_000.0 * s
        ext, corr = 100 + 2 * s, 500 + 2 * s
        events += [
            x(f"ProfilerStep#{s + 1}", t0, 9_000, cat="user_annotation"),
            x("## forward ##", t0 + 100, 2_500, cat="user_annotation"),
            x("aten::mm", t0 + 200, 300, **{"Input Dims": [[64, 64], [64, 64]], "External id": ext}),
            x("cudaLaunchKernel", t0 + 250, 20, cat="cuda_runtime", correlation=corr, **{"External id": ext}),
            x("sgemm_64x64", t0 + 400, 900, cat="kernel", pid=gpu, tid=stream, correlation=corr, **{"External id": ext}),
            x("## backward ##", t0 + 3_000, 2_500, cat="user_annotation"),
            x("## optimizer ##", t0 + 6_000, 2_500, cat="user_annotation"),
            x(
                "record_param_comms",
                t0 + 6_100,
                50,
                **{
                    "Collective name": "allreduce",
                    "In msg nelems": 4096,
                    "Out msg nelems": 4096,
                    "Group size": 2,
                    "dtype": "Float",
                    "External id": ext + 1,
                },
            ),
            x("cudaLaunchKernel", t0 + 6_120, 20, cat="cuda_runtime", correlation=corr + 1, **{"External id": ext + 1}),
            x(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                t0 + 6_200,
                1_500,
                cat="kernel",
                pid=gpu,
                tid=stream,
                correlation=corr + 1,
                **{"External id": ext + 1, "Collective name": "allreduce", "Group size": 2, "dtype": "Float"},
            ),
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": cpu,
                "tid": 1,
                "ts": t0 + 500,
                "args": {"Total Allocated": 1_000_000 + 1000 * s, "Bytes": 4096, "Device Type": 1, "Device Id": 0},
            },
            {"ph": "s", "id": corr, "pid": cpu, "tid": 1, "ts": t0 + 250, "cat": "ac2g", "name": "ac2g"},
        ]
    info = {
        "backend": "nccl",
        "rank": rank,
        "world_size": 2,
        "pg_count": 1,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}],
    }
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU"}],
        "distributedInfo": info,
        "traceEvents": events,
        "traceName": "synthetic]",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


# ---------------------------------------------------------------- mutations of the document


def _events(doc: dict | list) -> list:
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        return events if isinstance(events, list) else []
    return doc


def _some(rng: random.Random, events: list, k: int = 3) -> list[int]:
    return rng.sample(range(len(events)), min(k, len(events))) if events else []


def drop_events(doc: dict | list, rng: random.Random) -> str:
    events = _events(doc)
    for i in sorted(_some(rng, events, rng.randint(1, 5)), reverse=True):
        del events[i]
    return "drop events"


def duplicate_events(doc: dict | list, rng: random.Random) -> str:
    events = _events(doc)
    for i in _some(rng, events, rng.randint(1, 5)):
        events.insert(rng.randrange(len(events) + 1), copy.deepcopy(events[i]))
    return "duplicate events"


def reorder_events(doc: dict | list, rng: random.Random) -> str:
    events = _events(doc)
    rng.shuffle(events)
    return "reorder events"


def numbers_to_strings(doc: dict | list, rng: random.Random) -> str:
    for i in _some(rng, _events(doc), rng.randint(1, 6)):
        e = _events(doc)[i]
        if isinstance(e, dict):
            key = rng.choice(NUMERIC_FIELDS)
            if key in e:
                e[key] = str(e[key]) if rng.random() < 0.7 else f"x{e[key]}"
    return "numbers to strings"


def dicts_to_lists(doc: dict | list, rng: random.Random) -> str:
    events = _events(doc)
    for i in _some(rng, events, rng.randint(1, 3)):
        e = events[i]
        if isinstance(e, dict) and isinstance(e.get("args"), dict) and rng.random() < 0.5:
            e["args"] = list(e["args"].items())
        elif isinstance(e, dict):
            events[i] = list(e.values())
    return "objects to lists"


def odd_numbers(doc: dict | list, rng: random.Random) -> str:
    """NaN, infinities, huge, tiny and negative values in ts, dur, ids and args numbers."""
    for i in _some(rng, _events(doc), rng.randint(1, 6)):
        e = _events(doc)[i]
        if not isinstance(e, dict):
            continue
        value = rng.choice(ODD_NUMBERS)
        args = e.get("args")
        if isinstance(args, dict) and args and rng.random() < 0.3:
            args[rng.choice(sorted(args))] = value
        else:
            e[rng.choice(NUMERIC_FIELDS)] = value
    return "odd numbers"


def negative_durations(doc: dict | list, rng: random.Random) -> str:
    for i in _some(rng, _events(doc), rng.randint(1, 4)):
        e = _events(doc)[i]
        if isinstance(e, dict) and isinstance(e.get("dur"), (int, float)):
            e["dur"] = -abs(e["dur"]) - 1
    return "negative dur"


def delete_fields(doc: dict | list, rng: random.Random) -> str:
    for i in _some(rng, _events(doc), rng.randint(1, 4)):
        e = _events(doc)[i]
        if isinstance(e, dict) and e:
            del e[rng.choice(sorted(e))]
    return "delete fields"


DEEP_MARKER = "@@deep {}@@"  # json.dumps cannot write deep values (it recurses): a placeholder, expanded in the text


def nest_args(doc: dict | list, rng: random.Random) -> str:
    depth = rng.choice(NESTING_DEPTHS)
    for i in _some(rng, _events(doc), 1):
        e = _events(doc)[i]
        if isinstance(e, dict):
            e["args"] = {**(e["args"] if isinstance(e.get("args"), dict) else {}), "deep": DEEP_MARKER.format(depth)}
    return f"args nested {depth} deep"


def _expand_deep(text: bytes, rng: random.Random) -> bytes:
    """Replace each placeholder of :func:`nest_args` with objects and arrays nested that deep."""
    for depth in NESTING_DEPTHS:
        marker = json.dumps(DEEP_MARKER.format(depth)).encode()
        if marker in text:
            kinds = [rng.random() < 0.5 for _ in range(depth)]  # True: an object, False: an array
            opening = "".join('{"a": ' if k else "[" for k in kinds)
            closing = "".join("}" if k else "]" for k in reversed(kinds))
            text = text.replace(marker, (opening + "1" + closing).encode())
    return text


def shuffle_steps(doc: dict | list, rng: random.Random) -> str:
    """Rename a ProfilerStep to another's number (a duplicate step name)."""
    steps = [e for e in _events(doc) if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#")]
    if len(steps) >= 2:
        a, b = rng.sample(steps, 2)
        a["name"] = b["name"]
    return "duplicate step name"


def odd_step_names(doc: dict | list, rng: random.Random) -> str:
    """A step number beyond int64, a negative one, or none."""
    steps = [e for e in _events(doc) if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#")]
    for e in rng.sample(steps, min(len(steps), rng.randint(1, 2))):
        e["name"] = rng.choice(("ProfilerStep#" + "9" * 25, "ProfilerStep#-1", "ProfilerStep#", "ProfilerStep# 7"))
    return "odd step names"


def bare_array(doc: dict | list, rng: random.Random) -> str:
    """Keep only the events (the Chrome trace JSON array format)."""
    return "bare array"  # applied by mutate(): the document itself is replaced


DOC_MUTATIONS: tuple[Callable[[Any, random.Random], str], ...] = (
    drop_events,
    duplicate_events,
    reorder_events,
    numbers_to_strings,
    dicts_to_lists,
    odd_numbers,
    negative_durations,
    delete_fields,
    nest_args,
    shuffle_steps,
    odd_step_names,
    bare_array,
)


# ---------------------------------------------------------------- mutations of the text


def truncate(text: bytes, rng: random.Random) -> tuple[bytes, str]:
    at = rng.randrange(len(text))
    return text[:at], f"truncated at byte {at}"


def literal_huge_ts(text: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A number JSON allows and float64 does not hold (``json.dumps`` cannot write it)."""
    at = text.find(b'"ts": ', rng.randrange(len(text)))
    if at < 0:
        return text, "no ts to replace"
    end = at + 6
    while end < len(text) and text[end : end + 1] in b"-0123456789.e+":
        end += 1
    return text[: at + 6] + rng.choice((b"1e400", b"-1e400", b"1" + b"0" * 400)) + text[end:], f"literal huge ts at byte {at}"


def overwrite_byte(text: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A structural character, a control character or a space (not a digit: a changed number is
    valid data the analysis cannot know to be wrong)."""
    at = rng.randrange(len(text))
    new = rng.choice(b'{}[],:" \x01')
    return text[:at] + bytes([new]) + text[at + 1 :], f"byte {at} set to {bytes([new])!r}"


TEXT_MUTATIONS = (truncate, literal_huge_ts, overwrite_byte)


# ---------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One mutated trace: where it came from, how it was made, and its bytes."""

    source: str
    seed: int
    mutations: tuple[str, ...]
    data: bytes
    suffix: str  # ".json" or ".json.gz"

    def describe(self) -> str:
        return f"source={self.source} seed={self.seed}: {'; '.join(self.mutations)}"


def _copied(doc: dict | list) -> dict | list:
    """A deep copy of ``doc``, made through pickle: what ``copy.deepcopy`` gives (shared parts stay shared), about
    twice as fast on the multi-MB traces (the fuzz test copies one per case)."""
    return pickle.loads(pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL))


def _written(doc: dict | list, indent: int | None) -> bytes:
    """``json.dumps(doc, indent=indent)``, byte for byte, with NaN and Infinity written as bare literals. Indented
    through msgspec's formatter where it can (3-4x faster than json's Python encoder on the big traces); a
    document holding NaN or Infinity, which msgspec does not read, goes through json."""
    compact = json.dumps(doc).encode()
    if indent is None:
        return compact
    try:
        return msgspec.json.format(compact, indent=indent)
    except msgspec.DecodeError:
        return json.dumps(doc, indent=indent).encode()


def mutate(source_name: str, doc: dict | list, seed: int) -> Case:
    """Apply one to three mutations drawn with ``seed`` to a copy of ``doc``."""
    rng = random.Random(f"{source_name}:{seed}")
    doc = _copied(doc)
    done: list[str] = []
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.75:
            mutation = rng.choice(DOC_MUTATIONS)
            done.append(mutation(doc, rng))
            if mutation is bare_array and isinstance(doc, dict):
                doc = _events(doc)
        else:
            done.append("text")  # placeholder: text mutations run once the document is written
    text = _written(doc, indent=rng.choice((None, 1)))
    text = _expand_deep(text, rng)
    for i, name in enumerate(done):
        if name == "text" and text:
            text, done[i] = rng.choice(TEXT_MUTATIONS)(text, rng)
    gz = rng.random() < 0.25
    # mtime=0: a case is its seed's bytes, with no clock in the gzip header (two calls a second apart differed)
    data = gzip.compress(text, compresslevel=1, mtime=0) if gz else text
    return Case(source_name, seed, tuple(done), data, ".json.gz" if gz else ".json")


def cases(sources: dict[str, dict | list], n: int, first_seed: int = 0) -> list[Case]:
    """``n`` cases, spread over the sources in turn."""
    names = sorted(sources)
    return [mutate(names[i % len(names)], sources[names[i % len(names)]], first_seed + i) for i in range(n)]


# ---------------------------------------------------------------- outcomes

STEP_TIME_COLUMNS = (
    "forward_ms",
    "backward_ms",
    "optimizer_ms",
    "compute_window_ms",
    "comm_window_ms",
    "overlap_ms",
    "exposed_comm_ms",
    "idle_ms",
)
FRACTION_COLUMNS = ("compute_frac", "comm_frac", "exposed_comm_frac", "idle_frac", "optimizer_share")
SECONDS_PER_MB = 2.0  # time allowed per MB of file, plus FIXED_SECONDS
FIXED_SECONDS = 1.0


@dataclass(frozen=True)
class Outcome:
    kind: str  # "analyzed" or "refused"
    seconds: float
    steps: int
    message: str  # the error, or the warnings given


def time_limit(size_bytes: int) -> float:
    return SECONDS_PER_MB * size_bytes / 1e6 + FIXED_SECONDS


def check_outcome(path: Path, describe: str = "") -> Outcome:
    """Analyze ``path``; raise ``AssertionError`` unless the result is acceptable.

    Acceptable: a ``TraceError`` whose message names the file, or a breakdown whose numbers
    hold together (finite times, fractions in [0, 1], every part of a step within it, the
    window identity, distinct step ids, warnings that name the file), either in at most
    :func:`time_limit` seconds.
    """
    from muon_repro.analysis.breakdown import analyze_file
    from muon_repro.analysis.errors import TraceError

    label = f"{path} ({describe})" if describe else str(path)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            b = analyze_file(str(path))
    except TraceError as exc:
        seconds = time.perf_counter() - start
        assert str(path) in str(exc), f"{label}: the error does not name the file: {exc}"
        outcome = Outcome("refused", seconds, 0, str(exc))
    else:
        seconds = time.perf_counter() - start
        messages = [str(w.message) for w in caught]
        assert all(m.startswith(str(path)) for m in messages), f"{label}: a warning does not name the file: {messages}"
        check_steps(b.steps, label)
        check_collectives(b.collectives, label)
        outcome = Outcome("analyzed", seconds, len(b.steps), "; ".join(messages))
    limit = time_limit(path.stat().st_size)
    assert seconds < limit, f"{label}: took {seconds:.2f} s, more than {limit:.2f} s for {path.stat().st_size} bytes"
    return outcome


def check_steps(steps, label: str) -> None:
    """Raise ``AssertionError`` (naming ``label``) unless a steps table's numbers hold together."""
    import numpy as np

    assert len(steps), f"{label}: no step rows"
    assert steps["step"].is_unique, f"{label}: repeated step ids {steps['step'].tolist()}"
    floats = steps.drop(columns=["peak_mem_bytes"]).to_numpy(dtype=float)
    assert np.isfinite(floats).all(), f"{label}: non-finite numbers in the steps table\n{steps}"
    step_ms = steps["step_ms"].to_numpy(dtype=float)
    slack = 1e-6 * np.maximum(step_ms, 1.0)
    assert (step_ms >= 0).all(), f"{label}: negative step_ms"
    for column in STEP_TIME_COLUMNS:
        part = steps[column].to_numpy(dtype=float)
        assert ((part >= -slack) & (part <= step_ms + slack)).all(), f"{label}: {column} outside [0, step_ms]\n{steps}"
    for column in FRACTION_COLUMNS:
        frac = steps[column].to_numpy(dtype=float)
        assert ((frac >= 0) & (frac <= 1)).all(), f"{label}: {column} outside [0, 1]"
    phases = steps[["forward_ms", "backward_ms", "optimizer_ms"]].to_numpy(dtype=float).sum(axis=1)
    assert (phases <= step_ms + slack).all(), f"{label}: forward + backward + optimizer exceed the step\n{steps}"
    busy = steps["compute_window_ms"] + steps["comm_window_ms"] - steps["overlap_ms"] + steps["idle_ms"]
    assert np.allclose(busy.to_numpy(dtype=float), step_ms, rtol=1e-6, atol=1e-6), f"{label}: window parts do not add up"
    for column in ("compute_ms", "comm_ms", "comm_calls", "comm_bytes"):
        assert (steps[column].to_numpy(dtype=float) >= 0).all(), f"{label}: negative {column}"


def check_collectives(collectives, label: str) -> None:
    """Raise ``AssertionError`` (naming ``label``) unless the collectives' times are finite and ordered."""
    import numpy as np

    times = collectives[["start", "end", "dur"]].to_numpy(dtype=float)
    assert np.isfinite(times).all(), f"{label}: non-finite collective times"
    assert (collectives["dur"].to_numpy(dtype=float) >= 0).all(), f"{label}: negative collective dur"
