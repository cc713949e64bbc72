"""The run directory: the one contract between what records runs and what reads them.

A recorded run is one folder (written by :mod:`muon_repro.bench`, read by analysis, hub and the
pipeline; the report never opens one), under the hardware profile it was recorded on
(:mod:`muon_repro.hardware`; environment.json's ``profile`` says the same)::

    traces/<profile>/<group>/<name>/trial<k>/
        rank<r>.json.gz     one PyTorch profiler Chrome trace per rank (ui.perfetto.dev opens it)
        config.json         the resolved configuration, the trial, the backend, the device, the command line
        environment.json    what it ran on: hardware, software, git SHA, time of recording
        metrics.json        {"config": "<group>/<name>", "ranks": [one RankMetrics per rank]}
        log.txt             losses and step times as they went, worker stderr

Datasets recorded before profiles existed lie one level higher, ``traces/<group>/<name>/trial<k>/``
(the old layout); readers take a folder's profile from its environment.json, never from its place,
so both layouts, and a tree with some of each (``muon-repro migrate-layout``), read the same.

A run (a configuration) is recorded in several trials, each a folder of its own with the same
files; the analysis pools them. While a trial is being recorded it lives in the hidden sibling
``.trial<k>.partial`` and is renamed into place once every rank has finished, so a trial folder
that exists is complete.

The phases recorded in the traces, and the layout and overlap a run names, are in :mod:`muon_repro.phases`.
This module imports nothing heavy: no torch, no pandas.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from muon_repro.hardware import PROFILE_FIELD, UNKNOWN_PROFILE, profile_from_environment, profile_or_unknown, validate_profile_id
from muon_repro.tables.files import write_atomic

# ---------------------------------------------------------------- file names

CONFIG_FILE = "config.json"
ENVIRONMENT_FILE = "environment.json"
METRICS_FILE = "metrics.json"
LOG_FILE = "log.txt"
RUN_FILES = (CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE, LOG_FILE)
"""Every file of a run folder besides the traces."""
TRACE_SUFFIX = ".json.gz"
_TRACE_NAME = re.compile(r"^rank(\d+)\.json(?:\.gz)?$")

# Convergence runs (``muon-repro converge``): traces/<profile>/convergence/<optimizer>_lr<lr>_steps<n>_seed<s>/
CONVERGENCE_GROUP = "convergence"
CONVERGENCE_FILE = "convergence.json"
"""A convergence run's one record: config, corpus facts, model shares, the curve, wall time."""
CONVERGENCE_LOG = LOG_FILE
CHECKPOINT_SUFFIX = ".pt"


def checkpoint_name(rank: int) -> str:
    """One rank's checkpoint of a convergence run while it trains (only ever in the hidden .partial folder)."""
    return f"checkpoint-rank{rank}{CHECKPOINT_SUFFIX}"


def trace_name(rank: int) -> str:
    """File name of one rank's trace: ``rank<r>.json.gz``."""
    return f"rank{rank}{TRACE_SUFFIX}"


def trace_rank(name: str) -> int | None:
    """The rank in a trace file name we wrote (``rank3.json.gz`` -> 3), else ``None``."""
    match = _TRACE_NAME.match(name)
    return int(match[1]) if match else None


# The cost model's folder beside the runs (``traces/<profile>/costmodel/``): the profile of the machine that
# recorded them (``muon-repro calibrate``) and what the model predicts (``muon-repro regimes``),
# as records the analysis turns into the calibration, predictions and regime tables.
COSTMODEL_DIR = "costmodel"
REGIMES_GROUP = "regimes"  # traces/<profile>/regimes/<point>/trial<k>/: the regime sweep's runs (muon_repro.bench.regimes)
MACHINE_FILE = "machine.json"
CALIBRATION_FILE = "machine.calibration.csv"  # calibrate's rows, beside the profile it wrote
PREDICTIONS_FILE = "predictions.csv"
REGIME_MODEL_FILE = "regime_model.csv"
THRESHOLDS_FILE = "regime_thresholds.csv"

