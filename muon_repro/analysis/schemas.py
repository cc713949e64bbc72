"""The five tables' schemas: every column's name, pandas dtype, unit and meaning.

Declared once here; :mod:`muon_repro.analysis.tables` builds frames conformed to them and
writes the descriptions into the Parquet field metadata; the dataset card documents the
columns from them (:func:`schema_markdown`). Unknown values are nulls (pandas nullable
dtypes), never NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from muon_repro.analysis.collectives import COMM_KINDS


@dataclass(frozen=True)
class Column:
    """One column: pandas dtype (``string``, ``Int64``, ``Float64``, ``boolean``), unit, meaning."""

    name: str
    dtype: str
    unit: str
    description: str


@dataclass(frozen=True)
class TableSchema:
    name: str
    description: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def arrow_schema(self):
        import pyarrow as pa

        types = {"string": pa.string(), "Int64": pa.int64(), "Float64": pa.float64(), "boolean": pa.bool_()}
        fields = [
            pa.field(c.name, types[c.dtype], nullable=True, metadata={"unit": c.unit, "description": c.description})
            for c in self.columns
        ]
        return pa.schema(fields, metadata={"table": self.name, "description": self.description})

    def empty(self) -> pd.DataFrame:
        return pd.DataFrame({c.name: pd.Series([], dtype=c.dtype) for c in self.columns})

    def conform(self, df: pd.DataFrame) -> pd.DataFrame:
        """Exactly the schema's columns, in order, with its dtypes; NaN and inf become null."""
        missing = [c for c in self.names if c not in df.columns]
        if missing:
            raise ValueError(f"table {self.name!r} is missing columns {missing}")
        out = {}
        for c in self.columns:
            s = df[c.name]
            if c.dtype in ("Float64", "Int64"):
                values = pd.to_numeric(s, errors="coerce").astype("Float64")
                values = values.mask(~np.isfinite(values.fillna(0.0).astype(float)))
                if c.dtype == "Int64":
                    values = values.round().astype("Int64")
                out[c.name] = values
            elif c.dtype == "boolean":
                out[c.name] = s.astype("boolean")
            else:
                out[c.name] = s.map(lambda v: None if _is_null(v) else str(v), na_action=None).astype("string")
        return pd.DataFrame(out).reset_index(drop=True)


def _is_null(v) -> bool:
    if v is None or v is pd.NA:
        return True
    return isinstance(v, float) and not np.isfinite(v)


