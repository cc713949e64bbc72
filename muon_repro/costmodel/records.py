"""What the cost model says about the recorded runs and beyond them, written as records beside the runs.

``muon-repro regimes`` writes, into ``<traces>/<profile>/costmodel/`` (:mod:`muon_repro.rundir`'s names; every row
carries the hardware profile of the machine that wrote it, :mod:`muon_repro.hardware`):

    predictions.csv         every recorded run under ``<traces>``, measured against predicted on this machine's profile
    regime_model.csv        predicted Muon and AdamW steps over a grid of tokens per step: this machine at the
                            sweep's widths, the shipped profiles at the gpu scale's model and at 7B, and the
                            scale-out to 32-1024 GPUs
    regime_thresholds.csv   the tokens per step at which Muon's overhead falls to 1.1% and 3%, per profile and model,
                            with the range the model's held-out error implies at its stated coverage, or why
                            there is none (:func:`metric_error_spread`)
    pipeline_scale_out.csv  the 7B model as TP8 x PP4 x DP on H100 nodes over InfiniBand, 32-1024 GPUs
                            (:mod:`muon_repro.costmodel.pipeline_scale_out`)

``muon-repro analyze`` turns them into tables (the analysis imports no torch; predicting does:
the shard plan is built from the model on the meta device). Each file is written through a
temporary name and a rename.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from muon_repro.bench.configs import BenchConfig
from muon_repro.bench.regimes import LAYERS, SEQ_LEN, WIDTHS, regime_point
from muon_repro.claims import LEVELS
from muon_repro.costmodel.machine import resolve_profile
from muon_repro.costmodel.machine_profile import MachineProfile
from muon_repro.costmodel.predict import predict
from muon_repro.costmodel.prediction import Prediction
from muon_repro.costmodel.validate import validate
from muon_repro.hardware import PROFILE_FIELD
from muon_repro.model_config import LLAMA_7B_SHAPE, PRESETS
from muon_repro.rundir import (
    COSTMODEL_DIR,
    PIPELINE_SCALE_OUT_FILE,
    PREDICTIONS_FILE,
    REGIME_MODEL_FILE,
    THRESHOLDS_FILE,
    measured_compute_machine,
)
from muon_repro.tables.files import write_atomic, write_atomic_all

METRICS = ("optimizer_share", "muon_extra")
MAX_TOKENS = 2**27  # the grid's end: 134M tokens per step; a level not reached by then is recorded as null


@dataclass(frozen=True)
class Model:
    """A model to price: a preset's shape with overrides (``BenchConfig`` fields), its sequence length."""

    name: str
    preset: str
    seq_len: int
    shape: tuple[tuple[str, int], ...] = ()

    @property
    def d_model(self) -> int:
        return dict(self.shape).get("hidden", PRESETS[self.preset].hidden)


# The original study (Jen Wei's) does not publish its model; the gpu scale's (GPT-2-medium shaped, 369M) stands for it.
STUDY_MODEL = Model("gpu-scale-369m", "large", 1024)
# A LLaMA-7B-shaped model: 32 blocks of width 4096, MLP 11008, a 32k vocabulary, 4k sequences.
MODEL_7B = Model("7b", "large", 4096, tuple(LLAMA_7B_SHAPE.items()))


@dataclass(frozen=True)
class Setting:
    """Where a model is priced: a profile, a DP x TP grid, a layout, the model's matmul dtype."""

    machine: str
    model: Model
    dp: int
    tp: int
    layout: str = "contiguous"
    model_dtype: str = "bf16"  # large runs train in mixed precision; the bench's own runs are fp32


# The shipped profile of the original study's machine, 4 RTX A4000s each on PCIe Gen4 x4: named by the hardware profile
# its traces derive (muon_repro.study.sources.STUDY_PROFILE), one machine, one profile.
STUDY_MACHINE = "4xRTXA4000-pcie-nccl"
# Profile, grid and model of each threshold: the original study's 4 GPUs as DP2·TP2, one 8-GPU H100 node as DP4·TP2.
THRESHOLD_SETTINGS = tuple(
    Setting(machine, model, dp, tp)
    for machine, dp, tp in ((STUDY_MACHINE, 2, 2), ("h100-8x-nvlink", 4, 2))
    for model in (STUDY_MODEL, MODEL_7B)
)
SCALE_OUT_GPUS = (32, 64, 128, 256, 512, 1024)
SCALE_OUT_TOKENS = 4 * 2**20  # 4M tokens per step, the paper's pretraining regime
SCALE_OUT_TP = 8  # TP inside a node, DP across nodes


