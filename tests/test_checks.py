"""Consistency checks: each holds on a run that matches its construction and fails on one that does not."""

from __future__ import annotations

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
    muon_elems: int = MUON_ELEMS,
    muon_buffers: int = 1,
    hidden_state: int = 0,
    kept_buffer: int = 0,
    transient: int = 1000,
    extra_trace_bytes: float = 0.0,
) -> pd.DataFrame:
    """The checks of a synthetic Muon/AdamW pair at DP2·TP2 (contiguous and bucketed Muon runs). ``muon_buffers``:
    momenta Muon keeps per element, which its named ledger counts; ``hidden_state`` and ``kept_buffer``: bytes its
    state and its other buffers hold that no ledger names (only the storage census sees them)."""
    runs = [
        _run("comparison/muon_dp2_tp2", "muon"),
        _run("comparison/adamw_dp2_tp2", "adamw"),
        _run("layout_ablation/muon_dp2_tp2_bucketed", "muon", "bucketed"),
    ]
    ranks, phases = [], []
    for r in runs:
        muon = r["optimizer"] == "muon"
        for rank in range(RANKS):
            muon_state = 4 * muon_buffers * muon_elems if muon else 0
            adamw_state = 8 * (SHARD - (muon_elems if muon else 0))
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
                    "muon_elems": muon_elems if muon else 0,
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
    table = checks_table(pd.DataFrame(runs), pd.DataFrame(ranks), pd.DataFrame(phases))
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
