"""The array rewrites of hot paths give what their former pandas forms gave, value for value and dtype for dtype."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis.timed_steps import split_timed_waits
from muon_repro.analysis.waits import dp_group_index, tp_group_index


def _split_by_groupby(calls: pd.DataFrame, dp: int | None, tp: int | None) -> pd.DataFrame:
    """split_timed_waits as it was written with pandas' groupby: the reference."""
    out = calls.copy()
    out["dur_ns"] = out["end_ns"] - out["start_ns"]
    out["latest_ns"] = pd.Series(np.nan, index=out.index)
    out["matched"] = False
    if len(out) and dp and tp:
        rank = out["rank"]
        group_id = np.where(
            out["group"] == "dp", dp_group_index(rank, dp, tp), np.where(out["group"] == "tp", tp_group_index(rank, tp), -1)
        )
        size = out["group"].map({"dp": dp, "tp": tp}).fillna(0).astype(int)
        out["_gid"] = group_id
        out["_ordinal"] = (
            out.sort_values("start_ns", kind="stable").groupby(["rank", "step", "phase", "kind", "group"]).cumcount()
        )
        grouped = out.groupby(["step", "phase", "kind", "group", "_gid", "_ordinal"])
        seen = grouped["rank"].transform("nunique")
        sequence = ["step", "phase", "kind", "group", "_gid"]
        per_rank = out.groupby([*sequence, "rank"])["start_ns"].transform("size")
        equal = per_rank.groupby([out[c] for c in sequence]).transform("min") == per_rank.groupby(
            [out[c] for c in sequence]
        ).transform("max")
        out["matched"] = (group_id >= 0) & (seen == size) & (size > 1) & equal
        out["latest_ns"] = grouped["start_ns"].transform("max").where(out["matched"])
        out = out.drop(columns=["_gid", "_ordinal"])
    wait = (out["latest_ns"] - out["start_ns"]).fillna(0.0)
    out["wait_ns"] = np.minimum(np.maximum(wait.to_numpy(dtype=float), 0.0), out["dur_ns"].to_numpy(dtype=float))
    out["transfer_ns"] = out["dur_ns"] - out["wait_ns"]
    return out


def _random_calls(rng: np.random.Generator, world: int, calls: int, drop: float, groups: tuple[str, ...]) -> pd.DataFrame:
    """Every rank makes the same calls (tied starts common), then a share ``drop`` of them is lost."""
    per_rank = calls // world
    step = rng.integers(0, 3, per_rank)
    phase = rng.choice(["fwd", "bwd", "opt"], per_rank)
    kind = rng.choice(["all_reduce", "all_gather"], per_rank)
    group = rng.choice(groups, per_rank)
    frames = []
    for rank in range(world):
        start = rng.integers(0, 50, per_rank)  # few distinct starts: ties, whose order is the rows'
        frames.append(
            pd.DataFrame(
                {
                    "rank": rank,
                    "step": step,
                    "phase": phase,
                    "kind": kind,
                    "group": group,
                    "start_ns": start,
                    "end_ns": start + rng.integers(0, 30, per_rank),
                }
            )
        )
    all_calls = pd.concat(frames, ignore_index=True)
    kept = rng.random(len(all_calls)) >= drop
    return all_calls[kept].sample(frac=1.0, random_state=int(rng.integers(1 << 31))).reset_index(drop=True)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("dp", "tp", "drop", "groups"),
    [
        (2, 2, 0.0, ("dp", "tp")),  # every call matched: latest_ns stays int64
        (2, 2, 0.2, ("dp", "tp", "world")),
        (4, 1, 0.1, ("dp", "tp")),
        (1, 4, 0.0, ("dp", "tp", "world")),
        (2, 1, 0.3, ("dp", "world")),
        (None, 2, 0.0, ("dp", "tp")),
    ],
)
def test_split_timed_waits_matches_its_groupby_form(seed, dp, tp, drop, groups):
    world = (dp or 1) * (tp or 1) * (2 if seed % 2 else 1)  # odd seeds: two pipeline stages
    calls = _random_calls(np.random.default_rng(seed), world, 400, drop, groups)
    got, want = split_timed_waits(calls, dp, tp), _split_by_groupby(calls, dp, tp)
    assert list(got.dtypes.items()) == list(want.dtypes.items())
    pd.testing.assert_frame_equal(got, want, check_exact=True)
