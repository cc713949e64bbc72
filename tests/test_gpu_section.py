"""What the report and docs/gpu.md say of a GPU profile, from hand-made tables (no GPU needed): Newton-Schulz
against the same model's matmuls and against Gram Newton-Schulz, Muon and AdamW on one device by tokens per
step, the figure of a single-device profile, and the claims that fall back to one device's runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from muon_repro.report.gpu_section import (
    busy_lines,
    kernel_lines,
    one_device_only,
    own_crossings,
    single_device,
    single_device_pairs,
    single_device_rows,
)

PROFILE = "1xGPU-nccl"
REPO = Path(__file__).resolve().parents[1]


def _kernel(kernel: str, shape: str, seconds: float, tflops: float, dtype: str = "bf16") -> dict:
    return {
        "profile": PROFILE,
        "kind": "kernel",
        "kernel": kernel,
        "dtype": dtype,
        "shape": shape,
        "seconds": seconds,
        "tflops": tflops,
    }


def test_newton_schulz_is_set_against_its_models_matmuls_and_the_target_verdict_could_go_either_way():
    cal = pd.DataFrame(
        [
            _kernel("matmul", "369m tp=1: 4 blocks and the LM head, 4096 tokens", 1.0, 800.0),
            _kernel("newton_schulz", "369m [3072,1024]", 1.0, 200.0),
            _kernel("newton_schulz", "369m [1024,1024]", 3.0, 200.0),  # 4 s at 200: 25% of 800
            _kernel("matmul", "7b tp=1: 4 blocks and the LM head, 4096 tokens", 1.0, 600.0),
            _kernel("newton_schulz", "7b [4096,4096]", 1.0, 540.0),  # 90%
            _kernel("newton_schulz", "7b [4096,4096], beside gram_newton_schulz_compiled", 0.006, 500.0),
            _kernel("gram_newton_schulz_compiled", "7b [4096,4096]", 0.004, 750.0),
        ]
    )
    lines = kernel_lines(cal, PROFILE)
    assert any(
        "369M" in line and "25% of the 800 TFLOP/s" in line and "short of the 70% target by 45 points" in line for line in lines
    )
    assert any(
        "LLaMA-7B-shaped" in line and "90% of the 600 TFLOP/s" in line and "meets the 70% target" in line for line in lines
    )
    assert any("ours / theirs = 1.50" in line for line in lines)
    assert kernel_lines(cal, "another-profile") == []


def test_the_variants_are_timed_mode_against_mode_and_the_gram_target_could_go_either_way():
    rows = []
    for suffix, ours_s in (("", 0.001), ("_compiled", 0.003)):  # eager: ours faster; compiled: slower
        for i in range(4):  # the 369m model's four matrices
            shape = f"369m [{i + 1}024,1024]"
            rows += [_kernel(f"ns_{m}{suffix}", shape, ours_s, 100.0) for m in ("quintic", "polar_express", "gram")]
            rows.append(_kernel(f"gram_newton_schulz{suffix}", shape, 0.002, 100.0))
    rows.append(_kernel("newton_schulz", "369m [1024,1024]", 0.01, 100.0))  # the calibration's own: not in these lines
    lines = [line for line in kernel_lines(pd.DataFrame(rows), PROFILE) if line.startswith("Our Newton-Schulz")]
    eager, compiled = lines
    assert "eager" in eager and "quintic 4.00 ms" in eager and "(ours / theirs = 0.50): meets the target" in eager
    assert "compiled" in compiled and "(ours / theirs = 1.50): misses the target" in compiled


def test_muons_gpu_busy_share_is_judged_at_8k_tokens_on_the_369m_model():
    def runs(share: float, preset: str = "large") -> pd.DataFrame:
        return pd.DataFrame(
            {
                "profile": [PROFILE],
                "optimizer": ["muon"],
                "preset": [preset],
                "tokens_per_step": [8192],
                "optimizer_gpu_busy_ms": [10.0 * share],
                "optimizer_gpu_busy_share": [share],
            }
        )

    assert "falls short of the 80% target by 61 points" in busy_lines(runs(0.19), PROFILE)[0]
    assert "meets the 80% target" in busy_lines(runs(0.85), PROFILE)[0]
    assert "target" not in busy_lines(runs(0.19, "small"), PROFILE)[0]  # another model: no target to judge


def _runs() -> pd.DataFrame:
    rows = []
    for tokens, muon_step, adamw_step in ((8192, 200.0, 100.0), (262144, 2100.0, 2000.0)):
        for optimizer, step, opt_ms in (("muon", muon_step, 100.0), ("adamw", adamw_step, 25.0)):
            rows.append(
                {
                    "run": f"{PROFILE}/single_device/{optimizer}_t{tokens}",
                    "profile": PROFILE,
                    "optimizer": optimizer,
                    "dp": 1,
                    "tp": 1,
                    "tokens_per_step": tokens,
                    "timed_step_ms": step,
                    "timed_optimizer_ms": opt_ms,
                }
            )
    return pd.DataFrame(rows)


def test_one_device_rows_give_the_share_and_muons_extra_at_each_tokens_per_step():
    header, rows = single_device_rows(_runs(), PROFILE)
    assert header[0] == "tokens/step" and len(rows) == 2
    assert rows[0] == ["8,192", "200 ms", "100 ms", "100 ms", "25.0 ms", "50%", "+100%"]
    assert rows[1][-2:] == ["4.8%", "+5%"]
    points = single_device_pairs(_runs())
    assert points["optimizer_share"].round(4).tolist() == [0.5, 0.0476]
    # the runs table's share (the claims' estimator, within each step) when it has one, not the ratio of medians
    estimated = single_device_pairs(_runs().assign(optimizer_share=[0.487, 0.25, 0.045, 0.0125]))
    assert estimated["optimizer_share"].tolist() == [0.487, 0.045]


def _own_thresholds(share_at: float | None, extra_at: float | None) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "machine": PROFILE,
            "metric": ["optimizer_share", "muon_extra"],
            "level": [0.011, 0.03],
            "tokens_per_step": [share_at, extra_at],
        }
    )


def test_the_devices_own_crossings_are_checked_against_its_largest_run():
    """At 262k tokens the hand-made runs measure a 4.8% share and a 5% extra: above both levels. A model that puts
    the 3% crossing below 262k is contradicted; one that puts it beyond agrees; the verdict goes either way."""
    contradicted = own_crossings(_runs(), _own_thresholds(600_000, 150_000))
    assert contradicted.startswith("Measured at 262k tokens per step")
    assert "share 4.8%, above 1.1%, as the model says (it puts 1.1% at 600k)" in contradicted
    assert "step 5% longer than AdamW's, above 3%, though the model puts 3% at 150k" in contradicted
    agreed = own_crossings(_runs(), _own_thresholds(600_000, 400_000))
    assert "above 3%, as the model says (it puts 3% at 400k)" in agreed
    faster = _runs().assign(timed_step_ms=[200.0, 100.0, 1900.0, 2000.0])  # Muon 5% faster at 262k
    assert "step 5% shorter than AdamW's, below 3%, as the model says (it puts 3% at 100k)" in own_crossings(
        faster, _own_thresholds(None, 100_000)
    )
    never = own_crossings(faster, _own_thresholds(None, None))
    assert "share 5.3%, above 1.1%, as the model says (it puts 1.1% beyond its grid)" in never
    assert "step 5% shorter than AdamW's, below 3%, though the model puts 3% beyond its grid" in never
    assert own_crossings(_runs(), _own_thresholds(None, None).iloc[0:0]) == ""


def test_a_shipped_profiles_links_with_a_devices_compute_are_named_by_both():
    from muon_repro.costmodel.machine import resolve_profile
    from muon_repro.costmodel.records import measured_compute_profile
    from muon_repro.report.regimes_section import machine_name

    hybrid = measured_compute_profile(resolve_profile("h100-8x-nvlink"), resolve_profile("h100-8x-nvlink"))
    assert machine_name(hybrid.name) == "8x H100 NVLink node links, h100-8x-nvlink's measured compute"
    assert machine_name("h100-8x-nvlink") == "8x H100 NVLink node"


def test_a_single_device_profile_draws_its_own_figure(tmp_path):
    runs = _runs()
    assert one_device_only(runs) and not one_device_only(runs.assign(dp=2))
    model = pd.DataFrame(
        {
            "kind": "this_machine",
            "dp": 1,
            "tp": 1,
            "tokens_per_step": [8192, 1 << 20],
            "optimizer_share": [0.4, 0.01],
            "muon_extra": [0.5, 0.01],
        }
    )
    png = single_device(runs, model, tmp_path / "single_device")
    assert png.is_file() and png.with_suffix(".svg").is_file()
    empty = single_device(runs.iloc[:0], model.iloc[:0], tmp_path / "empty")  # says it has nothing, does not fail
    assert empty.is_file()


def test_the_committed_gpu_runs_give_claims_not_comparable_for_one_rank_and_not_measured_for_communication():
    claims = pd.read_parquet(REPO / "metrics" / "claims.parquet")
    gpu = claims[claims["profile"].str.contains("xH", regex=False)].set_index("claim_id")
    assert not gpu.empty, "the committed tables hold the 1xH200-nccl session's claims"
    for claim in ("optimizer_share", "latency_overhead"):
        assert gpu.loc[claim, "verdict"] == "not comparable here"
        assert "1 rank (no communication), not" in gpu.loc[claim, "outside_conditions"]
    assert gpu.loc["comm_time_dp2_tp2", "verdict"] == "not measured"


def test_the_section_says_from_the_runs_whether_a_gpu_profile_measured_communication():
    from muon_repro.report.gpu_section import devices_line

    runs = pd.DataFrame({"profile": ["one", "one", "four", "four"], "world_size": [1, 1, 1, 4]})
    assert devices_line(runs, "one") == "Every run on one GPU: no NCCL grid, so no communication is measured on this profile."
    assert devices_line(runs, "four").startswith("Runs on 1, 4 GPUs (runs.world_size): their collectives are measured")


def test_the_gpu_docs_block_gives_each_profiles_thresholds_once():
    """docs/gpu.md printed the H200's threshold table twice: the GPU section's, then its own older copy."""
    from muon_repro.report.data import load
    from muon_repro.report.gpu_section import gpu_profiles
    from muon_repro.report.readme import gpu_block

    data = load(REPO / "metrics")
    block = gpu_block(data)
    assert block.count("Where the claimed overheads hold with this device's compute") == len(gpu_profiles(data)) >= 1


def test_a_level_inside_the_claims_interval_is_neither_crossed_nor_not():
    """The device's overheads are the claims table's, with their intervals: on 2 rounds a 4.8% share whose interval
    holds 1.1% says nothing of the model's crossing; an interval wholly above says 'above' as before."""
    muon_run = f"{PROFILE}/single_device/muon_t262144"

    def claims(low: float, high: float) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "profile": PROFILE,
                "claim_id": ["optimizer_share", "latency_overhead"],
                "conditions": [f"{muon_run} (nccl on cuda, 1 rank)", f"{muon_run} (nccl on cuda); adamw"],
                "unit_kind": ["fraction", "change"],
                "rounds": 2,
                "measured_value": [0.048, 0.05],
                "measured_low": [low, low],
                "measured_high": [high, high],
            }
        )

    runs = _runs()
    assert muon_run in set(runs["run"])
    straddles = own_crossings(runs, _own_thresholds(600_000, 150_000), claims(0.0, 0.19))
    said = "share 4.8% (0.0–19.0%, cut at 0), an interval that holds 1.1%: neither"
    assert said in straddles
    assert "though the model" not in straddles
    above = own_crossings(runs, _own_thresholds(600_000, 150_000), claims(0.04, 0.06))
    assert "share 4.8% (4.0–6.0%), above 1.1%, as the model says" in above
    assert "step over AdamW's +5.0% (+4.0% to +6.0%), above 3%, though the model puts 3% at 150k" in above


