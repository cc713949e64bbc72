"""Joins of tables stored apart to stay small: what a reader does to see a normalized pair as one frame.

The convergence curves (``convergence``: one row per run and step) keep what is constant over a run in
``convergence_runs`` (one row per run); every step row repeating a run's command, corpus and costs made the
table ten times its size. The leading steps (``leading_steps``: one row per seed, alpha and Muon step) keep what
is constant over a seed and alpha in ``leading_summary`` the same way. Analysis and report join them here, on the
keys both share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

CONVERGENCE_RUN_KEYS = ("profile", "group", "run")
LEADING_KEYS = ("profile", "group", "seed", "alpha")


def convergence_with_runs(steps: pd.DataFrame, runs: pd.DataFrame | None) -> pd.DataFrame:
    """``convergence`` with each row's run columns from ``convergence_runs`` beside it (rows in ``steps``' order).

    ``runs`` of ``None``, or a ``steps`` that already holds the run columns (a table written before the two were
    split), gives ``steps`` unchanged. A step row whose run is missing from ``runs`` is a :class:`ValueError`
    naming the run: the two tables were not written together."""
    if runs is None or "optimizer" in steps.columns:
        return steps
    keys = [k for k in CONVERGENCE_RUN_KEYS if k in steps.columns and k in runs.columns]
    extra = [c for c in runs.columns if c not in steps.columns]
    joined = steps.merge(runs[[*keys, *extra]], on=keys, how="left", validate="many_to_one", indicator=True)
    orphans = joined.loc[joined["_merge"] == "left_only", "run"].unique()
    if len(orphans):
        raise ValueError(
            f"convergence rows of run(s) {', '.join(map(str, orphans[:5]))} have no row in convergence_runs: "
            "the tables are not of one analysis; re-run `muon-repro analyze`"
        )
    return joined.drop(columns="_merge")


def leading_with_summary(curve: pd.DataFrame, summary: pd.DataFrame | None) -> pd.DataFrame:
    """``leading_steps`` with each row's seed-and-alpha columns from ``leading_summary`` beside it (rows in
    ``curve``'s order). ``summary`` of ``None``, or a ``curve`` that already holds them (a table written before the
    two were split), gives ``curve`` unchanged; a curve row without its summary row is a :class:`ValueError`."""
    if summary is None or "muon_lr" in curve.columns:
        return curve
    keys = [k for k in LEADING_KEYS if k in curve.columns and k in summary.columns]
    extra = [c for c in summary.columns if c not in curve.columns]
    joined = curve.merge(summary[[*keys, *extra]], on=keys, how="left", validate="many_to_one", indicator=True)
    orphans = joined.loc[joined["_merge"] == "left_only", keys].drop_duplicates()
    if len(orphans):
        first = ", ".join(f"{k}={v}" for k, v in orphans.iloc[0].items())
        raise ValueError(
            f"leading_steps rows ({first}, and {len(orphans) - 1} more) have no row in leading_summary: "
            "the tables are not of one analysis; re-run `muon-repro analyze`"
        )
    return joined.drop(columns="_merge")