NON_TRACE_FILES = (*RUN_FILES, CONVERGENCE_FILE, MACHINE_FILE)
"""JSON files beside the runs that are not profiler traces: a run's side files, a convergence record, a machine profile."""


def is_trace_file(name: str) -> bool:
    """Whether a file name looks like a profiler trace (ours or anyone's): ``*.json`` or ``*.json.gz``,
    not one of the run's side files, a convergence record or a machine profile, not hidden."""
    return name.endswith((".json", ".json.gz")) and name not in NON_TRACE_FILES and not name.startswith(".")


TRIAL_PREFIX = "trial"
_TRIAL_NAME = re.compile(rf"^{TRIAL_PREFIX}(\d+)$")


def trial_dir(run_dir: Path, trial: int) -> Path:
    """The folder of one trial of a run: ``<run>/trial<k>``."""
    return run_dir / f"{TRIAL_PREFIX}{trial}"


def trial_of(folder: Path) -> int | None:
    """The trial a folder holds (``trial2`` -> 2), else ``None`` (a run folder of a single recording)."""
    match = _TRIAL_NAME.match(folder.name)
    return int(match[1]) if match else None


def is_hidden_under(path: Path, root: Path) -> bool:
    """Whether ``path`` lies in (or is) a hidden file or folder below ``root``: a trial still being
    recorded (``.<name>.partial``) or a table set being written."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def trial_folders(root: Path) -> dict[str, list[Path]]:
    """The trial folders under ``root`` (those with a config file, hidden ones left out), sorted, by
    run key ``<profile>/<group>/<name>``: the profile from environment.json, then config.json's ``key``
    (``<group>/<name>``), else the folder's path below ``root``. Either layout reads the same."""
    runs: dict[str, list[Path]] = {}
    for config in sorted(root.rglob(CONFIG_FILE)):
        folder = config.parent
        if is_hidden_under(folder, root):
            continue
        run = RunDir(folder)
        key = run.config_dict.get("key") or folder.relative_to(root).as_posix()
        runs.setdefault(f"{run.profile}/{key}", []).append(folder)
    return runs


def partial_dir(final: Path) -> Path:
    """Where a run is recorded before it is renamed to ``final``."""
    return final.with_name(f".{final.name}.partial")


def expected_files(world_size: int, profiled: bool = True) -> list[str]:
    """A complete run folder's files: a run that was only timed (config ``profile`` false) has no traces."""
    return [*RUN_FILES, *(trace_name(r) for r in range(world_size) if profiled)]


def missing_files(run_dir: Path, world_size: int, profiled: bool = True) -> list[str]:
    return [name for name in expected_files(world_size, profiled) if not (run_dir / name).is_file()]


# ---------------------------------------------------------------- JSON side files


def write_json(path: Path, obj: Mapping[str, Any], *, compact: bool = False) -> None:
    """Write ``obj`` through a temporary file and an atomic rename (``compact``: no indentation,
    for records whose long number lists would otherwise take a line per value)."""
    text = json.dumps(obj, separators=(",", ":"), default=str) if compact else json.dumps(obj, indent=1, default=str)
    write_atomic(path, text)


