"""The calibrated cost model: machine profiles, the run-shape flags, the alpha-beta fit, predict's inputs
against what recorded runs say, the waits across ranks, calibrate and validate end to end."""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support.costmodel_profiles import two_core_profile, write_profile_json

from muon_repro.bench.configs import CONFIGS, BenchConfig, from_dict, resolve
from muon_repro.bench.custom import add_run_shape_arguments, config_from_args
from muon_repro.cli import main
from muon_repro.costmodel.calibrate import JITTER_COMPUTE_S
from muon_repro.costmodel.collective_fit import fit_alpha_beta
from muon_repro.costmodel.machine import named_profiles, profile_from_dict, read_profile, resolve_profile, write_profile
from muon_repro.costmodel.machine_profile import COLLECTIVE_OPS, MachineProfile, ProfileError
from muon_repro.costmodel.predict import predict, processor_sharing
from muon_repro.costmodel.validate import bench_config, format_validation, measured, run_folders, run_probes, validate
from muon_repro.costmodel.workload import build_workload
from muon_repro.costmodel.world_bench import arrival_jitter, compute_share
from muon_repro.phases import DP_ALL_GATHER, DP_REDUCE_SCATTER, OPTIMIZER_COMM_PHASES, TP_ALL_GATHER, TP_ALL_REDUCE
from muon_repro.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "traces"


# ---------------------------------------------------------------- machine profiles


def test_a_hand_written_profile_loads_and_round_trips(tmp_path):
    profile = read_profile(write_profile_json(tmp_path, two_core_profile()))
    assert profile.compute_share == {2: 1.0, 4: 0.5} and profile.compute_cores(4) == 2.0
    assert profile.matmul_flops_per_s("fp32") == pytest.approx(4e10)
    again = read_profile(write_profile(profile, tmp_path / "copy.json"))
    assert again == profile


def test_an_unmeasured_rank_count_gets_the_cores_of_the_nearest_measured_count_below():
    """compute_share {2: 1.0, 4: 0.5}: 2 ranks' worth of cores. 3 ranks take the 2-rank figure (1.0 x 2 ranks = 2
    cores, not 1.0 x 3), 8 ranks the 4-rank one (0.5 x 4 = 2 cores, not 0.5 x 8): the cores do not grow with the ranks."""
    profile = profile_from_dict(two_core_profile())
    assert profile.compute_cores(3) == 2.0 and profile.compute_cores(8) == 2.0
    assert profile.shares_cores(3) and profile.shares_cores(8)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"matmul_tflop": {"fp32": 1.0}}, "unknown field(s) matmul_tflop"),
        ({"elementwise_gbps": None}, "missing figure(s) elementwise_gbps"),
        ({"collectives": [{"op": "all_gather", "alpha_us": 1.0}]}, "missing figure(s) collectives[0].beta_gbps"),
        (
            {"collectives": [{"op": "all_gather", "alpha_us": 1.0, "beta_gbps": 1.0, "latency": 2}]},
            "unknown field(s) collectives[0].latency",
        ),
        ({"collectives": [{"op": "broadcast", "alpha_us": 1.0, "beta_gbps": 1.0}]}, "collectives[0]: op must be one of"),
        ({"matmul_tflops": {"fp32": -1.0}}, "matmul_tflops.fp32 must be a number in [0.0001, 10000] TFLOP/s"),
        ({"matmul_tflops": {"fp16": 1.0}}, "matmul_tflops dtype must be one of fp32, bf16"),
        ({"efficiency": {"matmul": 1.5}}, "efficiency.matmul must be a number in [0.01, 1]"),
        ({"efficiency": {"network": 0.5}}, "efficiency: unknown kind 'network'"),
        ({"compute_share": {"four": 0.5}}, "compute_share key 'four'"),
        ({"sources": [{"figure": "matmul_tflops.fp32", "url": "https://example.org"}]}, "missing figure(s) sources[0].quote"),
        ({"size_curves": {"softmax": {"1024": 1.0}}}, "size_curves: unknown kind 'softmax'"),
        ({"size_curves": {"gelu": {"many": 1.0}}}, "size_curves.gelu key 'many'"),
        ({"size_curves": {"gelu": {"1024": 0}}}, "size_curves.gelu[1024] must be a number in [0.001, 100000] GB/s"),
        ({"bandwidth_share": {"4": 1.5}}, "bandwidth_share[4] must be a number in [0.001, 1]"),
        ({"arrival_jitter_curve_us": {"2": {"4000": -1.0}}}, "arrival_jitter_curve_us[2][4000] must be a number in [0, 1e+06]"),
        (
            {"collectives": [{"op": "all_gather", "alpha_us": 1.0, "beta_gbps": 1.0, "samples": [[1024]]}]},
            "collectives[0].samples must be a list of",
        ),
        (
            {"collectives": [{"op": "all_gather", "alpha_us": 1.0, "beta_gbps": 1.0, "samples": [[1024, 0.0]]}]},
            "samples[0] seconds must be a number in [1e-09, 1000] s",
        ),
    ],
)
def test_a_bad_profile_names_the_file_and_the_field(tmp_path, change, named):
    path = write_profile_json(tmp_path, two_core_profile(**change))
    with pytest.raises(ProfileError) as err:
        read_profile(path)
    assert str(path) in str(err.value) and named in str(err.value)


def test_profiles_are_validated_when_built_in_code():
    with pytest.raises(ProfileError, match=r"elementwise_gbps must be a number in \[0.001, 100000\] GB/s"):
        profile_from_dict(two_core_profile(elementwise_gbps=0))
    with pytest.raises(ProfileError, match="collectives must list at least one fit"):
        MachineProfile(**{**profile_from_dict(two_core_profile()).__dict__, "collectives": ()})


def test_the_shipped_profiles_load_with_their_sources():
    assert set(named_profiles()) == {"4xRTXA4000-pcie-nccl", "h100-8x-nvlink", "h100-multinode-ib400"}
    for name in named_profiles():
        profile = resolve_profile(name)
        assert profile.device == "cuda" and profile.ranks_per_node
        assert profile.sources and all(s.url.startswith("https://") and s.quote for s in profile.sources)
        assert 0 < profile.eff("matmul") < 1 and profile.notes  # peaks are discounted, and the assumptions said
    multinode = resolve_profile("h100-multinode-ib400")
    assert multinode.collective("all_reduce", 16, "inter_node").beta_gbps < multinode.collective("all_reduce", 8).beta_gbps
    with pytest.raises(ProfileError, match="shipped profiles: .*h100-8x-nvlink"):
        resolve_profile("h100-9x")
    for old in ("seed-4x-pcie4-x4", "wei-4x-pcie4-x4"):  # the study machine's names before it was named by its cards
        assert resolve_profile(old).name == "4xRTXA4000-pcie-nccl"