def test_a_rate_is_the_rows_flops_over_their_time_and_the_target_is_met_from_70_percent_on():
    """Two Newton-Schulz shapes, 1 s at 100 and 3 s at 300 TFLOP/s, run at 250 TFLOP/s together (not the mean of the
    rates, 200); against a 1000 TFLOP/s matmul that is 25%. At exactly 70% the target is met; at 65% it is 5 points
    short."""

    def lines(ns_tflops: tuple[float, float], mm_tflops: float) -> list[str]:
        cal = pd.DataFrame(
            [
                _kernel("matmul", "369m tp=1: 4 blocks and the LM head, 4096 tokens", 1.0, mm_tflops),
                _kernel("newton_schulz", "369m [3072,1024]", 1.0, ns_tflops[0]),
                _kernel("newton_schulz", "369m [1024,1024]", 3.0, ns_tflops[1]),
            ]
        )
        return kernel_lines(cal, PROFILE)

    (line,) = lines((100.0, 300.0), 1000.0)
    assert "bf16 Newton-Schulz runs at 250 TFLOP/s, 25% of the 1000 TFLOP/s" in line
    assert "meets the 70% target" in lines((350.0, 350.0), 500.0)[0]
    assert "short of the 70% target by 5 points" in lines((325.0, 325.0), 500.0)[0]


