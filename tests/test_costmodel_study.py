"""The original study's runs priced by the cost model (muon_repro.study.costmodel_check): its machine's profile, the
study's program, the table against measured times, the fit of the profile's factors and what it does to the thresholds."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.costmodel.machine import resolve_profile
from muon_repro.costmodel.records import STUDY_MACHINE, STUDY_MODEL, THRESHOLD_SETTINGS, threshold_rows, token_grid
from muon_repro.formulas import newton_schulz_flops
from muon_repro.study.costmodel_check import (
    COLUMNS,
    THRESHOLD_COLUMNS,
    StudyFit,
    apply_fit,
    fit_study_factors,
    fitted_study_profile,
    price_ms,
    study_costmodel_table,
    study_program,
    study_quantities,
    study_threshold_shift,
)
from muon_repro.study.sources import GROUP, STUDY_PROFILE
from muon_repro.tables.io import read_table
from muon_repro.tables.study_schemas import STUDY_COSTMODEL_SCHEMAS

REPO = Path(__file__).resolve().parents[1]

# What the study's runs really did on the cards, roughly (its traces): fp32 sgemm near 0.6 of the FP32 peak, bf16
# Newton-Schulz near 0.9 of the dense tensor peak, element-wise near 0.87 of the memory bandwidth, the PCIe rings near
# 0.6 of the x4 link. A profile with these is the "truth" the synthetic tables below are made from.
TRUE_FACTORS = StudyFit(
    efficiency={"matmul": 0.6, "newton_schulz": 0.9, "elementwise": 0.85, "intra_node": 0.6},
    alpha_us={"all_gather": 10.0, "all_reduce": 20.0},
    rows=0,
)
SPREAD = (0.9, 1.0, 1.1)  # three steps around each value: the median is the value


def run_id(name: str) -> str:
    return f"{STUDY_PROFILE}/{GROUP}/{name}"


def synthetic_tables(truth, runs=("adamw_FULLSTEP", "muon_FULLSTEP_dp2_tp2", "muon_FULLSTEP_dp2_tp2_async")):
    """study_steps and study_collectives as the study's traces would give them, had ``truth`` run its program."""
    steps, colls = [], []
    for name in runs:
        optimizer = "muon" if name.startswith("muon") else "adamw"
        program = study_program(
            optimizer, full_step="FULLSTEP" in name, dp=2 if optimizer == "muon" else 4, tp=2 if optimizer == "muon" else 1
        )
        traced = (0,) if name.endswith("_async") else (0, 1, 2, 3)
        scope = "Muon_Step" if optimizer == "muon" else "AdamW_Step"
        comm_scope = scope if optimizer == "muon" else "AdamW_AllReduce"
        for work in program:
            if work.rank not in traced:
                continue
            for step, f in enumerate(SPREAD):
                fwd = price_ms(_q(work.fwd_bwd), truth) * f
                nccl = 0.0
                for c in work.collectives:
                    transfer = price_ms(_q(c), truth) * f
                    wait = 0.5  # a wait is in the kernel, not in the transfer
                    nccl += transfer + wait
                    colls.append(
                        {
                            "run": run_id(name),
                            "rank": work.rank,
                            "step": step,
                            "scope": comm_scope,
                            "op": c.op,
                            "group_ranks": ",".join(map(str, c.group)),
                            "dtype": c.dtype,
                            "elements": c.elements,
                            "transfer_span_ms": transfer + wait,
                            "transfer_ms": None if len(traced) == 1 else transfer,
                        }
                    )
                opt = price_ms(_q(work.optimizer), truth) * f
                rows = [("FWD_BWD", fwd), (scope, opt + (nccl if comm_scope == scope else 0.0))]
                if comm_scope != scope:
                    rows.append((comm_scope, nccl))
                steps += [{"run": run_id(name), "rank": work.rank, "step": step, "scope": s, "gpu_kernel_ms": v} for s, v in rows]
    return pd.DataFrame(steps), pd.DataFrame(colls)


