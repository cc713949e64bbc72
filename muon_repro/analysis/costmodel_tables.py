"""The cost model's tables, from the records beside the runs: ``calibration``, ``predictions``,
``regimes``, ``regime_model`` and ``regime_thresholds``.

Inputs, under any analyzed folder, in ``<profile>/`` folders or (older datasets) straight under it
(names from :mod:`muon_repro.rundir`):

    costmodel/machine.calibration.csv    what ``muon-repro calibrate`` measured on the recording machine
    costmodel/predictions.csv            every recorded run, measured and predicted (``muon-repro regimes``)
    costmodel/regime_model.csv           predicted Muon and AdamW steps over tokens per step
    costmodel/regime_thresholds.csv      tokens per step at which Muon's overhead falls to 1.1% and 3%
    regimes/<point>/trial<k>/            the regime sweep's runs (timed without the profiler: no traces)

Every row carries a hardware profile: a record's ``profile`` column, else (records written before
profiles existed) the name of the ``machine.json`` beside it, the profile calibrated on the machine
that wrote them; a record's run ids gain that profile as their first part, as the runs' ids have.
The ``regimes`` table is measured here, from the sweep's ``metrics.json`` (every trial's recorded
steps; times the median over rounds of each round's median, intervals paired over rounds by
:mod:`muon_repro.analysis.rounds`), with the
predictions of ``predictions.csv`` beside each point. Torch-free, like the rest of the analysis.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from muon_repro.analysis.estimators import left_out, muon_extra, optimizer_share, steps_frame, typical_time
from muon_repro.rundir import (
    CALIBRATION_FILE,
    COSTMODEL_DIR,
    PIPELINE_SCALE_OUT_FILE,
    PREDICTIONS_FILE,
    REGIME_MODEL_FILE,
    REGIMES_GROUP,
    RENAMED_MACHINES,
    THRESHOLDS_FILE,
    RunDir,
    costmodel_profile,
    is_hidden_under,
    trial_folders,
)
from muon_repro.tables.schemas import SCHEMAS
from muon_repro.values import command_line, recorded_commit

if TYPE_CHECKING:
    from muon_repro.analysis.batch_read import TraceFailure  # batch_read imports this module

RECORD_TABLES = {
    "calibration": CALIBRATION_FILE,
    "predictions": PREDICTIONS_FILE,
    "regime_model": REGIME_MODEL_FILE,
    "regime_thresholds": THRESHOLDS_FILE,
    "pipeline_scale_out": PIPELINE_SCALE_OUT_FILE,
}
COSTMODEL_TABLES = (*RECORD_TABLES, "regimes")
# Columns a record written before they existed lacks, and the value every such row had: runs before pipelines had one
# stage.
RECORD_DEFAULTS = {"predictions": {"pp": 1}}
NS_OVER_FWD_BWD = (
    10 / 3
)  # closed form: Newton-Schulz / forward+backward FLOPs ~ (10/3) d_model / T per matrix (docs/method.md#regimes)


def costmodel_tables(paths: Iterable[str | Path], damaged: list[TraceFailure] | None = None) -> dict[str, pd.DataFrame]:
    """Every cost-model table from the records and sweep runs under ``paths`` (empty tables where there are none).
    A record file that cannot be read raises a ValueError naming it; with ``damaged`` given, it is left out and named
    there instead (``muon-repro analyze`` reports it with the traces it could not read, and writes the rest)."""
    roots = [Path(p) for p in paths if Path(p).is_dir()]
    tables = {name: _records(roots, name, file, damaged) for name, file in RECORD_TABLES.items()}
    tables["regimes"] = regimes_table(roots, tables["predictions"])
    return {name: SCHEMAS[name].conform(df) for name, df in tables.items()}


def has_costmodel_inputs(paths: Iterable[str | Path]) -> bool:
    """Whether ``paths`` hold a cost-model record or a regime-sweep run (what a folder without traces can still give)."""
    roots = [Path(p) for p in paths if Path(p).is_dir()]
    return any(_record_files(roots, file) for file in RECORD_TABLES.values()) or bool(sweep_runs(roots))


def _record_files(roots: list[Path], file: str) -> list[Path]:
    found = {p.resolve(): p for root in roots for p in root.rglob(f"{COSTMODEL_DIR}/{file}") if not is_hidden_under(p, root)}
    return [found[k] for k in sorted(found)]


def _records(roots: list[Path], name: str, file: str, damaged: list[TraceFailure] | None = None) -> pd.DataFrame:
    """The rows of every ``costmodel/<file>`` under ``roots``, with the table's columns (missing ones null); a file
    that cannot be read is named in ``damaged`` and left out, or raises when ``damaged`` is None."""
    schema = SCHEMAS[name]
    frames = []
    for path in _record_files(roots, file):
        try:
            frame = _record(path, name, schema.names)
        except ValueError as exc:
            if damaged is None:
                raise
            from muon_repro.analysis.batch_read import TraceFailure

            damaged.append(TraceFailure(str(path), f"{exc}; its rows are left out of the {name} table"))
            continue
        if frame is None:
            continue
        if "machine" in frame.columns:  # a shipped profile's name from before it was renamed: its name now
            frame["machine"] = frame["machine"].replace(RENAMED_MACHINES)
        frame = frame.assign(**{c: v for c, v in RECORD_DEFAULTS.get(name, {}).items() if c not in frame.columns})
        frames.append(_with_profile(frame, path.parent).reindex(columns=schema.names))
    return pd.concat(frames, ignore_index=True) if frames else schema.empty()


def _record(path: Path, name: str, columns: list[str]) -> pd.DataFrame | None:
    """One record file's rows (None for a record with no rows); a ValueError naming the file when it cannot be read."""
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:  # a record with no rows (muon-repro regimes --quick writes no thresholds)
        return None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable {name} record ({exc}); write it again with muon-repro regimes") from None
    unknown = sorted(set(frame.columns) - set(columns))
    if unknown:
        raise ValueError(f"{path}: columns {unknown} are not in the {name} table; write it again with this version of muon-repro")
    return frame


