"""Which runs a figure or a table shows, in which order, and what they are called.

Runs of the same configuration may be recorded in several groups (the original study's
comparison, the DP x TP grid, the layout ablation): one stands for each (optimizer, dp, tp),
chosen here once for every figure and the report. The ``pipeline`` group asks another question
(DP x TP x PP, in micro-batches of one sequence): :func:`study_runs` keeps it out of what is about
the original study's DP x TP grid, :func:`pipeline_runs` picks it.
"""

from __future__ import annotations

import pandas as pd

from muon_repro.report import style
from muon_repro.report.data import is_missing, metric, require_columns

GROUP_PREFERENCE = ("comparison", "distributed_muon", "layout_ablation")
PIPELINE_GROUP = "pipeline"  # muon_repro.bench.configs.PIPELINE_GROUP (the report may not import the bench)
LAYOUT_PREFERENCE = ("contiguous", "whole_matrix", "bucketed")


def _preference(row: pd.Series, groups: tuple[str, ...] = GROUP_PREFERENCE) -> tuple:
    group = str(row.get("group", ""))
    layout = "" if is_missing(row.get("layout")) else str(row["layout"])
    return (
        groups.index(group) if group in groups else len(groups),
        LAYOUT_PREFERENCE.index(layout) if layout in LAYOUT_PREFERENCE else len(LAYOUT_PREFERENCE),
        str(row["run"]),
    )


def _layout_first(row: pd.Series, groups: tuple[str, ...]) -> tuple:
    group, layout, run = _preference(row, groups)
    return (layout, group, run)


def grid_order(dp: int, tp: int) -> int:
    """DP·TP hybrids first, then pure DP, then pure TP (the original study's order). One rank (DP1·TP1) sorts with
    pure TP, last; :func:`sort_runs` breaks ties between grids of one kind by wider DP first."""
    return 0 if dp > 1 and tp > 1 else (1 if dp > 1 else 2)


def sort_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Muon before AdamW; grids DP·TP hybrids, then pure DP, then pure TP; then group, layout."""

    def key(r: pd.Series) -> tuple:
        dp, tp = int(metric(r, "dp")), int(metric(r, "tp"))
        return (0 if metric(r, "optimizer") == "muon" else 1, pp_of(r), grid_order(dp, tp), -dp, _preference(r))

    if runs.empty:
        return runs
    order = sorted(range(len(runs)), key=lambda i: key(runs.iloc[i]))
    return runs.iloc[order].reset_index(drop=True)


def pp_of(row: pd.Series) -> int:
    """The run's pipeline stages: ``runs.pp``, 1 where the tables predate it or leave it empty."""
    value = row.get("pp")
    return 1 if is_missing(value) else int(value)


def _pp(runs: pd.DataFrame) -> pd.Series:
    return runs["pp"].astype("Float64").fillna(1) if "pp" in runs.columns else pd.Series(1, index=runs.index)


def _in_pipeline_group(runs: pd.DataFrame) -> pd.Series:
    return runs["group"].astype(str).eq(PIPELINE_GROUP) if "group" in runs.columns else pd.Series(False, index=runs.index)


def study_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of the original study's DP x TP question: no pipeline stages, outside the pipeline group
    (whose grids train in micro-batches of one sequence, so they are never compared with the others)."""
    return runs[(_pp(runs) <= 1) & ~_in_pipeline_group(runs)]


def pipeline_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of the pipeline group (DP x TP x PP grids at equal tokens per step), and any run with stages."""
    return runs[(_pp(runs) > 1) | _in_pipeline_group(runs)]


def counted_by_group(runs: pd.DataFrame) -> str:
    """``15 (14 in pipeline, 1 in pipeline_bubble)``, or ``14 (pipeline)`` for one group: the runs and the groups they
    count, so that a count of runs never takes one group's name for several groups' runs."""
    groups = runs["group"].astype(str).value_counts(sort=False) if "group" in runs.columns else pd.Series(dtype="int64")
    if len(groups) <= 1:
        return f"{len(runs)} ({groups.index[0]})" if len(groups) else str(len(runs))
    return f"{len(runs)} ({', '.join(f'{n} in {g}' for g, n in sorted(groups.items()))})"