def test_a_variant_timed_on_fewer_than_a_models_four_matrices_is_not_summed():
    rows = [_kernel("ns_quintic", f"369m [{i + 1}024,1024]", 0.001, 100.0) for i in range(4)]
    rows += [_kernel("ns_gram", f"369m [{i + 1}024,1024]", 0.001, 100.0) for i in range(3)]  # one shape missing
    (line,) = [line for line in kernel_lines(pd.DataFrame(rows), PROFILE) if line.startswith("Our Newton-Schulz")]
    assert "quintic 4.00 ms" in line and "gram" not in line.split(":", 1)[1]


def test_a_tensor_parallel_run_is_not_a_single_device_pair():
    runs = pd.concat([_runs(), _runs().assign(tp=2, tokens_per_step=16384, run=lambda d: d["run"] + "_tp2")])
    assert single_device_pairs(runs)["tokens_per_step"].tolist() == [8192, 262144]


def test_the_device_predictions_are_its_own_profiles_prices():
    from muon_repro.report.gpu_section import prediction_rows

    predictions = pd.DataFrame(
        {
            "profile": [PROFILE],
            "run": [f"{PROFILE}/single_device/muon_t8192"],
            "measured_step_ms": [200.0],
            "predicted_step_ms": [300.0],  # the shipped profile's price
            "profile_predicted_step_ms": [180.0],  # this device's calibration's
            "profile_step_rel_error": [-0.1],
            "measured_optimizer_ms": [100.0],
            "profile_predicted_optimizer_ms": [90.0],
            "profile_optimizer_rel_error": [-0.1],
        }
    )
    _, (row,) = prediction_rows(predictions, PROFILE)
    assert row == ["muon_t8192", "200 ms", "180 ms", "-10%", "100 ms", "90.0 ms", "-10%"]