def test_the_profiles_collectives_are_the_comm_modules():
    from muon_repro.parallel.comm import OPS

    assert COLLECTIVE_OPS == OPS


def test_a_group_size_without_its_own_fit_takes_the_nearest_in_ratio():
    """Fits for groups of 2 and 4: a group of 3 is 1 rank from both, but 4/3 is nearer than 3/2 in ratio (the ring's
    steps grow with the log of the size), so it takes the 4-rank fit; a group of 16 takes it too, of 1 the 2-rank one."""
    fits = [{"op": "all_gather", "alpha_us": 100.0 * g, "beta_gbps": 0.5, "group_size": g} for g in (2, 4)]
    profile = profile_from_dict(two_core_profile(collectives=fits))
    assert [profile.collective("all_gather", g).group_size for g in (1, 3, 16)] == [2, 4, 4]


# ---------------------------------------------------------------- calibrate's pieces


def test_the_alpha_beta_fit_recovers_known_latency_and_bandwidth():
    alpha, beta = 80e-6, 2.5e9
    sizes = [16_384 * 4**k for k in range(6)]
    exact = fit_alpha_beta(sizes, [alpha + b / beta for b in sizes])
    assert exact.alpha_s == pytest.approx(alpha, rel=1e-6) and exact.beta_bytes_per_s == pytest.approx(beta, rel=1e-6)
    assert exact.rel_rmse < 1e-9
    noisy = fit_alpha_beta(sizes, [(alpha + b / beta) * (1.03 if k % 2 else 0.97) for k, b in enumerate(sizes)])
    assert noisy.alpha_s == pytest.approx(alpha, rel=0.15) and noisy.beta_bytes_per_s == pytest.approx(beta, rel=0.1)
    through_zero = fit_alpha_beta([1e6, 2e6, 4e6], [0.9e-3, 2.0e-3, 4.1e-3])  # would fit a negative latency
    assert through_zero.alpha_s == 0.0 and through_zero.beta_bytes_per_s == pytest.approx(1e9, rel=0.05)
    with pytest.raises(ValueError, match="do not grow with the bytes"):
        fit_alpha_beta([1e6, 2e6], [2e-3, 1e-3])


def test_the_compute_share_is_what_each_rank_keeps_when_all_compute():
    # 4 ranks on 2 cores: each window the four together reach twice one rank alone.
    rates = [[10.0, 9.0, 10.0], [10.0, 11.0, 10.0], [10.0, 10.0, 10.0], [10.0, 10.0, 10.0]]
    assert compute_share(rates, reference=20.0) == pytest.approx(0.5)
    assert compute_share([[20.0], [20.0]], reference=19.0) == 1.0  # never more than one rank alone


def test_the_arrival_jitter_is_the_mean_wait_for_a_groups_last_rank():
    # 4 ranks in groups of 2, after short then long compute: (0, 1) meet twice, rank 1 late by 2 ms
    # then rank 0 by 4 ms after the short compute, 10 ms apart after the long one; (2, 3) in step.
    arrivals = [
        {2: [[0.000, 0.014], [0.0]]},
        {2: [[0.002, 0.010], [0.010]]},
        {2: [[0.0, 0.01], [0.0]]},
        {2: [[0.0, 0.01], [0.0]]},
    ]
    assert arrival_jitter(arrivals) == {2: pytest.approx([(0.002 + 0.004) / 8, 0.010 / 4])}


def test_the_arrival_jitter_follows_the_compute_between_meetings():
    profile = profile_from_dict(
        two_core_profile(arrival_jitter_us={"2": 500.0}, arrival_jitter_curve_us={"2": {"4000": 500.0, "80000": 4500.0}})
    )
    assert profile.arrival_jitter_s(2, 0.042) == pytest.approx(2.5e-3)  # linear between the measured lengths
    assert profile.arrival_jitter_s(2, 1.0) == pytest.approx(4.5e-3)  # time slices bound the drift: no extrapolation
    assert (
        profile.arrival_jitter_s(4, 0.001) == pytest.approx(0.5e-3) == profile.arrival_jitter_s(2)
    )  # nearest size; flat figure without compute


def test_a_group_drifts_apart_with_the_compute_since_it_last_met_not_since_its_ranks_met_others():
    """At DP2·TP2 the TP all-reduces keep each TP pair in step, not the DP pairs: the optimizer's first DP
    collective waits for the drift that the whole forward and backward let the DP pair build up."""
    per_compute = 0.1  # a late arrival of 0.1 s per second of compute (alone) since the group last met
    profile = profile_from_dict(two_core_profile(arrival_jitter_curve_us={"2": {"1000": 100.0, "10000000": 1e6}}))
    base = resolve("comparison/adamw_dp2_tp2", "cpu")
    small, large = (predict(replace(base, tokens_per_step=t), profile).ranks[0] for t in (1024, 4096))
    rs_growth = large.phases[DP_REDUCE_SCATTER] - small.phases[DP_REDUCE_SCATTER]  # the same bytes: only the wait grows
    alone_growth = 0.5 * (large.compute_ms - small.compute_ms)  # 4 ranks on 2 cores (compute_share 0.5)
    assert rs_growth == pytest.approx(per_compute * alone_growth, rel=0.02)


def test_profiles_without_the_measured_curves_price_at_their_flat_figures():
    """Hand-written (GPU) profiles give one figure per kind: sizes, bandwidth share and samples are optional."""
    flat = profile_from_dict(two_core_profile())
    assert flat.elementwise_bytes_per_s(1 << 22) == flat.elementwise_bytes_per_s() == pytest.approx(20e9)
    assert flat.cross_entropy_bytes_per_s(1 << 22) == pytest.approx(20e9 / 8)
    assert flat.collective("all_gather", 2).seconds(5e5) == pytest.approx(300e-6 + 1e-3)
    for name in named_profiles():
        gpu = resolve_profile(name)
        assert not gpu.size_curves and not gpu.bandwidth_share


