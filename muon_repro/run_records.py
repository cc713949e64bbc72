"""What a run folder's JSON records say, typed: ``config.json`` (:class:`RunConfig`) and each rank's entry of
``metrics.json`` (:class:`RankMetrics`, with its :class:`ShardSummary` and the columnar ``timed_comm`` of the
steps timed without the profiler). Every field is read tolerantly: a value of the wrong type, a non-finite
number, a negative time or a malformed record reads as ``None`` or empty, never as a wrong number.

:mod:`muon_repro.rundir` owns the folder and its file names and reads these records from it. This module
imports nothing heavy: no torch, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from muon_repro.phases import LAYOUTS, OVERLAPS

# Ranks of one run. The project records runs of 1 to 4 ranks, its registry goes to 8 and its profiles name up to
# 2 nodes of 8 GPUs; 1,024 (128 nodes of 8) is far past any run recorded or reviewed, and keeps one trial's traces
# (a file per rank) well inside a pull request's file limit.
MAX_WORLD_SIZE = 1024
# Trial numbers: the project records trials 0-9 of a configuration and pools contributors' trials after them.
MAX_TRIAL = 9999
MAX_STEPS = 1_000_000  # training steps of a run (recorded: 3-6 profiled steps, 1,000 for convergence)
MAX_PROFILED = 10_000  # the profiler schedule (wait, warmup, active: 0-5 recorded): each active step is traced

# config.json's group for a run recorded from run-shape flags (``muon-repro bench custom --dp ...``): its name is
# in no registry bench knows, so re-recording one takes its flags again, not its name
CUSTOM_GROUP = "custom"
# config.json's scale when ``muon-repro bench`` is given no ``--scale``: the reference's small model on a CPU
DEFAULT_SCALE = "cpu"

MAX_ELEMS = 2**40  # tokens per step, bucket and unit sizes: far past any model's or batch's
# config.json's integer fields: (smallest, largest) allowed, for the analysis and a review alike
# (:func:`int_field_problem`). A field may be absent; those of NULLABLE_INTS may also be null.
RECORD_INT_RANGES: dict[str, tuple[int, int]] = {
    "world_size": (1, MAX_WORLD_SIZE),
    "dp": (1, MAX_WORLD_SIZE),
    "tp": (1, MAX_WORLD_SIZE),
    "pp": (1, MAX_WORLD_SIZE),
    "trial": (0, MAX_TRIAL),
    "trials": (1, MAX_TRIAL + 1),
    "steps": (1, MAX_STEPS),
    "timed_steps": (0, MAX_STEPS),
    "timed_warmup": (0, MAX_STEPS),
    "micro_batches": (1, 4096),  # recorded: 1-16; each is a forward and backward pass per step
    "wait": (0, MAX_PROFILED),
    "warmup": (0, MAX_PROFILED),
    "active": (0, MAX_PROFILED),
    # the work of a step: the claims compare runs by it and divide by it
    "tokens_per_step": (1, MAX_ELEMS),
    "batch_per_dp": (1, MAX_ELEMS),
    "seq_len": (1, 2**24),
    "hidden": (1, 2**20),
    "n_layers": (1, 10_000),
    "n_heads": (1, 2**20),
    "ffn_hidden": (1, 2**24),
    "vocab_size": (1, 2**24),
    "bucket_elems": (1, MAX_ELEMS),
    "ns_unit_elems": (1, MAX_ELEMS),
}
NULLABLE_INTS = frozenset({"bucket_elems", "ns_unit_elems"})  # null: the layout's own (no buckets, no cap)
# config.json's fields that name one of a few choices (:func:`choice_field_problem`); a field may be absent.
RECORD_CHOICES: dict[str, tuple[str, ...]] = {
    "optimizer": ("muon", "adamw"),
    "layout": LAYOUTS,
    "overlap": OVERLAPS,
    "precision": ("fp32", "bf16"),
}


def int_field_problem(key: str, value: Any) -> str | None:
    """Why ``value`` is no value of config.json's integer field ``key`` (a JSON integer within
    :data:`RECORD_INT_RANGES`: ``true``, ``4.0``, ``"2"`` and ``2.9`` are refused, never rounded); None when it is.
    The value is shown escaped and cut short, so that a hostile one prints as text."""
    from muon_repro.terminal import shown

    low, high = RECORD_INT_RANGES[key]
    if value is None and key in NULLABLE_INTS:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "a boolean" if isinstance(value, bool) else "null" if value is None else f"a {type(value).__name__}"
        return f"{key} is {shown(repr(value)[:40])} ({kind}), not an integer from {low} to {high}"
    if not low <= value <= high:
        shown_value = str(value) if abs(value) < 10**20 else f"a {len(str(abs(value)))}-digit number"
        return f"{key} is {shown_value}, outside {low} to {high}"
    return None


def choice_field_problem(key: str, value: Any) -> str | None:
    """Why ``value`` is none of the choices of config.json's field ``key`` (:data:`RECORD_CHOICES`); None when it is."""
    from muon_repro.terminal import shown

    if isinstance(value, str) and value in RECORD_CHOICES[key]:
        return None
    return f"{key} is {shown(repr(value)[:40])}, not one of {', '.join(RECORD_CHOICES[key])}"