def _q(item):
    """A quantity priced by ``item`` (a Compute or a StudyCollective), measured nothing yet."""
    from muon_repro.study.costmodel_check import StudyCollective, StudyQuantity

    if isinstance(item, StudyCollective):
        return StudyQuantity("r", "q", (), 1.0, collective=item)
    return StudyQuantity("r", "q", (), 1.0, compute=item)


@pytest.fixture(scope="module")
def datasheet():
    return resolve_profile(STUDY_MACHINE)


@pytest.fixture(scope="module")
def truth(datasheet):
    return apply_fit(datasheet, TRUE_FACTORS)


# ---------------------------------------------------------------- the profile and the program


def test_the_study_machines_profile_is_the_study_profile_with_the_a4000s_datasheet_rates(datasheet):
    assert STUDY_MACHINE == STUDY_PROFILE == datasheet.name == "4xRTXA4000-pcie-nccl"
    assert datasheet.matmul_tflops == {"fp32": 19.2, "bf16": 76.7} == datasheet.newton_schulz_tflops
    assert datasheet.elementwise_gbps == 448.0 and datasheet.ranks_per_node == 4
    assert all(c.beta_gbps == 7.88 for c in datasheet.collectives)
    quotes = {s.figure: s.quote for s in datasheet.sources}
    assert "19.2 TFLOPS" in quotes["matmul_tflops.fp32"] and "153.4 TFLOPS" in quotes["matmul_tflops.bf16"]
    assert "448 GB/s" in quotes["elementwise_gbps"]
    assert 2 * datasheet.matmul_tflops["bf16"] == pytest.approx(153.4)  # the dense half of the sparse figure


def test_the_study_program_is_its_protocols():
    adamw = study_program("adamw", full_step=False, dp=4, tp=1)
    assert [c.elements for c in adamw[0].collectives] == [4096 * 4096, 1024 * 324, 456 * 1024, 676 * 876, 128 * 128]
    assert sum(c.elements for c in adamw[0].collectives) == 18_184_496
    assert sum(c.elements * c.element_size for c in adamw[0].collectives) == pytest.approx(72.7e6, rel=1e-3)
    assert adamw[0].fwd_bwd is None and len({w.optimizer for w in adamw}) == 1

    muon = study_program("muon", full_step=True, dp=2, tp=2)
    assert muon[0].fwd_bwd.matmul_flops == 20 * 2 * 2048**3
    for work in muon:  # one bf16 DP gather of the TP-local buffer over DP (ranks r, r + 2)
        dp_gather = work.collectives[0]
        assert (dp_gather.op, dp_gather.dtype, dp_gather.elements) == ("all_gather", "bfloat16", 9_325_720)
        assert dp_gather.group == (work.rank % 2, work.rank % 2 + 2)
    # ranks 0/1 hold only the 4096 x 4096 matrix, ranks 2/3 all five: TP gathers of the four split ones, NS on all five
    assert muon[0].optimizer.ns_flops == newton_schulz_flops((4096, 4096))
    assert [c.elements for c in muon[1].collectives[1:]] == [4096 * 4096]
    assert muon[2].optimizer.ns_flops == sum(
        newton_schulz_flops(s) for s in [(4096, 4096), (1024, 324), (456, 1024), (676, 876), (128, 128)]
    )
    assert [c.elements for c in muon[3].collectives[1:]] == [4096 * 4096, 1024 * 324, 676 * 876, 128 * 128]
    assert muon[0].optimizer == muon[1].optimizer != muon[2].optimizer == muon[3].optimizer


# ---------------------------------------------------------------- the table