def test_size_curves_price_a_kernel_at_its_operands_size():
    curves = {"elementwise": {"1000": 100.0, "100000": 10.0}, "cross_entropy": {"1000": 2.0}}
    profile = profile_from_dict(two_core_profile(size_curves=curves))
    assert profile.elementwise_bytes_per_s(10_000) == pytest.approx(10**1.5 * 1e9)  # log-log between the points
    assert profile.elementwise_bytes_per_s(10) == pytest.approx(100e9) and profile.elementwise_bytes_per_s(
        10**7
    ) == pytest.approx(10e9)
    assert profile.elementwise_bytes_per_s() == pytest.approx(20e9)  # the optimizer's flat buffers: the flat figure
    assert profile.cross_entropy_bytes_per_s(5) == pytest.approx(2e9)
    assert profile.gelu_bytes_per_s(5) == pytest.approx(
        100e9 / 5
    )  # no GELU figure: the element-wise one, at its size, over 5 passes
    cfg = resolve("comparison/adamw_dp2_tp2", "cpu")
    assert predict(cfg, profile).step_ms > predict(cfg, profile_from_dict(two_core_profile())).step_ms  # slower out of cache


def test_collective_samples_price_a_call_from_the_samples_around_it():
    samples = [[1e6, 2e-3], [4e6, 5e-3], [16e6, 29e-3]]
    fit = profile_from_dict(
        two_core_profile(
            collectives=[{"op": op, "alpha_us": 300.0, "beta_gbps": 0.5, "samples": samples} for op in COLLECTIVE_OPS]
        )
    )
    ag = fit.collective("all_gather", 2)
    assert ag.seconds(2.5e6) == pytest.approx(3.5e-3) and ag.seconds(10e6) == pytest.approx(17e-3)
    assert ag.seconds(28e6) == pytest.approx(53e-3)  # beyond the largest: along the last two samples' slope
    assert ag.seconds(10.0) == pytest.approx(2e-3)  # below the smallest: its time


def test_two_collective_samples_are_enough_to_price_between_them():
    """A fit with exactly two samples prices a call from them (numpy.interp between), not from alpha and beta (which
    would say 300 us + 2.5 MB / 0.5 GB/s = 5.3 ms at 2.5 MB)."""
    samples = [[1e6, 2e-3], [4e6, 5e-3]]
    fits = [{"op": "all_gather", "alpha_us": 300.0, "beta_gbps": 0.5, "samples": samples}]
    fit = profile_from_dict(two_core_profile(collectives=fits)).collective("all_gather", 2)
    for nbytes in (1.5e6, 2.5e6, 3.9e6):
        assert fit.seconds(nbytes) == pytest.approx(float(np.interp(nbytes, [1e6, 4e6], [2e-3, 5e-3])))


def test_memory_bound_kernels_share_the_cores_as_matmuls_do_not_the_stream_loops_bandwidth():
    """The stream loop's bandwidth share is recorded, not applied: in-step kernels lose what the cores'
    sharing takes, which the compute share already prices (docs/method.md#cost-model)."""
    cfg = resolve("comparison/adamw_dp2_tp2", "cpu")
    plain = predict(cfg, profile_from_dict(two_core_profile()))
    assert predict(cfg, profile_from_dict(two_core_profile(bandwidth_share={"4": 0.25}))).step_ms == pytest.approx(plain.step_ms)
    assert predict(cfg, profile_from_dict(two_core_profile(compute_share={"2": 1.0, "4": 0.25}))).step_ms > plain.step_ms


def test_ranks_sharing_cores_meet_out_of_step_at_every_layer_not_every_bucket():
    """adamw_dp2_tp2 meets its TP group at 9 all-reduces each way and at the cross-entropy's reductions
    (back to back after the logits: one meeting), its DP group at one reduce-scatter and one all-gather:
    21 jitters in the step."""
    cfg = resolve("comparison/adamw_dp2_tp2", "cpu")
    steady = predict(cfg, profile_from_dict(two_core_profile())).step_ms
    jittery = predict(cfg, profile_from_dict(two_core_profile(arrival_jitter_us={"2": 1000.0}))).step_ms
    assert jittery - steady == pytest.approx(21.0)
    own_cores = two_core_profile(arrival_jitter_us={"2": 1000.0}, compute_share={"4": 1.0})
    assert predict(cfg, profile_from_dict(own_cores)).step_ms == pytest.approx(
        predict(cfg, profile_from_dict(two_core_profile(compute_share={"4": 1.0}))).step_ms
    )


def test_processor_sharing_gives_an_early_finisher_core_to_the_others():
    assert processor_sharing([0.0, 0.0], [1.0, 2.0], cores=1) == pytest.approx([2.0, 3.0])
    assert processor_sharing([0.0, 0.0], [1.0, 2.0], cores=2) == pytest.approx([1.0, 2.0])
    # 4 jobs on 2 cores: half speed until the shortest ends, then 2/3, then full speed.
    ends = processor_sharing([0.0] * 4, [1.0, 2.0, 2.0, 3.0], cores=2)
    assert ends == pytest.approx([2.0, 3.5, 3.5, 4.5])
    assert processor_sharing([0.0, 5.0], [1.0, 1.0], cores=1) == pytest.approx([1.0, 6.0])


# ---------------------------------------------------------------- run shapes from flags


def shape_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_run_shape_arguments(parser)
    return parser.parse_args(list(argv))


