"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of the study's own
method rebuilt (muon_repro.study.method: which event names count as communication and which scope an event goes to,
Table 7's rounded totals, a number whose run is absent) and of the study's runs priced by the cost model
(muon_repro.study.costmodel_check: the program on grids other than the study's own, its validation, the measured
quantities of a partly traced run, the collective fit of a group's size, what the fit leaves out).

Every expected value is derived by hand from the documented definitions (the modules' docstrings, docs/study.md "The
study's method, rebuilt", formulas.ring_bytes and the cost model's alpha-beta fit)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest
from test_analysis_inputs import _span
from test_costmodel_study import TRUE_FACTORS, run_id, synthetic_tables

from muon_repro.costmodel.machine import resolve_profile
from muon_repro.costmodel.machine_profile import CollectiveFit
from muon_repro.costmodel.records import STUDY_MACHINE
from muon_repro.costmodel.workload import Compute
from muon_repro.study.costmodel_check import (
    StudyCollective,
    StudyQuantity,
    apply_fit,
    fit_study_factors,
    price_ms,
    study_costmodel_table,
    study_program,
    study_quantities,
)
from muon_repro.study.method import Sums, method_numbers, study_sums

ALL_ELEMENTS = 4096 * 4096 + 1024 * 324 + 456 * 1024 + 676 * 876 + 128 * 128  # the five parameters: 18,184,496


@pytest.fixture(scope="module")
def datasheet():
    return resolve_profile(STUDY_MACHINE)


# ---------------------------------------------------------------- the study's method (muon_repro.study.method)


def _sums_of(tmp_path, *events: dict) -> Sums:
    path = tmp_path / "trace_rank0.json"
    path.write_text(json.dumps({"traceEvents": list(events)}))
    return study_sums(path)


def test_every_needle_of_the_communication_counts_its_events_whatever_the_spelling(tmp_path):
    # docs/study.md: an event counts when its lower-cased name holds all_reduce / allreduce, all_gather / allgather,
    # reduce_scatter / reducescatter or broadcast; 10 + 5 + 20 us of three collectives, the matmul's 100 us not
    sums = _sums_of(
        tmp_path,
        _span("ncclKernel_ReduceScatter_RING_LL_Sum_float", 0, 10.0, cat="kernel"),
        _span("ncclKernel_Broadcast_RING_LL", 20, 5.0, cat="kernel"),
        _span("ncclKernel_AllGather_RING_LL", 40, 20.0, cat="kernel"),
        _span("aten::mm", 80, 100.0, cat="cpu_op"),
    )
    assert sums.comm_calls == 3
    assert sums.comm_ms == pytest.approx(0.035)


def test_an_event_goes_to_the_first_scope_key_its_name_holds(tmp_path):
    # the study's scope keys in its order: nccl_all_reduce first, FWD_BWD before Attach_Grads; the first match wins
    sums = _sums_of(
        tmp_path,
        _span("FWD_BWD/Attach_Grads", 0, 40.0),
        _span("nccl_all_reduce_bucket", 50, 7.0),
    )
    assert sums.scope_ms == pytest.approx({"FWD_BWD": 0.04, "nccl_all_reduce": 0.007})
    assert sums.scope_calls == {"FWD_BWD": 1, "nccl_all_reduce": 1}


def _hand_sums(comm_ms: float, fwd_bwd_ms: float, step_ms: float, optimizer: str) -> Sums:
    step = "Muon_Step" if optimizer == "muon" else "AdamW_Step"
    total = "Muon_Full_Training_Step" if optimizer == "muon" else "AdamW_Full_Training_Step"
    scopes = {"FWD_BWD": fwd_bwd_ms, step: step_ms, total: 400.0}
    return Sums(comm_ms, 40, scopes, dict.fromkeys(scopes, 10), pd.DataFrame())


def test_the_multi_node_total_adds_the_phases_as_the_tables_rounded_them():
    # Table 7: forward-backward halved and rounded as Table 5.2 printed it (541.2 / 2 = 270.6 -> 271), the optimizer
    # rounded to 2 decimals (4.2949 -> 4.29), plus the single-node communication as rounded times 3 (139.53 * 3)
    numbers = method_numbers({"muon_FULLSTEP_dp2_tp2": _hand_sums(139.5312, 541.2, 4.2949, "muon")})
    assert numbers["multinode_comm_ms_muon"] == pytest.approx(418.59, rel=1e-12)
    assert numbers["multinode_total_ms_muon"] == pytest.approx(271 + 418.59 + 4.29, rel=1e-12)


def test_muons_run_alone_gives_its_own_numbers_and_its_share_and_no_ratio():
    # the share is Muon's own (Muon_Step over Muon_Full_Training_Step: 4.2949 / 400); a Muon/AdamW ratio needs AdamW
    numbers = method_numbers({"muon_FULLSTEP_dp2_tp2": _hand_sums(139.5312, 541.2, 4.2949, "muon")})
    own = ("comm_ms", "comm_calls", "comm_per_call", "fwd_bwd_ms", "optimizer_ms", "total_ms", "multinode_comm_ms")
    assert set(numbers) == {f"{n}_muon" for n in (*own, "multinode_total_ms", "optimizer_share")}
    assert numbers["optimizer_share_muon"] == pytest.approx(4.2949 / 400.0, rel=1e-12)


def test_an_async_run_without_its_synchronous_run_gives_its_communication_and_no_ratio():
    # a number whose run is absent is left out: the async/original ratio needs both runs
    numbers = method_numbers({"adamw_FULLSTEP_async": _hand_sums(377.44, 562.0, 1.46, "adamw")})
    assert numbers == {"async_comm_ms_adamw": 377.44}


# ---------------------------------------------------------------- the program (muon_repro.study.costmodel_check)


def test_a_muon_grid_that_does_not_fill_the_world_is_refused():
    with pytest.raises(ValueError, match=r"dp=1 x tp=2 on 4 ranks"):
        study_program("muon", full_step=False, dp=1, tp=2)


def test_a_tp_that_does_not_divide_a_split_dimension_is_refused():
    # 4096 = 3 * 1365 + 1: three TP ranks cannot split the first matrix's dimension 0
    with pytest.raises(ValueError, match="TP 3 does not divide"):
        study_program("muon", full_step=False, dp=1, tp=3, world_size=3)


def test_the_flat_buffer_is_padded_to_equal_shards():
    # 18,184,496 = 3 * 6,061,498 + 2: the study's cdiv gives shards of 6,061,499, a gathered buffer of 18,184,497
    for work in study_program("muon", full_step=False, dp=3, tp=1, world_size=3):
        assert work.collectives == (StudyCollective("all_gather", "bfloat16", 3 * 6_061_499, (0, 1, 2)),)


def test_one_dp_rank_gathers_nothing_over_dp_and_one_tp_rank_nothing_over_tp():
    # dp=1 x tp=4: rank 0 holds its whole TP-local buffer; only the four split matrices are gathered, over TP
    tp_only = study_program("muon", full_step=False, dp=1, tp=4)
    assert [(c.op, c.dtype, c.elements, c.group) for c in tp_only[0].collectives] == [
        ("all_gather", "bfloat16", n, (0, 1, 2, 3)) for n in (4096 * 4096, 1024 * 324, 676 * 876, 128 * 128)
    ]
    # dp=4 x tp=1: the one bf16 DP gather of the whole buffer (18,184,496 = 4 equal shards), no TP gather
    for work in study_program("muon", full_step=False, dp=4, tp=1):
        assert work.collectives == (StudyCollective("all_gather", "bfloat16", ALL_ELEMENTS, (0, 1, 2, 3)),)


def test_the_program_runs_on_the_world_it_is_given():
    adamw = study_program("adamw", full_step=False, dp=2, tp=1, world_size=2)
    assert [w.rank for w in adamw] == [0, 1]
    assert {c.group for w in adamw for c in w.collectives} == {(0, 1)}
    muon = study_program("muon", full_step=False, dp=2, tp=1, world_size=2)
    for work in muon:  # one DP group of both ranks; 18,184,496 splits into two shards of 9,092,248
        assert work.collectives == (StudyCollective("all_gather", "bfloat16", ALL_ELEMENTS, (0, 1)),)


def test_a_quantity_is_priced_by_compute_or_a_collective_not_both():
    collective = StudyCollective("all_reduce", "float32", 16, (0, 1))
    with pytest.raises(ValueError, match="one of them"):
        StudyQuantity("r", "q", (0,), 1.0, compute=Compute(vector_bytes=8), collective=collective)


def test_a_collective_of_an_unknown_dtype_is_refused_naming_it():
    with pytest.raises(ValueError, match="float33"):
        _ = StudyCollective("all_gather", "float33", 8, (0, 1)).ring_bytes


# ---------------------------------------------------------------- quantities measured


def test_a_step_of_the_scope_with_no_nccl_kernel_keeps_its_kernel_time():
    # rank 0's AdamW step: 10, 20, 30 ms of kernels; only step 0 launched an NCCL kernel (4 ms), left out of it alone:
    # 6, 20, 30 ms, median 20
    run = run_id("adamw_FULLSTEP")
    steps = pd.DataFrame(
        [{"run": run, "rank": 0, "step": s, "scope": "AdamW_Step", "gpu_kernel_ms": v} for s, v in enumerate((10.0, 20.0, 30.0))]
    )
    colls = pd.DataFrame([{"run": run, "rank": 0, "step": 0, "scope": "AdamW_Step", "transfer_span_ms": 4.0}])
    (optimizer,) = [q for q in study_quantities(steps, colls) if q.quantity == "optimizer"]
    assert optimizer.ranks == (0,) and optimizer.measured_ms == 20.0


def test_a_partly_traced_runs_transfer_is_the_median_over_its_traced_ranks_of_that_group():
    # AdamW traced on ranks 0 and 1 only: the all-reduce of the 128 x 128 parameter over all four ranks is measured
    # on ranks 0 and 1 (1 and 3 ms: median 2); a record of the same op and size on another group is another collective,
    # and an infinite transfer no measurement (the table's schema holds it as null)
    run = run_id("adamw_FULLSTEP")
    steps = pd.DataFrame([{"run": run, "rank": r, "step": 0, "scope": "FWD_BWD", "gpu_kernel_ms": 50.0} for r in (0, 1)])
    coll = {"run": run, "step": 0, "scope": "AdamW_AllReduce", "op": "all_reduce", "dtype": "float32", "elements": 16384}
    colls = pd.DataFrame(
        [
            coll | {"rank": 0, "group_ranks": "0,1,2,3", "transfer_span_ms": 1.5, "transfer_ms": 1.0},
            coll | {"rank": 1, "group_ranks": "0,1,2,3", "transfer_span_ms": 3.5, "transfer_ms": 3.0},
            coll | {"rank": 0, "group_ranks": "0,1", "transfer_span_ms": 100.5, "transfer_ms": 100.0},
            coll | {"rank": 1, "step": 1, "group_ranks": "0,1,2,3", "transfer_span_ms": 2.0, "transfer_ms": math.inf},
        ]
    )
    quantities = {q.quantity: q for q in study_quantities(steps, colls)}
    small = quantities["transfer all_reduce float32 x16384 [0,1,2,3]"]
    assert small.ranks == (0, 1)
    assert small.measured_ms == 2.0


# ---------------------------------------------------------------- prices and the fit


def test_a_collective_is_priced_by_the_fit_of_its_groups_size(datasheet):
    two = CollectiveFit("all_gather", alpha_us=10.0, beta_gbps=4.0, group_size=2)
    four = CollectiveFit("all_gather", alpha_us=50.0, beta_gbps=8.0, group_size=4)
    profile = replace(datasheet, collectives=(two, four))
    gather = StudyCollective("all_gather", "bfloat16", 4096 * 4096, (0, 1))
    q = StudyQuantity("r", gather.quantity, (0, 1), 1.0, collective=gather)
    # two ranks: one chunk of half the 4096^2 bf16 array, 16,777,216 bytes, at 4 GB/s times the link's 0.8
    ring = 4096 * 4096 // 2 * 2
    assert price_ms(q, profile) == pytest.approx((10e-6 + ring / (4e9 * 0.8)) * 1e3, rel=1e-12)


@pytest.mark.parametrize("measured", [0.0, math.nan, math.inf], ids=["zero", "nan", "inf"])
def test_a_quantity_without_a_measured_time_is_not_fitted_on(datasheet, measured):
    quantities = [StudyQuantity("r", "fwd_bwd", (0,), measured, compute=Compute(matmul_flops=1e12, vector_bytes=1e6))]
    with pytest.raises(ValueError, match="no measured quantity"):
        fit_study_factors(quantities, datasheet)


def test_a_table_of_async_runs_alone_has_empty_fitted_columns(datasheet):
    truth = apply_fit(datasheet, TRUE_FACTORS)
    table = study_costmodel_table(*synthetic_tables(truth, runs=("muon_FULLSTEP_dp2_tp2_async",)))
    assert set(table["quantity"]) == {"fwd_bwd", "optimizer"} and not table["fitted_on"].any()
    assert table["datasheet_ms"].gt(0).all()
    assert table["fitted_ms"].isna().all() and table["fitted_rel_error"].isna().all()
