"""Collectives in a trace: one normalized row per collective call (:data:`INSTANCE_COLUMNS`).

Three ways a collective shows up:

* **NCCL/RCCL on GPU**: ``ncclKernel_*`` / ``ncclDevKernel_*`` kernels on a GPU stream; the
  kernel's interval is the transfer time. Each is linked to the runtime call that launched it
  (``cudaLaunchKernel``/``hipExtModuleLaunchKernel``..., same ``correlation``) and to its
  *caller*, the ``record_param_comms`` op with the kernel's ``External id``, else the innermost
  one enclosing the launch on the launching thread. Sizes (``Collective name``, ``In/Out msg
  nelems``, ``Group size``, ``dtype``) come from the kernel's args, else the caller's. The kind
  comes from the first that names a collective: the kernel's ``Collective name``, the caller's,
  the ``nccl:<op>`` annotation linked the same way (External id, else enclosing the launch),
  the kernel's name; kernels that name no op (``ncclDevKernel_Generic``, RCCL's) thus get
  their launcher's kind instead of ``other``. A trace without kernels (CPU-only profile of
  NCCL) falls back to the ``record_param_comms`` intervals.
* **gloo on CPU**: the caller thread has ``c10d::allreduce_`` / ``c10d::_allgather_base_`` /
  ``c10d::_reduce_scatter_base_`` ops with sizes in ``Input Dims``; the transfer is a
  ``gloo:<op>`` annotation on a ``pt_gloo_runloop`` worker thread. Callers and transfers are
  matched in time order by kind and size (gloo runs a reduce-scatter as an all-reduce of the
  full input). Unmatched transfers (caller outside the profiled window, or a foreign trace
  without caller ops) still count, sized from their own ``Input Dims``.
* **our phase labels**: every collective in :mod:`muon_repro.parallel.comm` runs inside a
  ``record_function`` scope named after its phase (``dp_reduce_scatter``, ``tp_gather``...);
  the innermost enclosing label names the row's ``phase``; foreign traces get
  ``forward``/``backward``/``optimizer`` from their own annotations, else ``other``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import (
    arg_at,
    c10d_sizes,
    coarse_phase,
    dtype_info,
    first_dtype,
    is_receive,
    kind_of,
    label_phase,
    normalize_op,
    numel_any,
)
from muon_repro.analysis.intervals import innermost_enclosing
from muon_repro.analysis.trace_events import TraceEvents
from muon_repro.formulas import ring_bytes

INSTANCE_COLUMNS = (
    "op",  # normalized collective kind (all_reduce, all_gather, ...), see normalize_op
    "kind",  # one of COMM_KINDS
    "phase",  # innermost phase label at the call, or forward/backward/optimizer/other
    "source",  # nccl_kernel | gloo | cpu_op
    "group_size",  # ranks in the collective's group, -1 if unknown
    "dtype",  # canonical dtype name, "" if unknown
    "elements",  # S in elements (the full array), -1 if unknown
    "size_bytes",  # S in bytes, -1 if unknown
    "bytes",  # bytes this rank sends (ring model), -1 if unknown
    "start",  # transfer start, trace clock (us)
    "end",  # transfer end, trace clock (us)
    "dur",  # transfer duration (us), the event's own: end - start loses precision on large clocks
    "issue_ts",  # when this rank entered the collective (caller op start), trace clock (us)
    "launch_ts",  # when it was launched (the step it counts in), trace clock (us); NaN if unknown
)
"""``launch_ts``: for a kernel, the start of its launching runtime call, else of its caller op,
else NaN (launched outside the trace); for gloo and CPU-only rows, ``issue_ts`` (the caller
``c10d::`` op that hands the transfer to the worker, or the transfer itself when unmatched)."""


def _name_flags(names: np.ndarray, predicate) -> np.ndarray:
    return np.fromiter((bool(predicate(str(n))) for n in names), bool, len(names))


def group_size_fallback(trace: TraceEvents) -> dict[str, int]:
    """Group sizes to assume when a collective does not say: ``{"*": n}`` from the trace's
    process groups (the single size shared by all non-default groups, else the world)."""
    sizes = {
        int(pg["pg_size"])
        for pg in trace.meta.pg_config
        if isinstance(pg.get("pg_size"), int) and pg.get("pg_desc") != "default_pg" and pg["pg_size"] > 1
    }
    if len(sizes) == 1:
        return {"*": sizes.pop()}
    if trace.meta.world_size:
        return {"*": trace.meta.world_size}
    return {}


def _resolve_group(explicit: int | None, phase: str, hints: dict[str, int]) -> int:
    if explicit is not None and explicit > 0:
        return explicit
    prefix = phase.split("_", 1)[0] if "_" in phase else ""
    if prefix in hints:
        return hints[prefix]
    return hints.get("*", -1)


def collective_instances(trace: TraceEvents, group_sizes: dict[str, int] | None = None) -> pd.DataFrame:
    """One row per collective call in ``trace`` (columns :data:`INSTANCE_COLUMNS`).

    ``group_sizes`` maps a phase prefix (``"dp"``, ``"tp"``) to its group size, for gloo
    all-reduces, whose trace events do not say which group they ran on; ``"*"`` is the
    default. Defaults come from the trace's process groups.
    """
    ev = trace.events
    hints = {**group_size_fallback(trace), **(group_sizes or {})}
    names = np.asarray(ev["name"].cat.categories, dtype=object)
    name_codes = ev["name"].cat.codes.to_numpy()
    cats = np.asarray(ev["cat"].cat.categories, dtype=object)
    cat_codes = ev["cat"].cat.codes.to_numpy()
    is_kernel_cat = np.fromiter((c == "kernel" for c in cats), bool, len(cats))[cat_codes]
    nccl_kernel = _name_flags(names, lambda n: n.startswith(("ncclKernel", "ncclDevKernel")))[name_codes] & is_kernel_cat
    gpu_cat = np.fromiter((str(c).startswith(("kernel", "gpu_")) for c in cats), bool, len(cats))[cat_codes]
    rpc = _name_flags(names, lambda n: n == "record_param_comms")[name_codes] & ~gpu_cat
    c10d = _name_flags(names, lambda n: n.startswith("c10d::") and normalize_op(n) is not None)[name_codes] & ~gpu_cat
    gloo = _name_flags(names, lambda n: n.startswith("gloo:") and normalize_op(n) is not None)[name_codes] & ~gpu_cat

    rows: list[dict] = []
    callers = np.flatnonzero(rpc)
    caller_ops = {int(r): _rpc_op(trace, r) for r in callers}
    callers = np.array([r for r in callers.tolist() if caller_ops[r] is not None], np.int64)

    kernels = np.flatnonzero(nccl_kernel)
    if len(kernels):
        annotations = np.flatnonzero(
            _name_flags(names, lambda n: n.startswith("nccl:") and normalize_op(n) is not None)[name_codes] & ~gpu_cat
        )
        rows.extend(_kernel_rows(trace, kernels, callers, annotations, names, name_codes))
    elif len(callers):
        for r in callers.tolist():
            meta = _args(trace, r)
            rows.append(
                _row_from_nccl(
                    caller_ops[r], meta, start=ev["ts"].iat[r], end=ev["end"].iat[r], caller=r, source="cpu_op", event=r
                )
            )
    else:
        rows.extend(_gloo_rows(trace, np.flatnonzero(c10d), np.flatnonzero(gloo), names, name_codes))

    if not rows:
        return _empty_instances()
    df = pd.DataFrame(rows)
    df["dur"] = ev["dur"].to_numpy()[df["event"].to_numpy(np.int64)]
    _attach_phase(trace, df, names, name_codes)
    _finish_sizes(df, hints)
    return df[list(INSTANCE_COLUMNS)]


def _args(trace: TraceEvents, row: int | None) -> dict:
    if row is None:
        return {}
    return trace.arg_records.get(int(row), {})


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _kernel_rows(
    trace: TraceEvents, kernels: np.ndarray, callers: np.ndarray, annotations: np.ndarray, names: np.ndarray, name_codes
) -> list[dict]:
    """One row per NCCL kernel, with its caller, kind and launch time (module docstring)."""
    ev = trace.events
    ts, end = ev["ts"].to_numpy(), ev["end"].to_numpy()
    launch = trace.launch_rows[kernels]
    caller = launching_op(trace, kernels, launch, callers)
    annotation = launching_op(trace, kernels, launch, annotations)
    rows = []
    for k, launch_row, c, a in zip(kernels.tolist(), launch.tolist(), caller.tolist(), annotation.tolist()):
        kargs = _args(trace, k)
        cargs = _args(trace, c) if c >= 0 else {}
        meta = kargs if kargs.get("collective") else cargs
        op = (
            normalize_op(str(kargs.get("collective") or ""))
            or normalize_op(str(cargs.get("collective") or ""))
            or (normalize_op(str(names[name_codes[a]])) if a >= 0 else None)
            or normalize_op(str(names[name_codes[k]]))
            or "other"
        )
        row = _row_from_nccl(op, meta, start=ts[k], end=end[k], caller=c if c >= 0 else None, source="nccl_kernel", event=k)
        row["launch_ts"] = ts[launch_row] if launch_row >= 0 else (ts[c] if c >= 0 else math.nan)
        rows.append(row)
    return rows


def launching_op(trace: TraceEvents, kernels: np.ndarray, launch: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """Per kernel, the row among ``ops`` that launched it (-1 if none): the op with the
    kernel's ``External id``, else the innermost op enclosing its launch call on that thread."""
    out = np.full(len(kernels), -1, np.int64)
    if not len(ops):
        return out
    by_external: dict[int, int] = {}
    for r in ops.tolist():
        ext = _args(trace, r).get("external_id")
        if ext is not None:
            by_external.setdefault(ext, r)
    for i, k in enumerate(kernels.tolist()):
        out[i] = by_external.get(_args(trace, k).get("external_id"), -1)
    rest = np.flatnonzero((out < 0) & (launch >= 0))
    if len(rest):
        ev = trace.events
        thread, ts, end = ev["thread"].to_numpy(), ev["ts"].to_numpy(), ev["end"].to_numpy()
        q = launch[rest]
        inner = innermost_enclosing(thread[q], ts[q], thread[ops], ts[ops], end[ops])
        out[rest] = np.where(inner >= 0, ops[np.maximum(inner, 0)], -1)
    return out


