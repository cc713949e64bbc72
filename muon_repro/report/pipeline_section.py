"""The report's "3-D parallelism (DP x TP x PP)" section: what the pipeline group ran, its grids' step times,
each Muon stage's step taken apart, the two claims asked of it, and what they can and cannot say here.

From the tables only (``runs``, ``comparisons``, ``stages``, ``claims``, ``environment``): every number is a cell,
or a number a claim's explanation states. Without a pipeline run (a profile of single-device runs, a metrics folder
older than the ``pp`` column) the section is one sentence and draws nothing.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from muon_repro.hardware import rows_of_profile
from muon_repro.report import style
from muon_repro.report.abstract_section import not_comparable_reasons
from muon_repro.report.claims_section import claim_measured, report_verdict
from muon_repro.report.data import ReportData, is_missing, metric, require_columns
from muon_repro.report.formatting import ms, ratio
from muon_repro.report.pipeline_costmodel import pipeline_costmodel
from muon_repro.report.selection import pipeline_runs, pp_of

PIPELINE_CLAIMS = ("hybrid_survives_pp", "bubble_hides_step")
NO_PIPELINE = (
    "No pipeline run in these tables: `muon-repro bench pipeline --trials 6`, then `muon-repro analyze`, records the "
    "DP x TP x PP grids (docs/pipeline.md)."
)
GRID_HEADER = [
    "grid",
    "ranks",
    "micro-batches",
    "Muon step",
    "AdamW step",
    "Muon optimizer",
    "AdamW optimizer",
    "Muon / AdamW step (profiled)",
    "Muon bubble",
]
STAGE_HEADER = ["grid", "stage", "holds", "fwd+bwd", "bubble", "optimizer", "bubble / optimizer"]
NOT_A_PIPELINE = "no stages"


def grid_of(row: pd.Series) -> tuple[int, int, int]:
    """(dp, tp, pp) of a run or a comparison."""
    return int(metric(row, "dp")), int(metric(row, "tp")), pp_of(row)


def grid_order(grid: tuple[int, int, int], ranks: int) -> tuple:
    """The docs' order: DP4, TP4, DP2·TP2, then PP2·DP2, PP2·TP2, PP4 (fewer stages first), the 8-rank grid last."""
    dp, tp, pp = grid
    return (ranks, pp, dp > 1 and tp > 1, tp > 1)


def pipeline_grids(runs: pd.DataFrame) -> list[tuple[tuple[int, int, int], pd.DataFrame]]:
    """The pipeline group's grids in the docs' order, each with its runs (Muon first)."""
    require_columns(runs, "runs", ("run", "optimizer", "dp", "tp", "pp", "world_size"))
    grids: dict[tuple[int, int, int], list[int]] = {}
    for i, (_, r) in enumerate(runs.iterrows()):
        grids.setdefault(grid_of(r), []).append(i)
    out = [(g, runs.iloc[idx].sort_values("optimizer", ascending=False)) for g, idx in grids.items()]
    return sorted(out, key=lambda gr: grid_order(gr[0], int(metric(gr[1].iloc[0], "world_size"))))


def _one(rows: pd.DataFrame, optimizer: str) -> pd.Series | None:
    picked = rows[rows["optimizer"] == optimizer]
    return picked.iloc[0] if len(picked) else None


def _timed(row: pd.Series | None, column: str) -> str:
    return "not measured" if row is None or is_missing(row.get(column)) else ms(row[column], f"runs.{column}")


def grid_rows(data: ReportData, runs: pd.DataFrame) -> list[list[str]]:
    """Per grid: its ranks and micro-batches, both optimizers' steps and optimizer steps timed without the profiler,
    the comparisons table's Muon / AdamW step ratio and Muon's bubble (the mean over ranks)."""
    comp = data.comparisons
    rows = []
    for grid, g in pipeline_grids(runs):
        muon, adamw = _one(g, "muon"), _one(g, "adamw")
        pair = comp[comp["muon_run"] == muon["run"]] if muon is not None else comp.iloc[0:0]
        step_ratio = (
            ratio(metric(pair.iloc[0], "step_ms_ratio", "comparisons", "muon_run"), "comparisons.step_ms_ratio")
            if len(pair)
            else "not measured"
        )
        bubble = NOT_A_PIPELINE if grid[2] <= 1 else _timed(muon, "timed_bubble_ms")
        first = g.iloc[0]
        rows.append(
            [
                style.grid_label(*grid),
                str(int(metric(first, "world_size"))),
                str(int(metric(first, "micro_batches"))),
                _timed(muon, "timed_step_ms"),
                _timed(adamw, "timed_step_ms"),
                _timed(muon, "timed_optimizer_ms"),
                _timed(adamw, "timed_optimizer_ms"),
                step_ratio,
                bubble,
            ]
        )
    return rows


