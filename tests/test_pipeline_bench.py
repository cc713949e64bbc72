"""The pipeline group: its configurations, a recorded pipeline run read back by the analysis (pp, stage, the
bubble, the point-to-point bytes), and the two pipeline claims on synthetic tables, both ways."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis.claim_inputs import ProfileTables, UnequalWork
from muon_repro.analysis.pipeline_claims import bubble_hides_step, hybrid_survives_pp
from muon_repro.analysis.stages_table import stage_holdings
from muon_repro.analysis.timed_steps import split_timed_waits
from muon_repro.bench.configs import CONFIGS, PIPELINE_GRIDS, BenchConfig, expand_config_names, resolve
from muon_repro.claims import CLAIMS, verdict
from muon_repro.model_config import stage_layers
from muon_repro.phases import BUBBLE, PP_SEND_ACTIVATION, PP_SEND_GRAD
from muon_repro.run_records import RankMetrics, RunConfig

# ---------------------------------------------------------------- configurations


def test_the_pipeline_group_has_every_grid_for_both_optimizers_at_equal_tokens_per_step():
    keys = expand_config_names(["pipeline"])
    assert len(keys) == 2 * len(PIPELINE_GRIDS) == 14
    assert "pipeline/muon_pp2_dp2" in keys and "pipeline/adamw_dp2_tp2_pp2" in keys and "pipeline/muon_pp4" in keys
    resolved = [resolve(k, "cpu") for k in keys]
    assert {c.tokens_per_step for c in resolved} == {1024}
    # micro-batches of one sequence on every grid, with or without PP: 1F1B gets batch_per_dp micro-batches
    assert all(c.batch_per_dp // c.micro_batches == 1 for c in resolved)
    assert {(c.dp, c.tp, c.pp) for c in resolved} == set(PIPELINE_GRIDS)
    assert {c.world_size for c in resolved} == {4, 8}
    assert all(c.key not in expand_config_names(["reference"]) for c in resolved)  # not in the default run


def test_a_pipeline_config_is_refused_where_it_cannot_run():
    cpu = resolve("pipeline/muon_pp4", "cpu")
    with pytest.raises(ValueError, match="pp=4 stages need at least one block each"):
        dataclasses.replace(cpu, n_layers=3)
    with pytest.raises(ValueError, match="fp32 only"):
        dataclasses.replace(cpu, precision="bf16")
    with pytest.raises(ValueError, match="pp must be >= 1"):
        BenchConfig(group="g", name="n", optimizer="muon", dp=1, tp=1, pp=0)


def test_records_written_before_pipelines_read_as_one_stage():
    assert RunConfig.from_dict({"dp": 2, "tp": 2}).pp == 1
    assert RankMetrics.from_dict({"rank": 3}).pp_rank is None
    assert "pp_rank" not in RankMetrics(rank=0).to_dict()  # a run without stages writes what it wrote before
    assert RankMetrics.from_dict(RankMetrics(rank=5, pp_rank=1, bubble_ms=[2.0]).to_dict()).pp_rank == 1


def test_stage_holdings_follow_the_stage_split():
    assert [len(r) for r in stage_layers(5, 2)] == [3, 2]
    assert stage_holdings("small", 4, 0) == (1, "embedding")
    assert stage_holdings("small", 4, 3) == (1, "head")
    assert stage_holdings("tiny", 1, 0) == (2, "embedding + head")
    assert stage_holdings("unknown", 2, 0) == (None, "")


def test_timed_waits_match_dp_groups_inside_a_stage():
    # dp=2, tp=1, pp=2: DP groups {0,1} and {2,3}; a reduce-scatter of ranks 0 and 1 entering at 10 and 30 ns
    calls = pd.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "step": 0,
            "phase": "dp_reduce_scatter",
            "kind": "reduce_scatter",
            "group": "dp",
            "start_ns": [10, 30, 100, 100],
            "end_ns": [50, 50, 150, 150],
        }
    )
    split = split_timed_waits(calls, dp=2, tp=1)  # a DP group never spans stages, whatever pp
    assert split["matched"].all()
    assert split["wait_ns"].tolist() == [20.0, 0.0, 0.0, 0.0]  # rank 0 waited for rank 1, not for stage 1's ranks


# ---------------------------------------------------------------- a recorded pipeline run, analyzed


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> dict[str, pd.DataFrame]:
    from muon_repro.bench.sweep import record_local
    from muon_repro.table_set import build_tables

    out = tmp_path_factory.mktemp("pipeline")
    cfg = resolve("pipeline/muon_pp2_dp2", "tiny")
    record_local([cfg], out, "gloo", trials=2, traced_trials=1, progress=False)
    return build_tables([out], workers=1)


@pytest.mark.slow
def test_a_pipeline_run_has_pp_stages_and_a_measured_bubble(analyzed):
    runs, phases, timed, stages = analyzed["runs"], analyzed["phases"], analyzed["timed_steps"], analyzed["stages"]
    run = runs.iloc[0]
    assert (run["pp"], run["world_size"], run["rounds"]) == (2, 4, 2)
    assert run["timed_bubble_ms"] > 0
    assert sorted(analyzed["ranks"]["pp_rank"].tolist()) == [0, 0, 1, 1]
    bubble = phases[phases["phase"] == BUBBLE]
    assert sorted(bubble["stage"].tolist()) == [0, 0, 1, 1] and (bubble["ms_per_step"] > 0).all()
    assert timed["bubble_ms"].notna().all() and set(timed["stage"]) == {0, 1}
    # stage 0 ends the drain (its last backward comes last under 1F1B); stage 1 idles after its own
    assert (timed.loc[timed["stage"] == 0, "drain_idle_ms"] == 0).all()
    assert (timed.loc[timed["stage"] == 1, "drain_idle_ms"] > 0).all()
    assert stages["stage"].tolist() == [0, 1] and stages["holds"].tolist() == ["embedding", "head"]
    assert stages["bubble_over_optimizer"].notna().all()


@pytest.mark.slow
def test_point_to_point_bytes_in_the_trace_equal_the_analytic_ones(analyzed):
    phases = analyzed["phases"]
    # tiny: 4 micro-batches of 1 sequence x 16 tokens x hidden 32 x fp32 = 8,192 bytes each way per step
    sends = phases[phases["phase"].isin((PP_SEND_ACTIVATION, PP_SEND_GRAD)) & (phases["analytic_bytes"] > 0)]
    assert len(sends) == 4  # stage 0 sends activations, stage 1 gradients, on each DP rank
    assert (sends["analytic_bytes"] == 8192).all()
    assert (sends["trace_bytes"] == sends["analytic_bytes"]).all()
    receives = phases[phases["phase"].str.startswith("pp_recv")]
    assert (receives["trace_bytes"].fillna(0) == 0).all()  # a receive sends nothing
    # the optimizer's collectives are still found in their phases (gloo's sends run on the calling thread)
    scatter = phases[phases["phase"] == "dp_reduce_scatter"]
    assert (scatter["trace_bytes"] == scatter["analytic_bytes"]).all()


# ---------------------------------------------------------------- the pipeline claims


ROUNDS, STEPS = 4, 3
GPU = {"preset": "small", "tokens_per_step": 1024, "seq_len": 128, "reduce_dtype": "fp32", "precision": "fp32"}
GPU |= {"cross_entropy": "vocab_parallel", "backend": "nccl", "device": "cuda", "batch_per_dp": 4}


def _tables(
    step_ms: dict[str, float],
    bubble: float,
    optimizer: float,
    noise: float = 0.01,
    seed: int = 0,
    idle: dict[int, float] | None = None,
    stage_optimizer: dict[int, float] | None = None,
) -> ProfileTables:
    """The pipeline group's Muon runs with the given step times; every stage of PP4 with the given bubble and
    optimizer step (``stage_optimizer``: by stage, where it differs), and ``idle`` (by stage; default: the bubble)
    after its last backward."""
    rng = np.random.default_rng(seed)
    grids = {
        "dp4": (4, 1, 1),
        "tp4": (1, 4, 1),
        "dp2_tp2": (2, 2, 1),
        "pp2_dp2": (2, 1, 2),
        "pp2_tp2": (1, 2, 2),
        "pp4": (1, 1, 4),
    }
    runs, timed = [], []
    for grid, (dp, tp, pp) in grids.items():
        run = f"p/pipeline/muon_{grid}"
        batch = 8 // dp
        runs.append(
            {
                "run": run,
                "group": "pipeline",
                "name": f"muon_{grid}",
                "optimizer": "muon",
                "dp": dp,
                "tp": tp,
                "pp": pp,
                "world_size": 4,
                "ranks": 4,
                "trials": 1,
                "steps": 3,
                "rounds": ROUNDS,
                "layout": "contiguous",
                "timed_step_ms": step_ms[grid],
                "timed_optimizer_ms": optimizer,
                "timed_bubble_ms": bubble if pp > 1 else None,
                "ns_flops_max_rank": 1e9,
                "micro_batches": batch,
                **GPU,
                "batch_per_dp": batch,
            }
        )
        for trial in range(ROUNDS):
            for rank in range(4):
                for step in range(STEPS):
                    jitter = 1.0 + noise * rng.standard_normal()
                    stage = rank * pp // 4
                    stage_optimizer_ms = (stage_optimizer or {}).get(stage, optimizer) * (1.0 + noise * rng.standard_normal())
                    timed.append(
                        {
                            "run": run,
                            "trial": trial,
                            "rank": rank,
                            "stage": stage,
                            "step": step,
                            "step_ms": step_ms[grid] * jitter,
                            "optimizer_ms": stage_optimizer_ms if pp > 1 else optimizer,
                            "bubble_ms": bubble * jitter if pp > 1 else np.nan,
                            "drain_idle_ms": (idle or {}).get(stage, bubble) * jitter if pp > 1 else np.nan,
                        }
                    )
    frame = pd.DataFrame(timed)
    return ProfileTables(
        pd.DataFrame(runs), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(columns=["run", "phase", "ms_per_step"]), timed=frame
    )


STEP = {"dp4": 120.0, "tp4": 200.0, "dp2_tp2": 100.0, "pp2_dp2": 110.0, "pp2_tp2": 130.0, "pp4": 140.0}
REGIONS = {c.claim_id: c.region for c in CLAIMS}


def test_the_hybrid_survives_or_falls_with_the_step_times():
    survives = hybrid_survives_pp(_tables(STEP, 50.0, 100.0))
    assert survives.value == pytest.approx(100.0 / 110.0, rel=0.02) and "PP2·DP2" in survives.explanation
    assert verdict(survives.low, survives.high, REGIONS["hybrid_survives_pp"]) == "reproduced"
    falls = hybrid_survives_pp(_tables({**STEP, "pp4": 80.0}, 50.0, 100.0))
    assert falls.value == pytest.approx(100.0 / 80.0, rel=0.02)
    assert verdict(falls.low, falls.high, REGIONS["hybrid_survives_pp"]) == "not reproduced"


def test_the_bubble_hides_the_step_only_where_the_first_stage_has_little_optimizer_work():
    region = REGIONS["bubble_hides_step"]
    # Balanced stages: stage 0 ends the drain and pays its own step whole, however long the later stages idle.
    balanced = bubble_hides_step(_tables(STEP, bubble=150.0, optimizer=100.0, idle={0: 0.0}))
    assert balanced.value == pytest.approx(1.0, rel=0.03) and balanced.runs[0]["name"] == "muon_pp4"
    assert "Stage 0 ends the drain" in balanced.explanation
    assert balanced.quoted["stage3_idle_ms"] == pytest.approx(150.0, rel=0.03)
    assert verdict(balanced.low, balanced.high, region) == "not reproduced"
    # A first stage with little optimizer work (the embedding alone) and later stages idling past their steps:
    # the step pays stage 0's 10 ms against a stage's mean of (10 + 3 x 100) / 4.
    light = bubble_hides_step(_tables(STEP, bubble=150.0, optimizer=100.0, idle={0: 0.0}, stage_optimizer={0: 10.0}))
    assert light.value == pytest.approx(10.0 / 77.5, rel=0.03)
    assert verdict(light.low, light.high, region) == "reproduced"
    # A later stage whose step outlasts its idle time sets what the step pays: 200 - 40 against (3 x 100 + 200) / 4.
    late = bubble_hides_step(_tables(STEP, bubble=40.0, optimizer=100.0, idle={0: 0.0}, stage_optimizer={3: 200.0}))
    assert late.value == pytest.approx(160.0 / 125.0, rel=0.03) and "Stage 3's optimizer step outlasts" in late.explanation
    # Near the boundary with noisy rounds: inconclusive. 45 ms against (45 + 3 x 100) / 4 = 86.25: 0.52.
    near = _tables(STEP, bubble=150.0, optimizer=100.0, idle={0: 0.0}, stage_optimizer={0: 45.0}, noise=0.05, seed=3)
    straddles = bubble_hides_step(near)
    assert straddles.low < 0.5 <= straddles.high
    assert verdict(straddles.low, straddles.high, region) == "inconclusive"


def test_pipeline_claims_name_what_they_need_and_refuse_unequal_micro_batches():
    t = _tables(STEP, 50.0, 100.0)
    without_pp4 = dataclasses.replace(t, runs=t.runs[t.runs["name"] != "muon_pp4"])
    assert "PP4" in hybrid_survives_pp(without_pp4)
    no_pp = dataclasses.replace(t, runs=t.runs.drop(columns=["pp"]))
    assert "pp column" in bubble_hides_step(no_pp)
    undrained = dataclasses.replace(t, runs=t.runs.assign(backend="gloo"), timed=t.timed.assign(drain_idle_ms=float("nan")))
    assert "record them again" in bubble_hides_step(undrained)
    on_nccl = dataclasses.replace(undrained, runs=t.runs.assign(backend="nccl"))  # no drain there, and none to record
    assert bubble_hides_step(on_nccl).startswith("not measured on NCCL: a stage's host reads its clock")
    bigger = t.runs.copy()
    bigger.loc[bigger["name"] == "muon_dp2_tp2", "micro_batches"] = 1
    with pytest.raises(UnequalWork, match="micro-batches of 4 vs 1 sequences"):
        hybrid_survives_pp(dataclasses.replace(t, runs=bigger))


def test_every_pipeline_config_names_its_grid():
    for key, cfg in CONFIGS.items():
        if cfg.group == "pipeline":
            sizes = {f"dp{cfg.dp}", f"tp{cfg.tp}", f"pp{cfg.pp}"} - {"dp1", "tp1", "pp1"}
            assert set(cfg.name.split("_")[1:]) == sizes, key


def test_a_custom_run_takes_pipeline_stages_and_names_them():
    import argparse

    from muon_repro.bench.custom import add_run_shape_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_run_shape_arguments(parser)
    flags = "--optimizer muon --dp 1 --tp 1 --preset small --tokens-per-step 512 --seq-len 128 --micro-batches 4"
    cfg = config_from_args(parser.parse_args([*flags.split(), "--pp", "2"]))
    assert (cfg.pp, cfg.world_size, cfg.micro_batches) == (2, 2, 4)
    assert cfg.name == "muon_dp1_tp1_pp2_small_t512_s128_contiguous_m4"
    assert config_from_args(parser.parse_args(flags.split())).pp == 1
    with pytest.raises(ValueError, match="pp=8 stages need at least one block each"):
        config_from_args(parser.parse_args([*flags.split(), "--pp", "8"]))


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.slow  # it launches two workers
@pytest.mark.skipif(_gpus() < 2, reason="needs 2 CUDA GPUs")
def test_on_two_gpus_a_pipeline_records_over_nccl_and_reads_back(tmp_path):
    from muon_repro.bench.sweep import record_local
    from muon_repro.table_set import build_tables

    cfg = BenchConfig(
        group="gpu", name="muon_pp2", optimizer="muon", dp=1, tp=1, pp=2, scale="tiny", preset="tiny", tokens_per_step=128,
        seq_len=16, micro_batches=4, timed_steps=2, timed_warmup=1, active=2,
    )  # fmt: skip
    record_local([cfg], tmp_path, "nccl", trials=1, progress=False)
    tables = build_tables([tmp_path], workers=1)
    run = tables["runs"].iloc[0]
    assert (run["pp"], run["device"], run["backend"]) == (2, "cuda", "nccl")
    assert sorted(tables["stages"]["stage"]) == [0, 1]


def test_a_receive_is_told_from_a_send_by_its_name():
    from muon_repro.analysis.collectives import is_receive, normalize_op

    for name, receives in (("c10d::recv_", True), ("gloo:recv", True), ("c10d::send", False), ("gloo:all_reduce", False)):
        assert is_receive(normalize_op(name) or "other", name) is receives, name


def test_the_bubble_claim_leaves_out_a_disturbed_round_like_every_estimator():
    """One rule for every table (estimators.disturbed): a round whose step time is far off the others' is left out
    of the bubble claim too, as the claims' conditions then say."""
    tables = _tables(STEP, bubble=150.0, optimizer=100.0, idle={0: 0.0})
    timed = tables.timed
    hit = (timed["run"] == "p/pipeline/muon_pp4") & (timed["trial"] == 0)
    timed.loc[hit, "step_ms"] *= 3.0  # a disturbed round: the machine was busy
    timed.loc[hit & (timed["stage"] == 0), "optimizer_ms"] = 10.0  # whose steps, if read, would move the value
    measured = bubble_hides_step(tables)
    assert measured.value == pytest.approx(1.0, rel=0.03)
    assert f"{ROUNDS - 1} rounds" in measured.explanation


