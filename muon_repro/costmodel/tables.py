"""The cost model's tables: ``calibration`` (what ``muon-repro calibrate`` measured) and
``predictions`` (predicted against measured step times of recorded runs).

Declared like :mod:`muon_repro.analysis.schemas`' tables (the analysis registers them with its own);
:func:`write_table` writes one as Parquet (schema and descriptions in the metadata) and CSV, each
through a temporary file and a rename, next to whatever else the folder holds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from muon_repro.analysis.schemas import Column, TableSchema


def _cols(*specs: tuple[str, str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*spec) for spec in specs)

CALIBRATION = TableSchema(
    "calibration",
    "One row per measurement of a machine by `muon-repro calibrate`: a compute kernel at one shape (kind 'kernel'), "
    "the share of a rank's compute rate left when several ranks compute at once (kind 'share'), how far out of step "
    "ranks sharing cores reach a collective (kind 'jitter'), one collective size (kind 'collective_sample') and the "
    "alpha-beta fit of a collective over its sizes (kind 'collective'). Columns that do not apply to a kind are null.",
    ("machine", "kind", "kernel", "dtype", "shape", "op", "group_size", "world_size", "bytes"),
    _cols(
        ("machine", "string", "", "machine profile name (machine.json 'name')"),
        ("device", "string", "", "cpu or cuda"),
        ("backend", "string", "", "process-group backend of the collectives: gloo or nccl"),
        ("kind", "string", "", "kernel, share, jitter, collective_sample or collective"),
        ("kernel", "string", "", "matmul, newton_schulz, newton_schulz_matmuls (its own matmuls, timed one by one), attention, cross_entropy, gelu, elementwise, op_overhead, profiled_op_overhead, compute_share, arrival_jitter"),
        ("dtype", "string", "", "fp32 or bf16 (kernels)"),
        ("shape", "string", "", "what was timed: a preset's training-step matmuls at a TP size (matmul), [rows,cols] (Newton-Schulz), [batch,heads,seq,head_dim] (attention), [tokens,width] or [elements] (element-wise kernels)"),
        ("threads", "Int64", "count", "torch threads of the measuring process (kernels: the bench's threads per rank)"),
        ("seconds", "Float64", "s", "median time of one call (kernels; collective samples: mean over ranks, median over repetitions)"),
        ("tflops", "Float64", "TFLOP/s", "matmul FLOPs per second (matmul, newton_schulz, attention: 2 per multiply-add)"),
        ("gbps", "Float64", "GB/s", "bytes per second: elementwise moves 12 per fp32 element (p.add_(u)); cross_entropy and gelu count 4 per input element, forward+backward"),
        ("us", "Float64", "us", "op_overhead: host time per operator call of a training step (profiled_op_overhead: under the bench's profiler); arrival_jitter: mean wait per collective for the group's last rank, ranks computing equal work between collectives"),
        ("ratio", "Float64", "", "newton_schulz: its time over the summed time of its own matmuls; compute_share: per-rank rate with world_size ranks computing at once over one rank alone"),
        ("op", "string", "", "collective: all_gather, reduce_scatter or all_reduce"),
        ("group_size", "Int64", "ranks", "ranks per group (every group of that size in the world runs the collective at once; jitter: the groups it was measured on)"),
        ("world_size", "Int64", "ranks", "ranks running at once (collectives, compute_share)"),
        ("bytes", "Int64", "bytes", "collective_sample: what one rank sends by the ring model (muon_repro.parallel.comm.ring_bytes_per_rank)"),
        ("alpha_us", "Float64", "us", "collective: fitted latency, t = alpha + bytes / beta"),
        ("beta_gbps", "Float64", "GB/s", "collective: fitted bus bandwidth (ring bytes per rank per second)"),
        ("fit_rel_rmse", "Float64", "fraction", "collective: root-mean-square relative error of the fit over its samples"),
    ),
)

PREDICTIONS = TableSchema(
    "predictions",
    "One row per recorded run: its step and optimizer times as measured (metrics.json, every trial's profiled steps) "
    "and as predicted by the cost model from its config.json and a machine profile (muon_repro.costmodel). Relative "
    "errors are (predicted - measured) / measured.",
    ("run", "machine"),
    _cols(
        ("run", "string", "", "run id: '<group>/<name>' (config.json 'key')"),
        ("machine", "string", "", "machine profile the prediction used"),
        ("optimizer", "string", "", "muon or adamw"),
        ("layout", "string", "", "ZeRO-1 layout"),
        ("overlap", "string", "", "how Muon's gathers are scheduled"),
        ("dp", "Int64", "ranks", "data-parallel size"),
        ("tp", "Int64", "ranks", "tensor-parallel size"),
        ("trials", "Int64", "count", "trials whose steps were pooled"),
        ("steps", "Int64", "count", "profiled steps pooled (over trials)"),
        ("measured_step_ms", "Float64", "ms", "median over profiled steps of the slowest rank's step time (metrics.json step_ms)"),
        ("predicted_step_ms", "Float64", "ms", "predicted step time of the slowest rank"),
        ("step_rel_error", "Float64", "fraction", "(predicted - measured) / measured step time"),
        ("measured_optimizer_ms", "Float64", "ms", "median over profiled steps of the mean over ranks of optimizer_ms (metrics.json)"),
        ("predicted_optimizer_ms", "Float64", "ms", "predicted optimizer step, mean over ranks"),
        ("optimizer_rel_error", "Float64", "fraction", "(predicted - measured) / measured optimizer time"),
        ("predicted_forward_ms", "Float64", "ms", "predicted forward, mean over ranks (TP collectives included)"),
        ("predicted_backward_ms", "Float64", "ms", "predicted backward, mean over ranks (TP collectives included)"),
        ("predicted_comm_ms", "Float64", "ms", "predicted collective time (transfer + wait), mean over ranks"),
        ("predicted_wait_ms", "Float64", "ms", "predicted time waiting for a group's last rank, mean over ranks"),
        ("path", "string", "", "the run folder"),
    ),
)

SCHEMAS = {s.name: s for s in (CALIBRATION, PREDICTIONS)}


def write_table(rows: list[dict] | pd.DataFrame, schema: TableSchema, folder: str | Path, stem: str | None = None) -> list[Path]:
    """Write ``rows`` conformed to ``schema`` as ``<stem>.parquet`` and ``<stem>.csv`` (stem: the table's name) in ``folder``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: choose a folder for the {schema.name} table")
    folder.mkdir(parents=True, exist_ok=True)
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=schema.names)
    frame = schema.conform(frame.reindex(columns=schema.names))
    stem = stem or schema.name
    parquet, csv = folder / f"{stem}.parquet", folder / f"{stem}.csv"
    table = pa.Table.from_pandas(frame, schema=schema.arrow_schema(), preserve_index=False)
    _atomic(parquet, lambda tmp: pq.write_table(table, tmp))
    _atomic(csv, lambda tmp: tmp.write_bytes(frame.to_csv(index=False).encode("utf-8")))
    return [parquet, csv]


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
