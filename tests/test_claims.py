"""Claims: every verdict is reachable from synthetic tables, intervals cover the truth, unequal work is refused."""

from __future__ import annotations

import functools
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis.claim_inputs import UnequalWork, check_same_work, dp2_tp2_pair, without_pipeline, work_difference
from muon_repro.analysis.claim_measures import _single_device_pair, _versus_one
from muon_repro.analysis.claims import claims_table
from muon_repro.analysis.tables import _comparisons_table
from muon_repro.claims import CLAIMS, UNEQUAL_WORK, Region, verdict
from muon_repro.tables.schemas import SCHEMAS
from muon_repro.tables.verdict_schemas import COMPARISON_TIME_RATIOS

TRIALS, STEPS, RANKS = 3, 5, 4
# The synthetic runs are made under the claims' own conditions (GPUs, NCCL, 1,024 tokens per d_model of the
# small preset's 256), so that the region rule decides; CPU_WORK moves them off those conditions.
WORK = {"preset": "small", "tokens_per_step": 262144, "seq_len": 128, "reduce_dtype": "fp32", "backend": "nccl", "device": "cuda"}
CPU_WORK = {**WORK, "tokens_per_step": 1024, "backend": "gloo", "device": "cpu"}


class Bundle:
    """Synthetic tables: runs, steps, ranks, phases, with per-step values drawn around given medians."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.runs, self.steps, self.ranks, self.phases = [], [], [], []

    def run(
        self,
        run: str,
        optimizer: str,
        dp: int,
        tp: int,
        *,
        step_ms: float,
        comm_ms: float = 10.0,
        optimizer_ms: float = 1.0,
        noise: float = 0.01,
        state: tuple[int, int] = (0, 0),
        dp_bytes: float = 100.0,
        **work,
    ) -> None:
        group, name = run.split("/")
        self.runs.append(
            {
                "run": run,
                "profile": "cpu-2c-gloo",
                "group": group,
                "name": name,
                "optimizer": optimizer,
                "dp": dp,
                "tp": tp,
                "world_size": dp * tp,
                "ranks": RANKS,
                "trials": TRIALS,
                "steps": TRIALS * STEPS,
                "layout": "contiguous",
                "overlap": "none",
                "step_ms": step_ms,
                "ns_flops_max_rank": 2e9,
                "train_flops": 4e9,
                **WORK,
                **work,
            }
        )
        for trial in range(TRIALS):
            for rank in range(RANKS):
                for step in range(STEPS):
                    jitter = lambda v: v * (1.0 + noise * self.rng.standard_normal())  # noqa: E731
                    self.steps.append(
                        {
                            "run": run,
                            "trial": trial,
                            "rank": rank,
                            "step": step,
                            "step_ms": jitter(step_ms),
                            "comm_ms": jitter(comm_ms),
                            "comm_transfer_ms": jitter(comm_ms),
                            "optimizer_ms": jitter(optimizer_ms),
                        }
                    )
                muon_state, adamw_state = state
                self.ranks.append(
                    {
                        "run": run,
                        "trial": trial,
                        "rank": rank,
                        "muon_state_bytes": muon_state,
                        "adamw_state_bytes": adamw_state,
                        "state_bytes": muon_state + adamw_state,
                    }
                )
                for phase, nbytes in (("dp_reduce_scatter", dp_bytes / 2), ("dp_all_gather", dp_bytes / 2)):
                    self.phases.append(
                        {"run": run, "trial": trial, "rank": rank, "phase": phase, "trace_bytes": nbytes, "ms_per_step": 1.0}
                    )
                if optimizer == "muon":
                    extra = work.get("gather_bytes", 10.0)
                    self.phases.append(
                        {"run": run, "trial": trial, "rank": rank, "phase": "dp_gather", "trace_bytes": extra, "ms_per_step": 1.0}
                    )

    def scale_steps(self, run: str, factor: float, *, trial: int | None = None, rank: int | None = None) -> None:
        """Multiply ``run``'s step times by ``factor``: in one round (``trial``) or on one rank where given."""
        self.steps = [
            dict(s, step_ms=factor * s["step_ms"])
            if s["run"] == run and trial in (None, s["trial"]) and rank in (None, s["rank"])
            else s
            for s in self.steps
        ]

    def claims(self) -> pd.DataFrame:
        runs, steps = pd.DataFrame(self.runs), pd.DataFrame(self.steps)
        ranks, phases = pd.DataFrame(self.ranks), pd.DataFrame(self.phases)
        for col in ("wait_ms_per_step", "transfer_ms_per_step"):
            if col not in phases:  # a test may give its own, NaN where a run has no such wait
                phases[col] = 0.0
        return SCHEMAS["claims"].conform(claims_table(runs, steps, ranks, phases)).set_index("claim_id")


def study_grid(
    *,
    muon_comm: float,
    muon_step: float,
    adamw_step: float = 100.0,
    noise: float = 0.01,
    muon_opt: float = 1.0,
    muon_state: tuple[int, int] = (400, 200),
    adamw_state: tuple[int, int] = (0, 1000),
    gather_bytes: float = 10.0,
    hybrid_step: float | None = None,
    dp4_step: float = 120.0,
    tp4_step: float = 130.0,
) -> Bundle:
    """The runs of the original study's grid: Muon and AdamW at DP2·TP2, Muon at DP4 and TP4."""
    b = Bundle()
    b.run(
        "comparison/muon_dp2_tp2",
        "muon",
        2,
        2,
        step_ms=muon_step,
        comm_ms=muon_comm,
        optimizer_ms=muon_opt,
        noise=noise,
        state=muon_state,
        gather_bytes=gather_bytes,
    )
    b.run("comparison/adamw_dp2_tp2", "adamw", 2, 2, step_ms=adamw_step, comm_ms=10.0, noise=noise, state=adamw_state)
    b.run("distributed_muon/muon_dp4", "muon", 4, 1, step_ms=dp4_step, noise=noise)
    b.run("distributed_muon/muon_tp4", "muon", 1, 4, step_ms=tp4_step, noise=noise)
    if hybrid_step is not None:  # replace the hybrid point's step time only for the grid claim
        b.scale_steps("comparison/muon_dp2_tp2", hybrid_step / muon_step)
    return b