def write_records(
    traces: str | Path, machine: MachineProfile, *, profile: str, quick: bool = False, log: Callable[[str], None] = print
) -> list[Path]:
    """Predict and write the three records into ``<traces>/<profile>/costmodel/``, each row tagged with
    ``profile``; returns the files written. Every run of ``profile`` under ``traces`` is predicted,
    in the profile layout or the old one. ``quick``: the recorded runs and this machine's lines only
    (seconds, for tests)."""
    folder = Path(traces) / profile / COSTMODEL_DIR
    log(f"predicting every recorded run of {profile} under {traces} on {machine.name} ...")
    predictions = validate(traces, machine, profiled=None, profile=profile, warn=lambda line: log(f"warning: {line}"))
    if not predictions:  # written, an empty record would replace the profile's predictions, and its lines be another's
        raise ValueError(
            f"no run of profile {profile} under {traces} has measured steps that machine {machine.name!r} "
            f"({machine.device}) prices (it prices runs of its own kind of device): give the profile this machine's "
            f"runs were recorded on (--machine {Path(traces) / profile / COSTMODEL_DIR / 'machine.json'}, as calibrated), "
            "or record runs first; nothing was written"
        )
    folder.mkdir(parents=True, exist_ok=True)
    spread = metric_error_spread(predictions, machine.device)
    for metric, s in spread.items():
        said = s if isinstance(s, str) else f"log error {s.low:+.3f} to {s.high:+.3f} ({s.coverage:.0%}) over {s.runs} {s.basis}"
        log(f"  {metric}: {said}")
    log("pricing the regime lines ...")
    if not machine.collectives:  # one device calibrated alone: its own line, and its compute on the shipped GPUs' links
        lines, thresholds = single_device_lines(machine, spread, log)
        return _write(folder, profile, predictions, [with_ranges(row, spread) for row in lines], thresholds)
    lines = list(this_machine_lines(machine, quick=quick))
    thresholds: list[dict] = []
    on_gpus = spread_for(spread, "cuda", machine.device)  # the shipped GPU profiles: only GPU residuals range them
    if not quick:
        for setting in THRESHOLD_SETTINGS:
            log(f"  {setting.machine}, {setting.model.name}, DP{setting.dp}·TP{setting.tp}")
            grid = list(token_grid(setting))
            lines += grid
            thresholds += threshold_rows(setting, grid, on_gpus)
        log(f"  scale-out: {SCALE_OUT_GPUS[0]}-{SCALE_OUT_GPUS[-1]} GPUs (the largest take a minute each)")
        lines += list(scale_out_rows())
    lines = [with_ranges(row, spread if row["kind"] == "this_machine" else on_gpus) for row in lines]
    pipeline: list[dict] = []
    if not quick:
        from muon_repro.costmodel.pipeline_scale_out import pipeline_scale_out_rows

        log(f"  pipeline scale-out: 7B as TP8 x PP4 x DP, {SCALE_OUT_GPUS[0]}-{SCALE_OUT_GPUS[-1]} GPUs")
        pipeline = pipeline_scale_out_rows(SCALE_OUT_GPUS)
    return _write(folder, profile, predictions, lines, thresholds, pipeline)


def _write(
    folder: Path, profile: str, predictions: list[dict], lines: list[dict], thresholds: list[dict], pipeline: list[dict] = ()
) -> list[Path]:
    """The records, written whole before any replaces its old one (one set); the pipeline scale-out only when it was
    priced (not quick), and an older one removed when it was not, so that no set mixes two runs' records."""
    written = [folder / PREDICTIONS_FILE, folder / REGIME_MODEL_FILE, folder / THRESHOLDS_FILE]
    tables = [predictions, lines, thresholds]
    if pipeline:
        written.append(folder / PIPELINE_SCALE_OUT_FILE)
        tables.append(list(pipeline))
    paths = write_atomic_all(
        {path: _csv_of([{PROFILE_FIELD: profile, **row} for row in rows]) for path, rows in zip(written, tables)}
    )
    if not pipeline:
        (folder / PIPELINE_SCALE_OUT_FILE).unlink(missing_ok=True)
    return paths