def test_the_bubble_claim_counts_no_negative_payment_and_quotes_stage_0s_floor():
    """Stages that idle longer than their optimizer step pay nothing for it after the last backward, never a negative
    time; where stage 0 sets what the step pays, the floor quoted is stage 0's step over the stages' mean (10 ms over
    (10 + 3 x 100) / 4 = 77.5 ms), not the last stage's."""
    idle_all = bubble_hides_step(_tables(STEP, bubble=150.0, optimizer=100.0))  # every stage idles 150 ms, stage 0 too
    assert idle_all.value == 0.0
    light = bubble_hides_step(_tables(STEP, bubble=150.0, optimizer=100.0, idle={0: 0.0}, stage_optimizer={0: 10.0}))
    assert light.quoted["stage0_over_mean_ratio"] == pytest.approx(10.0 / 77.5, rel=0.03)
    assert "the estimate (not the interval) is at least 0.13" in light.explanation


def test_the_hybrid_is_timed_by_its_slowest_rank_each_step():
    """A step ends when its slowest rank's does: DP2·TP2 with one rank 30% slower takes 130 ms a step (the ranks'
    mean would be 107.5 ms), so PP2·DP2 at 110 ms wins."""
    tables = _tables(STEP, 50.0, 100.0, noise=0.0)
    timed = tables.timed
    timed.loc[(timed["run"] == "p/pipeline/muon_dp2_tp2") & (timed["rank"] == 3), "step_ms"] *= 1.3
    survives = hybrid_survives_pp(tables)
    assert survives.value == pytest.approx(130.0 / 110.0) and survives.quoted["hybrid_step_ms"] == pytest.approx(130.0)


