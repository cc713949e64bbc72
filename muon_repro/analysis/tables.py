"""The analysis tables' builders. After analysis these tables are the only interface: figures, the
report and the dataset card read them (through :mod:`muon_repro.tables`) and nothing else.

One row per:

* ``runs``: run (a benchmark configuration, all its ranks), with its configuration (:mod:`muon_repro.analysis.runs_table`);
* ``steps``: run x rank x profiled step;
* ``timed_steps``: run x rank x step timed without the profiler before the profiled ones
  (:mod:`muon_repro.analysis.timed_steps`; none for runs recorded without such steps);
* ``collectives``: run x rank x phase x collective op, totals over the profiled steps;
* ``comparisons``: Muon run x its AdamW twin (same profile, dp, tp, backend, device);
* ``claims``: a claim of the original study (Jen Wei's), the paper or Moonlight x hardware profile, measured, with a verdict;
* ``stages``: pipeline run x stage: the bubble, the optimizer step and the flush side by side
  (:mod:`muon_repro.analysis.stages_table`);
* ``ranks``, ``phases``, ``timeline``, ``losses``, ``environment``: what each rank recorded at run
  time, bytes and time per phase from three sources, phase intervals on one clock, losses, and
  the machine (built in :mod:`muon_repro.analysis.run_tables`).

Each column is declared once in :data:`SCHEMAS` (:mod:`muon_repro.tables.schemas`: name,
pandas dtype, unit, meaning); the builders return frames conformed to them, and
:func:`muon_repro.tables.io.write_tables` puts the descriptions into the Parquet field metadata.
Unknown values are nulls (pandas nullable dtypes), never NaN.

``tables_from_analysis(analysis)`` builds them from :func:`~muon_repro.analysis.batch_read.analyze_paths`'s
analysis; :func:`muon_repro.table_set.build_tables` (paths: trace files, run directories or trees of them) is the
entry point, with the original study's tables beside these.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from muon_repro.analysis.batch_read import Analysis
from muon_repro.analysis.collectives import busbw_factor
from muon_repro.analysis.run_tables import (
    environment_table,
    losses_table,
    phases_table,
    ranks_table,
    timeline_table,
)
from muon_repro.analysis.runs_table import display_path, runs_table, with_optimizer_gpu_busy
from muon_repro.analysis.stages_table import stages_table
from muon_repro.analysis.timed_steps import timed_steps_table
from muon_repro.analysis.trace_files import TraceFile, analyzed_trace_files, trace_files_table
from muon_repro.analysis.waits import MatchedCalls, match_calls
from muon_repro.tables.schemas import SCHEMAS
from muon_repro.tables.study_schemas import STUDY_SCHEMAS
from muon_repro.tables.verdict_schemas import COMPARISON_TIME_RATIOS

__all__ = ["tables_from_analysis"]


# ---------------------------------------------------------------- builders


def tables_from_analysis(
    analysis: Analysis,
    *,
    study: dict[str, pd.DataFrame] | None = None,
    study_claims: list[dict] | None = None,
    study_traces: list[TraceFile] | None = None,
) -> dict[str, pd.DataFrame]:
    """Every table of ``analysis``, conformed to SCHEMAS. ``study``: the original study's tables, ``study_claims``
    its claims rows (the claims judged on its own runs, first in the claims table) and ``study_traces`` the files
    they were read from, which :func:`muon_repro.table_set.tables_of` reads with :mod:`muon_repro.study`; empty
    when not given. A study run left out of ``study`` (a trace of it unreadable) has none of its files indexed."""
    from muon_repro.analysis.checks import checks_table
    from muon_repro.analysis.claims import claims_table, stated_numbers
    from muon_repro.analysis.convergence import convergence_tables
    from muon_repro.analysis.costmodel_tables import costmodel_tables

    # Convergence records (muon-repro converge) sit beside the traces: found under the same paths,
    # here, so that every way of building the set (analyze, stages, verify --recompute) has them.
    convergence = convergence_tables(analysis.paths)
    matches = [match_calls(items, dp=info.config.dp, tp=info.config.tp, pp=info.config.pp) for info, items in analysis.runs]
    steps = _steps_table(analysis, matches)
    timed = timed_steps_table(analysis)
    collectives = _collectives_table(analysis, matches)
    runs = runs_table(analysis, steps, timed).assign(protocol="benchmark")  # the study's protocol: study_runs
    comparisons = _comparisons_table(runs, _sweeps_by_round(steps, timed))
    ranks = ranks_table(analysis)
    phases = phases_table(analysis, steps, collectives)
    runs = with_optimizer_gpu_busy(runs, phases)
    costmodel = costmodel_tables(analysis.paths, damaged=analysis.failures)  # a damaged record: reported, left out
    environment = environment_table(analysis)
    study = study if study is not None else {schema.name: schema.empty() for schema in STUDY_SCHEMAS}
    study_runs = set(zip(study["study_runs"]["run"], study["study_runs"]["trial"]))
    study_traces = [f for f in study_traces or [] if (f.run, f.trial) in study_runs]
    claims = claims_table(
        runs,
        steps,
        ranks,
        phases,
        regimes=costmodel["regimes"],
        thresholds=costmodel["regime_thresholds"],
        convergence=convergence,
        environment=environment,
        predictions=costmodel["predictions"],
        timed=timed,
        study_claims=study_claims,
    )
    checks = checks_table(runs, ranks, phases)
    tables = {
        "runs": runs,
        "steps": steps,
        "timed_steps": timed,
        "collectives": collectives,
        "comparisons": comparisons,
        "claims": claims,
        "checks": checks,
        "stated_numbers": stated_numbers([("claims", "claim_id", claims), ("checks", "check_id", checks)]),
        "ranks": ranks,
        "phases": phases,
        "stages": stages_table(runs, timed, phases, ranks),
        "timeline": timeline_table(analysis),
        "losses": losses_table(analysis),
        "environment": environment,
        "trace_files": trace_files_table([*analyzed_trace_files(analysis), *study_traces], analysis.paths),
        **costmodel,
        **convergence,
        **study,
    }
    return {name: SCHEMAS[name].conform(df) for name, df in tables.items()}


def _steps_table(analysis: Analysis, matches: list[MatchedCalls]) -> pd.DataFrame:
    """The steps table; ``matches``: each of ``analysis.runs``' calls matched across its ranks (one matching gives
    the wait/transfer split and the start skew)."""
    frames = []
    for (info, items), match in zip(analysis.runs, matches):
        skew = match.start_skew()
        splits = match.wait_transfer()
        for b, split in zip(items, splits):
            df = b.steps.copy()
            df.insert(0, "run", info.key)
            df.insert(1, "profile", info.profile)
            df.insert(2, "group", info.group)
            df.insert(3, "name", info.name)
            df.insert(4, "rank", b.meta.rank)
            df.insert(5, "trial", info.trial)
            df["sweep"] = info.config.sweep
            df.insert(7, "file", display_path(b.meta.path))
            df.insert(7, "device", b.device)
            if skew is not None:
                df = df.merge(skew, on=["rank", "step"], how="left")
            else:
                df["start_skew_ms"] = np.nan
                df["late_ms"] = np.nan
                df["straggler_rank"] = np.nan
            df["comm_wait_ms"], df["comm_transfer_ms"] = _wait_transfer_by_step(split, b.collectives["step"], df["step"])
            frames.append(df)
    if not frames:
        return SCHEMAS["steps"].empty()
    return pd.concat(frames, ignore_index=True)


def _wait_transfer_by_step(split: pd.DataFrame, launch_step: pd.Series, steps: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per step of ``steps``: wait and transfer (ms) of the collectives launched in it
    (``split`` from :meth:`MatchedCalls.wait_transfer`, ``launch_step`` the calls' ``step``)."""
    sums = split[["wait_us", "transfer_us"]].groupby(launch_step.to_numpy()).sum() / 1000.0
    sums = sums.reindex(steps.to_numpy(), fill_value=0.0)
    return sums["wait_us"].to_numpy(), sums["transfer_us"].to_numpy()