def _with_profile(frame: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """``frame`` with its ``profile`` filled (older records: from the folder's machine.json) and its run ids
    ``<profile>/<group>/<name>``."""
    frame = frame.copy()
    recorded = frame["profile"] if "profile" in frame.columns else pd.Series(None, index=frame.index, dtype=object)
    frame["profile"] = recorded.where(recorded.notna(), costmodel_profile(folder))
    if "run" in frame.columns:
        frame["run"] = [
            r if pd.isna(r) or str(r).startswith(f"{p}/") else f"{p}/{r}" for r, p in zip(frame["run"], frame["profile"])
        ]
    return frame


# ---------------------------------------------------------------- the regime sweep, measured


def sweep_runs(roots: list[Path]) -> dict[str, list[RunDir]]:
    """The sweep's trial folders by run key (``<profile>/regimes/<name>``), by trial number. A trial recorded with
    another configuration than its run's first is not one of its rounds (the analysis names it and leaves it out:
    batch_read, run_records.POOLED_FIELDS); it is left out here too."""
    runs: dict[str, dict[Path, RunDir]] = {}
    for root in roots:
        for key, folders in trial_folders(root).items():
            if key.split("/")[1:2] == [REGIMES_GROUP]:
                runs.setdefault(key, {}).update((folder.resolve(), RunDir(folder)) for folder in folders)
    by_key = {key: sorted(found.values(), key=lambda run: run.trial) for key, found in sorted(runs.items())}
    return {key: [run for run in trials if not run.config.differences(trials[0].config)] for key, trials in by_key.items()}


def _recorded_frame(key: str, trials: list[RunDir]) -> pd.DataFrame:
    """Run ``key``'s recorded steps (step time of the slowest rank, optimizer time mean over ranks), each trial's by
    its number and sweep: the rounds of two runs pair by number, within one sweep (estimators.unpaired_rounds)."""
    steps = {run.trial: np.array(run.recorded_steps(), dtype="float64").reshape(-1, 2) for run in trials}
    return steps_frame(key, steps, {run.trial: run.config.sweep for run in trials})


def regimes_table(roots: list[Path], predictions: pd.DataFrame) -> pd.DataFrame:
    """One row per point of the regime sweep: measured step, optimizer share and Muon's extra over its
    AdamW twin (same width, tokens, DP x TP), with the predicted values beside them."""
    runs = sweep_runs(roots)
    recorded = {key: _recorded_frame(key, trials) for key, trials in runs.items()}
    predicted = {row.run: row for row in predictions.itertuples()} if len(predictions) else {}
    points = {key: _point(trials[0]) for key, trials in runs.items()}
    twin_of = lambda p: (p["profile"], p["d_model"], p["tokens_per_step"], p["dp"], p["tp"])  # noqa: E731 - same profile, shape, tokens
    twins = {twin_of(p): key for key, p in points.items() if p["optimizer"] == "adamw"}
    rows = []
    for key, point in points.items():
        frame = recorded[key]
        if frame.empty:
            continue
        twin = twins.get(twin_of(point)) if point["optimizer"] == "muon" else None
        # a Muon point is paired with its AdamW twin round by round: trial k of both was recorded in round k
        runs_of_row = ((frame, key), (recorded[twin], twin)) if twin is not None else ((frame, key),)
        share = optimizer_share(frame, key)  # the claims' estimator: one median per round (trial)
        step_ms = typical_time(frame, key, "step_ms", "max")
        row = {
            **point,
            "run": key,
            "trials": len(runs[key]),
            "steps": int(frame["step_ms"].notna().sum()),
            "step_ms": step_ms,
            "optimizer_ms": typical_time(frame, key, "optimizer_ms", "mean"),
            "optimizer_share": share[0],
            "optimizer_share_lo": share[1],
            "optimizer_share_hi": share[2],
            "adamw_run": twin,
            "disturbed_rounds": len(left_out(*runs_of_row)),
        }
        if twin is not None:
            extra = muon_extra(*runs_of_row)
            adamw_step_ms = typical_time(recorded[twin], twin, "step_ms", "max")
            adamw_optimizer_ms = typical_time(recorded[twin], twin, "optimizer_ms", "mean")
            outside = adamw_step_ms - adamw_optimizer_ms
            row |= {
                "adamw_step_ms": adamw_step_ms,
                "muon_extra": extra[0],
                "muon_extra_lo": extra[1],
                "muon_extra_hi": extra[2],
                "muon_extra_ms_per_ktoken": (step_ms - adamw_step_ms) / (point["tokens_per_step"] / 1000),
                "ns_time_ratio": (row["optimizer_ms"] - adamw_optimizer_ms) / outside if outside > 0 else None,
            }
        row |= _predicted(predicted.get(key), predicted.get(twin) if twin else None)
        rows.append(row)
    return pd.DataFrame(rows, columns=SCHEMAS["regimes"].names) if rows else SCHEMAS["regimes"].empty()


def _point(run: RunDir) -> dict:
    """What a sweep point is: its shape from config.json, its FLOPs from metrics.json."""
    cfg, ranks = run.config, run.ranks
    world = (cfg.dp or 1) * (cfg.tp or 1)
    ns_max = max((r.ns_flops or 0 for r in ranks), default=0)
    train = next((r.train_flops for r in ranks if r.train_flops), None)
    fwd_bwd = train / world if train else None
    multiplier = (cfg.tp or 1) * (
        (cfg.dp or 1) if cfg.layout == "bucketed" else 1
    )  # who runs every matrix (docs/method.md#regimes)
    return {
        "profile": run.profile,
        "command": command_line(cfg.command),
        "git_sha": recorded_commit(run.environment),
        "d_model": cfg.hidden,
        "n_layers": cfg.n_layers,
        "tokens_per_step": cfg.tokens_per_step,
        "dp": cfg.dp,
        "tp": cfg.tp,
        "layout": cfg.layout,
        "optimizer": cfg.optimizer,
        "ns_gflop_max_rank": ns_max / 1e9 if cfg.optimizer == "muon" else 0.0,
        "fwd_bwd_gflop_per_rank": fwd_bwd / 1e9 if fwd_bwd else None,
        "flop_ratio": ns_max / fwd_bwd if fwd_bwd and cfg.optimizer == "muon" else None,
        "closed_form_ratio": NS_OVER_FWD_BWD * cfg.hidden / cfg.tokens_per_step * multiplier
        if cfg.optimizer == "muon" and cfg.hidden and cfg.tokens_per_step
        else None,
    }


def _predicted(muon, adamw) -> dict:
    if muon is None:
        return {}
    out = {
        "held_out": getattr(muon, "held_out", None),
        "validation_set": getattr(muon, "validation_set", None),
        "predicted_step_ms": muon.predicted_step_ms,
        "predicted_optimizer_ms": muon.predicted_optimizer_ms,
        "predicted_optimizer_share": muon.predicted_optimizer_ms / muon.predicted_step_ms,
    }
    if adamw is not None:
        out["predicted_muon_extra"] = muon.predicted_step_ms / adamw.predicted_step_ms - 1
    return out
