"""Joins of tables stored apart to stay small: what a reader does to see a normalized pair as one frame.

The convergence curves (``convergence``: one row per run and step) keep what is constant over a run in
``convergence_runs`` (one row per run); every step row repeating a run's command, corpus and costs made the
table ten times its size. Analysis and report join them here, on the keys both share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

CONVERGENCE_RUN_KEYS = ("profile", "group", "run")


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