def test_run_shape_flags_give_a_named_validated_config():
    cfg = config_from_args(
        shape_args(
            "--optimizer", "muon", "--dp", "2", "--tp", "2", "--preset", "small", "--tokens-per-step", "1024", "--seq-len", "128"
        )
    )
    assert (cfg.group, cfg.name, cfg.world_size, cfg.batch_per_dp) == ("custom", "muon_dp2_tp2_small_t1024_s128_contiguous", 4, 4)
    assert cfg.model_config() == resolve("comparison/muon_dp2_tp2").model_config()
    custom = config_from_args(
        shape_args(
            "--optimizer",
            "adamw",
            "--dp",
            "4",
            "--tp",
            "1",
            "--hidden",
            "512",
            "--layers",
            "6",
            "--heads",
            "8",
            "--tokens-per-step",
            "2048",
            "--seq-len",
            "256",
            "--layout",
            "bucketed",
        )
    )
    model = custom.model_config()
    assert (model.hidden, model.n_layers, model.n_heads, model.ffn_hidden, model.max_seq_len) == (512, 6, 8, 2048, 256)
    assert custom.name == "adamw_dp4_tp1_small-h512l6a8f2048_t2048_s256_bucketed" and custom.bucket_elems == 1_000_000
    assert from_dict(custom.to_dict()) == custom  # config.json round trip, overrides included


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            ["--dp", "2", "--tp", "2", "--preset", "small", "--tokens-per-step", "1000", "--seq-len", "128"],
            "tokens_per_step=1000 does not divide into dp=2",
        ),
        (
            ["--dp", "2", "--tp", "2", "--hidden", "256", "--tokens-per-step", "1024", "--seq-len", "128"],
            "--layers, --heads are missing",
        ),
        (
            ["--dp", "1", "--tp", "3", "--preset", "small", "--tokens-per-step", "1024", "--seq-len", "128"],
            "hidden=256 is not divisible by tp=3",
        ),
        (
            ["--dp", "2", "--tp", "2", "--preset", "small", "--heads", "6", "--tokens-per-step", "1024", "--seq-len", "128"],
            "not divisible by n_heads=6",
        ),
        (["--dp", "2", "--tp", "2", "--preset", "small", "--tokens-per-step", "1024"], "needs --seq-len"),
    ],
)
def test_predict_reports_a_bad_run_shape_as_its_error(capsys, argv, named):
    code = main(["predict", "--machine", "h100-8x-nvlink", "--optimizer", "muon", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("muon-repro predict: error: ") and named in err, err


def test_named_configs_train_the_same_model_as_before():
    from muon_repro.model_config import GPTConfig

    for key in CONFIGS:
        cfg = resolve(key, "cpu")
        preset = GPTConfig.preset(cfg.preset)
        assert cfg.model_config() == GPTConfig.preset(
            cfg.preset, qkv=cfg.qkv, seed=cfg.seed, max_seq_len=max(cfg.seq_len, preset.max_seq_len)
        )
        assert not any(name in cfg.to_dict() for name in ("hidden", "n_layers", "n_heads", "ffn_hidden", "vocab_size"))


def test_a_shape_override_needs_sizes_tp_divides():
    with pytest.raises(ValueError, match="ffn_hidden=1002 is not divisible by tp=4"):
        BenchConfig(
            group="g", name="n", optimizer="muon", dp=1, tp=4, preset="small", ffn_hidden=1002, tokens_per_step=128, seq_len=128
        )


# ---------------------------------------------------------------- predict's inputs against recorded runs


@functools.cache
def committed_runs() -> dict[str, list[Path]]:
    """The committed trial folders by run key, found once (a walk of traces/ that reads every config file)."""
    return run_folders(TRACES)


def committed_run_key(run: str) -> str:
    """The committed run id ``<profile>/<group>/<name>`` of ``<group>/<name>`` (one profile is committed)."""
    (key,) = [k for k in committed_runs() if k.split("/", 1)[1] == run]
    return key


@pytest.mark.parametrize("run", sorted(committed_runs()))
def test_predict_inputs_equal_what_each_committed_run_recorded(run):
    folder = committed_runs()[run][0]
    ranks = RunDir(folder).ranks
    work = build_workload(bench_config(RunDir(folder)), "cpu")
    assert list(work.ns_flops) == [r.ns_flops for r in ranks]
    assert [dict(b) for b in work.analytic_bytes] == [r.analytic_bytes for r in ranks]
    assert work.train_flops == ranks[0].train_flops


def stage_bytes(work, rank: int) -> dict[str, int]:
    """Ring bytes of every collective in a rank's program, by phase."""
    from muon_repro.formulas import ring_bytes

    sizes = {"tp": work.cfg.tp, "dp": work.cfg.dp}
    out: dict[str, int] = {}
    for stage in work.programs[rank]:
        if stage.comm is not None and stage.comm.mode != "finish":
            n = sizes[stage.comm.group]
            out[stage.phase] = out.get(stage.phase, 0) + sum(
                ring_bytes(stage.comm.op, e, stage.comm.element_size, n) for e in stage.comm.calls
            )
    return out


def _ledger_bytes(metrics) -> dict[str, int]:
    """Bytes a rank's ledger recorded in its first recorded step, by phase."""
    ledger: dict[str, int] = {}
    for record in metrics.ledger:
        if record["step"] == 0:
            ledger[record["phase"]] = ledger.get(record["phase"], 0) + record["bytes"]
    return ledger


@pytest.mark.parametrize("run", ["comparison/muon_dp2_tp2", "layout_ablation/muon_dp2_tp2_bucketed", "distributed_muon/muon_tp4"])
def test_the_priced_collectives_are_the_ledgers(run):
    """Every collective a rank's program prices (model TP traffic included) sends what the run's ledger recorded."""
    folder = committed_runs()[committed_run_key(run)][0]
    cfg = bench_config(RunDir(folder))
    work = build_workload(cfg, "cpu")
    for r, metrics in enumerate(RunDir(folder).ranks):
        ledger = _ledger_bytes(metrics)
        priced = {phase: b for phase, b in stage_bytes(work, r).items() if b}
        assert priced == ledger, (r, priced, ledger)
        assert {p: priced.get(p, 0) for p in OPTIMIZER_COMM_PHASES} == metrics.analytic_bytes
        assert priced[TP_ALL_REDUCE] and (TP_ALL_GATHER in priced) == (cfg.cross_entropy == "gathered")


@pytest.mark.parametrize("overlap", ["none", "naive_async", "pipelined"])
def test_every_overlap_prices_the_same_bytes_and_pipelining_hides_some(overlap):
    base = replace(resolve("layout_ablation/muon_dp2_tp2_bucketed", "cpu"), bucket_elems=200_000)  # several units to pipeline
    cfg = replace(base, overlap=overlap)
    work, reference = build_workload(cfg), build_workload(base)
    assert [stage_bytes(work, r) for r in range(4)] == [stage_bytes(reference, r) for r in range(4)]
    machine = profile_from_dict(two_core_profile(compute_share=None))
    step, blocking = predict(cfg, machine).step_ms, predict(base, machine).step_ms
    assert step < blocking if overlap == "pipelined" else step == pytest.approx(blocking)


def test_the_largest_newton_schulz_share_sets_the_pace():
    """muon_dp4 (contiguous): DP ranks orthogonalize different matrices; each waits, at the next DP
    collective, for the rank with the most Newton-Schulz work."""
    cfg = resolve("distributed_muon/muon_dp4", "cpu")
    machine = profile_from_dict(two_core_profile(compute_share=None, op_overhead_us=0.0))
    p = predict(cfg, machine)
    ns = p.workload.ns_flops
    busiest, idlest = ns.index(max(ns)), ns.index(min(ns))
    waits = [r.wait_ms for r in p.ranks]
    assert waits[busiest] == pytest.approx(min(waits), abs=1.0) and waits[idlest] == max(waits)
    ns_ms = [r.phases["newton_schulz"] for r in p.ranks]
    assert waits[idlest] - waits[busiest] == pytest.approx(ns_ms[busiest] - ns_ms[idlest], rel=0.1)
    assert len({round(r.step_ms, 6) for r in p.ranks}) == 1  # the parameter all-gather ends together


def test_ranks_sharing_cores_take_longer_than_ranks_with_their_own():
    cfg = resolve("comparison/muon_dp2_tp2", "cpu")
    shared = predict(cfg, profile_from_dict(two_core_profile())).step_ms
    alone = predict(cfg, profile_from_dict(two_core_profile(compute_share=None))).step_ms
    assert 1.5 < shared / alone < 2.0  # compute at half speed, communication not


def two_nodes(inter_alpha_us: float = 300.0, **changes) -> MachineProfile:
    """The 2-core profile as two nodes of 2 ranks each (a DP2·TP2 run's DP pairs span them), with an inter-node fit
    of every collective (latency ``inter_alpha_us``) beside the intra-node one."""
    fits = [
        {"op": op, "alpha_us": inter_alpha_us if scope == "inter_node" else 300.0, "beta_gbps": 0.5, "scope": scope}
        for op in COLLECTIVE_OPS
        for scope in ("intra_node", "inter_node")
    ]
    return profile_from_dict(two_core_profile(ranks_per_node=2, collectives=fits, **changes))


def test_a_group_whose_ranks_sit_on_two_nodes_is_priced_on_the_inter_node_link():
    """DP2·TP2 on two nodes of 2 ranks: the TP pairs (0, 1) and (2, 3) are inside a node, the DP pairs (0, 2) and
    (1, 3) span both. Adding 10 ms to the inter-node latency adds 10 ms per DP call to the step, nothing to TP."""
    cfg = resolve("comparison/adamw_dp2_tp2", "cpu")
    near, far = (predict(cfg, two_nodes(alpha), profiled=False) for alpha in (300.0, 10_300.0))
    dp_calls = sum(len(s.comm.calls) for s in far.workload.programs[0] if s.comm is not None and s.comm.group == "dp")
    assert dp_calls >= 2  # the gradients' reduce-scatter and the parameters' all-gather
    assert far.step_ms - near.step_ms == pytest.approx(10.0 * dp_calls)
    assert far.ranks[0].phases[TP_ALL_REDUCE] == pytest.approx(near.ranks[0].phases[TP_ALL_REDUCE])


def test_ranks_on_two_nodes_share_only_their_own_nodes_cores():
    """4 ranks on two nodes of 2 compute 2 at a time per node: the compute share of 4 ranks on one node (0.25) is
    never read, so the step is the one priced with the 2-rank share alone (each pair keeps its 2 cores)."""
    cfg = resolve("comparison/adamw_dp2_tp2", "cpu")
    measured_four = predict(cfg, two_nodes(compute_share={"2": 1.0, "4": 0.25}), profiled=False)
    pairs_only = predict(cfg, two_nodes(compute_share={"2": 1.0}), profiled=False)
    assert measured_four.step_ms == pytest.approx(pairs_only.step_ms)
    assert measured_four.ranks[0].compute_ms == pytest.approx(pairs_only.ranks[0].compute_ms)


def test_predict_json_holds_the_totals_and_every_ranks_parts(capsys):
    code = main(
        [
            "predict",
            "--machine",
            "h100-multinode-ib400",
            "--optimizer",
            "muon",
            "--dp",
            "4",
            "--tp",
            "4",
            "--preset",
            "large",
            "--tokens-per-step",
            "16384",
            "--seq-len",
            "1024",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["machine"] == "h100-multinode-ib400" and out["inputs"]["ns_dtype"] == "bf16"
    assert out["step_ms"] >= max(r["forward_ms"] + r["backward_ms"] for r in out["ranks"]) > 0
    assert {"step_ms", "optimizer_ms", "comm_ms", "comm_wait_ms", "comm_transfer_ms"} <= set(out)
    assert len(out["ranks"]) == 16
    for rank in out["ranks"]:
        assert rank["forward_ms"] + rank["backward_ms"] + rank["optimizer_ms"] == pytest.approx(rank["step_ms"])
        assert {"dp_reduce_scatter", "dp_gather", "tp_gather", "newton_schulz", "update", "dp_all_gather"} <= set(
            rank["phases_ms"]
        )


@pytest.mark.slow  # end to end: prices every committed run (~4 s)
def test_validate_writes_one_prediction_per_committed_run(tmp_path, capsys):
    machine = write_profile_json(tmp_path, two_core_profile())
    code = main(["predict", "--machine", str(machine), "--validate", str(TRACES), "--out", str(tmp_path / "tables")])
    assert code == 0, capsys.readouterr().err
    import pandas as pd

    from muon_repro.tables.schemas import PREDICTIONS

    table = pd.read_parquet(tmp_path / "tables" / "predictions.parquet")
    on_cpu = [k for k, folders in committed_runs().items() if RunDir(folders[0]).config_dict.get("device") == "cpu"]
    assert list(table.columns) == PREDICTIONS.names and sorted(table["run"]) == sorted(on_cpu)  # GPU runs: another device
    key = committed_run_key("comparison/muon_dp2_tp2")
    row = table.set_index("run").loc[key]
    want = measured([RunDir(f) for f in committed_runs()[key]])
    assert row["measured_step_ms"] == pytest.approx(want.step_ms) and row["trials"] == want.trials == 10  # every round
    assert row["step_rel_error"] == pytest.approx(row["predicted_step_ms"] / row["measured_step_ms"] - 1)
    assert "median |error|" in capsys.readouterr().out


@pytest.mark.slow  # reads every committed run (~5 s)
def test_the_committed_prediction_records_measure_the_committed_traces():
    """Every run a committed ``predictions`` record names is measured from the trials committed today: a run
    re-recorded without writing the records again (``muon-repro regimes --records-only``) would leave the
    predictions table judging the model against steps no trace holds."""
    import pandas as pd

    runs, checked = committed_runs(), 0
    for record in sorted(TRACES.glob("*/costmodel/predictions.csv")):
        for row in pd.read_csv(record).itertuples():
            folders = runs.get(row.run)
            assert folders is not None, f"{record}: {row.run} has no committed trial"
            want = measured([RunDir(f) for f in folders])
            assert (row.measured_step_ms, row.measured_optimizer_ms) == pytest.approx((want.step_ms, want.optimizer_ms)), (
                f"{record}: {row.run} (write the records again)"
            )
            assert row.trials == want.trials, row.run
            checked += 1
    assert checked >= 100


def test_a_trial_whose_metrics_cannot_be_read_is_refused_by_name_not_dropped(tmp_path, capsys):
    """A truncated metrics.json read as empty dropped its trial from the run's measured time, and `regimes
    --records-only` rewrote the records with it gone, exit 0, nothing said."""
    import shutil

    run = "cpu-2c-gloo/regimes/adamw_d128_t1024_dp2_tp2"
    shutil.copytree(TRACES / run, tmp_path / "traces" / run)
    metrics = tmp_path / "traces" / run / "trial0" / "metrics.json"
    metrics.write_text(metrics.read_text()[:100])
    machine = write_profile_json(tmp_path, two_core_profile())
    with pytest.raises(ValueError, match=r"trial0/metrics\.json: .*its trial would drop out of the run's measured time"):
        validate(tmp_path / "traces", read_profile(machine))
    code = main(["predict", "--machine", str(machine), "--validate", str(tmp_path / "traces"), "--out", str(tmp_path / "t")])
    assert code != 0 and "trial0/metrics.json" in capsys.readouterr().err and not (tmp_path / "t").exists()


def copied_run(tmp_path: Path, run: str) -> Path:
    """The committed run ``<profile>/<group>/<name>`` copied under ``tmp_path/traces``, its traces left out."""
    folder = tmp_path / "traces" / run
    shutil.copytree(TRACES / run, folder, ignore=shutil.ignore_patterns("*.gz", "log.txt"))
    return folder


def test_a_prediction_row_measures_the_run_by_hand_and_states_its_errors_against_the_measurement(tmp_path):
    """Three trials of 4 ranks with 3 steps timed without the profiler, rank r taking ``base + r`` ms a step and
    ``opt + r`` ms of optimizer: a step is its slowest rank's (base + 3), the optimizer the mean over ranks (opt + 1.5).
    Trials' medians 113, 98, 143 ms -> 113; optimizer 21.5, 7.5, 61.5 -> 21.5. The steps were timed without the
    profiler, so they are priced without it; each error is the prediction over that measurement, less one; the run
    was recorded on its earliest trial's date."""
    folder = copied_run(tmp_path, "cpu-2c-gloo/pipeline/adamw_dp4")
    steps = {0: ([100, 120, 110], [10, 30, 20]), 1: ([200, 90, 95], [40, 5, 6]), 2: ([130, 140, 150], [50, 60, 70])}
    dates = {0: "2026-11-28T01:00:00+00:00", 1: "2026-11-26T23:00:00+00:00", 2: "2026-11-27T00:00:00+00:00"}
    for trial in (3, 4, 5):
        shutil.rmtree(folder / f"trial{trial}")
    for trial, (base, opt) in steps.items():
        metrics = json.loads((folder / f"trial{trial}" / "metrics.json").read_text())
        for r, rank in enumerate(metrics["ranks"]):
            rank["timed_step_ms"], rank["timed_optimizer_ms"] = [b + r for b in base], [o + r for o in opt]
        (folder / f"trial{trial}" / "metrics.json").write_text(json.dumps(metrics))
        environment = json.loads((folder / f"trial{trial}" / "environment.json").read_text())
        (folder / f"trial{trial}" / "environment.json").write_text(json.dumps({**environment, "recorded_at": dates[trial]}))
    machine = read_profile(TRACES / "cpu-2c-gloo" / "costmodel" / "machine.json")
    (row,) = validate(tmp_path / "traces", machine)
    trials = [RunDir(folder / f"trial{t}") for t in steps]
    cfg = bench_config(trials[0])
    on_day = predict(cfg, machine.on_day(*run_probes(trials)), profiled=False)
    as_calibrated = predict(cfg, machine, profiled=False)
    assert (row["trials"], row["steps"], row["profiled"], row["recorded_on"]) == (3, 9, False, "2026-11-26")
    assert (row["measured_step_ms"], row["measured_optimizer_ms"]) == (113.0, 21.5)
    assert row["priced_by"] == "own_calibration" and on_day.step_ms != as_calibrated.step_ms
    assert (row["predicted_step_ms"], row["predicted_optimizer_ms"]) == pytest.approx((on_day.step_ms, on_day.optimizer_ms))
    assert row["step_rel_error"] == pytest.approx(on_day.step_ms / 113.0 - 1)
    assert row["optimizer_rel_error"] == pytest.approx(on_day.optimizer_ms / 21.5 - 1)
    assert row["profile_predicted_step_ms"] == pytest.approx(as_calibrated.step_ms)
    assert row["profile_step_rel_error"] == pytest.approx(as_calibrated.step_ms / 113.0 - 1)


def test_a_gpu_runs_day_ratios_are_recorded_not_applied(tmp_path):
    """A GPU's speed probe times launches and clocks, not the GPU's rate: the row states the day's ratios and prices
    the run with the profile as calibrated."""
    copied_run(tmp_path, "1xH200-nccl/single_device/adamw_t8k")
    machine = read_profile(TRACES / "1xH200-nccl" / "costmodel" / "machine.json")
    (row,) = validate(tmp_path / "traces", machine)
    assert row["priced_by"] == "profile" and row["day_compute"] is not None and row["day_compute"] != 1.0
    assert row["predicted_step_ms"] == row["profile_predicted_step_ms"]


def test_the_validation_summary_states_the_median_and_the_worst_errors():
    """Step errors +10%, -20%, +90%: median |error| 20% (their mean would be 40%), worst +90%; optimizer errors 5%
    and -30% (one run has none): median 17.5%."""
    rows = [
        {"run": run, "measured_step_ms": 100.0, "predicted_step_ms": 100.0 * (1 + step), "step_rel_error": step}
        | {"profile_step_rel_error": step, "day_compute": None, "within_calibration": True, "measured_optimizer_ms": 10.0}
        | {"predicted_optimizer_ms": 10.0, "optimizer_rel_error": optimizer}
        for run, step, optimizer in (("a", 0.1, 0.05), ("b", -0.2, -0.3), ("c", 0.9, None))
    ]
    summary = format_validation(rows).splitlines()[-1]
    assert summary.startswith("step time: median |error| 20.0%, worst +90.0% (c); as calibrated: median |error| 20.0%")
    assert summary.endswith("optimizer: median |error| 17.5%, worst 30.0%")


def test_a_runs_measured_time_is_one_number_in_every_table():
    """One number, one path: the cost model's ``measured`` times are the runs table's ``timed_*`` and the regimes
    table's ``step_ms`` / ``optimizer_ms`` (the median over rounds of the rounds' medians), so a page that puts
    a prediction beside a measured time states the measured time every other page states."""
    from muon_repro.tables.io import read_table

    predictions = read_table(REPO / "metrics" / "predictions.parquet", "predictions")
    runs = read_table(REPO / "metrics" / "runs.parquet", "runs")
    regimes = read_table(REPO / "metrics" / "regimes.parquet", "regimes")
    for other, columns in ((runs, ("timed_step_ms", "timed_optimizer_ms")), (regimes, ("step_ms", "optimizer_ms"))):
        both = predictions.merge(other[["run", *columns]], on="run").dropna(subset=list(columns))
        assert len(both) >= 30, len(both)
        for mine, theirs in zip(("measured_step_ms", "measured_optimizer_ms"), columns):
            differ = both[~np.isclose(both[mine].astype(float), both[theirs].astype(float), rtol=1e-9)]
            assert differ.empty, f"{mine} against {theirs}: {differ['run'].tolist()[:5]}"


def test_measured_is_the_median_of_the_rounds_medians():
    """A round of many slow steps weighs as one round: pooled, its 9 steps would outvote the other rounds' 2."""
    from muon_repro.analysis.estimators import steps_frame, typical_time

    rounds = [np.array([[10.0, 1.0], [12.0, 1.0]]), np.array([[11.0, 2.0], [11.0, 2.0]]), np.full((9, 2), 50.0)]
    frame = steps_frame("r", dict(enumerate(rounds)))
    assert typical_time(frame, "r", "step_ms", "max") == 11.0  # the rounds' medians 11, 11, 50
    assert typical_time(frame, "r", "optimizer_ms", "mean") == 2.0  # 1, 2, 50
    assert float(np.median(np.concatenate(rounds)[:, 0])) == 50.0  # what a pooled median would have said
    assert np.isnan(typical_time(frame, "absent", "step_ms", "max"))


_PROFILER_WINDOWS = """
import contextlib, os, sys, torch
from torch.profiler import ProfilerActivity, profile
from muon_repro.costmodel.compute_bench import profiler_notes_off
first = profiler_notes_off() if sys.argv[1] == "off" else contextlib.nullcontext()
for guard in (first, contextlib.nullcontext()):  # the second window as calibrate's later ones
    with guard, profile(activities=[ProfilerActivity.CPU]):
        torch.ones(3) + 1
print(os.environ.get("KINETO_LOG_LEVEL", "unset"))
"""


@pytest.mark.slow
def test_calibrate_windows_print_no_kineto_notes_and_the_environment_is_restored():
    """Kineto's USDT lines buried calibrate's progress (ten per run); off for the process after its first window."""
    import subprocess
    import sys

    def run(mode: str, **env) -> subprocess.CompletedProcess:
        import os

        environ = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"} | env
        return subprocess.run([sys.executable, "-c", _PROFILER_WINDOWS, mode], capture_output=True, text=True, env=environ)

    plain, quiet, users = run("on"), run("off"), run("off", KINETO_LOG_LEVEL="0")
    assert plain.returncode == quiet.returncode == users.returncode == 0, quiet.stderr
    assert plain.stderr.count("profiler_start") == 2  # the notes this guards against, one per window
    assert "profiler_" not in quiet.stderr and quiet.stdout.strip() == "unset"  # both windows quiet, nothing left set
    assert "profiler_start" in users.stderr and users.stdout.strip() == "0"  # a level the user set wins


# ---------------------------------------------------------------- end to end: calibrate, record, predict


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("calibrate") / "machine.json"
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["calibrate", "--out", str(out), "--quick", "--ranks", "4"])
    assert code == 0
    return out, printed.getvalue()


@pytest.mark.slow
def test_calibrate_quick_writes_a_profile_and_its_table(calibrated):
    import pandas as pd

    path, printed = calibrated
    profile = read_profile(path)
    assert profile.device == "cpu" and profile.backend == "gloo" and profile.calibration["quick"]
    assert {(f.op, f.group_size) for f in profile.collectives} == {(op, g) for op in COLLECTIVE_OPS for g in (2, 4)}
    assert 0 < profile.compute_share[4] <= 1 and 0 < profile.bandwidth_share[4] <= 1 and set(profile.arrival_jitter_us) == {2, 4}
    assert set(profile.size_curves) == {"matmul", "attention", "cross_entropy", "gelu", "elementwise"}
    assert all(len(curve) == 2 for curve in profile.size_curves.values())
    assert len(profile.arrival_jitter_curve_us[2]) == len(JITTER_COMPUTE_S)
    assert all(len(f.samples) == 3 for f in profile.collectives)
    assert "its time over its own matmuls' fp32" in printed and "alpha us" in printed
    table = pd.read_parquet(path.with_name("machine.calibration.parquet"))
    assert {"kernel", "share", "jitter", "collective_sample", "collective"} == set(table["kind"])
    fits = table[table["kind"] == "collective"]
    assert len(fits) == 6 and (fits["beta_gbps"] > 0).all() and (fits["alpha_us"] >= 0).all()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_sweep) -> Path:
    from tiny_sweep import copy_of

    cfg = resolve("layout_ablation/muon_dp2_tp2_bucketed", "tiny")
    return copy_of(tiny_sweep[cfg.key], tmp_path_factory.mktemp("traces"))


@pytest.mark.slow
def test_predict_inputs_equal_a_fresh_runs_metrics_and_it_is_priced_on_its_own_day(tiny_run, calibrated):
    """Inputs and structure only: how close the time comes is the predictions table's business, not a test's."""
    ranks = RunDir(tiny_run).ranks
    cfg = bench_config(RunDir(tiny_run))
    machine = read_profile(calibrated[0])
    p = predict(cfg, machine)
    assert list(p.workload.ns_flops) == [r.ns_flops for r in ranks]
    assert [dict(b) for b in p.workload.analytic_bytes] == [r.analytic_bytes for r in ranks]
    assert p.workload.train_flops == ranks[0].train_flops
    assert statistics.fmean(r.parts["optimizer"] for r in p.ranks) == pytest.approx(p.optimizer_ms)
    # a fresh run computes the vocab-parallel cross-entropy: its ledger holds exactly the bytes priced
    assert cfg.cross_entropy == "vocab_parallel"
    for r, metrics in enumerate(ranks):
        assert {phase: b for phase, b in stage_bytes(p.workload, r).items() if b} == _ledger_bytes(metrics)
    # the run took a speed probe in its own world; the calibration took one in a world of that size
    probe = RunDir(tiny_run).environment["speed_probe"]
    assert probe["world_size"] == cfg.world_size and str(cfg.world_size) in machine.calibration["speed_probe"]
    (row,) = validate(Path(tiny_run).parents[3], machine)
    assert row["priced_by"] == "own_calibration" and row["held_out"] is False
    assert all(row[f"day_{kind}"] > 0 for kind in ("compute", "memory", "host", "network"))
    # the two predictions differ exactly by the day's speed (the compute ratio): scaling the profile by it reproduces the first
    on_day = replace(machine, day_speed=row["day_compute"])
    assert predict(cfg, on_day, profiled=row["profiled"]).step_ms == pytest.approx(row["predicted_step_ms"])
    assert row["profile_predicted_step_ms"] == pytest.approx(predict(cfg, machine, profiled=row["profiled"]).step_ms)


@pytest.mark.slow
def test_a_custom_shape_trains_the_model_it_names(tmp_path):
    """The bench's runner builds the config's model, shape overrides included (BenchConfig.model_config)."""
    from muon_repro.bench.sweep import record_local

    cfg = BenchConfig(
        group="custom",
        name="narrow",
        optimizer="adamw",
        dp=1,
        tp=1,
        scale="tiny",
        preset="tiny",
        tokens_per_step=32,
        seq_len=16,
        hidden=16,
        n_layers=1,
        n_heads=2,
        ffn_hidden=32,
        warmup=0,
        active=1,
    )
    run = RunDir(record_local([cfg], tmp_path, "gloo", trials=1, progress=False)[0].run_dir)
    assert (
        run.ranks[0].model_params
        == cfg.model_config().num_params()
        != resolve("comparison/adamw_dp2_tp2", "tiny").model_config().num_params()
    )
    assert (run.config_dict["hidden"], run.config_dict["n_layers"]) == (16, 1) and bench_config(run) == cfg
    assert build_workload(cfg).train_flops == run.ranks[0].train_flops


def test_list_machines_prints_json_when_asked(capsys):
    """``predict --list-machines --json`` printed the text listing, ignoring --json."""
    from muon_repro.costmodel.machine import named_profiles

    assert main(["predict", "--list-machines", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert list(listed) == list(named_profiles()) and all(isinstance(d, str) and d for d in listed.values())
    assert main(["predict", "--list-machines"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(next(iter(named_profiles())))


@pytest.mark.parametrize(
    "blocks_at, wait, transfer",
    [
        (10.0, 0.0, 2.0),  # blocks after the last rank issued the gather (at 8): all of it is the transfer
        (5.0, 3.0, 4.0),  # blocks before: 5 -> 8 waits for the last rank, 8 -> 12 is the transfer
        (13.0, 0.0, 0.0),  # the gather ended before it asked: no time at all
    ],
)
def test_a_pipelined_gathers_wait_is_what_blocks_before_its_last_rank_issued_it(blocks_at, wait, transfer):
    """A rank issued an asynchronous gather at 0, the group's last rank at 8, it ends at 12. The rank's wait is the
    part of its own blocked time (from ``blocks_at``) before 8, as the analysis splits a measured wait; it was
    counted from when the rank issued it, so a rank blocking at 10 had 2 s of wait and no transfer."""
    from types import SimpleNamespace

    from muon_repro.costmodel.predict import _finish

    ranks = [SimpleNamespace(wait_ms=0.0, transfer_ms=0.0)]
    clock = [blocks_at]
    _finish((0,), clock, ranks, (8.0, 12.0))
    assert ranks[0].wait_ms == pytest.approx(wait * 1e3) and ranks[0].transfer_ms == pytest.approx(transfer * 1e3)
    assert clock[0] == max(blocks_at, 12.0)


def test_a_bf16_bench_run_is_priced_gathering_the_fp32_parameters_it_keeps():
    """The bench's bf16 runs autocast over fp32 parameters, so ZeRO-1's parameter all-gather sends 4 bytes an element
    (the analytic bytes, the ledger's); Megatron-style bf16 training (model_dtype bf16) gathers bf16 weights."""
    cfg = replace(resolve("comparison/muon_dp2_tp2", "gpu"), precision="bf16")
    machine = resolve_profile("h100-8x-nvlink")
    for model_dtype, share_of_fp32 in ((None, 1.0), ("bf16", 0.5)):
        work = predict(cfg, machine, profiled=False, model_dtype=model_dtype).workload
        priced = stage_bytes(work, 0)[DP_ALL_GATHER]
        assert work.precision == "bf16" and priced == pytest.approx(share_of_fp32 * work.analytic_bytes[0][DP_ALL_GATHER])