def test_the_table_prices_a_synthetic_study_with_the_datasheet_profile(datasheet, truth):
    steps, colls = synthetic_tables(truth)
    table = study_costmodel_table(steps, colls)
    assert list(table.columns) == list(COLUMNS)
    assert not table.duplicated(["run", "quantity"]).any()
    by = table.set_index(["run", "quantity"])
    fwd = by.loc[(run_id("adamw_FULLSTEP"), "fwd_bwd")]
    # 20 fp32 matmuls of 2048^3 at 0.7 of 19.2 TFLOP/s, and randn's 16.8 MB at 0.8 of 448 GB/s
    expected = (20 * 2 * 2048**3 / (19.2e12 * 0.7) + 4 * 2048**2 / (448e9 * 0.8)) * 1e3
    assert fwd["datasheet_ms"] == pytest.approx(expected)
    truth_fwd = (20 * 2 * 2048**3 / (19.2e12 * 0.6) + 4 * 2048**2 / (448e9 * 0.85)) * 1e3
    assert fwd["measured_ms"] == pytest.approx(truth_fwd)  # the median of the three steps, NCCL-free
    assert fwd["datasheet_rel_error"] == pytest.approx(expected / truth_fwd - 1)
    assert fwd["ranks"] == "0,1,2,3" and bool(fwd["fitted_on"])
    # the AdamW optimizer: the divide and torch's foreach step on 18,184,496 elements, NCCL's kernels left out
    adamw = by.loc[(run_id("adamw_FULLSTEP"), "optimizer")]
    assert adamw["measured_ms"] == pytest.approx(88 * 18_184_496 / (448e9 * 0.85) * 1e3)
    # a collective's transfer: alpha + ring bytes / beta; all-reduce of 4096^2 fp32 over 4 ranks
    big = by.loc[(run_id("adamw_FULLSTEP"), "transfer all_reduce float32 x16777216 [0,1,2,3]")]
    ring = 2 * 3 * (4096**2 // 4) * 4
    assert big["datasheet_ms"] == pytest.approx((25e-6 + ring / (7.88e9 * 0.8)) * 1e3)
    assert big["measured_ms"] == pytest.approx((20e-6 + ring / (7.88e9 * 0.6)) * 1e3)
    # Muon's ranks do unequal work: one row per pair; the async run (rank 0 alone) has no transfer and is not fitted on
    muon = table[table["run"] == run_id("muon_FULLSTEP_dp2_tp2")]
    assert {"optimizer [0,1]", "optimizer [2,3]"} <= set(muon["quantity"])
    assert "transfer all_gather bfloat16 x9325720 [1,3]" in set(muon["quantity"])
    asyn = table[table["run"] == run_id("muon_FULLSTEP_dp2_tp2_async")]
    assert set(asyn["quantity"]) == {"fwd_bwd", "optimizer"} and not asyn["fitted_on"].any()
    for schema, frame in zip(STUDY_COSTMODEL_SCHEMAS, (table, None)):
        if frame is not None:
            assert schema.name == "study_costmodel" and list(schema.conform(frame).columns) == list(COLUMNS)


def test_the_fit_recovers_the_factors_and_removes_the_error(datasheet, truth):
    steps, colls = synthetic_tables(truth)
    fit = fit_study_factors(study_quantities(steps, colls), datasheet)
    for kind, value in TRUE_FACTORS.efficiency.items():
        assert fit.efficiency[kind] == pytest.approx(value, rel=1e-6), kind
    for op, value in TRUE_FACTORS.alpha_us.items():
        assert fit.alpha_us[op] == pytest.approx(value, rel=1e-6), op
    table = study_costmodel_table(steps, colls)
    fitted = table[table["fitted_on"]]
    assert fitted["fitted_rel_error"].abs().max() < 1e-6 < fitted["datasheet_rel_error"].abs().median()
    assert fitted_study_profile(steps, colls).name == f"{STUDY_MACHINE}-fitted-to-study"


def test_the_fit_reduces_the_error_on_noisy_measurements_and_keeps_factors_in_range(datasheet, truth):
    steps, colls = synthetic_tables(truth)
    # the two DP gathers on different paths, as the study's were: one half as fast again as the model allows
    slow = colls["group_ranks"].eq("1,3")
    colls.loc[slow, "transfer_ms"] = colls.loc[slow, "transfer_ms"] * 1.5
    steps.loc[steps["scope"].eq("FWD_BWD") & steps["rank"].eq(1), "gpu_kernel_ms"] *= 0.9
    table = study_costmodel_table(steps, colls)
    used = table[table["fitted_on"]]
    assert used["fitted_rel_error"].abs().median() < used["datasheet_rel_error"].abs().median()
    assert (used["fitted_rel_error"] ** 2).mean() < (used["datasheet_rel_error"] ** 2).mean()
    # an element-wise kernel faster than the bandwidth allows: the efficiency is held at 1, the rest refitted
    fast = study_costmodel_table(*synthetic_tables(apply_fit(datasheet, replace(TRUE_FACTORS, efficiency={"elementwise": 1.0}))))
    assert fast["fitted_rel_error"].abs().max() < 1e-6
    fit = fit_study_factors(study_quantities(*synthetic_tables(truth)), replace(datasheet, elementwise_gbps=300.0))
    assert fit.efficiency["elementwise"] == 1.0 and "elementwise" in fit.at_bound


def test_factors_the_quantities_cannot_separate_keep_the_profiles_values(datasheet, truth):
    # two quantities of four factors: the forward-backward (matmul and element-wise kernels) and one all-reduce (the
    # link's rate and its alpha); each prices one pair only together, so one of each pair is fitted
    quantities = study_quantities(*synthetic_tables(truth, runs=("adamw_FULLSTEP",)))
    used = [next(q for q in quantities if q.quantity == "fwd_bwd"), next(q for q in quantities if q.collective)]
    fit = fit_study_factors(used, datasheet)
    assert {"matmul" in fit.efficiency, "elementwise" in fit.efficiency} == {True, False}, fit
    assert {"intra_node" in fit.efficiency, "all_reduce" in fit.alpha_us} == {True, False}, fit
    fitted = apply_fit(datasheet, fit)
    for q in used:
        assert price_ms(q, fitted) == pytest.approx(q.measured_ms, rel=1e-9), q.quantity


def test_the_committed_table_is_what_the_fit_gives_bit_for_bit():
    """The fit sums in plain floats: a rebuild on any CPU writes the committed table's bits (numpy's lstsq differed by
    one unit in the last place between two machines, and so changed every table's stamp)."""
    committed = {name: read_table(REPO / "metrics" / f"{name}.parquet") for name in ("study_steps", "study_collectives")}
    original = [frame[frame["profile"] == STUDY_PROFILE].reset_index(drop=True) for frame in committed.values()]
    table = STUDY_COSTMODEL_SCHEMAS[0].conform(study_costmodel_table(*original))
    want = read_table(REPO / "metrics" / "study_costmodel.parquet")
    pd.testing.assert_frame_equal(table, want)  # a readable difference first
    assert table.equals(want), table.compare(want)  # then every bit (check_exact leaves nullable floats a tolerance)


def test_empty_study_tables_give_an_empty_table_with_its_columns():
    table = study_costmodel_table(pd.DataFrame(), pd.DataFrame())
    assert table.empty and list(table.columns) == list(COLUMNS)
    with pytest.raises(ValueError, match="no measured quantity"):
        fit_study_factors([])


# ---------------------------------------------------------------- the thresholds


def test_the_threshold_shift_is_what_the_fitted_profile_recomputes(datasheet):
    fitted = apply_fit(datasheet, replace(TRUE_FACTORS, efficiency={"newton_schulz": 0.9}, alpha_us={}))
    shift = study_threshold_shift(fitted, datasheet, models=[STUDY_MODEL.name])
    assert list(shift.columns) == list(THRESHOLD_COLUMNS) and len(shift) == 4
    setting = next(s for s in THRESHOLD_SETTINGS if s.machine == STUDY_MACHINE and s.model == STUDY_MODEL)
    recomputed = {
        (r["metric"], r["level"]): r["tokens_per_step"] for r in threshold_rows(setting, list(token_grid(setting, fitted)))
    }
    for row in shift.itertuples():
        assert row.fitted_tokens_per_step == pytest.approx(recomputed[(row.metric, row.level)])
        assert recomputed[(row.metric, row.level)] / row.datasheet_tokens_per_step == pytest.approx(row.ratio)
        assert row.ratio < 1  # Newton-Schulz faster than assumed: Muon's overhead falls to the level sooner
    schema = STUDY_COSTMODEL_SCHEMAS[1]
    assert schema.name == "study_costmodel_thresholds" and list(schema.conform(shift).columns) == list(THRESHOLD_COLUMNS)
    assert all(math.isfinite(v) for v in shift["ratio"])