def test_every_claim_is_in_the_table_with_an_interval_and_an_explanation():
    claims = study_grid(muon_comm=5.7, muon_step=101.0).claims()
    assert list(claims.index) == [c.claim_id for c in CLAIMS]
    measured = claims[claims["verdict"] != "not measured"]
    assert (measured["measured_low"] <= measured["measured_value"]).all() and (
        measured["measured_value"] <= measured["measured_high"]
    ).all()
    assert claims["explanation"].str.len().gt(20).all()
    assert set(claims["verdict"]) <= {"reproduced", "not reproduced", "inconclusive", "not measured"}


def _on_cpu(b: Bundle, cores: int = 2) -> tuple[pd.DataFrame, ...]:
    """The bundle's tables as if recorded with gloo on a ``cores``-core CPU at 1,024 tokens per step."""
    runs = pd.DataFrame([{**r, **{k: CPU_WORK[k] for k in ("tokens_per_step", "backend", "device")}} for r in b.runs])
    environment = pd.DataFrame(
        [{"run": r["run"], "profile": r["profile"], "trial": 0, "key": "host_cpu_cores", "value": str(cores)} for r in b.runs]
    )
    phases = pd.DataFrame(b.phases).assign(wait_ms_per_step=0.0, transfer_ms_per_step=0.0)
    return runs, pd.DataFrame(b.steps), pd.DataFrame(b.ranks), phases, environment


def test_a_claim_outside_its_conditions_is_not_comparable_here_and_says_why():
    runs, steps, ranks, phases, environment = _on_cpu(study_grid(muon_comm=5.7, muon_step=101.0))
    claims = claims_table(runs, steps, ranks, phases, environment=environment).set_index("claim_id")
    time_claims = ["comm_time_dp2_tp2", "optimizer_share", "hybrid_beats_pure", "latency_overhead"]
    assert (claims.loc[time_claims, "verdict"] == "not comparable here").all()
    assert claims.loc[time_claims, "measured_value"].notna().all()  # still measured, with its interval
    share = claims.loc["optimizer_share", "outside_conditions"].split("; ")
    assert share == [
        "gloo on cpu, not nccl on cuda",
        "4 tokens per step per d_model, not 100+",
        "2 ranks per core, not one per device",
    ]
    assert "4 tokens per step per d_model, not 1,000+" in claims.loc["latency_overhead", "outside_conditions"]
    assert not claims.loc["optimizer_share", "explanation"].startswith("Not comparable")  # the cause alone
    # the counts (state, bytes) are no claims: they are checks (muon_repro.analysis.checks, tests/test_checks.py)
    assert not {"state_memory", "comm_bytes_ratio"} & set(claims.index)
    # with a core per rank, the ranks-per-core reason goes (the device reason stays)
    runs, steps, ranks, phases, environment = _on_cpu(study_grid(muon_comm=5.7, muon_step=101.0), cores=4)
    again = claims_table(runs, steps, ranks, phases, environment=environment).set_index("claim_id")
    assert again.loc["hybrid_beats_pure", "outside_conditions"] == "gloo on cpu, not nccl on cuda"


def test_a_condition_the_run_did_not_record_is_not_met():
    from muon_repro.claims import BY_ID

    gpu_run = {"run": "g/muon", "device": "cuda", "backend": "nccl", "preset": "large", "d_model": 1024, "world_size": 4}
    share = BY_ID["optimizer_share"].made_under
    assert share.outside({**gpu_run, "tokens_per_step": 524_288}, None, {}) == []  # 512 tokens per d_model: inside
    # the same run with its tokens, its width or its ranks unknown is not shown to be inside
    assert share.outside({**gpu_run, "tokens_per_step": pd.NA}, None, {}) == ["tokens per step per d_model not recorded"]
    assert share.outside({**gpu_run, "tokens_per_step": 524_288, "preset": "custom", "d_model": None}, None, {}) == [
        "tokens per step per d_model not recorded"
    ]
    assert share.outside({**gpu_run, "tokens_per_step": 524_288, "world_size": float("nan")}, None, {}) == ["ranks not recorded"]
    # gloo on GPUs is not the NCCL the claim was made with (NCCL also keeps one rank per GPU)
    assert share.outside({**gpu_run, "tokens_per_step": 524_288, "backend": "gloo"}, None, {}) == [
        "gloo on cuda, not nccl on cuda"
    ]
    # on a CPU whose cores were not recorded, ranks per core is unknown
    cpu_run = {**gpu_run, "device": "cpu", "backend": "gloo", "tokens_per_step": 524_288}
    assert share.outside(cpu_run, None, {}) == ["gloo on cpu, not nccl on cuda", "ranks per core not recorded (the host's cores)"]
    leading = BY_ID["muon_leading_steps"].made_under
    assert leading.outside({"run": "c/muon", "params": 2e8, "tokens_trained": 4e9}, None, {}) == []
    assert leading.outside({"run": "c/muon", "params": None, "tokens_trained": 4e9}, None, {}) == [
        "tokens trained per parameter not recorded",
        "the model's parameters not recorded",
    ]