def _rpc_op(trace: TraceEvents, row: int) -> str | None:
    name = _args(trace, row).get("collective")
    return normalize_op(str(name)) if name else None


def _valid_count(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not v.is_integer():
        return None
    v = int(v)
    return v if 0 <= v < 2**62 else None


def _row_from_nccl(op: str, meta: dict, *, start: float, end: float, caller: int | None, source: str, event: int) -> dict:
    in_n, out_n = _valid_count(meta.get("in_nelems")), _valid_count(meta.get("out_nelems"))
    n = _valid_count(meta.get("group_size"))
    if op == "all_gather":
        elements = out_n if out_n is not None else (in_n * n if in_n is not None and n else None)
    elif op == "reduce_scatter":
        elements = in_n if in_n is not None else (out_n * n if out_n is not None and n else None)
    else:
        elements = max([v for v in (in_n, out_n) if v is not None], default=None)
    dt = dtype_info(meta.get("dtype"))
    return {
        "op": op,
        "source": source,
        "group_size": n,
        "dtype": dt,
        "elements": elements,
        "start": float(start),
        "end": float(end),
        "caller": caller,
        "event": event,
    }


def _gloo_rows(trace: TraceEvents, callers: np.ndarray, transfers: np.ndarray, names: np.ndarray, name_codes) -> list[dict]:
    """Match c10d caller ops to gloo worker transfers; rows for both matched and unmatched."""
    ev = trace.events
    ts = ev["ts"].to_numpy()
    end = ev["end"].to_numpy()
    transfer_ops = {t: normalize_op(str(names[name_codes[t]])) or "other" for t in transfers.tolist()}
    # gloo runs collectives on worker threads, but point-to-point sends and receives on the calling thread
    thread = ev["thread"].to_numpy()
    worker_threads = {int(thread[t]) for t, op in transfer_ops.items() if op != "send_recv"}
    callers = np.array([c for c in callers.tolist() if int(thread[c]) not in worker_threads], np.int64)

    # transfers: (ts, row, op, numel, dtype)
    pending: dict[str, list[list]] = {}
    for t in transfers[np.argsort(ts[transfers], kind="stable")].tolist():
        a = _args(trace, t)
        op = transfer_ops[t]
        numel = numel_any(arg_at(a.get("input_dims"), 0))
        pending.setdefault(op, []).append([ts[t], t, numel, first_dtype(a.get("input_type"), 0), False])

    rows = []
    for c in callers[np.argsort(ts[callers], kind="stable")].tolist():
        a = _args(trace, c)
        cname = str(names[name_codes[c]])
        op = normalize_op(cname) or "other"
        elements, dt, n = c10d_sizes(cname, a.get("input_dims"), a.get("input_type"))
        # what the worker annotation shows: gloo runs reduce_scatter as an all_reduce of the input
        expect_ops = {"reduce_scatter": ("reduce_scatter", "all_reduce")}.get(op, (op,))
        expect_numel = (
            elements // n if op == "all_gather" and elements is not None and n else (None if op == "all_gather" else elements)
        )
        match = _take_transfer(pending, expect_ops, ts[c], expect_numel)
        row = {"op": op, "group_size": n, "dtype": dt, "elements": elements, "caller": c, "receives": is_receive(op, cname)}
        if match is not None:
            _, t, numel, tdt, _ = match
            row.update(source="gloo", start=float(ts[t]), end=float(end[t]), event=t)
            row["dtype"] = row["dtype"] or tdt
            if row["elements"] is None and numel is not None and op != "all_gather":
                row["elements"] = numel
        else:
            row.update(source="cpu_op", start=float(ts[c]), end=float(end[c]), event=c)
        rows.append(row)
    for op, items in pending.items():
        for _, t, numel, tdt, used in items:
            if used:
                continue
            rows.append(
                {
                    "op": op,
                    "source": "gloo",
                    "group_size": None,
                    "dtype": tdt,
                    "elements": numel,
                    "elements_are_shard": op == "all_gather",
                    "receives": is_receive(op, str(names[name_codes[t]])),
                    "start": float(ts[t]),
                    "end": float(end[t]),
                    "caller": None,
                    "event": t,
                }
            )
    return rows


def _take_transfer(pending: dict[str, list[list]], ops: Iterable[str], t0: float, numel: int | None, window: int = 64):
    """Earliest unused transfer of one of ``ops`` starting at or after ``t0`` (1 us slack),
    with the expected size when both sizes are known."""
    best = None
    for op in ops:
        items = pending.get(op, [])
        lo = _bisect_ts(items, t0 - 1.0)
        seen = 0
        for item in items[lo:]:
            if item[4]:
                continue
            seen += 1
            if seen > window:
                break
            if numel is not None and item[2] is not None and item[2] != numel:
                continue
            if best is None or item[0] < best[0]:
                best = item
            break
    if best is not None:
        best[4] = True
    return best


def _bisect_ts(items: list[list], t: float) -> int:
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid][0] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _attach_phase(trace: TraceEvents, df: pd.DataFrame, names: np.ndarray, name_codes: np.ndarray) -> None:
    """``issue_ts`` and ``phase`` for each row, from its caller op (or its own start)."""
    ev = trace.events
    caller = df["caller"].to_numpy(dtype=object)
    has_caller = np.array([c is not None and not _missing(c) for c in caller])
    caller_rows = np.array([int(c) if h else -1 for c, h in zip(caller, has_caller)], np.int64)
    ts = ev["ts"].to_numpy()
    thread = ev["thread"].to_numpy()
    issue = np.where(has_caller, ts[np.maximum(caller_rows, 0)], df["start"].to_numpy(dtype=float))
    df["issue_ts"] = issue
    launched = df["launch_ts"].to_numpy(dtype=float) if "launch_ts" in df else np.full(len(df), np.nan)
    df["launch_ts"] = np.where(df["source"].to_numpy() == "nccl_kernel", launched, issue)

    phases = np.array([label_phase(str(n)) or "" for n in names], dtype=object)
    label_rows = np.flatnonzero((phases != "")[name_codes])  # per name, then per event
    phase = np.full(len(df), "other", dtype=object)
    if len(label_rows):
        q = np.flatnonzero(has_caller)
        inner = innermost_enclosing(
            thread[caller_rows[q]],
            ts[caller_rows[q]],
            thread[label_rows],
            ts[label_rows],
            ev["end"].to_numpy()[label_rows],
        )
        found = inner >= 0
        phase[q[found]] = phases[name_codes[label_rows[inner[found]]]]
        # no label on the calling thread (e.g. DDP's all-reduce on the autograd thread, or a
        # kernel without a caller): the coarse phase by time, on the same side of the trace
        # (CPU annotations for a CPU call, GPU annotations for a kernel's start)
        coarse = np.array([coarse_phase(str(n)) or "" for n in names], dtype=object)
        cats = np.asarray(ev["cat"].cat.categories, dtype=object)
        on_gpu = np.fromiter((str(c).startswith(("kernel", "gpu_")) for c in cats), bool, len(cats))[
            ev["cat"].cat.codes.to_numpy()
        ]
        is_coarse = (coarse != "")[name_codes]
        for side_is_gpu, rest in (
            (False, np.flatnonzero((phase == "other") & has_caller)),
            (True, np.flatnonzero((phase == "other") & ~has_caller)),
        ):
            coarse_rows = np.flatnonzero(is_coarse & (on_gpu == side_is_gpu))
            if side_is_gpu and not len(coarse_rows):
                coarse_rows = np.flatnonzero(is_coarse)
            if not len(coarse_rows) or not len(rest):
                continue
            inner = innermost_enclosing(
                np.zeros(len(rest), np.int64),
                issue[rest],
                np.zeros(len(coarse_rows), np.int64),
                ts[coarse_rows],
                ev["end"].to_numpy()[coarse_rows],
            )
            found = inner >= 0
            phase[rest[found]] = coarse[name_codes[coarse_rows[inner[found]]]]
    df["phase"] = phase


