"""Consistency checks: each holds on a run that matches its construction and fails on one that does not."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest

from muon_repro.analysis.checks import checks_table
from muon_repro.tables.schemas import SCHEMAS

PROFILE = "cpu-2c-gloo"
WORK = {"preset": "small", "tokens_per_step": 1024, "seq_len": 128, "reduce_dtype": "fp32", "backend": "gloo", "device": "cpu"}
RANKS = 4
SHARD = 1000  # elements each rank's ZeRO-1 shard owns
MUON_ELEMS = 600  # of which Muon manages these (one fp32 momentum each; AdamW two moments for the rest)


def _run(run: str, optimizer: str, layout: str = "contiguous") -> dict:
    group, name = run.split("/")
    return {
        "run": run,
        "profile": PROFILE,
        "group": group,
        "name": name,
        "optimizer": optimizer,
        "dp": 2,
        "tp": 2,
        "world_size": 4,
        "ranks": RANKS,
        "trials": 1,
        "rounds": 10,
        "steps": 5,
        "layout": layout,
        "overlap": "none",
        **WORK,
    }


def tables(
    *,
    muon_elems: int | tuple[int, ...] = MUON_ELEMS,
    muon_buffers: int = 1,
    hidden_state: int = 0,
    kept_buffer: int = 0,
    transient: int = 1000,
    extra_trace_bytes: float = 0.0,
    edit: Callable[[pd.DataFrame, pd.DataFrame], tuple[pd.DataFrame, pd.DataFrame]] | None = None,
) -> pd.DataFrame:
    """The checks of a synthetic Muon/AdamW pair at DP2·TP2 (contiguous and bucketed Muon runs). ``muon_buffers``:
    momenta Muon keeps per element, which its named ledger counts; ``hidden_state`` and ``kept_buffer``: bytes its
    state and its other buffers hold that no ledger names (only the storage census sees them). ``muon_elems``: per
    rank where a tuple; ``edit(ranks, phases)``: the tables with a departure planted in them."""
    runs = [
        _run("comparison/muon_dp2_tp2", "muon"),
        _run("comparison/adamw_dp2_tp2", "adamw"),
        _run("layout_ablation/muon_dp2_tp2_bucketed", "muon", "bucketed"),
    ]
    ranks, phases = [], []
    for r in runs:
        muon = r["optimizer"] == "muon"
        for rank in range(RANKS):
            elems = (muon_elems[rank] if isinstance(muon_elems, tuple) else muon_elems) if muon else 0
            muon_state = 4 * muon_buffers * elems
            adamw_state = 8 * (SHARD - elems)
            ranks.append(
                {
                    "run": r["run"],
                    "profile": PROFILE,
                    "trial": 0,
                    "rank": rank,
                    "muon_state_bytes": muon_state,
                    "adamw_state_bytes": adamw_state,
                    "state_bytes": muon_state + adamw_state,
                    "transient_bytes": transient if muon else 0,
                    "held_state_bytes": muon_state + adamw_state + (hidden_state if muon else 0),
                    "held_buffer_bytes": 16 * SHARD + ((4 * 8 + kept_buffer) if muon else 0),  # 8 update-RMS scalars
                    "ns_matrices": 8 if muon else 0,
                    "shard_elems": SHARD,
                    "muon_elems": elems,
                    "muon_matrices": 16 if muon else 0,
                    "dp_gathered_matrices": (16 if r["layout"] == "bucketed" else 0) if muon else 0,
                }
            )
            per_phase = {"dp_reduce_scatter": 400.0, "dp_all_gather": 400.0}
            if r["layout"] == "bucketed":
                per_phase["dp_gather"] = 200.0  # 1000 / 800 = 1.25: the paper's bound
            for phase, nbytes in per_phase.items():
                trace = nbytes + (extra_trace_bytes if phase == "dp_gather" else 0.0)
                phases.append(
                    {
                        "run": r["run"],
                        "profile": PROFILE,
                        "trial": 0,
                        "rank": rank,
                        "phase": phase,
                        "trace_bytes": trace,
                        "analytic_bytes": nbytes,
                        "ledger_bytes": nbytes,
                    }
                )
    ranks, phases = pd.DataFrame(ranks), pd.DataFrame(phases)
    if edit is not None:
        ranks, phases = edit(ranks, phases)
    table = checks_table(pd.DataFrame(runs), ranks, phases)
    return SCHEMAS["checks"].conform(table).set_index("check_id")


def test_checks_hold_on_runs_that_match_their_construction():
    checks = tables(transient=100)
    assert list(checks.index) == ["state_accounting", "state_with_transients", "bytes_bucketed", "bytes_contiguous"]
    assert checks["holds"].all()
    assert checks.loc["state_accounting", ["expected", "measured_value"]].tolist() == [0.5, 0.5]
    assert checks.loc["state_accounting", "in_claimed_region"]
    f = MUON_ELEMS / SHARD
    said = checks.loc["state_accounting", "explanation"]
    assert f"{(4 * 600 + 8 * 400) / 8000:.3f} = 1 - f/2" in said and f"f = {f:.3f}" in said
    # Per layout: bucketed DP-gathers every matrix (1.25, inside the paper's bound), contiguous none (1.00, outside).
    assert checks.loc["bytes_bucketed", ["measured_value", "in_claimed_region"]].tolist() == [1.25, True]
    assert checks.loc["bytes_contiguous", ["measured_value", "in_claimed_region"]].tolist() == [1.0, False]
    assert "Algorithm 1" in checks.loc["bytes_bucketed", "explanation"]
    assert (checks["fails_if"].str.len() > 20).all()


@pytest.mark.parametrize(
    ("planted", "ratio_moves"),
    [
        ({"muon_buffers": 2}, True),  # a second momentum, named: the ledger sees it too
        ({"hidden_state": 4 * MUON_ELEMS}, True),  # a copy of the weights under another name: only storage sees it
        ({"kept_buffer": 4 * MUON_ELEMS}, False),  # a full gather kept between steps: a buffer, not state
    ],
)
def test_state_the_plan_does_not_call_for_fails_the_accounting(planted, ratio_moves):
    row = tables(**planted).loc["state_accounting"]
    assert not row["holds"]
    assert (row["measured_value"] == 1.0) == ratio_moves and row["in_claimed_region"] == (not ratio_moves)


def test_runs_recorded_before_the_storage_census_have_no_accounting():
    import muon_repro.analysis.checks as checks_module

    frame = tables().reset_index()
    assert "state_accounting" in set(frame["check_id"])
    m = pd.DataFrame({"muon_state_bytes": [1.0], "shard_elems": [1.0]})  # no held_* columns
    assert checks_module.state_accounting(m, m, ()) is None


def test_gather_buffers_larger_than_the_state_saved_fail_the_transient_check():
    saved = 8000 - (4 * 600 + 8 * 400)  # 2,400 bytes of state saved per rank
    assert tables(transient=saved - 1).loc["state_with_transients", "holds"]
    row = tables(transient=saved + 1).loc["state_with_transients"]
    assert not row["holds"] and row["measured_value"] > 1.0
    # The cause is named: the layout's units gather all of the rank's matrices at once, and the cap that bounds them.
    assert (
        "contiguous layout's Newton-Schulz units gather all of a rank's matrices (the 8 it orthogonalizes)" in row["explanation"]
    )
    assert "ns_unit_elems caps" in row["explanation"]


def test_trace_bytes_the_model_does_not_price_fail_the_bytes_check():
    checks = tables(extra_trace_bytes=50.0)
    assert not checks.loc["bytes_bucketed", "holds"]  # the trace sent more than the analytic model and the ledger
    assert checks.loc["bytes_contiguous", "holds"]  # no DP gather there: nothing extra


def test_without_a_pair_there_is_no_check():
    assert checks_table(pd.DataFrame([_run("comparison/muon_dp2_tp2", "muon")]), pd.DataFrame(), pd.DataFrame()).empty


def _of(frame: pd.DataFrame, run: str, rank: int | None = None) -> pd.Series:
    """The rows of ``run`` (and of one rank) in a ranks or phases table."""
    return (frame["run"] == run) & (True if rank is None else frame["rank"] == rank)


MUON, ADAMW = "comparison/muon_dp2_tp2", "comparison/adamw_dp2_tp2"


def test_the_accounting_is_exact_not_about_half():
    """4 bytes of state beyond the plan move the ratio by 0.08%: outside the source's [0.5, 0.5]."""
    row = tables(hidden_state=4).loc["state_accounting"]
    assert row["measured_value"] != 0.5 and not row["in_claimed_region"] and not row["holds"]