def holds(row: pd.Series) -> str:
    """``2 blocks + embedding``, ``1 block``, ``1 block + head``: what a stage holds (stages.blocks, stages.holds)."""
    blocks = int(metric(row, "blocks", "stages"))
    extra = "" if is_missing(row.get("holds")) else str(row["holds"]).strip()
    said = f"{blocks} block{'s' if blocks != 1 else ''}"
    return f"{said} + {extra}" if extra else said


def muon_stages(stages: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The stages table's rows of the Muon pipelines among ``runs``, in the grids' order, then by stage."""
    require_columns(stages, "stages", ("run", "optimizer", "stage", "blocks", "holds", "timed_fwd_bwd_ms"))
    order = {str(r["run"]): i for i, (_, g) in enumerate(pipeline_grids(runs)) for _, r in g.iterrows()}
    rows = stages[(stages["optimizer"] == "muon") & stages["run"].isin(list(order))]
    return rows.assign(_order=rows["run"].map(order)).sort_values(["_order", "stage"]).drop(columns="_order")


def stage_rows(data: ReportData, runs: pd.DataFrame) -> list[list[str]]:
    """Per stage of each Muon pipeline, timed without the profiler: forward+backward (transfers and flush in it),
    the bubble inside it, the optimizer step after it, and their ratio."""
    by_run = {str(r["run"]): r for _, r in runs.iterrows()}
    out = []
    for _, s in muon_stages(data.stages, runs).iterrows():
        what = f"stages.* of {s['run']} stage {s['stage']}"
        out.append(
            [
                style.grid_label(*grid_of(by_run[str(s["run"])])),
                str(int(metric(s, "stage", "stages"))),
                holds(s),
                ms(s["timed_fwd_bwd_ms"], what),
                ms(s["timed_bubble_ms"], what),
                ms(s["timed_optimizer_ms"], what),
                ratio(s["bubble_over_optimizer"], what),
            ]
        )
    return out


def _sentence_after(text: str, prefix: str) -> str:
    """The sentence of ``text`` that follows ``prefix`` ('' if none)."""
    at = text.find(prefix)
    if at < 0:
        return ""
    rest = text[at + len(prefix) :].strip()
    end = re.search(r"\.(\s|$)", rest)
    return (rest[: end.start() + 1] if end else rest).strip()


def claim_lines(data: ReportData) -> list[dict[str, Any]]:
    """Each pipeline claim, and per hardware profile its measurement, verdict and the first of its explanation:
    why it is not compared, in a few words, and the first sentence of what was measured."""
    claims = data.claims
    profiles = list(dict.fromkeys([data.profile or data.profiles[0], *claims["profile"].astype(str)]))
    out = []
    for cid in PIPELINE_CLAIMS:
        rows = claims[claims["claim_id"] == cid]
        if rows.empty:
            continue
        per_profile = []
        for profile in profiles:
            mine = rows_of_profile(rows, profile)
            if mine.empty:
                continue
            c = mine.iloc[0]
            verdict = report_verdict(c, data.runs)
            explanation = "" if is_missing(c["explanation"]) else str(c["explanation"])
            reasons = [r for r, _ in not_comparable_reasons(mine)]
            why = f"{verdict}: {'; '.join(reasons)}." if reasons else _sentence_after(explanation, "")
            measured = _sentence_after(explanation, "Measured here:")
            value = claim_measured(c)
            said = f"{profile}: {why}" if value == verdict else f"{profile}: {value}, {why}"
            per_profile.append({"profile": profile, "said": said + (f" Measured here: {measured}" if measured else "")})
        out.append({"id": cid, "claim": str(rows.iloc[0]["claim"]), "profiles": per_profile})
    return out


def _cores(data: ReportData, run: str) -> int | None:
    """The host's cores a run shared (environment.host_cpu_cores), None when it was not recorded."""
    value = data.environment_of(run).get("host_cpu_cores")
    return int(float(value)) if value else None


def _sequences_per_micro_batch(run: pd.Series) -> int:
    """Sequences in one micro-batch: tokens per step / (DP x micro-batches x sequence length)."""
    replicas = int(metric(run, "dp")) * int(metric(run, "micro_batches")) * int(metric(run, "seq_len"))
    return int(metric(run, "tokens_per_step")) // replicas


def intro(data: ReportData, runs: pd.DataFrame) -> str:
    """What was run: the grids, equal tokens per step in micro-batches of one sequence, rounds, the schedule."""
    grids = pipeline_grids(runs)
    labels = [f"{style.grid_label(*g)} ({int(metric(rs.iloc[0], 'world_size'))} ranks)" for g, rs in grids]
    tokens = sorted({int(metric(r, "tokens_per_step")) for _, r in runs.iterrows()})
    per_micro = sorted({_sequences_per_micro_batch(r) for _, r in runs.iterrows()})
    seq = sorted({int(metric(r, "seq_len")) for _, r in runs.iterrows()})
    micro = sorted({int(metric(r, "micro_batches")) for _, r in runs.iterrows()})
    rounds = sorted({int(metric(r, "rounds")) for _, r in runs.iterrows()})
    optimizers = " and ".join(style.OPTIMIZER_LABELS[o] for o in ("muon", "adamw") if (runs["optimizer"] == o).any())
    sequences = "one sequence" if per_micro == [1] else f"{', '.join(map(str, per_micro))} sequences"
    return (
        f"The pipeline group: {len(runs)} runs, {len(grids)} grids for {optimizers}: {', '.join(labels)}. Every grid "
        f"trains {', '.join(f'{t:,}' for t in tokens)} tokens per step in micro-batches of {sequences} of "
        f"{', '.join(map(str, seq))} tokens ({'–'.join(map(str, (micro[0], micro[-1]))) if len(micro) > 1 else micro[0]} "
        f"micro-batches per step and DP replica), so grids with and without stages run the same matmul shapes; "
        f"these runs are compared only with each other. Each was timed without the profiler in "
        f"{', '.join(map(str, rounds))} interleaved rounds. The stages run the 1F1B schedule (PipeDream-Flush: "
        "warm-up forwards, one forward and one backward in turn, cool-down backwards, then a flush of the sends), and "
        "each stage's ZeRO-1 optimizer (Distributed Muon or AdamW) shards the stage's own parameters over its DP group "
        "and steps after the flush."
    )


def meaning(data: ReportData, runs: pd.DataFrame) -> list[str]:
    """What these runs say and what they do not, with the machine's numbers."""
    four = runs[runs["world_size"] == runs["world_size"].min()]
    cores = _cores(data, str(four.iloc[0]["run"]))
    share = f"{cores} cores" if cores else "the host's cores"
    lines = [
        f"On {share} with {int(four['world_size'].iloc[0])} ranks, wall time follows the work summed over ranks: a rank "
        "blocked in the bubble gives its core to another rank. So a pipeline is fast here when its ranks do little work "
        "(each stage orthogonalizes only its own matrices), not because its bubble is small; on GPUs, one rank per "
        "device, the bubble is idle device time.",
        "The bubble as measured is the time a stage blocks on its neighbours (its receives and its flush), warm-up and "
        "cool-down included. It is an upper bound on what could hide the optimizer step: only the idle time after a "
        "stage's last backward, once its gradients are complete, could hold that stage's optimizer step.",
    ]
    for (dp, tp, pp), g in pipeline_grids(runs):
        world = int(metric(g.iloc[0], "world_size"))
        if world > int(four["world_size"].iloc[0]):
            per_core = f", {world // cores} ranks per core" if cores and world % cores == 0 else ""
            lines.append(
                f"{style.grid_label(dp, tp, pp)} runs {world} ranks on the same {share}{per_core}: it is shown, but not "
                "compared with the 4-rank grids."
            )
    return lines


def pipeline_section(data: ReportData) -> dict[str, Any]:
    """The section's context; ``present`` False (and only ``none``, one sentence) without a pipeline run."""
    runs = pipeline_runs(data.runs) if "pp" in data.runs.columns else data.runs.iloc[0:0]
    if runs.empty:
        return {"present": False, "none": NO_PIPELINE}
    return {
        "present": True,
        "intro": intro(data, runs),
        "grid_header": GRID_HEADER,
        "grid_rows": grid_rows(data, runs),
        "stage_header": STAGE_HEADER,
        "stage_rows": stage_rows(data, runs),
        "claims": claim_lines(data),
        "meaning": meaning(data, runs),
        "costmodel": pipeline_costmodel(data),
    }