def test_the_stages_table_takes_each_stages_ranks_and_rounds_by_its_documented_rule():
    """A PP2 run, stage 0 on ranks 0 and 1: per step the mean over the stage's ranks (rank 1 always 4 ms above
    rank 0), the median over a round's steps, then the median over its three rounds (not their mean, 33); the trace
    columns the mean over the stage's traced ranks; what a stage holds its busiest rank's."""
    from muon_repro.analysis.stages_table import stages_table
    from muon_repro.phases import FORWARD, OPTIMIZER

    run = {"run": "p/pipeline/muon_pp2", "profile": "p", "group": "pipeline", "name": "muon_pp2", "optimizer": "muon"}
    runs = pd.DataFrame([run | {"pp": 2, "preset": "small"}])
    timed = pd.DataFrame(
        [
            {"run": run["run"], "trial": trial, "step": step, "rank": rank, "stage": rank // 2}
            | dict.fromkeys(("fwd_bwd_ms", "optimizer_ms"), level + extra + 4.0 * (rank % 2))
            | {"bubble_ms": (level + extra + 4.0 * (rank % 2)) / 2}
            for trial, level in enumerate((10.0, 20.0, 60.0))
            for step, extra in enumerate((0.0, 1.0, 10.0))
            for rank in range(4)
        ]
    )
    phases = pd.DataFrame(
        [
            {"run": run["run"], "trial": 0, "rank": rank, "stage": rank // 2, "phase": phase, "ms_per_step": ms}
            for rank in range(4)
            for phase, ms in ((FORWARD, 1.0 + 2.0 * (rank % 2)), (OPTIMIZER, 5.0))
        ]
    )
    ranks = pd.DataFrame(
        [
            {"run": run["run"], "rank": rank, "pp_rank": rank // 2, "local_params": 10, "state_bytes": s, "ns_flops": 1.0}
            for rank, s in enumerate((100, 300, 200, 200))
        ]
    )
    stage0 = stages_table(runs, timed, phases, ranks).set_index("stage").loc[0]
    # per round: steps of 12, 13 and 22 ms (means over ranks); medians 13, 23 and 63; their median 23
    assert stage0["timed_optimizer_ms"] == 23.0 and stage0["timed_fwd_bwd_ms"] == 23.0 and stage0["rounds"] == 3
    assert stage0["timed_bubble_ms"] == 11.5 and stage0["bubble_over_optimizer"] == 0.5
    assert stage0["forward_ms"] == 2.0 and stage0["optimizer_ms"] == 5.0  # ranks 0 and 1: 1 and 3 ms
    assert stage0["state_bytes"] == 300 and stage0["ranks"] == 2