def test_each_condition_holds_from_its_threshold_on():
    """A run at a condition's threshold is inside it; just below, it is outside, said with its own number."""
    from muon_repro.claims import BY_ID

    gpu_run = {"run": "g/muon", "device": "cuda", "backend": "nccl", "preset": "large", "d_model": 1024, "world_size": 4}
    share = BY_ID["optimizer_share"].made_under  # 100 tokens per step per d_model, 4 ranks
    assert share.outside({**gpu_run, "tokens_per_step": 102_400}, None, {}) == []
    assert share.outside({**gpu_run, "tokens_per_step": 51_200}, None, {}) == ["50 tokens per step per d_model, not 100+"]
    assert share.outside({**gpu_run, "tokens_per_step": 102_400, "world_size": 3}, None, {}) == ["3 ranks (fewer), not 4+"]
    leading = BY_ID["muon_leading_steps"].made_under  # 10 tokens per parameter, 100,000,000 parameters
    assert leading.outside({"run": "c/muon", "params": 1e8, "tokens_trained": 1e9}, None, {}) == []
    assert leading.outside({"run": "c/muon", "params": 2e8, "tokens_trained": 1.5e9}, None, {}) == [
        "7.5 tokens per parameter, not 10+"
    ]
    assert leading.outside({"run": "c/muon", "params": 5e7, "tokens_trained": 1e9}, None, {}) == [
        "50,000,000 parameters, not 100,000,000+"
    ]


def test_a_difference_of_some_of_the_runs_compared_names_them():
    runs, steps, ranks, phases, environment = _on_cpu(study_grid(muon_comm=5.7, muon_step=101.0))
    environment.loc[environment["run"] != "comparison/muon_dp2_tp2", "value"] = "4"  # a core per rank but for one run
    claims = claims_table(runs, steps, ranks, phases, environment=environment).set_index("claim_id")
    assert claims.loc["hybrid_beats_pure", "outside_conditions"].split("; ") == [
        "gloo on cpu, not nccl on cuda",
        "2 ranks per core, not one per device (only comparison/muon_dp2_tp2)",
    ]


def test_the_width_of_a_shape_override_sets_its_tokens_per_d_model():
    from muon_repro.claims import BY_ID, d_model_of
    from muon_repro.run_records import RunConfig

    # the runs table's d_model: a custom shape's width, which keeps its base preset's name
    assert [RunConfig(preset="small", hidden=96).d_model, RunConfig(preset="large").d_model, RunConfig().d_model] == [
        96,
        1024,
        None,
    ]
    assert d_model_of({"preset": "small", "d_model": 96}) == 96
    assert d_model_of({"preset": "small", "d_model": pd.NA}) == 256  # a table written before the column: the preset's
    quoted: dict[str, float] = {}
    run = {"run": "c/muon", "device": "cuda", "backend": "nccl", "preset": "small", "d_model": 4096, "world_size": 4}
    assert BY_ID["optimizer_share"].made_under.outside({**run, "tokens_per_step": 8192}, None, quoted) == [
        "2 tokens per step per d_model, not 100+"
    ]
    assert quoted["d_model"] == 4096


def test_runs_of_one_preset_name_and_other_shapes_did_different_work():
    from muon_repro.analysis.claim_inputs import UnequalWork, check_same_work, work_difference

    base = {**CPU_WORK, "preset": "small", "d_model": 256, "model_params": 4_196_608, "qkv": "fused", "seq_len": 128}
    base |= {"precision": "fp32", "reduce_dtype": "fp32", "cross_entropy": "vocab_parallel"}
    muon = pd.Series({**base, "run": "custom/muon_h96"} | {"d_model": 96, "model_params": 1_234_567})
    adamw = pd.Series({**base, "run": "comparison/adamw"})
    assert "d_model is 96 vs 256" in work_difference(muon, adamw)
    with pytest.raises(UnequalWork, match="model_params"):
        check_same_work(muon.drop("d_model"), adamw.drop("d_model"))
    with pytest.raises(UnequalWork, match="qkv is 'split' vs 'fused'"):
        check_same_work(pd.Series({**base, "run": "a", "qkv": "split"}), pd.Series({**base, "run": "b"}))
    assert work_difference(pd.Series({**base, "run": "a"}), pd.Series({**base, "run": "b"})) is None


def test_each_interval_is_the_paired_interval_of_the_per_round_values():
    from muon_repro.analysis.rounds import mean_interval, paired_ratio_interval, per_round, per_round_ratio

    b = study_grid(muon_comm=5.7, muon_step=101.0, noise=0.2)
    claims, steps = b.claims(), pd.DataFrame(b.steps)
    muon, adamw = "comparison/muon_dp2_tp2", "comparison/adamw_dp2_tp2"
    expected = {
        "comm_time_dp2_tp2": paired_ratio_interval(
            per_round(steps, muon, "comm_transfer_ms"), per_round(steps, adamw, "comm_transfer_ms")
        ),
        "optimizer_share": mean_interval(per_round_ratio(steps, muon, "optimizer_ms", "step_ms")),
        "latency_overhead": tuple(
            v - 1.0
            for v in paired_ratio_interval(per_round(steps, muon, "step_ms", "max"), per_round(steps, adamw, "step_ms", "max"))
        ),
    }
    for claim_id, (value, low, high) in expected.items():
        row = claims.loc[claim_id]
        assert (row["measured_value"], row["measured_low"], row["measured_high"]) == pytest.approx((value, low, high), rel=1e-12)


