"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier, of the cost model:

* its records (muon_repro.costmodel.records): the crossing of a level at the grid's first point and past zero, the
  AdamW twin of a Muon run, which residuals count and what the optimizer share's residual is, a regime row's range
  (low end first), a threshold row's tokens per unit of width, the grid of tokens per step up to its end, and a
  measured device priced on shipped links;
* its pipeline prediction (muon_repro.costmodel.pipeline): the period of steps back to back over a given number of
  steps, the mean bubble, a stage row's first block, the fit a transfer is priced with;
* its machine profile (muon_repro.costmodel.machine_profile): which collective fit a group takes, a one-sample fit,
  samples that share the largest size, a day without a probe, each kind at its own efficiency, the optional
  figures' fallbacks, the notes on figures a size curve replaces;
* its workload (muon_repro.costmodel.workload): a pipeline stage's TP all-reduces, element-wise traffic, GELU and
  cross-entropy bytes over its own part of the model, bf16's fp32 reductions, a stage's first global rank, an
  unknown parameter dtype.

Every expected value is derived by hand from the documented definitions (the modules' docstrings, docs/method.md
"Cost model", "bf16 workload", "Thresholds as ranges", "Pipeline parallelism" and the tables' schemas there)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from support.costmodel_profiles import two_core_profile
from test_speed_probe import probe, profile
from test_threshold_ranges import _predictions

from muon_repro.bench.configs import BenchConfig
from muon_repro.costmodel import records
from muon_repro.costmodel.machine import profile_from_dict
from muon_repro.costmodel.machine_profile import CollectiveFit, interpolate_samples
from muon_repro.costmodel.pipeline import PipelinePrediction, StagePrediction, back_to_back, p2p_seconds
from muon_repro.costmodel.records import (
    MAX_TOKENS,
    MODEL_7B,
    STUDY_MODEL,
    ErrorSpread,
    Model,
    Setting,
    adamw_twin,
    crossing,
    measured_compute_profile,
    metric_error_spread,
    threshold_rows,
    token_grid,
    with_ranges,
)
from muon_repro.costmodel.workload import Workload, build_workload, forward_vector_elems_per_token, model_stages
from muon_repro.model_config import StagePart
from muon_repro.phases import BACKWARD, FORWARD, NEWTON_SCHULZ, TP_ALL_REDUCE

# ---------------------------------------------------------------- records: the crossing of a level


def test_a_metric_already_at_the_level_at_the_first_point_crosses_there():
    """crossing is "the smallest x where the line falls to level": a first point exactly at the level has reached it
    (falling to the level counts), so the crossing is that point, not "never" for want of a point above it."""
    assert crossing([(64, 1.0), (128, 0.5)], 1.0) == 64
    assert crossing([(64, 0.011), (128, 0.02), (256, 0.005)], 0.011) == 64


def test_a_metric_that_falls_to_zero_or_below_crosses_at_the_first_point_that_does():
    """Muon's extra can turn negative (Muon faster): no log-log line runs through it, and the first grid point at or
    below the level is where the metric has fallen to it; the point before it is still above the level."""
    assert crossing([(64, 2.0), (128, -0.5)], 0.011) == 128
    assert crossing([(64, 2.0), (128, 1.0), (256, 0.0)], 0.03) == 256


def test_a_threshold_row_states_its_tokens_per_unit_of_width():
    """regime_thresholds.tokens_per_d_model is tokens_per_step / d_model, the model's width (its shape's hidden over
    the preset's). A width-128 model of 256-token sequences whose share falls 0.06, 0.03, 0.011 at 1k, 2k, 4k tokens
    crosses 3% at 2,048 tokens (16 per unit of width) and 1.1% at 4,096 (32); its extra, 0.5 throughout, never."""
    model = Model("w128", "small", 256, (("hidden", 128),))
    assert (model.d_model, MODEL_7B.d_model) == (128, 4096)  # the shape's width, not the preset's
    grid = [
        {"tokens_per_step": t, "optimizer_share": share, "muon_extra": 0.5}
        for t, share in ((1024, 0.06), (2048, 0.03), (4096, 0.011))
    ]
    rows = {(r["metric"], r["level"]): r for r in threshold_rows(Setting("m", model, 1, 1), grid)}
    assert rows[("optimizer_share", 0.03)]["tokens_per_step"] == pytest.approx(2048)
    assert rows[("optimizer_share", 0.03)]["tokens_per_d_model"] == pytest.approx(16)
    assert rows[("optimizer_share", 0.011)]["tokens_per_d_model"] == pytest.approx(32)
    assert rows[("optimizer_share", 0.011)]["d_model"] == 128
    assert rows[("muon_extra", 0.011)]["tokens_per_d_model"] is None


# ---------------------------------------------------------------- records: the residuals and the ranges


@pytest.mark.parametrize(
    ("muon_run", "twin"),
    [
        ("cpu-2c-gloo/regimes/muon_d256_t1024_dp2_tp2_whole_matrix", "cpu-2c-gloo/regimes/adamw_d256_t1024_dp2_tp2"),
        ("cpu-2c-gloo/regimes/muon_d576_t10240_dp2_tp2_bucketed", "cpu-2c-gloo/regimes/adamw_d576_t10240_dp2_tp2"),
        ("cpu-2c-gloo/comparison/muon_dp2_tp2", "cpu-2c-gloo/comparison/adamw_dp2_tp2"),
        # only the run's own name swaps its optimizer, not a folder that happens to hold "muon_"
        ("box/ablate_muon_lr/muon_dp2_tp2", "box/ablate_muon_lr/adamw_dp2_tp2"),
    ],
)
def test_the_adamw_twin_of_a_muon_run_is_in_the_contiguous_layout(muon_run, twin):
    """The same name with the optimizer swapped, the contiguous layout: both the bucketed and the whole-matrix
    suffixes go (AdamW's runs have no whole-matrix layout of their own)."""
    assert adamw_twin(muon_run) == twin


def test_a_tuned_on_muon_run_gives_no_residual_of_either_metric():
    """Only held-out runs count: Muon runs the model was tuned on give no optimizer-share residual (the existing tests
    check muon_extra, which their twins already exclude), and, twins held out, no muon_extra residual either."""
    rows = _predictions([0.0] * 30)
    for row in rows:
        row["held_out"] = row["optimizer"] == "adamw"
    spread = metric_error_spread(rows, "cpu")
    assert spread["optimizer_share"] == "unavailable: 0 held-out cpu residuals, 20 needed"
    assert spread["muon_extra"] == "unavailable: 0 held-out cpu residuals, 20 needed"


def test_the_optimizer_shares_residual_is_the_optimizers_log_error_less_the_steps():
    """A share is optimizer / step, so its log error is the optimizer's minus the step's. Muon runs predicted with
    their steps 10% long (log error 0.1) and their optimizers exp(0.1 + e_i) too long, e_i = 0.00 .. 0.19: the share's
    residuals are the e_i (20 of them: k = 1, the smallest and largest, 0 and 0.19); muon_extra's, each Muon step's
    error less its exactly predicted AdamW twin's, are all 0.1."""
    rows = _predictions([0.1 + 0.01 * i for i in range(20)])
    for row in rows:
        if row["optimizer"] == "muon":
            row["predicted_step_ms"] = row["measured_step_ms"] * math.exp(0.1)
    spread = metric_error_spread(rows, "cpu")
    share, extra = spread["optimizer_share"], spread["muon_extra"]
    assert isinstance(share, ErrorSpread) and isinstance(extra, ErrorSpread)
    assert (share.low, share.high) == (pytest.approx(0.0, abs=1e-12), pytest.approx(0.19))
    assert (extra.low, extra.high) == (pytest.approx(0.1), pytest.approx(0.1))


def test_a_regime_rows_range_puts_the_low_end_in_low_and_none_without_a_spread():
    """with_ranges: <metric>_low / _high, null where the spread has none. A log error from -0.1 to +0.2 (the hand
    computation of tests/test_threshold_ranges.py): a share of 0.1 stands for 0.1 e^-0.2 = 0.0818731 to
    0.1 e^0.1 = 0.1105171."""
    spread = {"optimizer_share": ErrorSpread(-0.1, 0.2, 30, "held-out cpu runs", 29 / 31), "muon_extra": "unavailable"}
    row = with_ranges({"optimizer_share": 0.1, "muon_extra": 0.5}, spread)
    assert (row["optimizer_share_low"], row["optimizer_share_high"]) == pytest.approx((0.0818731, 0.1105171), rel=1e-6)
    assert (row["muon_extra_low"], row["muon_extra_high"]) == (None, None)


# ---------------------------------------------------------------- records: the grid, and a device on shipped links


def test_the_token_grid_doubles_from_one_sequence_per_dp_rank_up_to_max_tokens_included(monkeypatch):
    """One micro-batch per DP rank (dp x seq_len = 2 x 1024 = 2^11 tokens), doubling up to MAX_TOKENS = 2^27: 17
    points, the last at MAX_TOKENS itself ("up to", and the record says a level not reached "by then" is null)."""
    workload = SimpleNamespace(model=SimpleNamespace(num_params=lambda: 1), ns_flops=(1,), train_flops=4)
    fake = SimpleNamespace(workload=workload, step_ms=2.0, optimizer_ms=1.0, comm_ms=0.0)
    monkeypatch.setattr(records, "_pair", lambda setting, tokens, machine=None: (fake, fake))
    tokens = [row["tokens_per_step"] for row in token_grid(Setting("m", STUDY_MODEL, 2, 2))]
    assert MAX_TOKENS == 2**27
    assert tokens == [2**k for k in range(11, 28)]


def test_measured_compute_on_shipped_links_keeps_the_links_efficiencies_and_drops_the_kernels():
    """measured_compute_profile: the links' interconnect "and their efficiencies" with the device's measured kernel
    rates "at full efficiency (they are what the device reached)": of efficiency {matmul 0.7, elementwise 0.5,
    intra_node 0.8, inter_node 0.6} only the two links' stay, so a matmul runs at the measured 0.04 TFLOP/s whole."""
    links = profile_from_dict(
        two_core_profile(
            name="links",
            efficiency={"matmul": 0.7, "elementwise": 0.5, "intra_node": 0.8, "inter_node": 0.6},
            matmul_tflops={"fp32": 9.0},
        )
    )
    hybrid = measured_compute_profile(links, profile_from_dict(two_core_profile(name="device")))
    assert hybrid.efficiency == {"intra_node": 0.8, "inter_node": 0.6}
    assert hybrid.matmul_flops_per_s("fp32") == pytest.approx(0.04e12)
    assert hybrid.collective_efficiency("intra_node") == 0.8


# ---------------------------------------------------------------- pipeline


def test_steps_that_alternate_take_the_mean_period_of_stage_0_over_the_second_half_of_the_steps_played():
    """The alternating case of tests/test_costmodel_pipeline.py (stage 0's steps end 18, 37, 55, 74, 92, 111: periods
    18, 19, 18, 19, 18, 19) played for a given number of steps: the mean of stage 0's periods over the second half.
    5 steps: the last 3 periods, 18 + 19 + 18 = 92 - 37, over 3; 6 steps: 19 + 18 + 19 = 111 - 55, over 3 (not the
    last stage's periods, which alternate out of phase with stage 0's)."""
    forward, backward, transfer, optimizer = [3, 1, 1], [4, 1, 1], [0, 1], [1, 10, 0]
    assert back_to_back(forward, backward, transfer, optimizer, 2, steps=5).step == pytest.approx(55 / 3)
    assert back_to_back(forward, backward, transfer, optimizer, 2, steps=6).step == pytest.approx(56 / 3)


def test_the_pipelines_bubble_is_the_mean_of_its_stages_bubbles_and_a_row_names_its_first_block():
    """bubble_ms: "the mean over stages of each stage's bubble". A pipeline of T = 9 ms whose stages compute 6 and 8 ms
    (M = 2 micro-batches of 1 + 2 and of 1.5 + 2.5 ms) idles 3 and 1 ms: a mean of 2, where the largest is 3. Stage 1
    holds blocks 2 and 3: its row's first block is 2 (the global index, not the stage's)."""
    stages = (
        StagePrediction(0, range(0, 2), True, False, 1.0, 2.0, 6.0, 3.0, 0.5, 0, ()),
        StagePrediction(1, range(2, 4), False, True, 1.5, 2.5, 8.0, 1.0, 0.5, 0, ()),
    )
    p = PipelinePrediction(None, "m", "cpu", False, stages, (), 9.0, (0.0,), 0)
    assert p.bubble_ms == pytest.approx(2.0)
    assert [(row["stage"], row["blocks"], row["first_block"]) for row in p.stage_rows()] == [(0, 2, 0), (1, 2, 2)]


def test_a_transfer_is_priced_by_the_two_rank_all_gather_fit_not_another_collectives():
    """p2p_seconds: "the profile's two-rank all-gather at nbytes per rank": alpha + bytes / beta of the all-gather fit
    (100 us, 2 GB/s), whatever the reduce-scatter's and all-reduce's fits say."""
    fits = {"all_gather": (100.0, 2.0), "reduce_scatter": (900.0, 0.1), "all_reduce": (700.0, 0.2)}
    collectives = [{"op": op, "alpha_us": a, "beta_gbps": b} for op, (a, b) in fits.items()]
    machine = profile_from_dict(two_core_profile(collectives=collectives))
    assert p2p_seconds(machine, 1_000_000, "intra_node", 4) == pytest.approx(100e-6 + 1e6 / 2e9)


# ---------------------------------------------------------------- machine profile: collectives


def test_a_groups_own_fit_comes_before_the_fit_for_any_size():
    """MachineProfile.collective: "the exact group size if listed, else one for any size (null), else the nearest
    listed size". A 4-rank fit beside an any-size fit: a group of 4 takes its own, groups of 2 and 8 the any-size one
    (never the nearest listed size while an any-size fit exists)."""
    fits = [
        {"op": "all_gather", "alpha_us": 100.0, "beta_gbps": 0.5},
        {"op": "all_gather", "alpha_us": 400.0, "beta_gbps": 0.5, "group_size": 4},
    ]
    profile = profile_from_dict(two_core_profile(collectives=fits))
    assert [profile.collective("all_gather", g).alpha_us for g in (4, 2, 8)] == [400.0, 100.0, 100.0]


def test_a_group_between_two_listed_sizes_equally_near_takes_the_smaller():
    """MachineProfile.collective and arrival_jitter_s: the nearest listed size by ratio, "the smaller of two equally
    near" (docs/method.md "Cost model"). A group of 4 is 2x from both 2 and 8: it takes the 2-rank fit (alpha 200 us,
    not 800) and the 2-rank wait (10 us, not 30); a group of 6 is nearer 8 (1.33x against 3x) and takes 8's."""
    fits = [
        {"op": "all_gather", "alpha_us": 200.0, "beta_gbps": 0.5, "group_size": 2},
        {"op": "all_gather", "alpha_us": 800.0, "beta_gbps": 0.5, "group_size": 8},
    ]
    profile = profile_from_dict(two_core_profile(collectives=fits, arrival_jitter_us={"2": 10.0, "8": 30.0}))
    assert [profile.collective("all_gather", g).alpha_us for g in (4, 6)] == [200.0, 800.0]
    assert [profile.arrival_jitter_s(g) for g in (4, 6)] == pytest.approx([10e-6, 30e-6])


def test_a_fit_with_one_sample_prices_every_call_from_alpha_and_beta():
    """CollectiveFit.seconds: "from the measured samples around it when there are at least two, else from the fit".
    One sample of 1 ms at 1 kB, alpha 100 us, beta 1 GB/s: a call of 1 kB costs 100 us + 1 us (the fit, not the
    sample's 1 ms), one of 1 MB 100 us + 1 ms."""
    fit = CollectiveFit("all_gather", alpha_us=100.0, beta_gbps=1.0, samples=((1000.0, 1e-3),))
    assert fit.seconds(1000) == pytest.approx(101e-6)
    assert fit.seconds(1_000_000) == pytest.approx(1.1e-3)


def test_a_call_beyond_samples_sharing_the_largest_size_is_never_priced_below_the_largest():
    """interpolate_samples: beyond the largest sample, "never below the largest's time". Two samples at the largest
    size, 2 and 3 ms at 2 kB (sorted, the largest is the 3 ms one; their slope says nothing): a 3 kB call costs 3 ms."""
    samples = ((1000.0, 1e-3), (2000.0, 3e-3), (2000.0, 2e-3))
    assert interpolate_samples(samples, 3000) == pytest.approx(3e-3)


def test_a_day_needs_a_probe_of_that_day():
    """day_ratios is the median over a run's probes, "at least one speed probe": none is refused by name, not left to
    the median of nothing."""
    machine = profile(speed_probe={"4": probe().to_dict()})
    with pytest.raises(ValueError, match="day_ratios needs at least one speed probe"):
        machine.day_ratios()


# ---------------------------------------------------------------- machine profile: rates


def test_newton_schulz_runs_at_its_own_efficiency_not_the_matmuls():
    """The effective rate of a figure is "figure * efficiency[kind]" (1 where efficiency says nothing): Newton-Schulz's
    0.04 TFLOP/s at efficiency.newton_schulz 0.5 is 0.02 TFLOP/s, and a matmul efficiency of 0.25 leaves it whole."""
    ns_only = profile_from_dict(two_core_profile(efficiency={NEWTON_SCHULZ: 0.5}))
    matmul_only = profile_from_dict(two_core_profile(efficiency={"matmul": 0.25}))
    assert ns_only.newton_schulz_flops_per_s("fp32") == pytest.approx(0.02e12)
    assert matmul_only.newton_schulz_flops_per_s("fp32") == pytest.approx(0.04e12)
    assert matmul_only.matmul_flops_per_s("fp32") == pytest.approx(0.01e12)


def test_a_cross_entropy_curve_falls_back_to_an_eighth_of_the_elementwise_rate_where_it_has_no_size():
    """cross_entropy_gbps: "default: elementwise / 8" (CROSS_ENTROPY_PASSES), curve or not: with a cross-entropy size
    curve and no flat figure, a kernel of unknown size (0 elements) runs at 20 / 8 = 2.5 GB/s; GELU's at 20 / 5 = 4."""
    curves = {"cross_entropy": {"1024": 1.0}, "gelu": {"1024": 1.0}}
    profile = profile_from_dict(two_core_profile(size_curves=curves))
    assert profile.cross_entropy_bytes_per_s(0) == pytest.approx(2.5e9)
    assert profile.gelu_bytes_per_s(0) == pytest.approx(4e9)
    assert profile.cross_entropy_bytes_per_s(1024) == pytest.approx(1e9)  # the curve where the size is known


def test_attention_without_its_own_figure_is_priced_as_a_matmul_of_its_size():
    """attention_tflops: "default: matmul_tflops", and the matmul's size curve prices every fp32 matmul of forward and
    backward at its operand's size: attention over 1,000 elements without a figure of its own runs at the curve's
    0.01 TFLOP/s there, not at the flat 0.04."""
    profile = profile_from_dict(two_core_profile(size_curves={"matmul": {"100": 0.01, "100000": 0.01}}))
    assert profile.attention_flops_per_s("fp32", 1000) == pytest.approx(0.01e12)
    assert profile.attention_flops_per_s("fp32") == pytest.approx(0.04e12)  # no size: the flat figure


def test_a_note_on_a_replaced_figure_names_only_the_other_dtypes_it_holds():
    """unused_figures: an fp32 matmul size curve replaces matmul_tflops.fp32; a bf16 figure beside it "still prices
    bf16 training", which the note says, and only where the profile has one."""
    curve = {"matmul": {"1024": 0.04}}
    fp32_only = profile_from_dict(two_core_profile(size_curves=curve))
    both = profile_from_dict(two_core_profile(size_curves=curve, matmul_tflops={"fp32": 0.04, "bf16": 0.4}))
    [note] = [n for n in fp32_only.unused_figures() if n.startswith("matmul_tflops.fp32")]
    assert "still prices" not in note
    [note] = [n for n in both.unused_figures() if n.startswith("matmul_tflops.fp32")]
    assert note.endswith("; matmul_tflops.bf16 still prices bf16 training")


# ---------------------------------------------------------------- workload: a pipeline stage's part of the model


def _tiny_tp2() -> BenchConfig:
    """The tiny preset (2 blocks of width 32, MLP 128, vocabulary 128) on TP 2, one DP rank, 32 tokens per step (one
    pass)."""
    fields = {"group": "t", "name": "tiny_tp2", "optimizer": "adamw", "dp": 1, "tp": 2, "scale": "tiny"}
    return BenchConfig(**fields, preset="tiny", tokens_per_step=32, seq_len=16, profile=False)


def _tp_all_reduces(stages) -> list[tuple[int, ...]]:
    return [s.comm.calls for s in stages if s.comm is not None and s.phase == TP_ALL_REDUCE]


def test_a_stage_all_reduces_for_its_own_layers_embedding_and_head():
    """model_stages over part of the model: per block the attention's and the MLP's output all-reduce forward and their
    inputs' backward, each of [tokens, hidden] = 32 x 32; the embedding's forward all-reduce on the stage holding the
    embedding, the LM head's input gradient backward on the stage holding the head, and the vocab-parallel
    cross-entropy's three [tokens] all-reduces on the head's stage only."""
    cfg = _tiny_tp2()
    model = cfg.model_config()
    activation = (32 * 32,)
    first_fwd, first_bwd = model_stages(cfg, model, "fp32", StagePart(1, embedding=True, head=False))
    assert _tp_all_reduces(first_fwd) == [activation * 3]  # 2 per block + the embedding's
    assert _tp_all_reduces(first_bwd) == [activation * 2]  # 2 per block, no head here
    last_fwd, last_bwd = model_stages(cfg, model, "fp32", StagePart(1, embedding=False, head=True))
    assert _tp_all_reduces(last_fwd) == [activation * 2, (32,) * 3]
    assert _tp_all_reduces(last_bwd) == [activation * 3]  # 2 per block + the LM head's input gradient
    whole_fwd, whole_bwd = model_stages(cfg, model, "fp32")
    assert _tp_all_reduces(whole_fwd) == [activation * 5, (32,) * 3]
    assert _tp_all_reduces(whole_bwd) == [activation * 5]


def test_a_stage_pays_gelu_for_its_own_blocks_and_cross_entropy_only_with_the_head():
    """Forward and backward together: GELU reads fp32 [tokens, ffn / tp] = 32 x 64 per block, 4 x 32 x 64 = 8,192
    bytes for a stage of one block; the cross-entropy reads the head's vocab-parallel logits [tokens, vocab / tp] =
    32 x 64 in fp32, 8,192 bytes, on the last stage only (the first has no logits)."""
    cfg = _tiny_tp2()
    model = cfg.model_config()

    def totals(part: StagePart) -> tuple[float, float, int]:
        forward, backward = model_stages(cfg, model, "fp32", part)
        work = [s.compute for s in forward + backward if s.compute is not None and s.phase in (FORWARD, BACKWARD)]
        return sum(c.gelu_bytes for c in work), sum(c.cross_entropy_bytes for c in work), max(c.logits_elems for c in work)

    assert totals(StagePart(1, embedding=True, head=False)) == (pytest.approx(8192), 0, 0)
    assert totals(StagePart(1, embedding=False, head=True)) == (pytest.approx(8192), pytest.approx(8192), 32 * 64)


@pytest.mark.parametrize("gathered", [False, True])
def test_the_stages_element_wise_traffic_adds_up_to_the_whole_models(gathered):
    """forward_vector_elems_per_token "over part of the model": the embedding counted on the first stage only, the
    final norm and the logits' re-layout on the last only, so the parts of a cut add up to the whole, and a middle
    stage's blocks are the same blocks wherever they sit."""
    model = _tiny_tp2().model_config()
    parts = [StagePart(1, embedding=True, head=False), StagePart(1, embedding=False, head=True)]
    whole = forward_vector_elems_per_token(model, 2, gathered)
    assert sum(forward_vector_elems_per_token(model, 2, gathered, p) for p in parts) == pytest.approx(whole)
    middle = forward_vector_elems_per_token(model, 2, gathered, StagePart(1, embedding=False, head=False))
    assert 2 * middle < whole  # the embedding and the head add to the blocks
    assert forward_vector_elems_per_token(model, 2, gathered, StagePart(2, embedding=False, head=False)) == 2 * middle


def test_in_bf16_the_layers_all_reduce_bf16_and_the_cross_entropys_reductions_stay_fp32():
    """docs/method.md "bf16 workload": the TP all-reduces of activations in bf16 (2 bytes an element), and three
    all-reduces of [tokens] fp32 (4 bytes) for the vocab-parallel cross-entropy."""
    cfg = _tiny_tp2()
    forward, backward = model_stages(cfg, cfg.model_config(), "bf16")
    sizes = [(s.comm.calls, s.comm.element_size) for s in forward + backward if s.comm is not None]
    assert sizes == [((32 * 32,) * 5, 2), ((32,) * 3, 4), ((32 * 32,) * 5, 2)]


def test_a_stages_first_global_rank_counts_whole_dp_by_tp_grids():
    """Workload.first_rank: rank = pp_rank * dp * tp + dp_rank * tp + tp_rank, so stage s's programs start at
    s * dp * tp: with DP 1 x TP 2, stage 1 at rank 2 and stage 3 at rank 6 (not s * dp)."""
    cfg = _tiny_tp2()
    ranks = [Workload(cfg, cfg.model_config(), (), (), (), 0, "fp32", stage=s).first_rank for s in (0, 1, 3)]
    assert ranks == [0, 2, 6]


def test_an_unknown_parameter_dtype_is_refused_by_name():
    """build_workload gathers the updated parameters in param_dtype, one of PRECISIONS: another is refused naming it,
    before any pricing."""
    with pytest.raises(ValueError, match=r"unknown parameter dtype 'fp16'; choose one of fp32, bf16"):
        build_workload(_tiny_tp2(), param_dtype="fp16")
