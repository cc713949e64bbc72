"""The analysis tables: documented schemas, builders, Parquet + CSV writers.

Five tables, one row per:

* ``runs``: run (a benchmark configuration, all its ranks);
* ``steps``: run x rank x profiled step;
* ``collectives``: run x rank x phase x collective op, totals over the profiled steps;
* ``comparisons``: Muon run x its AdamW twin (same dp, tp, backend, device);
* ``claims``: a claim of the seed or the paper, measured, with a verdict.

Each column is declared once in :data:`SCHEMAS` (:mod:`muon_repro.analysis.schemas`: name,
pandas dtype, unit, meaning); the builders return frames conformed to them, the writers put
the descriptions into the Parquet field metadata. Unknown values are nulls (pandas nullable
dtypes), never NaN.

``build_tables(paths)`` is the entry point for the report: paths are trace files, run
directories or trees of them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import busbw_factor
from muon_repro.analysis.pipeline import Analysis, analyze_paths
from muon_repro.analysis.schemas import SCHEMAS, TABLE_NAMES, Column, TableSchema, schema_markdown

__all__ = [
    "SCHEMAS",
    "TABLE_NAMES",
    "Column",
    "TableSchema",
    "build_tables",
    "read_table",
    "schema_markdown",
    "tables_from_analysis",
    "write_tables",
]


# ---------------------------------------------------------------- builders


def build_tables(paths: Iterable[str | Path], *, workers: int | None = None, rank: int | None = None) -> dict[str, pd.DataFrame]:
    """Analyze every trace under ``paths`` and return the five tables, conformed to SCHEMAS.

    Files that cannot be read are skipped with a warning naming each (their problems are
    available in detail from :func:`muon_repro.analysis.pipeline.analyze_paths`).
    """
    analysis = analyze_paths(list(paths), workers=workers, rank=rank)
    for failure in analysis.failures:
        warnings.warn(failure.message, stacklevel=2)
    return tables_from_analysis(analysis)


def tables_from_analysis(analysis: Analysis) -> dict[str, pd.DataFrame]:
    from muon_repro.analysis.claims import claims_table

    steps = _steps_table(analysis)
    collectives = _collectives_table(analysis)
    runs = _runs_table(analysis, steps)
    comparisons = _comparisons_table(runs)
    tables = {
        "runs": runs,
        "steps": steps,
        "collectives": collectives,
        "comparisons": comparisons,
        "claims": claims_table(runs, comparisons),
    }
    return {name: SCHEMAS[name].conform(df) for name, df in tables.items()}


def _steps_table(analysis: Analysis) -> pd.DataFrame:
    frames = []
    for info, items in analysis.runs:
        skew = _skew(items)
        for b in items:
            df = b.steps.copy()
            df.insert(0, "run", info.key)
            df.insert(1, "group", info.group)
            df.insert(2, "name", info.name)
            df.insert(3, "rank", b.meta.rank)
            df.insert(5, "file", display_path(b.meta.path))
            df.insert(6, "device", b.device)
            if skew is not None:
                df = df.merge(skew, on=["rank", "step"], how="left")
            else:
                df["start_skew_ms"] = np.nan
                df["late_ms"] = np.nan
                df["straggler_rank"] = np.nan
            frames.append(df)
    if not frames:
        return SCHEMAS["steps"].empty()
    return pd.concat(frames, ignore_index=True)


def _skew(items: list) -> pd.DataFrame | None:
    """Spread of collective start times across the ranks of one run, per step.

    The k-th call of a given (phase, op) in a step is the same collective on every rank
    (they run the same program). Times are made comparable with each trace's
    ``baseTimeNanoseconds`` (absolute time = base + ts).
    """
    if len(items) < 2 or any(b.meta.base_time_ns is None for b in items):
        return None
    ref = min(b.meta.base_time_ns for b in items)
    frames = []
    for b in items:
        c = b.collectives[["step", "phase", "op", "issue_ts"]].copy()
        if c.empty:
            continue
        c["ordinal"] = c.sort_values("issue_ts").groupby(["step", "phase", "op"]).cumcount()
        c["t_us"] = c["issue_ts"] + (b.meta.base_time_ns - ref) / 1000.0
        c["rank"] = b.meta.rank
        frames.append(c)
    if len(frames) < 2:
        return None
    allc = pd.concat(frames, ignore_index=True)
    key = ["step", "phase", "op", "ordinal"]
    allc["first_us"] = allc.groupby(key)["t_us"].transform("min")
    allc["ranks_seen"] = allc.groupby(key)["rank"].transform("nunique")
    allc = allc[allc["ranks_seen"] >= 2]
    if allc.empty:
        return None
    allc["late_ms"] = (allc["t_us"] - allc["first_us"]) / 1000.0
    spread = allc.groupby(key)["late_ms"].max().groupby(level="step").max().rename("start_skew_ms")
    late = allc.groupby(["rank", "step"])["late_ms"].mean().reset_index()
    straggler = late.loc[late.groupby("step")["late_ms"].idxmax(), ["step", "rank"]].rename(columns={"rank": "straggler_rank"})
    out = late.merge(spread.reset_index(), on="step", how="left").merge(straggler, on="step", how="left")
    return out[["rank", "step", "start_skew_ms", "late_ms", "straggler_rank"]]


def _collectives_table(analysis: Analysis) -> pd.DataFrame:
    rows = []
    for info, items in analysis.runs:
        for b in items:
            inst = b.collectives
            if inst.empty:
                continue
            n_steps = len(b.steps)
            step_set = set(b.steps["step"].tolist())
            ledger = _ledger_by_phase_op(info.ledger(b.meta.rank), step_set)
            inst = inst.assign(
                dur_us=inst["end"] - inst["start"],
                factor=[busbw_factor(op, n) if n > 0 else None for op, n in zip(inst["op"], inst["group_size"])],
            )
            for (phase, op), g in inst.groupby(["phase", "op"], sort=True):
                known = g[g["bytes"] >= 0]
                sized = g[g["size_bytes"] >= 0]
                t_us = float(g["dur_us"].sum())
                t_sized = float(sized["dur_us"].sum())
                with_factor = sized[sized["factor"].notna()]
                t_factor = float(with_factor["dur_us"].sum())
                rows.append(
                    {
                        "run": info.key,
                        "group": info.group,
                        "name": info.name,
                        "rank": b.meta.rank,
                        "phase": phase,
                        "op": op,
                        "source": _single(g["source"], "mixed"),
                        "group_size": _single(g["group_size"][g["group_size"] > 0], None),
                        "dtype": _single(g["dtype"][g["dtype"] != ""], "mixed"),
                        "steps": n_steps,
                        "calls": len(g),
                        "bytes": int(known["bytes"].sum()) if len(known) else None,
                        "size_bytes": int(sized["size_bytes"].sum()) if len(sized) else None,
                        "ms": t_us / 1000.0,
                        "bytes_per_step": float(known["bytes"].sum()) / n_steps if len(known) and n_steps else None,
                        "ms_per_step": t_us / 1000.0 / n_steps if n_steps else None,
                        "algbw_gbps": float(sized["size_bytes"].sum()) / t_sized / 1e3 if t_sized > 0 else None,
                        "busbw_gbps": float((with_factor["size_bytes"] * with_factor["factor"]).sum()) / t_factor / 1e3
                        if t_factor > 0
                        else None,
                        "ledger_bytes": ledger.get((phase, op)) if ledger is not None else None,
                    }
                )
    if not rows:
        return SCHEMAS["collectives"].empty()
    return pd.DataFrame(rows)


def _single(values: pd.Series, mixed):
    uniq = pd.unique(values)
    if len(uniq) == 1:
        return uniq[0]
    return None if len(uniq) == 0 else mixed


def _ledger_by_phase_op(ledger: list[dict], steps: set) -> dict[tuple[str, str], int] | None:
    if not ledger:
        return None
    from muon_repro.analysis.collectives import normalize_op

    out: dict[tuple[str, str], int] = {}
    for rec in ledger:
        step, nbytes = rec.get("step"), rec.get("bytes")
        if not isinstance(nbytes, int) or (steps and step not in steps and -1 not in steps):
            continue
        op = normalize_op(str(rec.get("op", ""))) or str(rec.get("op", ""))
        key = (str(rec.get("phase", "")), op)
        out[key] = out.get(key, 0) + nbytes
    return out


# Per-step quantities a run reports as the median over steps of the mean over ranks.
_RANK_MEAN_COLUMNS = (
    "forward_ms", "backward_ms", "optimizer_ms", "compute_ms", "comm_ms", "overlap_ms",
    "exposed_comm_ms", "idle_ms", "comm_calls", "comm_bytes",
)


def _runs_table(analysis: Analysis, steps: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for info, items in analysis.runs:
        s = steps[steps["run"] == info.key]
        per_step = s.groupby("step").agg(
            step_ms=("step_ms", "max"),
            **{
                c: (c, "mean")
                for c in _RANK_MEAN_COLUMNS
            },
            start_skew_ms=("start_skew_ms", "max"),
        )
        state = [v for b in items if (v := info.state_bytes(b.meta.rank)) is not None]
        trace_peaks = [int(v) for v in s["peak_mem_bytes"].dropna()]
        metric_peaks = [v for b in items if (v := info.peak_memory_bytes(b.meta.rank)) is not None]
        if trace_peaks:
            peak, peak_source = max(trace_peaks), "trace_allocator"
        elif metric_peaks:
            peak = max(metric_peaks)
            peak_source = next((src for b in items if (src := info.peak_memory_source(b.meta.rank))), "metrics.json")
        else:
            peak, peak_source = None, None
        total_step = float(s["step_ms"].sum())
        world = info.int_config("world_size") or next((b.meta.world_size for b in items if b.meta.world_size), None)
        rows.append(
            {
                "run": info.key,
                "group": info.group,
                "name": info.name,
                "optimizer": info.str_config("optimizer"),
                "layout": info.str_config("layout"),
                "dp": info.int_config("dp"),
                "tp": info.int_config("tp"),
                "world_size": world,
                "backend": info.str_config("backend") or next((b.meta.backend for b in items if b.meta.backend), None),
                "device": info.str_config("device") or items[0].device,
                "ranks": len(items),
                "steps": int(s.groupby("rank")["step"].nunique().max()) if len(s) else 0,
                "step_ms": per_step["step_ms"].median(),
                "step_ms_p10": per_step["step_ms"].quantile(0.1),
                "step_ms_p90": per_step["step_ms"].quantile(0.9),
                **{
                    c: per_step[c].median()
                    for c in _RANK_MEAN_COLUMNS
                },
                "optimizer_share": float(s["optimizer_ms"].sum()) / total_step if total_step > 0 else None,
                "start_skew_ms": per_step["start_skew_ms"].median() if per_step["start_skew_ms"].notna().any() else None,
                "state_bytes": max(state) if state else None,
                "peak_mem_bytes": peak,
                "peak_mem_source": peak_source,
                "path": display_path(info.path),
            }
        )
    if not rows:
        return SCHEMAS["runs"].empty()
    return pd.DataFrame(rows)


def display_path(path: str | Path) -> str:
    """A path as stored in the tables: relative to the working directory when inside it
    (so tables written from the repository root hold ``traces/...``), else absolute."""
    p = Path(path).absolute()
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return p.as_posix()


def _ratio(a, b) -> float | None:
    if a is None or b is None or pd.isna(a) or pd.isna(b) or float(b) == 0.0:
        return None
    return float(a) / float(b)


def _comparisons_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Each Muon run against an AdamW run with the same dp, tp, backend, device (same group first)."""
    rows = []
    runs = runs.astype(object).where(runs.notna(), None)
    adamw = runs[runs["optimizer"] == "adamw"]
    for _, m in runs[runs["optimizer"] == "muon"].iterrows():
        same = adamw[
            (adamw["dp"] == m["dp"])
            & (adamw["tp"] == m["tp"])
            & (adamw["backend"] == m["backend"])
            & (adamw["device"] == m["device"])
        ]
        if same.empty:
            continue
        preferred = same[same["group"] == m["group"]]
        a = (preferred if len(preferred) else same).iloc[0]
        rows.append(
            {
                "group": m["group"],
                "dp": m["dp"],
                "tp": m["tp"],
                "backend": m["backend"],
                "device": m["device"],
                "layout": m["layout"],
                "muon_run": m["run"],
                "adamw_run": a["run"],
                **{
                    f"{col}_ratio": _ratio(m[col], a[col])
                    for col in ("comm_ms", "exposed_comm_ms", "comm_bytes", "optimizer_ms", "step_ms", "state_bytes")
                },
            }
        )
    if not rows:
        return SCHEMAS["comparisons"].empty()
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- writers


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | Path) -> list[Path]:
    """Write each table as ``<name>.parquet`` (schema and descriptions in the metadata) and
    ``<name>.csv``, each through a temporary file and an atomic rename. Returns the paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, df in tables.items():
        schema = SCHEMAS[name]
        df = schema.conform(df)
        table = pa.Table.from_pandas(df, schema=schema.arrow_schema(), preserve_index=False)
        table = table.replace_schema_metadata(schema.arrow_schema().metadata)
        parquet_path = out / f"{name}.parquet"
        _atomic_write(parquet_path, lambda p, t=table: pq.write_table(t, p))
        csv_path = out / f"{name}.csv"
        _atomic_write(csv_path, lambda p, d=df: d.to_csv(p, index=False))
        written += [parquet_path, csv_path]
    return written


def read_table(path: str | Path, name: str | None = None) -> pd.DataFrame:
    """Read a table written by :func:`write_tables` back with its schema's dtypes."""
    import pyarrow.parquet as pq

    path = Path(path)
    name = name or path.name.removesuffix(".parquet")
    schema = SCHEMAS[name]
    table = pq.read_table(path, schema=schema.arrow_schema())
    return schema.conform(table.to_pandas(types_mapper=pd.ArrowDtype).astype({c.name: c.dtype for c in schema.columns}))