def test_an_absent_phase_is_written_as_absent_never_as_zero():
    b = study_grid(muon_comm=5.7, muon_step=101.0)
    b.phases = [ph for ph in b.phases if ph["phase"] != "dp_gather"]  # no matrix straddles a DP shard boundary
    explanation = b.claims().loc["comm_time_dp2_tp2", "explanation"]
    assert "DP gather: absent" in explanation and "0.00 MB" not in explanation


def test_a_phase_adamw_never_waited_in_is_said_to_be_absent():
    """AdamW's run has a tp_gather row with no wait measured (it issues none): not 'against 0.0', a number no table
    holds."""
    b = study_grid(muon_comm=5.7, muon_step=101.0)
    for run, wait in (("comparison/muon_dp2_tp2", 4.8), ("comparison/adamw_dp2_tp2", float("nan"))):
        b.phases.append({"run": run, "trial": 0, "rank": 0, "phase": "tp_gather", "trace_bytes": 1.0, "ms_per_step": 1.0})
        b.phases[-1]["wait_ms_per_step"] = wait
    phases = pd.DataFrame(b.phases)
    phases["wait_ms_per_step"] = phases["wait_ms_per_step"].where(phases["phase"] == "tp_gather", 0.0)
    b.phases = phases.to_dict("records")
    explanation = b.claims().loc["comm_time_dp2_tp2", "explanation"]
    assert "tp_gather 4.8 (AdamW has none)" in explanation and "against 0.0" not in explanation


def test_the_single_device_share_is_muons_alone_whatever_adamws_run_did():
    """On one device the share reads Muon's run only: an AdamW run of other work is left out of the explanation,
    not a reason to judge the share 'unequal work'; the latency claim, which compares them, is."""

    def one_device(adamw_precision: str) -> pd.DataFrame:
        b = Bundle()
        b.run("single/muon", "muon", 1, 1, step_ms=100.0, optimizer_ms=5.0, precision="bf16", timed_optimizer_ms=5.0)
        b.run("single/adamw", "adamw", 1, 1, step_ms=96.0, precision=adamw_precision, timed_optimizer_ms=1.0)
        return b.claims()

    same, other = one_device("bf16"), one_device("fp32")
    assert same.loc["optimizer_share", "verdict"] != UNEQUAL_WORK and "AdamW's 1 ms" in same.loc["optimizer_share", "explanation"]
    assert other.loc["optimizer_share", "verdict"] == same.loc["optimizer_share", "verdict"]
    assert other.loc["optimizer_share", "measured_value"] == pytest.approx(same.loc["optimizer_share", "measured_value"])
    assert "AdamW" not in other.loc["optimizer_share", "explanation"]
    assert other.loc["latency_overhead", "verdict"] == UNEQUAL_WORK


@pytest.mark.parametrize(
    ("claim_id", "grid", "expected"),
    [
        ("comm_time_dp2_tp2", {"muon_comm": 5.7, "muon_step": 100.0}, "reproduced"),
        ("comm_time_dp2_tp2", {"muon_comm": 16.0, "muon_step": 100.0}, "not reproduced"),
        ("comm_time_dp2_tp2", {"muon_comm": 6.84, "muon_step": 100.0, "noise": 0.3}, "inconclusive"),  # straddles 0.684
        ("optimizer_share", {"muon_comm": 5.7, "muon_step": 100.0, "muon_opt": 1.1}, "reproduced"),
        ("optimizer_share", {"muon_comm": 5.7, "muon_step": 100.0, "muon_opt": 50.0}, "not reproduced"),
        (
            "optimizer_share",
            {"muon_comm": 5.7, "muon_step": 100.0, "muon_opt": 2.7, "noise": 0.3},
            "inconclusive",
        ),  # the max over ranks inflates step time
        ("latency_overhead", {"muon_comm": 5.7, "muon_step": 101.0}, "reproduced"),
        ("latency_overhead", {"muon_comm": 5.7, "muon_step": 170.0}, "not reproduced"),
        ("latency_overhead", {"muon_comm": 5.7, "muon_step": 103.0, "noise": 0.2}, "inconclusive"),
        ("hybrid_beats_pure", {"muon_comm": 5.7, "muon_step": 100.0, "hybrid_step": 100.0}, "reproduced"),
        ("hybrid_beats_pure", {"muon_comm": 5.7, "muon_step": 100.0, "hybrid_step": 150.0}, "not reproduced"),
        ("hybrid_beats_pure", {"muon_comm": 5.7, "muon_step": 100.0, "hybrid_step": 120.0, "noise": 0.2}, "inconclusive"),
        ("async_slowdown", {"muon_comm": 5.7, "muon_step": 100.0}, "not measured"),
    ],
)
def test_each_verdict_is_reachable(claim_id, grid, expected):
    assert study_grid(**grid).claims().loc[claim_id, "verdict"] == expected


@pytest.mark.parametrize(("naive_step", "expected"), [(200.0, "reproduced"), (100.0, "not reproduced")])
def test_async_claim_is_measured_when_the_variant_exists(naive_step, expected):
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.run("overlap/muon_dp2_tp2_naive_async", "muon", 2, 2, step_ms=naive_step, overlap="naive_async")
    b.run("overlap/muon_dp2_tp2_pipelined", "muon", 2, 2, step_ms=90.0, overlap="pipelined")
    row = b.claims().loc["async_slowdown"]
    assert row["verdict"] == expected and row["measured_value"] == pytest.approx(naive_step / 100.0, rel=0.05)
    assert "Pipelined gathers" in row["explanation"] and "0.90x" in row["explanation"]