def test_state_beyond_the_plan_fails_even_where_the_ratio_stays_half():
    def both_hold_more(ranks: pd.DataFrame, phases: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        ranks.loc[_of(ranks, MUON), "held_state_bytes"] += 4 * MUON_ELEMS  # 2,400 bytes
        ranks.loc[_of(ranks, ADAMW), "held_state_bytes"] += 8 * MUON_ELEMS  # 4,800
        return ranks, phases

    row = tables(edit=both_hold_more).loc["state_accounting"]
    assert row["measured_value"] == 0.5 and not row["holds"]


def test_a_rank_without_muon_elements_is_left_out_of_the_ratio_and_the_largest_whole_model_ratio_is_quoted():
    row = tables(muon_elems=(600, 200, 600, 0)).loc["state_accounting"]
    assert row["holds"] and row[["measured_value", "measured_low", "measured_high"]].tolist() == [0.5, 0.5, 0.5]
    # whole-model ratios 1 - f/2: 0.7, 0.9, 0.7, 1.0 (rank 3 holds no Muon state): rank 3's is quoted
    assert "Rank 3's whole-model ratio is 1.000 = 1 - f/2" in row["explanation"]
    assert "Rank 1's whole-model ratio is 0.900" in tables(muon_elems=(600, 200, 600, 600)).loc["state_accounting", "explanation"]


def test_gather_buffers_as_large_as_the_state_saved_fail_the_transient_check():
    saved = 8 * SHARD - (4 * MUON_ELEMS + 8 * (SHARD - MUON_ELEMS))  # 2,400 bytes: the check asks for less
    assert tables(transient=saved - 1).loc["state_with_transients", "holds"]
    assert not tables(transient=saved).loc["state_with_transients", "holds"]


def test_the_transient_check_fails_when_one_rank_exceeds():
    def rank_2_gathers_more(ranks: pd.DataFrame, phases: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        ranks.loc[_of(ranks, MUON, rank=2), "transient_bytes"] = 5000
        return ranks, phases

    row = tables(transient=100, edit=rank_2_gathers_more).loc["state_with_transients"]
    assert not row["holds"] and row["measured_value"] > 1.0 and row["explanation"].startswith("Rank 2:")


def test_a_ledger_that_disagrees_with_the_traces_and_the_model_fails_the_bytes_check():
    def ledger_off(ranks: pd.DataFrame, phases: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        phases.loc[phases["phase"] == "dp_all_gather", "ledger_bytes"] += 10.0
        return ranks, phases

    checks = tables(edit=ledger_off)
    assert not checks.loc["bytes_bucketed", "holds"] and not checks.loc["bytes_contiguous", "holds"]


def test_the_accounting_reads_the_first_trial():
    def later_trial_differs(ranks: pd.DataFrame, phases: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        later = ranks.assign(trial=1, held_state_bytes=ranks["held_state_bytes"] + 1)
        return pd.concat([ranks, later], ignore_index=True), phases

    assert tables(edit=later_trial_differs).loc["state_accounting", "holds"]


def test_runs_recorded_on_other_ranks_have_no_accounting():
    def adamw_lacks_rank_3(ranks: pd.DataFrame, phases: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        return ranks[~_of(ranks, ADAMW, rank=3)], phases

    assert "state_accounting" not in tables(edit=adamw_lacks_rank_3).index