def _collectives_table(analysis: Analysis, matches: list[MatchedCalls]) -> pd.DataFrame:
    rows = []
    for (info, items), match in zip(analysis.runs, matches):
        for b, split in zip(items, match.wait_transfer()):
            inst = b.collectives
            if inst.empty:
                continue
            n_steps = len(b.steps)
            step_set = set(b.steps["step"].tolist())
            metrics = info.rank(b.meta.rank)
            ledger = _ledger_by_phase_op(metrics.ledger if metrics else [], step_set)
            inst = inst.assign(
                dur_us=inst["end"] - inst["start"],
                wait_us=split["wait_us"],
                matched=split["matched"],
                factor=[busbw_factor(op, n) if n > 0 else None for op, n in zip(inst["op"], inst["group_size"])],
            )
            for (phase, op), g in inst.groupby(["phase", "op"], sort=True):
                known = g[g["bytes"] >= 0]
                sized = g[g["size_bytes"] >= 0]
                t_us = float(g["dur_us"].sum())
                wait_ms = float(g["wait_us"].sum()) / 1000.0
                t_sized = float(sized["dur_us"].sum())
                with_factor = sized[sized["factor"].notna()]
                t_factor = float(with_factor["dur_us"].sum())
                rows.append(
                    {
                        "run": info.key,
                        "profile": info.profile,
                        "group": info.group,
                        "name": info.name,
                        "trial": info.trial,
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
                        "wait_ms": wait_ms,
                        "transfer_ms": t_us / 1000.0 - wait_ms,  # the rest of ms, so that the two add up to it
                        "matched_calls": int(g["matched"].sum()),
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


def _ratio(a, b) -> float | None:
    if a is None or b is None or pd.isna(a) or pd.isna(b) or float(b) == 0.0:
        return None
    return float(a) / float(b)


def _sweeps_by_round(steps: pd.DataFrame, timed: pd.DataFrame) -> pd.DataFrame:
    """Which sweep recorded each run's round (run, trial, sweep), from its profiled and its timed steps."""
    columns = ["run", "trial", "sweep"]
    frames = [df[columns] for df in (steps, timed) if not df.empty and set(columns) <= set(df.columns)]
    return pd.concat(frames).drop_duplicates() if frames else pd.DataFrame(columns=columns)


def _comparisons_table(runs: pd.DataFrame, sweeps: pd.DataFrame) -> pd.DataFrame:
    """Each Muon run against an AdamW run of the same hardware profile, backend and device that did the same work on
    the same grid (claim_inputs.equal_work_twins; recorded together first, then the same group). A Muon run without
    one has no row: a run recorded on its own (a contributed ``bench custom`` size) has no twin to compare with,
    which is no reason to stop the analysis. ``sweeps``: which sweep recorded each round (:func:`_sweeps_by_round`);
    a pair not recorded together (:func:`~muon_repro.analysis.estimators.recorded_together`) has no time ratios."""
    from muon_repro.analysis.claim_inputs import equal_work_twins
    from muon_repro.analysis.estimators import recorded_together

    rows = []
    runs = runs.astype(object).where(runs.notna(), None)
    adamw = runs[runs["optimizer"] == "adamw"]
    ratio_columns = [
        c
        for c in (
            "comm_ms",
            "comm_transfer_ms",
            "exposed_comm_ms",
            "comm_bytes",
            "optimizer_ms",
            "step_ms",
            "timed_step_ms",
            "state_bytes",
        )
        if c in runs.columns
    ]
    for _, m in runs[runs["optimizer"] == "muon"].iterrows():
        same = adamw[
            (adamw["profile"] == m["profile"])
            & (adamw["dp"] == m["dp"])
            & (adamw["tp"] == m["tp"])
            & (adamw["pp"].fillna(1) == (m.get("pp") or 1) if "pp" in adamw.columns else True)
            & (adamw["backend"] == m["backend"])
            & (adamw["device"] == m["device"])
        ]
        equal = equal_work_twins(m, same)
        if equal.empty:
            continue
        together = np.array([recorded_together(sweeps, m["run"], run) for run in equal["run"]], bool)
        same_group = (equal["group"] == m["group"]).to_numpy()
        first = int(np.lexsort((~same_group, ~together))[0])  # recorded together first, then the same group
        a, paired = equal.iloc[first], bool(together[first])
        rows.append(
            {
                "profile": m["profile"],
                "group": m["group"],
                "dp": m["dp"],
                "tp": m["tp"],
                "pp": m.get("pp") or 1,
                "backend": m["backend"],
                "device": m["device"],
                "layout": m["layout"],
                "tokens_per_step": m.get("tokens_per_step"),
                "muon_run": m["run"],
                "adamw_run": a["run"],
                "recorded_together": paired,
                **{
                    f"{col}_ratio": _ratio(m[col], a[col]) if paired or f"{col}_ratio" not in COMPARISON_TIME_RATIOS else None
                    for col in ratio_columns
                },
            }
        )
    if not rows:
        return SCHEMAS["comparisons"].empty()
    return pd.DataFrame(rows)