SINGLE_DEVICE_TOKENS = tuple(2**k for k in range(13, 21))  # 8k to 1M tokens per step


def single_device_lines(
    machine: MachineProfile, spread: dict[str, ErrorSpread | str], log: Callable[[str], None] = print
) -> tuple[list[dict], list[dict]]:
    """What a profile of one device measured alone prices: the gpu scale's model on that device (kind
    ``this_machine``), and, labelled as predictions (kind ``measured_compute``), the shipped GPU profiles'
    threshold settings with their interconnect and this device's measured kernel rates; their thresholds."""
    lines = []
    setting = Setting(machine.name, STUDY_MODEL, 1, 1)
    for tokens in SINGLE_DEVICE_TOKENS:
        lines.append(line_row(setting, tokens, "this_machine", *_pair(setting, tokens, machine)))
    thresholds = threshold_rows(setting, lines, spread)
    for base in THRESHOLD_SETTINGS:
        hybrid = measured_compute_profile(resolve_profile(base.machine), machine, base.model)
        setting = replace(base, machine=hybrid.name)
        log(f"  {hybrid.name}, {setting.model.name}, DP{setting.dp}·TP{setting.tp}")
        grid = list(token_grid(setting, hybrid, kind="measured_compute"))
        lines += grid
        thresholds += threshold_rows(setting, grid, spread)
    return lines, thresholds


# Each priced model's key in a calibration's ``ns_against_matmul``: bf16 Newton-Schulz and matmuls timed at that
# model's own shapes (muon_repro.costmodel.compute_bench.TARGET_MODELS).
MEASURED_AT_SHAPES = {STUDY_MODEL.name: "369m", MODEL_7B.name: "7b"}


def measured_compute_profile(links: MachineProfile, compute: MachineProfile, model: Model | None = None) -> MachineProfile:
    """``links``'s interconnect (its collectives, ranks per node and their efficiencies) with ``compute``'s measured
    kernel rates and size curves, at full efficiency (they are what the device reached): a prediction for GPUs we
    do not have. Where the calibration timed ``model``'s own shapes (``ns_against_matmul``: Newton-Schulz on its full
    matrices, as Distributed Muon runs it, and the matmuls of its layers at full width, TP 1), those bf16 rates price
    it: the profile's flat rates come from smaller matrices, on a GPU launch-bound (about 0.35 ms a call whatever the
    size on the H200), and would price a 7B model's matrices at a quarter of the rate the device reached on them."""
    from muon_repro.costmodel.machine_profile import SCOPES

    matmul, newton_schulz = dict(compute.matmul_tflops), dict(compute.newton_schulz_tflops)
    measured = (compute.calibration.get("ns_against_matmul") or {}).get(MEASURED_AT_SHAPES.get(model.name)) if model else None
    at_shapes = ""
    if measured and "ns_tflops" in measured and "matmul_tflops" in measured:
        matmul["bf16"], newton_schulz["bf16"] = float(measured["matmul_tflops"]), float(measured["ns_tflops"])
        at_shapes = (
            f" bf16 Newton-Schulz as timed on the {model.name} model's matrices, bf16 matmuls on its full-width (TP 1) layers."
        )
    return replace(
        links,
        name=measured_compute_machine(links.name, compute.name),
        description=f"{links.description} Kernel rates measured on {compute.name} ({compute.description}).{at_shapes}",
        matmul_tflops=matmul,
        newton_schulz_tflops=newton_schulz,
        attention_tflops=compute.attention_tflops,
        elementwise_gbps=compute.elementwise_gbps,
        cross_entropy_gbps=compute.cross_entropy_gbps,
        gelu_gbps=compute.gelu_gbps,
        op_overhead_us=compute.op_overhead_us,
        profiled_op_overhead_us=compute.profiled_op_overhead_us,
        size_curves=compute.size_curves,  # the device's own kernels by size (a GPU's: bf16, at its runs' passes)
        size_curves_precision=compute.size_curves_precision,
        efficiency={k: v for k, v in links.efficiency.items() if k in SCOPES},
        calibration={},
    )