def configured(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that know their optimizer, dp and tp (foreign traces do not)."""
    return runs[runs["optimizer"].notna() & runs["dp"].notna() & runs["tp"].notna()]


def representative_runs(runs: pd.DataFrame, groups: tuple[str, ...] = GROUP_PREFERENCE) -> pd.DataFrame:
    """One run per (optimizer, dp, tp) of the original study's question (:func:`study_runs`): contiguous
    layout first, then by ``groups`` (the original study's comparison first; the DP x TP figure prefers
    its grid experiment, as the claims do)."""
    require_columns(runs, "runs", ("run", "group", "optimizer", "layout", "dp", "tp"))
    picked = [
        min((r for _, r in g.iterrows()), key=lambda r: _layout_first(r, groups))
        for _, g in configured(study_runs(runs)).groupby(["optimizer", "dp", "tp"], sort=False)
    ]
    return sort_runs(pd.DataFrame(picked)) if picked else runs.iloc[0:0]


def timeline_run(runs: pd.DataFrame) -> pd.Series:
    """The run whose timeline shows the most: Muon with both DP and TP (all optimizer phases), the original study's first."""
    rs = sort_runs(configured(study_runs(runs)))
    if rs.empty:
        return runs.iloc[0]
    both = rs[(rs["optimizer"] == "muon") & (rs["dp"] > 1) & (rs["tp"] > 1)]
    return (both if len(both) else rs).iloc[0]


def grids(runs: pd.DataFrame) -> list[tuple[int, int]]:
    """(dp, tp) present, hybrids first, then pure DP, then pure TP, larger first."""
    present = {(int(dp), int(tp)) for dp, tp in zip(runs["dp"], runs["tp"])}
    return sorted(present, key=lambda g: (grid_order(*g), -g[0] * g[1], -g[0]))


def pair_at(reps: pd.DataFrame, dp: int, tp: int) -> tuple[pd.Series, pd.Series] | None:
    """(Muon run, AdamW run) at one grid, if both were recorded."""
    at = reps[(reps["dp"] == dp) & (reps["tp"] == tp)]
    m, a = at[at["optimizer"] == "muon"], at[at["optimizer"] == "adamw"]
    return (m.iloc[0], a.iloc[0]) if len(m) and len(a) else None


def first_pair(reps: pd.DataFrame) -> tuple[pd.Series, pd.Series] | None:
    """The Muon/AdamW pair at the first grid (in :func:`grids` order) that has both."""
    for dp, tp in grids(reps):
        pair = pair_at(reps, dp, tp)
        if pair:
            return pair
    return None


def grid_said(row: pd.Series) -> str:
    """A runs or comparisons row's process grid as the report writes it: ``DP2·TP2``, ``PP2·DP2`` (dp, tp, pp); a
    missing dp or tp is :class:`MissingMetric` naming the row's table and run."""
    table, key = ("runs", "run") if "run" in row else ("comparisons", "muon_run")
    return style.grid_label(int(metric(row, "dp", table, key)), int(metric(row, "tp", table, key)), pp_of(row))


def run_label(row: pd.Series, *, group: bool = False) -> str:
    """``Muon DP2·TP2``, with the layout when not contiguous, how its gathers overlap when they do
    (``Muon DP2·TP2 bucketed, naive async``), and the group when asked. Runs shown together take
    their labels from :func:`run_labels`, which tells apart the runs this leaves alike."""
    opt = str(row["optimizer"])
    label = f"{style.OPTIMIZER_LABELS.get(opt, opt)} {grid_said(row)}"
    layout = row.get("layout")
    if isinstance(layout, str) and layout != "contiguous":
        label += f" {layout.replace('_', '-')}"
    overlap = row.get("overlap")
    if isinstance(overlap, str) and overlap != "none":
        label += f", {style.OVERLAP_LABELS.get(overlap, overlap.replace('_', ' '))}"
    if group:
        label += f"  [{row['group']}]"
    return label


def run_labels(runs: pd.DataFrame, *, group: bool = False) -> list[str]:
    """The labels of ``runs`` (in their order), one per run and no two alike: :func:`run_label`, then,
    for the runs that still share one, the group (``[layout_ablation]``, ``[overlap]``), then the run id."""
    labels = [run_label(r, group=group) for _, r in runs.iterrows()]
    if not group:
        labels = _tell_apart(labels, [f"{label} [{r['group']}]" for label, (_, r) in zip(labels, runs.iterrows())])
    return _tell_apart(labels, [f"{label} ({r['run']})" for label, (_, r) in zip(labels, runs.iterrows())])


def _tell_apart(labels: list[str], longer: list[str]) -> list[str]:
    """``labels``, each one that is not unique replaced by its ``longer`` form."""
    seen = pd.Series(labels).value_counts()
    return [long if seen[label] > 1 else label for label, long in zip(labels, longer)]


def titled(row: pd.Series) -> str:
    """``Muon DP2·TP2 (comparison/muon_dp2_tp2)``, or the run id alone for a run without a configuration."""
    if any(is_missing(row.get(k)) for k in ("optimizer", "dp", "tp")):
        return str(row["run"])
    return f"{run_label(row)} ({row['run']})"