def _finish_sizes(df: pd.DataFrame, hints: dict[str, int]) -> None:
    """Group size, dtype, S and ring bytes, with -1 / "" for unknown."""
    group, dtype, elements, size_bytes, sent = [], [], [], [], []
    shard = df["elements_are_shard"].fillna(False).to_numpy(dtype=bool) if "elements_are_shard" in df else np.zeros(len(df), bool)
    receives = df["receives"].fillna(False).to_numpy(dtype=bool) if "receives" in df else np.zeros(len(df), bool)
    for i, (op, g, dt, e, phase) in enumerate(zip(df["op"], df["group_size"], df["dtype"], df["elements"], df["phase"])):
        n = _resolve_group(_valid_count(g) if not _missing(g) else None, phase, hints)
        e = _valid_count(e) if not _missing(e) else None
        if e is not None and shard[i]:
            e = e * n if n > 0 else None
        dt = dt if isinstance(dt, tuple) else None
        group.append(n)
        dtype.append(dt[0] if dt else "")
        elements.append(e if e is not None else -1)
        size_bytes.append(e * dt[1] if e is not None and dt else -1)
        sent_bytes = ring_bytes(op, e, dt[1], n) if e is not None and dt and n > 0 else None
        sent_bytes = 0 if receives[i] and sent_bytes is not None else sent_bytes
        sent.append(sent_bytes if sent_bytes is not None else -1)
    df["group_size"] = np.array(group, np.int64)
    df["dtype"] = np.array(dtype, dtype=object)
    df["elements"] = np.array(elements, np.int64)
    df["size_bytes"] = np.array(size_bytes, np.int64)
    df["bytes"] = np.array(sent, np.int64)
    df["kind"] = [kind_of(op) for op in df["op"]]


def _empty_instances() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "op": pd.Series([], dtype=object),
            "kind": pd.Series([], dtype=object),
            "phase": pd.Series([], dtype=object),
            "source": pd.Series([], dtype=object),
            "group_size": pd.Series([], dtype=np.int64),
            "dtype": pd.Series([], dtype=object),
            "elements": pd.Series([], dtype=np.int64),
            "size_bytes": pd.Series([], dtype=np.int64),
            "bytes": pd.Series([], dtype=np.int64),
            "start": pd.Series([], dtype=np.float64),
            "end": pd.Series([], dtype=np.float64),
            "dur": pd.Series([], dtype=np.float64),
            "issue_ts": pd.Series([], dtype=np.float64),
            "launch_ts": pd.Series([], dtype=np.float64),
        }
    )