def test_the_async_claims_rounds_are_those_its_interval_pairs():
    """The pipelined variant is measured beside the claim, not in its interval: a disturbed round of it is no round
    the headline leaves out."""
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.run("overlap/muon_dp2_tp2_naive_async", "muon", 2, 2, step_ms=200.0, overlap="naive_async")
    b.run("overlap/muon_dp2_tp2_pipelined", "muon", 2, 2, step_ms=90.0, overlap="pipelined")
    for run in b.runs:
        run["rounds"] = TRIALS
    b.scale_steps("overlap/muon_dp2_tp2_pipelined", 2, trial=1)
    row = b.claims().loc["async_slowdown"]
    assert row["rounds"] == TRIALS and "disturbed" not in row["conditions"]


def test_a_claims_rounds_are_those_of_every_run_it_pairs_less_those_left_out():
    def grid() -> Bundle:
        b = study_grid(muon_comm=5.7, muon_step=101.0)
        for run in b.runs:
            run["rounds"] = TRIALS
        return b

    assert grid().claims().loc["comm_time_dp2_tp2", "rounds"] == TRIALS
    disturbed = grid()  # AdamW's round 1 three times slower: left out of the pairs
    disturbed.scale_steps("comparison/adamw_dp2_tp2", 3, trial=1)
    row = disturbed.claims().loc["latency_overhead"]
    assert row["rounds"] == TRIALS - 1 and "1 disturbed round" in row["conditions"]
    missing = grid()  # AdamW has no round 2: Muon's round 2 pairs with nothing
    missing.steps = [s for s in missing.steps if (s["run"], s["trial"]) != ("comparison/adamw_dp2_tp2", 2)]
    assert missing.claims().loc["comm_time_dp2_tp2", "rounds"] == TRIALS - 1
    # runs not recorded in rounds have no count
    assert pd.isna(study_grid(muon_comm=5.7, muon_step=101.0).claims().loc["comm_time_dp2_tp2", "rounds"])


def test_a_profile_is_judged_if_any_table_has_it_and_unknown_only_without_any():
    from muon_repro.tables.schemas import SCHEMAS

    none, runs = pd.DataFrame(), SCHEMAS["runs"].empty()
    only_regimes = claims_table(runs, none, none, none, regimes=pd.DataFrame({"profile": ["cpu-x"], "x": [1]}))
    assert set(only_regimes["profile"]) == {"cpu-x"} and len(only_regimes) == len(CLAIMS)
    study = [{"claim_id": "comm_time_dp2_tp2", "profile": "4xRTXA4000-pcie-nccl"}]
    assert claims_table(none, none, none, none, study_claims=study)["profile"].tolist() == ["4xRTXA4000-pcie-nccl"]
    assert set(claims_table(runs, none, none, none)["profile"]) == {"unknown"}


def test_async_claim_pairs_only_a_twin_of_the_same_layout():
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.run("overlap/muon_dp2_tp2_naive_async", "muon", 2, 2, step_ms=200.0, overlap="naive_async", layout="bucketed")
    assert b.claims().loc["async_slowdown", "verdict"] == "not measured"


def test_verdict_rule_needs_the_whole_interval():
    region = Region(1.0, 1.25, low_open=True)
    assert verdict(1.05, 1.2, region) == "reproduced"
    assert verdict(0.9, 0.99, region) == "not reproduced"
    assert verdict(1.0, 1.0, region) == "not reproduced"  # the open end
    assert verdict(0.95, 1.1, region) == "inconclusive"
    assert verdict(float("nan"), float("nan"), region) == "not measured"


def test_a_regions_ends_are_inside_or_outside_as_declared():
    """A closed low end and the high end belong to the region; an interval that touches an end from outside is not
    wholly outside it."""
    assert verdict(0.0, 0.01, Region(0.0, 0.022)) == "reproduced"  # the closed low end is inside
    assert verdict(1.25, 1.25, Region(1.0, 1.25, low_open=True)) == "reproduced"  # so is the high end
    assert verdict(0.9, 1.0, Region(1.0, 1.25)) == "inconclusive"  # reaches the closed low end
    assert verdict(0.9, 0.99, Region(1.0, 1.25)) == "not reproduced"
    assert verdict(0.5, 0.7, Region(None, 0.5)) == "inconclusive"  # reaches the high end from above
    assert verdict(0.51, 0.7, Region(None, 0.5)) == "not reproduced"


def test_unequal_work_is_judged_unequal_work_naming_both_runs_and_the_field():
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.runs[1]["tokens_per_step"] = 2048  # the AdamW twin trained twice the tokens
    claims = b.claims()  # judged, not stopped: the claim says the runs did different work, and by what
    comm = claims.loc["comm_time_dp2_tp2"]
    assert comm["verdict"] == UNEQUAL_WORK and not comm["equal_work"] and pd.isna(comm["measured_value"])
    assert re.search(
        r"comparison/muon_dp2_tp2 and comparison/adamw_dp2_tp2.*tokens_per_step is 262144 vs 2048", comm["work_difference"]
    )
    assert "did different work" in comm["explanation"] and "comparison/adamw_dp2_tp2" in comm["conditions"]
    runs = SCHEMAS["runs"].conform(pd.DataFrame(b.runs).reindex(columns=SCHEMAS["runs"].names))
    cmp = _comparisons_table(runs, sweeps_of(runs))  # no twin of the same work: no comparison, and the analysis goes on
    assert "comparison/muon_dp2_tp2" not in set(cmp.get("muon_run", []))
    a, m = pd.Series({"run": "a", **WORK}), pd.Series({"run": "m", **WORK, "preset": "medium"})
    with pytest.raises(UnequalWork, match="runs a and m did different work: preset is 'small' vs 'medium'"):
        check_same_work(a, m)