def read_json(path: Path) -> dict[str, Any] | None:
    """A side file as a dict; ``None`` when absent, unreadable or not an object (foreign folders
    have none; NaN and Infinity read as null)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda _: None)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value) if -(2**63) <= value < 2**63 else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _str(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def _floats(value: Any) -> list[float | None]:
    return [_float(v) for v in value] if isinstance(value, list) else []


TIMED_COMM_VOCABULARIES = ("phases", "kinds", "groups")
TIMED_COMM_COLUMNS = ("step", "phase", "kind", "group", "start_ns", "end_ns")


def _timed_comm(value: Any) -> dict[str, list]:
    """metrics.json's ``timed_comm`` if well formed (string vocabularies, integer columns of one length, codes
    inside their vocabulary), else ``{}``: a malformed record reads as none, not as wrong times."""
    if not isinstance(value, Mapping):
        return {}
    vocab = {k: value.get(k) for k in TIMED_COMM_VOCABULARIES}
    cols = {k: value.get(k) for k in TIMED_COMM_COLUMNS}
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in vocab.values()):
        return {}
    if not all(isinstance(v, list) and all(type(x) is int for x in v) for v in cols.values()):
        return {}
    if len({len(v) for v in cols.values()}) != 1:
        return {}
    for column, names in (("phase", "phases"), ("kind", "kinds"), ("group", "groups")):
        if any(not 0 <= code < len(vocab[names]) for code in cols[column]):
            return {}
    return {**vocab, **cols}


def _int_map(value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v for k, raw in value.items() if (v := _int(raw)) is not None}


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested fields (environment.json's) as one level, their keys joined with '.'."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# ---------------------------------------------------------------- config.json


@dataclass(frozen=True)
class RunConfig:
    """What ``config.json`` says about a run; every field is ``None`` where it says nothing
    (a foreign folder of traces has no config at all)."""

    group: str | None = None
    name: str | None = None
    optimizer: str | None = None  # muon | adamw
    dp: int | None = None
    tp: int | None = None
    layout: str | None = None  # contiguous | bucketed | whole_matrix
    overlap: str | None = None  # none | naive_async | pipelined (phases.OVERLAPS); "none" for runs recorded before it existed
    scale: str | None = None
    preset: str | None = None
    qkv: str | None = None
    tokens_per_step: int | None = None  # global, over all DP ranks
    batch_per_dp: int | None = None
    seq_len: int | None = None
    bucket_elems: int | None = None
    steps: int | None = None
    wait: int | None = None
    warmup: int | None = None
    active: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    ns_dtype: str | None = None
    gather_dtype: str | None = None
    reduce_dtype: str | None = None
    seed: int | None = None
    trial: int | None = None  # which recording of the configuration this is, from 0
    trials: int | None = None  # how many were asked for
    round_order: int | None = None  # its place in its round of the sweep (shuffled per round); null: recorded before
    timed_steps: int | None = None  # steps timed without the profiler before the profiled ones; null: none (older runs)
    timed_warmup: int | None = None
    world_size: int | None = None
    backend: str | None = None
    device: str | None = None
    profile: bool | None = None  # False: timed without the profiler, no traces (the regime sweep); null: profiled (older runs)
    hidden: int | None = None  # model shape overrides of a custom or sweep run (null: the preset's)
    n_layers: int | None = None
    n_heads: int | None = None
    ffn_hidden: int | None = None
    vocab_size: int | None = None
    command: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RunConfig:
        """Typed fields from a decoded ``config.json``; a value of the wrong type reads as ``None``."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = raw.get(f.name)
            if f.name == "command":
                if isinstance(value, list):
                    values[f.name] = tuple(str(v) for v in value)
                elif isinstance(value, str) and value.strip():
                    values[f.name] = (value,)
            elif f.type in ("int | None",):
                values[f.name] = _int(value)
            elif f.type in ("float | None",):
                values[f.name] = _float(value)
            elif f.type in ("bool | None",):
                values[f.name] = value if isinstance(value, bool) else None
            else:
                values[f.name] = _str(value)
        if raw and "overlap" not in raw:  # recorded before the option existed: every gather blocked
            values["overlap"] = "none"
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["command"] = list(self.command)
        return out


# ---------------------------------------------------------------- metrics.json


@dataclass(frozen=True)
class ShardSummary:
    """One rank's share of the ZeRO-1 shard plan (what sets its Newton-Schulz work and its state)."""

    layout: str
    buckets: int
    shard_elems: int  # flat-buffer elements this rank owns (optimizer state is kept for these)
    muon_matrices: int  # Muon matrices in the model (TP-local)
    ns_matrices: int  # matrices this rank orthogonalizes each step
    dp_gathered_matrices: int  # matrices that need a DP gather (straddle a boundary, or bucketed)

    @classmethod
    def from_dict(cls, raw: Any) -> ShardSummary | None:
        if not isinstance(raw, Mapping):
            return None
        values = {f.name: (_str(raw.get(f.name)) if f.name == "layout" else _int(raw.get(f.name))) for f in fields(cls)}
        return None if any(v is None for v in values.values()) else cls(**values)


