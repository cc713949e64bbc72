"""One trace as tables: :class:`TraceEvents` and what it says about itself, :class:`TraceMeta`.

:func:`muon_repro.analysis.reader.read_trace` builds them; the rest of the analysis reads them.
The columns are documented on :class:`TraceEvents`; two views derived from them are computed
once, on first use: :attr:`TraceEvents.arg_records` and :attr:`TraceEvents.launch_rows`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from muon_repro.analysis.piece_columns import GPU_WORK_CATS, LAUNCH_CATS, NO_CORRELATION


@dataclass
class TraceMeta:
    """What a trace says about itself, and where its rank came from."""

    path: str
    rank: int
    rank_source: str  # "distributedInfo", "filename", "argument" or "assumed"
    world_size: int | None
    backend: str | None
    base_time_ns: int | None
    pg_config: list[dict] = field(default_factory=list)
    device_names: list[str] = field(default_factory=list)
    file_bytes: int = 0
    decoded_by: str = "sequential"  # or "parallel" (pieces shared with worker processes)


@dataclass
class TraceEvents:
    """One trace as tables.

    ``events``: one row per complete (``ph: X``) event, file order. Columns: ``ts`` (float64,
    us, the file's clock), ``dur`` (float64, us, >= 0), ``end`` (``ts + dur``), ``name`` and
    ``cat`` (categorical), ``thread`` (int32 index into ``threads``), ``correlation`` (int64
    ``args.correlation`` of GPU work and runtime/driver calls, ``-1`` elsewhere or when absent).

    ``threads``: indexed by thread code: ``pid``, ``tid`` (as in the file, int or str),
    ``thread_name`` (all names seen, ``;``-joined), ``process_name``, ``process_label``.

    ``args``: decoded ``args`` of the events the analysis needs (collectives), indexed by
    ``events`` row; columns are the fields of :class:`muon_repro.analysis.piece_columns.Args`.

    ``memory``: ``[memory]`` instant events: ``ts``, ``thread``, ``bytes`` (signed),
    ``total_allocated``, ``device_type``, ``device_id``.

    ``notes``: what was repaired or dropped (dirty data), by kind, with counts.

    ``warnings``: the messages of the :class:`TraceWarning` s :func:`read_trace` gave (each
    names the file), kept so that a caller in another process can pass them on.
    """

    meta: TraceMeta
    events: pd.DataFrame
    threads: pd.DataFrame
    args: pd.DataFrame
    memory: pd.DataFrame
    notes: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.meta.path

    @cached_property
    def arg_records(self) -> dict[int, dict[str, Any]]:
        """``args`` rows as plain dicts keyed by ``events`` row (missing values are ``None``)."""
        # the same as ``self.args.to_dict("index")`` with NaN as None, without pandas' per-cell
        # boxing: the columns hold the decoded Python objects as they are (dtype object)
        columns = [str(c) for c in self.args.columns]
        rows = self.args.index.to_numpy().tolist()
        values = self.args.to_numpy(dtype=object).tolist()
        return {
            int(row): {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in zip(columns, rec)}
            for row, rec in zip(rows, values)
        }

    @cached_property
    def launch_rows(self) -> np.ndarray:
        """For every ``events`` row, the row of the runtime/driver call that launched it (the
        ``cuda_runtime``/``hip_runtime``/... event with the same ``correlation``; Kineto's
        ``ac2g`` flow joins the same pair), for GPU kernels, copies and memsets; -1 for other
        events and for GPU work launched outside the trace. One sort and one ``searchsorted``."""
        return _launch_rows(self.events)


def _launch_rows(events: pd.DataFrame) -> np.ndarray:
    """See :attr:`TraceEvents.launch_rows`."""
    out = np.full(len(events), -1, np.int64)
    correlation = events["correlation"].to_numpy()
    cats = np.asarray(events["cat"].cat.categories, dtype=object)
    cat_codes = events["cat"].cat.codes.to_numpy()
    has_id = correlation != NO_CORRELATION
    launches = np.flatnonzero(np.isin(cats, LAUNCH_CATS)[cat_codes] & has_id)
    work = np.flatnonzero(np.isin(cats, GPU_WORK_CATS)[cat_codes] & has_id)
    if not len(launches) or not len(work):
        return out
    launches = launches[np.argsort(correlation[launches], kind="stable")]  # first launch wins on duplicate ids
    sorted_ids = correlation[launches]
    pos = np.minimum(np.searchsorted(sorted_ids, correlation[work]), len(launches) - 1)
    hit = sorted_ids[pos] == correlation[work]
    out[work[hit]] = launches[pos[hit]]
    return out