def test_a_claim_finds_the_equal_work_twin_behind_a_run_of_other_work():
    """The claims took the first AdamW run at the grid and refused it; an equal-work twin in another group is used."""
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.runs[1]["tokens_per_step"] = 2048  # the first AdamW run (the comparison group's) did other work
    b.run("other/adamw_dp2_tp2", "adamw", 2, 2, step_ms=100.0, comm_ms=10.0)  # the twin, same work as Muon's
    comm = b.claims().loc["comm_time_dp2_tp2"]
    assert comm["verdict"] != UNEQUAL_WORK and "other/adamw_dp2_tp2" in comm["conditions"]


def test_the_dp2_tp2_claims_pair_runs_on_the_same_grid_only():
    """A pipelined DP2·TP2 run (8 ranks, 4 micro-batches) is not the study's grid, and an AdamW run of another grid
    is not a Muon run's twin: same tokens per step, but more ranks or more passes."""
    b = Bundle()
    b.run("pipeline/muon_dp2_tp2_pp2", "muon", 2, 2, step_ms=100.0, pp=2, world_size=8, micro_batches=4)
    b.run("comparison/adamw_dp2_tp2", "adamw", 2, 2, step_ms=100.0, pp=1, micro_batches=1)
    assert b.claims().loc["comm_time_dp2_tp2", "verdict"] == "not measured"
    b.run("pipeline/muon_dp2_tp2", "muon", 2, 2, step_ms=100.0, pp=1, micro_batches=4)
    comm = b.claims().loc["comm_time_dp2_tp2"]
    assert comm["verdict"] == UNEQUAL_WORK and "micro_batches is 4 vs 1" in comm["work_difference"]
    b.run("pipeline/adamw_dp2_tp2", "adamw", 2, 2, step_ms=100.0, pp=1, micro_batches=4)
    claims = b.claims()
    comm = claims.loc["comm_time_dp2_tp2"]
    assert comm["verdict"] != UNEQUAL_WORK and "pipeline/adamw_dp2_tp2" in comm["conditions"]
    assert bool(comm["equal_work"]) and pd.isna(claims.loc["optimizer_share", "equal_work"])  # one run: nothing compared


def sweeps_of(runs: pd.DataFrame, sweep: dict[str, str] | None = None) -> pd.DataFrame:
    """Which sweep recorded each run's one round: ``sweep[run]``, else none (recorded before sweeps had ids)."""
    sweep = sweep or {}
    return pd.DataFrame({"run": runs["run"], "trial": 0, "sweep": [sweep.get(r) for r in runs["run"]]})


def test_comparisons_pair_only_a_partner_that_did_the_same_work():
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.run("other/adamw_dp2_tp2", "adamw", 2, 2, step_ms=100.0, tokens_per_step=4096)
    runs = SCHEMAS["runs"].conform(pd.DataFrame(b.runs).reindex(columns=SCHEMAS["runs"].names))
    cmp = _comparisons_table(runs, sweeps_of(runs))
    assert set(cmp["adamw_run"]) == {"comparison/adamw_dp2_tp2"}


def test_comparisons_compare_times_only_of_runs_recorded_together():
    """The same configuration recorded in two sessions can differ by more than Muon and AdamW do: an AdamW twin
    recorded by the Muon run's sweep is preferred to the same group's from another sweep, and a Muon run whose only
    twin is another sweep's keeps its byte and state ratios and has no time ratios."""
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.run("later/adamw_dp2_tp2", "adamw", 2, 2, step_ms=80.0)
    runs = pd.DataFrame(b.runs).reindex(columns=SCHEMAS["runs"].names)
    runs["state_bytes"] = runs["optimizer"].map({"muon": 500, "adamw": 1000})
    runs = SCHEMAS["runs"].conform(runs)
    muon = "comparison/muon_dp2_tp2"
    mine = _comparisons_table(runs, sweeps_of(runs, {muon: "s1", "later/adamw_dp2_tp2": "s1"}))
    row = mine[mine["muon_run"] == muon].iloc[0]
    assert row["adamw_run"] == "later/adamw_dp2_tp2" and bool(row["recorded_together"])
    assert row["step_ms_ratio"] == pytest.approx(100.0 / 80.0) and row["state_bytes_ratio"] == pytest.approx(0.5)
    apart = _comparisons_table(runs, sweeps_of(runs, {muon: "s1", "later/adamw_dp2_tp2": "s2"}))
    row = apart[apart["muon_run"] == muon].iloc[0]
    assert row["adamw_run"] == "comparison/adamw_dp2_tp2" and not row["recorded_together"]  # s1 against none
    for column in COMPARISON_TIME_RATIOS:
        assert pd.isna(row[column]), column
    assert row["state_bytes_ratio"] == pytest.approx(0.5)  # state does not drift: compared whatever the session