def _cols(*specs: tuple[str, str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in specs)


_RUN_ID = (
    ("run", "string", "", "run id: '<group>/<name>' (the run directory under traces/)"),
    ("group", "string", "", "run group (config.json 'group', else the parent directory's name)"),
    ("name", "string", "", "run name (config.json 'name', else the directory's name)"),
)
_TIME_NOTE = "median over steps of the mean over ranks"

SCHEMAS: dict[str, TableSchema] = {
    "runs": TableSchema(
        "runs",
        "One row per run (a benchmark configuration across all its ranks). Per-step quantities are medians over the "
        "profiled steps; a step's time is its slowest rank's.",
        ("run",),
        _cols(
            *_RUN_ID,
            ("optimizer", "string", "", "'muon' or 'adamw' (config.json); null for foreign traces"),
            ("layout", "string", "", "ZeRO-1 layout of the flat buffer: contiguous, bucketed, whole_matrix (config.json)"),
            ("dp", "Int64", "ranks", "data-parallel size (config.json)"),
            ("tp", "Int64", "ranks", "tensor-parallel size (config.json)"),
            ("world_size", "Int64", "ranks", "dp * tp, else distributedInfo.world_size"),
            ("backend", "string", "", "process-group backend: gloo or nccl"),
            ("device", "string", "", "cpu or cuda (cuda when the traces have GPU kernels)"),
            ("ranks", "Int64", "count", "rank traces analyzed"),
            ("steps", "Int64", "count", "profiled steps (ProfilerStep#N) per rank; 1 for a trace without steps"),
            ("step_ms", "Float64", "ms", "median step time (per step: the slowest rank)"),
            ("step_ms_p10", "Float64", "ms", "10th percentile of step time"),
            ("step_ms_p90", "Float64", "ms", "90th percentile of step time"),
            ("forward_ms", "Float64", "ms", f"forward phase, {_TIME_NOTE}"),
            ("backward_ms", "Float64", "ms", f"backward phase, {_TIME_NOTE}"),
            ("optimizer_ms", "Float64", "ms", f"optimizer phase (ours, or Optimizer.step#...), {_TIME_NOTE}"),
            ("optimizer_share", "Float64", "fraction", "total optimizer time / total step time, over all ranks and steps"),
            ("compute_ms", "Float64", "ms", f"computation (union of kernels, or of CPU ops off the comm threads), {_TIME_NOTE}"),
            ("comm_ms", "Float64", "ms", f"communication (union of collective transfers), {_TIME_NOTE}"),
            ("overlap_ms", "Float64", "ms", f"communication overlapped with computation, {_TIME_NOTE}"),
            ("exposed_comm_ms", "Float64", "ms", f"communication not overlapped with computation, {_TIME_NOTE}"),
            ("idle_ms", "Float64", "ms", f"step time with neither computation nor communication, {_TIME_NOTE}"),
            ("comm_calls", "Float64", "count", f"collective calls per rank per step, {_TIME_NOTE}"),
            ("comm_bytes", "Int64", "bytes", f"bytes sent per rank per step (ring model, DESIGN.md section 4), {_TIME_NOTE}"),
            ("start_skew_ms", "Float64", "ms", "median over steps of the largest spread of a collective's start across ranks"),
            ("state_bytes", "Int64", "bytes", "optimizer state per rank, steady state (metrics.json), the largest rank"),
            ("peak_mem_bytes", "Int64", "bytes", "peak memory of the largest rank: trace [memory] events, else metrics.json"),
            ("peak_mem_source", "string", "", "where peak_mem_bytes comes from: trace_allocator or metrics.json's source"),
            ("path", "string", "", "run directory (or trace file) analyzed, relative to the working directory when inside it"),
        ),
    ),
    "steps": TableSchema(
        "steps",
        "One row per run, rank and profiled step. Times are lengths of unions of intervals inside the step's window "
        "[start, start + step_ms), so compute + comm - overlap + idle = step_ms.",
        ("run", "rank", "step"),
        _cols(
            *_RUN_ID,
            ("rank", "Int64", "", "global rank (distributedInfo, else the file name, else the --rank argument, else 0)"),
            ("step", "Int64", "", "profiler step number N of ProfilerStep#N; -1 for a trace without steps"),
            ("file", "string", "", "trace file"),
            ("device", "string", "", "cpu or cuda"),
            ("start_us", "Float64", "us", "step start on the trace's clock (relative to its baseTimeNanoseconds)"),
            ("step_ms", "Float64", "ms", "step duration (the ProfilerStep annotation)"),
            ("forward_ms", "Float64", "ms", "forward annotations (ours, '## forward ##')"),
            ("backward_ms", "Float64", "ms", "backward annotations; without any, the autograd engine's ops"),
            ("optimizer_ms", "Float64", "ms", "optimizer annotations (ours, Optimizer.step#...)"),
            (
                "compute_ms",
                "Float64",
                "ms",
                "union of computation: non-NCCL kernels and copies on GPU; CPU ops off the gloo threads, except collective calls and the ops enclosing one, on CPU",
            ),
            ("comm_ms", "Float64", "ms", "union of collective transfers (NCCL kernels, gloo worker annotations, else the calls)"),
            *((f"comm_{k}_ms", "Float64", "ms", f"union of {k} transfers") for k in COMM_KINDS),
            ("overlap_ms", "Float64", "ms", "communication overlapped with computation"),
            ("exposed_comm_ms", "Float64", "ms", "comm_ms - overlap_ms"),
            ("idle_ms", "Float64", "ms", "step_ms - (compute_ms + comm_ms - overlap_ms)"),
            ("compute_frac", "Float64", "fraction", "compute_ms / step_ms"),
            ("comm_frac", "Float64", "fraction", "comm_ms / step_ms"),
            ("exposed_comm_frac", "Float64", "fraction", "exposed_comm_ms / step_ms"),
            ("idle_frac", "Float64", "fraction", "idle_ms / step_ms"),
            ("optimizer_share", "Float64", "fraction", "optimizer_ms / step_ms"),
            ("comm_calls", "Int64", "count", "collective calls issued by this rank in the step"),
            ("comm_bytes", "Int64", "bytes", "bytes this rank sent in the step's collectives (ring model)"),
            (
                "peak_mem_bytes",
                "Int64",
                "bytes",
                "highest allocator 'Total Allocated' among the step's [memory] events; null without them",
            ),
            (
                "start_skew_ms",
                "Float64",
                "ms",
                "largest spread, across ranks, of the start of one collective of this step; null for one rank",
            ),
            ("late_ms", "Float64", "ms", "this rank's mean delay entering the step's collectives, after the earliest rank"),
            ("straggler_rank", "Int64", "", "the rank with the largest late_ms in this step (null for one rank)"),
        ),
    ),
    "collectives": TableSchema(
        "collectives",
        "One row per run, rank, phase and collective op: totals over the profiled steps. bytes must agree with the byte "
        "ledger (ledger_bytes) and the analytic model.",
        ("run", "rank", "phase", "op"),
        _cols(
            *_RUN_ID,
            ("rank", "Int64", "", "global rank"),
            (
                "phase",
                "string",
                "",
                "innermost phase label at the call (dp_reduce_scatter, tp_gather, ...), else forward/backward/optimizer, else other",
            ),
            (
                "op",
                "string",
                "",
                "collective: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send_recv, barrier, ...",
            ),
            ("source", "string", "", "nccl_kernel, gloo (worker thread transfer), cpu_op (the call only), or mixed"),
            ("group_size", "Int64", "ranks", "ranks in the collective's group; null if mixed or unknown"),
            ("dtype", "string", "", "element type (float32, bfloat16, ...); 'mixed' or null"),
            ("steps", "Int64", "count", "profiled steps the totals cover"),
            ("calls", "Int64", "count", "collective calls"),
            (
                "bytes",
                "Int64",
                "bytes",
                "bytes this rank sent, ring model (all-gather/reduce-scatter (n-1)*ceil(S/n), all-reduce twice that)",
            ),
            ("size_bytes", "Int64", "bytes", "sum of S, the full array size of each call (nccl-tests convention)"),
            ("ms", "Float64", "ms", "sum of transfer durations"),
            ("bytes_per_step", "Float64", "bytes", "bytes / steps"),
            ("ms_per_step", "Float64", "ms", "ms / steps"),
            ("algbw_gbps", "Float64", "GB/s", "sum(S) / sum(t), 1 GB = 1e9 bytes"),
            (
                "busbw_gbps",
                "Float64",
                "GB/s",
                "sum(S * factor) / sum(t); factor 2(n-1)/n all-reduce, (n-1)/n all-gather and reduce-scatter, 1 broadcast",
            ),
            (
                "ledger_bytes",
                "Int64",
                "bytes",
                "bytes the run-time byte ledger (metrics.json) recorded for the same rank, phase, op and steps; null without one",
            ),
        ),
    ),
    "comparisons": TableSchema(
        "comparisons",
        "Muon vs AdamW at the same dp, tp, backend and device: ratios Muon / AdamW (null where AdamW's value is 0 or unknown).",
        ("muon_run", "adamw_run"),
        _cols(
            ("group", "string", "", "the Muon run's group"),
            ("dp", "Int64", "ranks", "data-parallel size"),
            ("tp", "Int64", "ranks", "tensor-parallel size"),
            ("backend", "string", "", "gloo or nccl"),
            ("device", "string", "", "cpu or cuda"),
            ("layout", "string", "", "the Muon run's ZeRO-1 layout"),
            ("muon_run", "string", "", "run id of the Muon run"),
            ("adamw_run", "string", "", "run id of the AdamW run (same group preferred)"),
            ("comm_ms_ratio", "Float64", "ratio", "communication time"),
            ("exposed_comm_ms_ratio", "Float64", "ratio", "exposed communication time"),
            ("comm_bytes_ratio", "Float64", "ratio", "bytes sent per rank per step"),
            ("optimizer_ms_ratio", "Float64", "ratio", "optimizer time"),
            ("step_ms_ratio", "Float64", "ratio", "step time"),
            ("state_bytes_ratio", "Float64", "ratio", "optimizer state bytes per rank"),
        ),
    ),
    "claims": TableSchema(
        "claims",
        "The seed's claims (DESIGN.md section 1) and the paper's, each measured on these runs, with a verdict.",
        ("claim_id",),
        _cols(
            ("claim_id", "string", "", "short stable identifier"),
            ("claim", "string", "", "what was claimed"),
            ("source", "string", "", "who claimed it, where"),
            ("seed_value", "Float64", "", "the claimed number (see unit)"),
            ("measured_value", "Float64", "", "our number, same unit; null when not measured"),
            ("unit", "string", "", "unit of seed_value and measured_value"),
            ("conditions", "string", "", "runs, backend, device and sizes the measurement comes from"),
            ("verdict", "string", "", "supported, partly supported, not supported, or not measured (rule in claims.py)"),
            ("rule", "string", "", "how the verdict was decided"),
        ),
    ),
}

TABLE_NAMES = tuple(SCHEMAS)


def schema_markdown() -> str:
    """The schemas as Markdown (for the dataset card and docs)."""
    lines = []
    for s in SCHEMAS.values():
        lines += [f"### `{s.name}`", "", s.description, "", "| column | type | unit | meaning |", "|---|---|---|---|"]
        lines += [f"| `{c.name}` | {c.dtype} | {c.unit} | {c.description} |" for c in s.columns]
        lines.append("")
    return "\n".join(lines)