@dataclass(frozen=True)
class RankMetrics:
    """What one rank measured and knew at run time (one entry of ``metrics.json``'s ``ranks``).

    Per-step lists cover every step (profiled or not); ``analytic_bytes`` and ``ns_flops`` are per
    step; ``ledger`` holds one record per collective call (step, phase, op, group, bytes, ...).
    """

    rank: int
    dp_rank: int | None = None
    tp_rank: int | None = None
    step_ms: list[float | None] = field(default_factory=list)
    optimizer_ms: list[float | None] = field(default_factory=list)
    loss: list[float | None] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    state_bytes: dict[str, int] = field(default_factory=dict)  # muon (momentum) / adamw (two moments)
    transient_bytes: int | None = None  # largest set of gather/shard buffers alive at once
    peak_memory_bytes: int | None = None
    peak_memory_source: str | None = None  # cuda_max_allocated | process_max_rss
    update_rms: dict[str, float] = field(default_factory=dict)
    ns_calls: int | None = None
    ns_flops: int | None = None  # Newton-Schulz FLOPs of this rank in one step
    model_params: int | None = None
    local_params: int | None = None
    analytic_bytes: dict[str, int] = field(default_factory=dict)  # per optimizer comm phase, per step
    shard: ShardSummary | None = None
    train_flops: int | None = None  # forward+backward FLOPs of the whole model in one step (all ranks together)
    loopback_bytes: int | None = None  # rank 0 only: bytes through the loopback interface during the profiled steps
    loopback_steps: int | None = None  # the steps loopback_bytes covers
    # The steps timed with no profiler before the profiled ones (config timed_steps; empty for runs without):
    # per kept step, perf_counter_ns around the whole step, forward+backward and the optimizer step.
    timed_step_ms: list[float | None] = field(default_factory=list)
    timed_fwd_bwd_ms: list[float | None] = field(default_factory=list)
    timed_optimizer_ms: list[float | None] = field(default_factory=list)
    # Every collective call of those steps, as columns (muon_repro.parallel.comm.CommTimer.columns):
    # vocabularies "phases", "kinds", "groups"; then "step", "phase", "kind", "group" (codes into them),
    # "start_ns", "end_ns" (perf_counter_ns: CLOCK_MONOTONIC, one clock for the ranks of one host). {} without.
    timed_comm: dict[str, list] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], index: int = 0) -> RankMetrics:
        """Typed fields from one decoded entry; wrong types read as empty/``None``."""
        ledger = raw.get("ledger")
        update_rms = raw.get("update_rms") if isinstance(raw.get("update_rms"), Mapping) else {}
        return cls(
            rank=r if (r := _int(raw.get("rank"))) is not None else index,
            dp_rank=_int(raw.get("dp_rank")),
            tp_rank=_int(raw.get("tp_rank")),
            step_ms=_floats(raw.get("step_ms")),
            optimizer_ms=_floats(raw.get("optimizer_ms")),
            loss=_floats(raw.get("loss")),
            ledger=[rec for rec in ledger if isinstance(rec, dict)] if isinstance(ledger, list) else [],
            state_bytes=_int_map(raw.get("state_bytes")),
            transient_bytes=_int(raw.get("transient_bytes")),
            peak_memory_bytes=_int(raw.get("peak_memory_bytes", raw.get("peak_mem_bytes"))),
            peak_memory_source=_str(raw.get("peak_memory_source")),
            update_rms={str(k): v for k, x in update_rms.items() if (v := _float(x)) is not None},
            ns_calls=_int(raw.get("ns_calls")),
            ns_flops=_int(raw.get("ns_flops")),
            model_params=_int(raw.get("model_params")),
            local_params=_int(raw.get("local_params")),
            analytic_bytes=_int_map(raw.get("analytic_bytes")),
            shard=ShardSummary.from_dict(raw.get("shard")),
            train_flops=_int(raw.get("train_flops")),
            loopback_bytes=_int(raw.get("loopback_bytes")),
            loopback_steps=_int(raw.get("loopback_steps")),
            timed_step_ms=_floats(raw.get("timed_step_ms")),
            timed_fwd_bwd_ms=_floats(raw.get("timed_fwd_bwd_ms")),
            timed_optimizer_ms=_floats(raw.get("timed_optimizer_ms")),
            timed_comm=_timed_comm(raw.get("timed_comm")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The entry as written; a rank without timed steps writes no ``timed_*`` key (as before they existed)."""
        out = asdict(self)
        if not (self.timed_step_ms or self.timed_fwd_bwd_ms or self.timed_optimizer_ms or self.timed_comm):
            for name in ("timed_step_ms", "timed_fwd_bwd_ms", "timed_optimizer_ms", "timed_comm"):
                del out[name]
        return out

    @property
    def total_state_bytes(self) -> int | None:
        return sum(self.state_bytes.values()) if self.state_bytes else None


# ---------------------------------------------------------------- one run folder


@dataclass
class RunDir:
    """A run folder, read through the typed views above. Missing side files read as empty."""

    path: Path

    @property
    def config_dict(self) -> dict[str, Any]:
        return read_json(self.path / CONFIG_FILE) or {}

    @property
    def config(self) -> RunConfig:
        return RunConfig.from_dict(self.config_dict)

    @property
    def environment(self) -> dict[str, Any]:
        return read_json(self.path / ENVIRONMENT_FILE) or {}

    @property
    def profile(self) -> str:
        """The hardware profile environment.json names or describes (``unknown`` without one)."""
        return profile_or_unknown(self.environment)

    @property
    def ranks(self) -> list[RankMetrics]:
        raw = (read_json(self.path / METRICS_FILE) or {}).get("ranks")
        if not isinstance(raw, list):
            return []
        return [RankMetrics.from_dict(entry, i) for i, entry in enumerate(raw) if isinstance(entry, Mapping)]

    def recorded_steps(self) -> list[tuple[float, float]]:
        """Each recorded step (after the profiler's wait and warm-up) that every rank timed: the slowest
        rank's ``step_ms`` (a step lasts as long as its slowest rank) and the mean over ranks of ``optimizer_ms``."""
        ranks, cfg = self.ranks, self.config
        first = (cfg.wait or 0) + (cfg.warmup or 0)
        steps = []
        for step in zip(*(zip(r.step_ms[first:], r.optimizer_ms[first:]) for r in ranks)):
            if all(s is not None and o is not None for s, o in step):
                steps.append((max(s for s, _ in step), math.fsum(o for _, o in step) / len(step)))
        return steps

    def write(self, config: Mapping[str, Any], environment: Mapping[str, Any], ranks: list[RankMetrics], log: str) -> None:
        """Write the side files (rank 0 does, once every rank's metrics are gathered)."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / LOG_FILE).write_text(log, encoding="utf-8")
        write_json(self.path / METRICS_FILE, {"config": config.get("key"), "ranks": [r.to_dict() for r in ranks]})
        write_json(self.path / CONFIG_FILE, dict(config))
        write_json(self.path / ENVIRONMENT_FILE, dict(environment))


# ---------------------------------------------------------------- profiles of records beside the runs


def convergence_profile(record: Mapping[str, Any]) -> str:
    """A convergence run's hardware profile: its environment's ``profile``, else derived from the cores and
    backend it recorded (records written before profiles existed ran on CPU)."""
    env = record.get("environment") if isinstance(record.get("environment"), Mapping) else {}
    if env.get(PROFILE_FIELD):
        return profile_from_environment(env)
    return profile_from_environment({"host_cpu_cores": env.get("cpu_count"), "backend": record.get("backend")})


def costmodel_profile(folder: Path) -> str:
    """The profile of a costmodel folder's records that carry none (written before profiles existed): the
    name of the machine profile calibrated beside them, else ``unknown``."""
    machine = read_json(folder / MACHINE_FILE) or {}
    name = machine.get(PROFILE_FIELD) or machine.get("name")
    try:
        return validate_profile_id(str(name)) if name else UNKNOWN_PROFILE
    except ValueError:
        return UNKNOWN_PROFILE