def choice_problems(config: Mapping[str, Any]) -> list[str]:
    """Every choice field of a decoded config.json that :func:`choice_field_problem` refuses (absent fields pass)."""
    return [problem for key in RECORD_CHOICES if key in config if (problem := choice_field_problem(key, config[key]))]


def record_problems(config: Mapping[str, Any]) -> list[str]:
    """Every integer field of a decoded config.json that :func:`int_field_problem` refuses, then every choice field
    :func:`choice_problems` does (absent fields pass)."""
    ints = [problem for key in RECORD_INT_RANGES if key in config if (problem := int_field_problem(key, config[key]))]
    return ints + choice_problems(config)


def _int(value: Any) -> int | None:
    """An integer field: an int, or a float holding a whole number (JSON writers may add ``.0``), within int64;
    anything else (``2.9`` is no world size, ``1e400`` no count) reads as not recorded, never rounded."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
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


def _durations(value: Any) -> list[float | None]:
    """A list of times: a negative one is no time (a clock read backwards, or an edited file) and reads as None."""
    return [None if v is None or v < 0 else v for v in _floats(value)]


def _ints(value: Any) -> list[int | None]:
    return [_int(v) for v in value] if isinstance(value, list) else []


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


# ---------------------------------------------------------------- config.json


# The config.json fields in which trials of one run may differ and still pool: which trial, round and sweep it is and
# the command that recorded it; how many steps were kept and how (the profiler's schedule, the timed-step counts,
# whether the trial was traced at all); and what changes the values but not the operations (learning rate, weight
# decay, seed). Every other field is the run's work or where it ran: trials differing there measure different runs.
POOLED_FIELDS = (
    "trial",
    "trials",
    "round_order",
    "sweep",
    "command",
    "steps",
    "wait",
    "warmup",
    "active",
    "timed_steps",
    "timed_warmup",
    "profile",
    "lr",
    "weight_decay",
    "seed",
)


@dataclass(frozen=True)
class RunConfig:
    """What ``config.json`` says about a run; every field is ``None`` where it says nothing
    (a foreign folder of traces has no config at all)."""

    group: str | None = None
    name: str | None = None
    optimizer: str | None = None  # muon | adamw
    dp: int | None = None
    tp: int | None = None
    pp: int | None = None  # pipeline stages; 1 for runs recorded before the option existed
    layout: str | None = None  # contiguous | bucketed | whole_matrix
    overlap: str | None = None  # none | naive_async | pipelined (phases.OVERLAPS); "none" for runs recorded before it existed
    scale: str | None = None
    preset: str | None = None
    qkv: str | None = None
    cross_entropy: str | None = None  # vocab_parallel | gathered; "gathered" for runs recorded before the option existed
    precision: str | None = None  # fp32 | bf16 (autocast); "fp32" for runs recorded before the option existed
    micro_batches: int | None = None  # forward+backward passes per step; 1 for runs recorded before the option
    tokens_per_step: int | None = None  # global, over all DP ranks
    batch_per_dp: int | None = None
    seq_len: int | None = None
    bucket_elems: int | None = None
    ns_unit_elems: int | None = None  # Muon's cap on its Newton-Schulz units; null: the layout's own (every run before it)
    steps: int | None = None
    wait: int | None = None
    warmup: int | None = None
    active: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    ns_dtype: str | None = None
    ns_method: str | None = None
    gather_dtype: str | None = None
    reduce_dtype: str | None = None
    seed: int | None = None
    trial: int | None = None  # which recording of the configuration this is, from 0
    trials: int | None = None  # how many were asked for
    round_order: int | None = None  # its place in its round of the sweep (shuffled per round); null: recorded before
    sweep: str | None = None  # the bench command that recorded it (one id per command); null: recorded before
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
        if raw and "cross_entropy" not in raw:  # recorded before the option existed: the logits were gathered
            values["cross_entropy"] = "gathered"
        if raw and "precision" not in raw:  # recorded before the options existed: fp32, the whole batch at once
            values["precision"] = "fp32"
        if raw and "micro_batches" not in raw:
            values["micro_batches"] = 1
        if raw and "pp" not in raw:  # recorded before pipeline stages existed: the whole model on every rank
            values["pp"] = 1
        if raw and "ns_method" not in raw:  # recorded before the variants existed: the quintic, the only one then
            values["ns_method"] = "quintic"
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["command"] = list(self.command)
        return out

    def differences(self, other: RunConfig) -> dict[str, tuple[Any, Any]]:
        """The fields in which two trials of one run were recorded differently, beyond :data:`POOLED_FIELDS`: each
        ``(this trial's value, other's)``. Empty: the two measure one configuration, and their times pool."""
        mine, theirs = self.to_dict(), other.to_dict()
        return {name: (mine[name], theirs[name]) for name in mine if name not in POOLED_FIELDS and mine[name] != theirs[name]}

    @property
    def d_model(self) -> int | None:
        """The model's width: the run's override (``hidden``), else its preset's; None for an unknown preset."""
        from muon_repro.model_config import PRESETS

        if self.hidden is not None:
            return self.hidden
        preset = PRESETS.get(self.preset or "")
        return preset.hidden if preset is not None else None

    @property
    def timed_total(self) -> int:
        """Steps trained before the profiled ones, timed without the profiler (warm-up included); 0 for a run
        without timed steps (bench.configs.BenchConfig.timed_total, read back from config.json)."""
        return (self.timed_warmup or 0) + self.timed_steps if self.timed_steps else 0


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
    muon_elems: int | None = None  # shard elements routed to Muon by the plan (None: recorded before it was kept)

    @classmethod
    def from_dict(cls, raw: Any) -> ShardSummary | None:
        if not isinstance(raw, Mapping):
            return None
        values = {f.name: (_str(raw.get(f.name)) if f.name == "layout" else _int(raw.get(f.name))) for f in fields(cls)}
        required = {k: v for k, v in values.items() if k != "muon_elems"}
        return None if any(v is None for v in required.values()) else cls(**values)