def line_row(setting: Setting, tokens: int, kind: str, muon: Prediction, adamw: Prediction) -> dict:
    """One point of a model line: both optimizers' predicted steps at ``tokens`` per step."""
    workload = muon.workload
    world = setting.dp * setting.tp
    return {
        "kind": kind,
        "machine": setting.machine,
        "model": setting.model.name,
        "d_model": setting.model.d_model,
        "model_params": workload.model.num_params(),
        "model_dtype": setting.model_dtype,
        "gpus": world,
        "dp": setting.dp,
        "tp": setting.tp,
        "layout": setting.layout,
        "tokens_per_step": tokens,
        "muon_step_ms": muon.step_ms,
        "muon_optimizer_ms": muon.optimizer_ms,
        "muon_comm_ms": muon.comm_ms,
        "adamw_step_ms": adamw.step_ms,
        "adamw_optimizer_ms": adamw.optimizer_ms,
        "adamw_comm_ms": adamw.comm_ms,
        "optimizer_share": muon.optimizer_ms / muon.step_ms,
        "muon_extra": muon.step_ms / adamw.step_ms - 1,
        "flop_ratio": max(workload.ns_flops) / (workload.train_flops / world),
    }


def this_machine_lines(machine: MachineProfile, *, quick: bool = False) -> Iterable[dict]:
    """The sweep's own points (DP2·TP2, contiguous, fp32, unprofiled) on a finer grid of tokens per step."""
    widths = WIDTHS[:1] if quick else WIDTHS
    tokens = (512, 4096) if quick else tuple(2**k for k in range(8, 17)) + (3 * 2**14, 2**16)
    for width in widths:
        model = Model(
            f"d{width}",
            "small",
            SEQ_LEN,
            (("hidden", width), ("n_layers", LAYERS), ("n_heads", width // 32), ("ffn_hidden", 4 * width)),
        )
        setting = Setting(machine.name, model, 2, 2, model_dtype="fp32")
        for t in sorted(set(tokens)):
            muon, adamw = (predict(regime_point(opt, width, t), machine, profiled=False) for opt in ("muon", "adamw"))
            yield line_row(setting, t, "this_machine", muon, adamw)


def run_config(setting: Setting, optimizer: str, tokens: int) -> BenchConfig:
    shape = dict(setting.model.shape)
    return BenchConfig(
        group="model",
        name=f"{setting.model.name}_{optimizer}",
        optimizer=optimizer,
        dp=setting.dp,
        tp=setting.tp,
        layout=setting.layout,
        scale="gpu",
        preset=setting.model.preset,
        tokens_per_step=tokens,
        seq_len=setting.model.seq_len,
        bucket_elems=40_000_000 if setting.layout == "bucketed" else None,
        profile=False,
        **shape,
    )


def _pair(setting: Setting, tokens: int, machine: MachineProfile | None = None) -> tuple[Prediction, Prediction]:
    machine = machine or resolve_profile(setting.machine)
    return tuple(
        predict(run_config(setting, opt, tokens), machine, profiled=False, model_dtype=setting.model_dtype)
        for opt in ("muon", "adamw")
    )  # type: ignore[return-value]


def token_grid(setting: Setting, machine: MachineProfile | None = None, kind: str = "profile") -> Iterable[dict]:
    """Predicted steps at one micro-batch per DP rank, doubling up to :data:`MAX_TOKENS` (on ``machine``, default the
    setting's shipped profile)."""
    tokens = setting.dp * setting.model.seq_len
    while tokens <= MAX_TOKENS:
        yield line_row(setting, tokens, kind, *_pair(setting, tokens, machine))
        tokens *= 2


@dataclass(frozen=True)
class ErrorSpread:
    """A range for the model's log error on a metric, from its held-out residuals on one kind of device: the
    ``k``-th smallest and ``k``-th largest of ``n`` residuals. For a new configuration whose residual is exchangeable
    with them, the true value lies between ``predicted * exp(-high)`` and ``predicted * exp(-low)`` with probability
    ``coverage = (n + 1 - 2k) / (n + 1)`` (order statistics: no distribution assumed)."""

    low: float  # the k-th smallest log(predicted / measured)
    high: float  # the k-th largest
    runs: int  # n: the held-out residuals
    basis: str  # which residuals: "held-out cpu runs", ...
    coverage: float  # the stated coverage of the range


RANGE_MIN_RESIDUALS = 20  # fewer held-out residuals of the device's kind than this: no range, and the table says so
RANGE_TAIL = 0.05  # k = floor((n + 1) * RANGE_TAIL), at least 1: about a 90% range


def adamw_twin(run: str) -> str:
    """The run id of a Muon run's AdamW twin: the same name with the optimizer swapped, the contiguous layout
    (AdamW's layout only buckets its reduce-scatter differently)."""
    twin = run.replace("/muon_", "/adamw_", 1)
    for layout in ("_bucketed", "_whole_matrix"):
        twin = twin.removesuffix(layout)
    return twin


def metric_residuals(predictions: list[dict]) -> dict[str, list[float]]:
    """Per threshold metric, the model's log errors on it over the held-out runs (configurations never tuned on):

    * ``optimizer_share`` of a Muon run: log(predicted share / measured share) = its optimizer's log error
      minus its step's;
    * ``muon_extra`` (on the ratio 1 + extra): a Muon run's step log error minus its AdamW twin's (same
      width, tokens, grid and key apart from the optimizer), both held out."""
    by_run = {r["run"]: r for r in predictions}

    def step_error(r: dict) -> float:
        return math.log(r["predicted_step_ms"] / r["measured_step_ms"])

    residuals: dict[str, list[float]] = {m: [] for m in METRICS}
    for r in predictions:
        if r["optimizer"] != "muon" or not r["measured_optimizer_ms"] or not r["held_out"]:
            continue
        residuals["optimizer_share"].append(math.log(r["predicted_optimizer_ms"] / r["measured_optimizer_ms"]) - step_error(r))
        twin = by_run.get(adamw_twin(r["run"]))
        if twin is not None and twin["held_out"]:
            residuals["muon_extra"].append(step_error(r) - step_error(twin))
    return residuals


def metric_error_spread(predictions: list[dict], device: str) -> dict[str, ErrorSpread | str]:
    """Per threshold metric, the range of the model's log error from the held-out residuals of ``predictions``
    (runs on ``device``: cpu or cuda), or why there is none (fewer than :data:`RANGE_MIN_RESIDUALS`)."""
    out: dict[str, ErrorSpread | str] = {}
    for metric, values in metric_residuals(predictions).items():
        n = len(values)
        if n < RANGE_MIN_RESIDUALS:
            out[metric] = f"unavailable: {n} held-out {device} residuals, {RANGE_MIN_RESIDUALS} needed"
            continue
        k = max(1, math.floor((n + 1) * RANGE_TAIL))
        ordered = sorted(values)
        out[metric] = ErrorSpread(ordered[k - 1], ordered[n - k], n, f"held-out {device} runs", (n + 1 - 2 * k) / (n + 1))
    return out


def spread_for(spread: dict[str, ErrorSpread | str], device: str, recorded_on: str) -> dict[str, ErrorSpread | str]:
    """The spread that may price a machine of kind ``device``: the residuals' own when they were recorded on that
    kind (``recorded_on``), else none (a GPU threshold is never given a range from CPU residuals)."""
    if device == recorded_on:
        return spread
    return {metric: f"unavailable: 0 held-out {device} residuals, {RANGE_MIN_RESIDUALS} needed" for metric in METRICS}


def metric_range(metric: str, value: float, spread: ErrorSpread) -> tuple[float, float]:
    """The (low, high) true values of ``metric`` that a predicted ``value`` stands for, given the model's spread."""
    if metric == "muon_extra":  # the error is on the step ratio 1 + extra
        return (1 + value) * math.exp(-spread.high) - 1, (1 + value) * math.exp(-spread.low) - 1
    return value * math.exp(-spread.high), value * math.exp(-spread.low)


def with_ranges(row: dict, spread: dict[str, ErrorSpread | str]) -> dict:
    """A regime_model row with each metric's range (``<metric>_low`` / ``_high``) by the model's validated error,
    null where the spread has none."""
    out = dict(row)
    for metric in METRICS:
        s = spread.get(metric)
        low, high = metric_range(metric, row[metric], s) if isinstance(s, ErrorSpread) else (None, None)
        out[f"{metric}_low"], out[f"{metric}_high"] = low, high
    return out


def threshold_rows(setting: Setting, grid: list[dict], spread: dict[str, ErrorSpread | str] | None = None) -> list[dict]:
    """For each metric and level, the tokens per step at which the metric first falls to the level:
    log-linear interpolation between the two grid points around the crossing (null if it never does within the
    grid, whose end ``grid_max_tokens`` says); and where the true curve could cross, given the model's error
    ``spread`` (at its stated ``range_coverage``): the low end where the metric is as small as the errors allow
    (it falls to the level soonest), the high end where it is as large (null: not within the grid)."""
    rows = []
    spread = spread or {}
    grid_max = max((r["tokens_per_step"] for r in grid), default=None)
    for metric in METRICS:
        s = spread.get(metric)
        for level in (declared.value for declared in LEVELS):
            points = [(r["tokens_per_step"], r[metric]) for r in grid]
            tokens = crossing(points, level)
            low = high = None
            if isinstance(s, ErrorSpread):
                ranges = [(t, metric_range(metric, v, s)) for t, v in points]
                low = crossing([(t, lo) for t, (lo, _) in ranges], level)
                high = crossing([(t, hi) for t, (_, hi) in ranges], level)
            rows.append(
                {
                    "machine": setting.machine,
                    "model": setting.model.name,
                    "d_model": setting.model.d_model,
                    "model_dtype": setting.model_dtype,
                    "dp": setting.dp,
                    "tp": setting.tp,
                    "layout": setting.layout,
                    "metric": metric,
                    "level": level,
                    "tokens_per_step": tokens,
                    "tokens_per_step_low": low,
                    "tokens_per_step_high": high,
                    "tokens_per_d_model": tokens / setting.model.d_model if tokens is not None else None,
                    "grid_max_tokens": grid_max,
                    "range_coverage": s.coverage if isinstance(s, ErrorSpread) else None,
                    "error_runs": s.runs if isinstance(s, ErrorSpread) else None,
                    "error_basis": s.basis if isinstance(s, ErrorSpread) else (s or "no residuals"),
                }
            )
    return rows


def crossing(points: list[tuple[int, float]], level: float) -> float | None:
    """The smallest x where the piecewise log-log line through ``points`` (sorted by x) falls to ``level``."""
    points = sorted(points)
    if points and points[0][1] <= level:
        return float(points[0][0])
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if y0 > level >= y1:
            if y1 <= 0:
                return float(x1)
            f = (math.log(y0) - math.log(level)) / (math.log(y0) - math.log(y1))
            return math.exp(math.log(x0) + f * (math.log(x1) - math.log(x0)))
    return None


def scale_out_rows() -> Iterable[dict]:
    """The 7B model on H100 nodes over 400 Gb/s InfiniBand, TP8 in a node, DP across nodes, 4M tokens per step."""
    for gpus in SCALE_OUT_GPUS:
        setting = Setting("h100-multinode-ib400", MODEL_7B, gpus // SCALE_OUT_TP, SCALE_OUT_TP)
        yield line_row(setting, SCALE_OUT_TOKENS, "scale_out", *_pair(setting, SCALE_OUT_TOKENS))


def write_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` as CSV (columns in first-seen order) through a temporary file and a rename."""
    write_atomic(path, _csv_of(rows))


def _csv_of(rows: list[dict]) -> Callable[[Path], object]:
    """The writer of ``rows`` as CSV, columns in first-seen order, for :func:`write_atomic` and its set."""
    import pandas as pd

    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return lambda tmp: pd.DataFrame(rows, columns=list(columns)).to_csv(tmp, index=False)