def _claims_with_timed(b: Bundle, timed: pd.DataFrame, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    runs, ranks, phases = pd.DataFrame(b.runs), pd.DataFrame(b.ranks), pd.DataFrame(b.phases)
    for col in ("wait_ms_per_step", "transfer_ms_per_step"):
        phases[col] = 0.0
    steps = pd.DataFrame(b.steps) if steps is None else steps
    return SCHEMAS["claims"].conform(claims_table(runs, steps, ranks, phases, timed=timed)).set_index("claim_id")


def test_on_nccl_communication_comes_from_the_traced_kernels_never_from_launch_times():
    """Timed NCCL calls return once their kernel is queued: launch times of 0.1 ms for both optimizers would give
    a ratio near 1; the claim takes the traced kernels (5.7 ms against 10 ms) and says so."""
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    launches = pd.DataFrame(b.steps).assign(comm_ms=0.1, comm_transfer_ms=0.1, comm_timing="host_launch")
    claims = _claims_with_timed(b, launches)
    row = claims.loc["comm_time_dp2_tp2"]
    assert row["measured_value"] == pytest.approx(0.57, rel=0.05) and row["verdict"] == "reproduced"
    assert "traced NCCL kernels" in row["conditions"]
    # without the traces of one of them, the claim refuses to measure rather than read launch times
    untraced = pd.DataFrame(b.steps)
    untraced = untraced[~untraced["run"].str.contains("adamw")]
    refused = _claims_with_timed(b, launches, untraced).loc["comm_time_dp2_tp2"]
    assert refused["verdict"] == "not measured" and "launch times, not communication" in refused["explanation"]


def test_a_statistic_over_runs_reads_one_source_for_all_of_them():
    """A run whose timed steps were lost (its metrics.json) was compared on its profiled steps against the other's
    timed ones: unlike times, since the profiler costs Muon and AdamW unequally."""
    import pandas as pd

    from muon_repro.analysis.claim_inputs import ProfileTables

    def frame(run: str, ms: float) -> pd.DataFrame:
        return pd.DataFrame({"run": run, "trial": [0, 0, 1, 1], "step": [0, 1, 0, 1], "rank": 0, "step_ms": ms})

    runs = pd.DataFrame({"run": ["a", "b"], "backend": "gloo"})
    a, b = runs.iloc[0], runs.iloc[1]
    profiled = pd.concat([frame("a", 20.0), frame("b", 30.0)])
    t = ProfileTables(runs, profiled, pd.DataFrame(), pd.DataFrame(), timed=frame("a", 10.0))  # b: no timed steps
    assert [src is t.steps for src, _ in t.sources(a, b)] == [True, True]
    assert t.sources(a)[0][0] is t.timed  # alone, a reads its own timed steps
    both = ProfileTables(runs, profiled, pd.DataFrame(), pd.DataFrame(), timed=pd.concat([frame("a", 10.0), frame("b", 15.0)]))
    assert [src is both.timed for src, _ in both.sources(a, b)] == [True, True]


def test_an_unknown_flop_count_or_interval_is_said_unknown_never_a_number():
    """A run without its Newton-Schulz FLOPs printed '0.0 GFLOP' (None) or 'nan GFLOP'; an interval of NaN ends read
    'not distinguishable from 1'."""
    from muon_repro.analysis.claim_inputs import ns_gflop
    from muon_repro.analysis.claim_measures import _versus_one

    assert [ns_gflop(pd.Series({"ns_flops_max_rank": v})) for v in (None, float("nan"), 9.4e9)] == ["unknown", "unknown", "9.4"]
    assert _versus_one(float("nan"), float("nan")) == "no interval"
    assert _versus_one(0.97, 1.01) == "not distinguishable from 1"


def grid_run(
    name: str, optimizer: str, dp: int, tp: int, *, pp: int = 1, tokens: int | None = None, work: dict = WORK, **over
) -> dict:
    """A runs-table row of ``work`` (the claims' own, unless told) on a DP x TP x PP grid, at ``tokens`` per step
    (``work``'s where not given), ``over`` replacing any field."""
    grid = {"dp": dp, "tp": tp, "pp": pp, "world_size": dp * tp * pp, "micro_batches": 1, "overlap": "none"}
    return {
        **work,
        **grid,
        "run": f"c/{name}",
        "group": "c",
        "layout": "contiguous",
        "optimizer": optimizer,
        "tokens_per_step": work["tokens_per_step"] if tokens is None else tokens,
        **over,
    }


def test_the_grids_a_claim_speaks_of_are_picked_whole():
    """One device means one rank (a PP4 pipeline has dp 1 and tp 1 too); the DP2·TP2 run is the blocking one (its async
    variant, which sorts first here, is the async claim's)."""
    run = functools.partial(grid_run, work=CPU_WORK)

    runs = pd.DataFrame(
        [
            run("a_muon_pp4", "muon", 1, 1, pp=4, tokens=8192),
            run("a_adamw_pp4", "adamw", 1, 1, pp=4, tokens=8192),
            run("muon_one", "muon", 1, 1),
            run("adamw_one", "adamw", 1, 1),
            run("a_muon_dp2_tp2_async", "muon", 2, 2, overlap="naive_async"),
            run("muon_dp2_tp2", "muon", 2, 2),
            run("adamw_dp2_tp2", "adamw", 2, 2),
        ]
    )
    tables = SimpleNamespace(runs=runs)
    assert [r["run"] for r in _single_device_pair(tables)] == ["c/muon_one", "c/adamw_one"]
    assert [r["run"] for r in dp2_tp2_pair(tables)] == ["c/muon_dp2_tp2", "c/adamw_dp2_tp2"]
    assert _single_device_pair(SimpleNamespace(runs=runs[runs["pp"] == 4])) is None


def test_a_measure_that_compared_unequal_work_unchecked_reads_unequal_work(monkeypatch):
    """equal_work true is a check of the runs measured, not the absence of an error: a measure that forgot
    check_same_work still gets 'unequal work', naming the runs and the field."""
    from muon_repro.analysis import claim_measures
    from muon_repro.analysis.claim_inputs import Measurement

    runs, steps, ranks, phases, environment = _on_cpu(study_grid(muon_comm=5.7, muon_step=101.0))
    muon, adamw = (runs[runs["run"] == name].iloc[0] for name in ("comparison/muon_dp2_tp2", "comparison/adamw_dp2_tp2"))
    unchecked = Measurement(0.02, 0.01, 0.03, "two runs", "Compared without a check.", (muon, adamw.copy()))
    monkeypatch.setitem(claim_measures.MEASURE, "latency_overhead", lambda t: unchecked)
    row = claims_table(runs, steps, ranks, phases, environment=environment).set_index("claim_id").loc["latency_overhead"]
    assert (row["verdict"], row["equal_work"], row["work_difference"]) == ("not comparable here", True, "")
    bigger = adamw.copy()
    bigger["tokens_per_step"] = 2048
    unchecked = Measurement(0.02, 0.01, 0.03, "two runs", "Compared without a check.", (muon, bigger))
    row = claims_table(runs, steps, ranks, phases, environment=environment).set_index("claim_id").loc["latency_overhead"]
    assert (row["verdict"], row["equal_work"]) == ("unequal work", False)
    assert "tokens_per_step is 1024 vs 2048" in row["work_difference"] and "comparison/adamw_dp2_tp2" in row["work_difference"]


# ---------------------------------------------------------------------- which runs each claim compares


def test_runs_on_different_devices_did_different_work():
    a, b = pd.Series({"run": "a", **WORK}), pd.Series({"run": "b", **WORK, "device": "cpu"})
    assert "device is 'cuda' vs 'cpu'" in work_difference(a, b)


def test_a_field_one_run_did_not_record_is_a_difference_and_none_in_both_is_not():
    a = pd.Series({"run": "a", **WORK}, dtype=object)
    b = pd.Series({"run": "b", **WORK, "tokens_per_step": None}, dtype=object)
    assert "tokens_per_step is 262144 vs not recorded" in work_difference(a, b)
    assert work_difference(a.drop("tokens_per_step"), b) is None


def test_the_dp2_tp2_pair_needs_an_adamw_run_on_muons_device():
    runs = pd.DataFrame([grid_run("muon", "muon", 2, 2), grid_run("adamw_cpu", "adamw", 2, 2, device="cpu")])
    assert dp2_tp2_pair(SimpleNamespace(runs=runs)) is None  # not measured, rather than 'unequal work'


def test_a_run_without_a_pp_cell_has_no_pipeline():
    runs = pd.DataFrame({"run": ["a", "b", "c"], "pp": [1.0, float("nan"), 2.0]})
    assert without_pipeline(runs)["run"].tolist() == ["a", "b"]


def test_the_hybrid_is_compared_with_the_faster_of_dp4_and_tp4():
    claims = study_grid(muon_comm=5.7, muon_step=100.0, hybrid_step=100.0, dp4_step=130.0, tp4_step=120.0).claims()
    assert claims.loc["hybrid_beats_pure", "measured_value"] == pytest.approx(100.0 / 120.0, rel=0.02)


def test_a_tp4_run_of_other_work_leaves_the_hybrid_claim_without_a_value():
    b = study_grid(muon_comm=5.7, muon_step=100.0, hybrid_step=100.0)
    b.runs[3]["tokens_per_step"] = 2048  # distributed_muon/muon_tp4
    row = b.claims().loc["hybrid_beats_pure"]
    assert row["verdict"] == UNEQUAL_WORK and pd.isna(row["measured_value"])


def test_an_interval_reaching_one_is_not_beyond_the_noise():
    assert _versus_one(1.0, 1.3) == "not distinguishable from 1"
    assert _versus_one(0.8, 1.0) == "not distinguishable from 1"


def test_async_claim_pairs_only_a_twin_on_the_same_backend():
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.run("overlap/muon_dp2_tp2_naive_async", "muon", 2, 2, step_ms=200.0, overlap="naive_async", backend="gloo")
    assert b.claims().loc["async_slowdown", "verdict"] == "not measured"


def test_the_single_device_pair_is_at_the_largest_tokens_both_recorded():
    runs = pd.DataFrame(
        [grid_run(f"{o}_{t}", o, 1, 1, tokens=t) for o in ("muon", "adamw") for t in (1024, 8192)]
        + [grid_run("muon_65536", "muon", 1, 1, tokens=65536)]
    )
    assert [r["run"] for r in _single_device_pair(SimpleNamespace(runs=runs))] == ["c/muon_8192", "c/adamw_8192"]


def test_the_optimizer_share_is_the_dp2_tp2_run_without_a_pipeline():
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.run("comparison/a_muon_dp2_tp2_pp2", "muon", 2, 2, step_ms=100.0, optimizer_ms=50.0, pp=2, world_size=8)
    row = b.claims().loc["optimizer_share"]
    assert "a_muon_dp2_tp2_pp2" not in row["conditions"] and row["measured_value"] < 0.05


def test_the_async_ratio_is_of_the_slowest_ranks_step():
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.run("overlap/muon_dp2_tp2_naive_async", "muon", 2, 2, step_ms=200.0, overlap="naive_async")
    b.scale_steps("overlap/muon_dp2_tp2_naive_async", 3, rank=0)
    assert b.claims().loc["async_slowdown", "measured_value"] == pytest.approx(6.0, rel=0.05)


def test_async_claim_prefers_the_twin_recorded_in_its_own_sweep():
    b = study_grid(muon_comm=5.7, muon_step=100.0)
    b.run("overlap/muon_dp2_tp2_naive_async", "muon", 2, 2, step_ms=200.0, overlap="naive_async")
    b.run("overlap/muon_dp2_tp2", "muon", 2, 2, step_ms=50.0)  # blocking, recorded beside it
    row = b.claims().loc["async_slowdown"]
    assert row["measured_value"] == pytest.approx(4.0, rel=0.05) and "overlap/muon_dp2_tp2 " in row["conditions"]