def test_the_busy_line_gives_the_host_span_and_judges_the_target_at_8k_tokens_only():
    runs = pd.DataFrame(
        {
            "profile": PROFILE,
            "optimizer": "muon",
            "preset": "large",
            "tokens_per_step": [8192, 16384],
            "optimizer_gpu_busy_ms": [1.9, 5.0],
            "optimizer_gpu_busy_share": [0.19, 0.5],
        }
    )
    (line,) = busy_lines(runs, PROFILE)
    assert "8.19k tokens 1.9 ms busy (19% of its 10.0 ms); 16.4k tokens 5.0 ms busy (50% of its 10.0 ms)" in line
    assert line.endswith("it falls short of the 80% target by 61 points.")
    assert "target" not in busy_lines(runs.iloc[1:], PROFILE)[0]  # 16k tokens: not the target's setting


def test_the_thresholds_trust_the_worst_error_by_size_and_note_pricing_beyond_calibration_only_for_every_run():
    from muon_repro.report.gpu_section import thresholds_intro

    predictions = pd.DataFrame(
        {
            "profile": PROFILE,
            "profile_step_rel_error": [-0.4, 0.1, 0.2],
            "within_calibration": [False, False, True],
            "beyond_calibration": "tokens per pass beyond 4,096",
        }
    )
    empty = _own_thresholds(None, None).iloc[0:0]
    said = thresholds_intro(predictions, _runs(), empty, PROFILE)
    assert "median |error| 20%, worst 40%." in said  # not the largest signed error, 20%
    beyond = thresholds_intro(predictions.assign(within_calibration=False), _runs(), empty, PROFILE)
    assert "every run priced beyond what the calibration measured (beyond_calibration: tokens per pass beyond 4,096)" in beyond


def test_a_level_at_an_intervals_low_end_or_a_crossing_at_the_largest_run_counts_as_reached():
    """An interval from exactly 1.1% up holds the level (neither side); a model crossing at 262k, the largest run's
    tokens, is a crossing the runs reached: a share above the level there contradicts it."""
    muon_run = f"{PROFILE}/single_device/muon_t262144"
    claims = pd.DataFrame(
        {
            "profile": PROFILE,
            "claim_id": ["optimizer_share"],
            "conditions": [f"{muon_run} (nccl on cuda, 1 rank)"],
            "unit_kind": ["fraction"],
            "rounds": 2,
            "measured_value": [0.048],
            "measured_low": [0.011],
            "measured_high": [0.09],
        }
    )
    touching = own_crossings(_runs(), _own_thresholds(600_000, None), claims)
    assert "an interval that holds 1.1%: neither below nor above it" in touching
    at_largest = own_crossings(_runs(), _own_thresholds(262_144, None))
    assert "share 4.8%, above 1.1%, though the model puts 1.1% at 262k" in at_largest