@dataclass(frozen=True)
class RankMetrics:
    """What one rank measured and knew at run time (one entry of ``metrics.json``'s ``ranks``).

    Per-step lists cover every step (profiled or not); ``analytic_bytes`` and ``ns_flops`` are per
    step; ``ledger`` holds one record per collective call (step, phase, op, group, bytes, ...).
    """

    rank: int
    dp_rank: int | None = None
    tp_rank: int | None = None
    pp_rank: int | None = None  # pipeline stage; None without pipeline stages (stage 0 of 1)
    step_ms: list[float | None] = field(default_factory=list)
    optimizer_ms: list[float | None] = field(default_factory=list)
    # With pipeline stages, per profiled step: host time blocked in the stage's receives and flush (the bubble).
    bubble_ms: list[float | None] = field(default_factory=list)
    loss: list[float | None] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    state_bytes: dict[str, int] = field(default_factory=dict)  # muon (momentum) / adamw (two moments)
    transient_bytes: int | None = None  # largest set of gather/shard buffers alive at once
    # The same optimizer's memory measured by storage (muon_repro.optim.held_memory), whatever its buffers are called:
    held_state_bytes: int | None = None  # every distinct storage in optimizer.state
    held_buffer_bytes: int | None = None  # every other storage it owns (flat buffers, shards, kept gathers)
    peak_memory_bytes: int | None = None
    peak_memory_source: str | None = None  # cuda_max_allocated | process_max_rss
    update_rms: dict[str, float] = field(default_factory=dict)
    ns_calls: int | None = None
    ns_flops: int | None = None  # Newton-Schulz FLOPs of this rank in one step
    # ATen operator calls of one optimizer step on this rank, counted on a step after the recorded ones (None: before)
    optimizer_op_calls: int | None = None
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
    timed_bubble_ms: list[float | None] = field(default_factory=list)  # pipeline stages only, as bubble_ms
    timed_last_backward_ns: list[int | None] = field(default_factory=list)  # pipeline stages: each step's last backward end
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
            pp_rank=_int(raw.get("pp_rank")),
            step_ms=_durations(raw.get("step_ms")),
            optimizer_ms=_durations(raw.get("optimizer_ms")),
            bubble_ms=_durations(raw.get("bubble_ms")),
            loss=_floats(raw.get("loss")),
            ledger=[rec for rec in ledger if isinstance(rec, dict)] if isinstance(ledger, list) else [],
            state_bytes=_int_map(raw.get("state_bytes")),
            transient_bytes=_int(raw.get("transient_bytes")),
            held_state_bytes=_int(raw.get("held_state_bytes")),
            held_buffer_bytes=_int(raw.get("held_buffer_bytes")),
            peak_memory_bytes=_int(raw.get("peak_memory_bytes", raw.get("peak_mem_bytes"))),
            peak_memory_source=_str(raw.get("peak_memory_source")),
            update_rms={str(k): v for k, x in update_rms.items() if (v := _float(x)) is not None},
            ns_calls=_int(raw.get("ns_calls")),
            ns_flops=_int(raw.get("ns_flops")),
            optimizer_op_calls=_int(raw.get("optimizer_op_calls")),
            model_params=_int(raw.get("model_params")),
            local_params=_int(raw.get("local_params")),
            analytic_bytes=_int_map(raw.get("analytic_bytes")),
            shard=ShardSummary.from_dict(raw.get("shard")),
            train_flops=_int(raw.get("train_flops")),
            loopback_bytes=_int(raw.get("loopback_bytes")),
            loopback_steps=_int(raw.get("loopback_steps")),
            timed_step_ms=_durations(raw.get("timed_step_ms")),
            timed_fwd_bwd_ms=_durations(raw.get("timed_fwd_bwd_ms")),
            timed_optimizer_ms=_durations(raw.get("timed_optimizer_ms")),
            timed_bubble_ms=_durations(raw.get("timed_bubble_ms")),
            timed_last_backward_ns=_ints(raw.get("timed_last_backward_ns")),
            timed_comm=_timed_comm(raw.get("timed_comm")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The entry as written; a rank without timed steps writes no ``timed_*`` key, and one without pipeline stages
        no pipeline key (as before they existed)."""
        out = asdict(self)
        if self.pp_rank is None:
            for name in ("pp_rank", "bubble_ms", "timed_bubble_ms", "timed_last_backward_ns"):
                del out[name]
        if not (self.timed_step_ms or self.timed_fwd_bwd_ms or self.timed_optimizer_ms or self.timed_comm):
            for name in ("timed_step_ms", "timed_fwd_bwd_ms", "timed_optimizer_ms", "timed_comm"):
                del out[name]
        return out

    @property
    def total_state_bytes(self) -> int | None:
        """The state's bytes, all kinds together; None without any, or past int64 (each kind may be in range and
        their sum not: an edited record, read as not recorded rather than failing every table)."""
        total = sum(self.state_bytes.values()) if self.state_bytes else None
        return total if total is not None and total < 2**63 else None
