"""The cost model's pipelines (pp > 1): the 1F1B playback and its closed form, stages, transfers, per-stage optimizer
steps, validation on pipeline runs, and the 7B TP8 x PP4 x DP scale-out. Fast, CPU, no process launched."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from support.costmodel_profiles import two_core_profile

from muon_repro.bench.configs import BenchConfig, resolve
from muon_repro.cli import main
from muon_repro.costmodel.machine import profile_from_dict, resolve_profile
from muon_repro.costmodel.pipeline import (
    BackToBack,
    PipelinePrediction,
    StagePrediction,
    back_to_back,
    boundary_scope,
    one_f_one_b,
    one_f_one_b_closed_form,
    p2p_seconds,
)
from muon_repro.costmodel.pipeline_scale_out import pipeline_config, pipeline_scale_out_rows
from muon_repro.costmodel.pipeline_workload import activation_bytes, build_pipeline_workload
from muon_repro.costmodel.predict import predict
from muon_repro.costmodel.validate import bench_config, run_folders, trial_sets, validate
from muon_repro.formulas import newton_schulz_flops_total, one_f_one_b_order
from muon_repro.model_config import stage_parts
from muon_repro.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "traces" / "cpu-2c-gloo"
MACHINE = PROFILE / "costmodel" / "machine.json"


@pytest.fixture(scope="module")
def two_cores():
    return profile_from_dict(two_core_profile())


def pipeline(key: str) -> BenchConfig:
    return resolve(key, "cpu")


# ---------------------------------------------------------------- pp = 1 is today's model


def test_pp1_predictions_equal_the_committed_records_bit_for_bit():
    """Every committed prediction of a run without stages recomputed, as calibrated: the pipeline code changed none."""
    records = pd.read_csv(PROFILE / "costmodel" / "predictions.csv")
    machine = resolve_profile(str(MACHINE))
    runs = run_folders(REPO / "traces")
    checked = 0
    for row in records.itertuples():
        if row.run not in runs:
            continue
        cfg = bench_config(RunDir(runs[row.run][0]))
        if cfg.pp > 1:  # priced by the pipeline code itself (tests below)
            continue
        p = predict(cfg, machine, profiled=bool(row.profiled))
        assert (p.step_ms, p.optimizer_ms) == (row.profile_predicted_step_ms, row.profile_predicted_optimizer_ms), row.run
        checked += 1
    assert checked >= 50


# ---------------------------------------------------------------- the 1F1B playback


def test_the_playback_runs_the_runtimes_order():
    assert one_f_one_b_order(0, 2, 3) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)]
    assert one_f_one_b_order(1, 2, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]


def test_the_pipeline_time_of_a_hand_computed_case():
    # pp=2, M=2, f=1, b=2, c=0.5. Stage 1: F0 1.5-2.5, B0 2.5-4.5, F1 4.5-5.5 (F1 of stage 0 ended at 2), B1 5.5-7.5.
    # Stage 0: F0 0-1, F1 1-2, B0 5-7 (gradient at 4.5 + 0.5), B1 8-10 (7.5 + 0.5).
    times = one_f_one_b([1, 1], [2, 2], [0.5], 2)
    assert times.total == 10 and times.stage_end == (10, 7.5)
    assert one_f_one_b_closed_form([1, 1], [2, 2], [0.5], 2) == (2 + 2 - 1) * 3 + 2 * 0.5 == 10
    assert one_f_one_b([1, 1], [2, 2], [0.0], 2).total == 9


@pytest.mark.parametrize("pp", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("micro", [1, 2, 4, 8, 9])
def test_equal_stages_idle_for_the_bubble_fraction(pp, micro):
    forward, backward = [1.5] * pp, [3.0] * pp
    total = one_f_one_b(forward, backward, [0.0] * (pp - 1), micro).total
    assert total == pytest.approx(one_f_one_b_closed_form(forward, backward, [0.0] * (pp - 1), micro))
    bubble = total - micro * 4.5
    assert bubble / total == pytest.approx((pp - 1) / (micro + pp - 1))


def test_a_heavier_head_stage_lengthens_the_pipeline_within_the_closed_form():
    balanced = one_f_one_b([1] * 4, [2] * 4, [0.0] * 3, 8).total
    heavy = [1, 1, 1, 1.5], [2, 2, 2, 3]
    unbalanced = one_f_one_b(*heavy, [0.0] * 3, 8).total
    assert balanced < unbalanced <= one_f_one_b_closed_form(*heavy, [0.0] * 3, 8)
    # transfers on a blocking receive also show in the steady state: more than the first and last crossings
    assert one_f_one_b([1] * 4, [2] * 4, [0.5] * 3, 8).total > balanced + 2 * 3 * 0.5


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (([1, 1], [2, 2], [0.5], 0), "micro_batches must be an integer >= 1, got 0"),
        (([1, 1], [2, 2], [], 2), "one transfer time per boundary"),
        (([1, float("nan")], [2, 2], [0.5], 2), "a forward time is nan"),
    ],
)
def test_bad_pipeline_times_are_refused(args, named):
    with pytest.raises(ValueError, match=named):
        one_f_one_b(*args)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: one_f_one_b([1, 1], [2, 2], [0.5], 2, start=[0.0]), r"one finite start time per stage \(2\), got \[0.0\]"),
        (lambda: one_f_one_b([1, 1], [2, 2], [0.5], 2, start=[0, float("inf")]), "one finite start time per stage"),
        (lambda: back_to_back([1, 1], [2, 2], [0.5], [1.0], 2), r"one finite optimizer time >= 0 per stage \(2\)"),
        (lambda: back_to_back([1, 1], [2, 2], [0.5], [1.0, -1.0], 2), r"got \[1.0, -1.0\]"),
        (lambda: back_to_back([1, 1], [2, 2], [0.5], [1, 1], 2, steps=1), "play at least 2 steps"),
    ],
)
def test_bad_back_to_back_inputs_are_refused(call, named):
    with pytest.raises(ValueError, match=named):
        call()


# ---------------------------------------------------------------- a run's stages


def test_stages_split_the_model_as_the_runtime_does():
    parts = stage_parts(6, 4)
    assert [p.layers for p in parts] == [2, 2, 1, 1]  # the spare blocks to the first stages
    assert [(p.embedding, p.head) for p in parts] == [(True, False), (False, False), (False, False), (False, True)]
    with pytest.raises(ValueError, match="needs at least one block per stage"):
        stage_parts(2, 4)


def test_every_stage_orthogonalizes_its_own_matrices_once():
    cfg = pipeline("pipeline/muon_pp4")
    work = build_pipeline_workload(cfg)
    assert len(work.ns_flops) == cfg.world_size
    assert sum(work.ns_flops) == newton_schulz_flops_total(cfg.model_config())  # dp = tp = 1: each matrix once


def test_p2p_bytes_are_the_activations_and_priced_on_the_link(two_cores):
    cfg = pipeline("pipeline/muon_pp4")  # micro-batches of one sequence of 128 tokens, hidden 256
    assert activation_bytes(cfg) == 1 * 128 * 256 * 4
    p = predict(cfg, two_cores, profiled=False)
    sent = cfg.micro_batches * activation_bytes(cfg)
    assert [s.p2p_bytes for s in p.stages] == [sent, 2 * sent, 2 * sent, sent]  # the ends send one way only
    expected = 300e-6 + activation_bytes(cfg) / 0.5e9  # the 2-rank all-gather fit: alpha + bytes / beta
    assert p.transfer_ms == pytest.approx((expected * 1e3,) * 3)
    assert p2p_seconds(two_cores, activation_bytes(cfg), "intra_node", 4) == pytest.approx(expected)


def test_steps_back_to_back_in_a_hand_computed_case():
    # The pipeline above (T = 10; stage 0 ends at 10, stage 1 at 7.5) with optimizer steps o = (1, o1). Stage 0's
    # next forward ends at 10 + 1 + 1 and reaches stage 1 at 12.5: stage 1 hides up to 12.5 - 7.5 = 5 of its o1.
    assert back_to_back([1, 1], [2, 2], [0.5], [1, 1], 2) == BackToBack(10, 11)  # stage 0's step is paid whole
    assert back_to_back([1, 1], [2, 2], [0.5], [1, 5], 2).step == 11  # stage 1's 5 hidden
    six = back_to_back([1, 1], [2, 2], [0.5], [1, 6], 2)
    assert (six.step, six.exposed_optimizer) == (12, 2)  # 1 of stage 1's 6 is not
    # the second step by hand: stage 0 starts at 11, stage 1 at 7.5 + 6, 1 after stage 0's forward arrives; both
    # end 12 after the first step's ends, and their optimizer steps start the third step 12 after the second
    assert one_f_one_b([1, 1], [2, 2], [0.5], 2, start=[11, 13.5]).stage_end == (22, 19.5)


def _period_over(steps: int, forward, backward, transfer, optimizer, micro: int) -> float:
    """The mean period of the last half of ``steps`` steps played back to back, by hand."""
    start, ends_of_stage_0 = [0.0] * len(forward), []
    for _ in range(steps):
        ends = one_f_one_b(forward, backward, transfer, micro, start=start).stage_end
        start = [end + o for end, o in zip(ends, optimizer)]
        ends_of_stage_0.append(start[0])
    half = steps // 2
    return (ends_of_stage_0[-1] - ends_of_stage_0[half - 1]) / (steps - half)


def test_steps_back_to_back_settle_between_stage_0s_optimizer_and_the_slowest():
    rng = random.Random(3)
    for _ in range(200):
        pp, micro = rng.choice([2, 3, 4, 6]), rng.choice([1, 2, 3, 8])
        forward, backward = [rng.uniform(0.5, 2) for _ in range(pp)], [rng.uniform(1, 4) for _ in range(pp)]
        transfer, optimizer = [rng.uniform(0, 1) for _ in range(pp - 1)], [rng.uniform(0, 20) for _ in range(pp)]
        steps = back_to_back(forward, backward, transfer, optimizer, micro)
        assert steps.step == pytest.approx(_period_over(120, forward, backward, transfer, optimizer, micro), rel=1e-9)
        assert steps.pipeline + optimizer[0] - 1e-9 <= steps.step <= steps.pipeline + max(optimizer) + 1e-9
        # what docs/pipeline.md says the step pays: stage k's step hides in its idle time and in the fill, the
        # time stage 0's next forward takes to reach it
        ends = one_f_one_b(forward, backward, transfer, micro).stage_end
        idle = [steps.pipeline - end for end in ends]
        fill = [sum(forward[j] + transfer[j] for j in range(k)) for k in range(pp)]
        paid = max(optimizer[0], *(optimizer[k] - idle[k] - fill[k] for k in range(pp)))
        assert steps.exposed_optimizer == pytest.approx(paid, abs=1e-9)


def test_steps_that_alternate_between_two_periods_take_their_mean():
    """Stages whose start offsets never repeat: stage 0's steps end 18, 37, 55, 74, ... apart by 18 then 19 (played by
    hand above, step after step), so the step is their mean 18.5, taken over the second half of the steps played."""
    forward, backward, transfer, optimizer = [3, 1, 1], [4, 1, 1], [0, 1], [1, 10, 0]
    steps = back_to_back(forward, backward, transfer, optimizer, 2)
    assert (steps.pipeline, steps.step) == (17, pytest.approx(18.5))
    assert steps.step == pytest.approx(_period_over(120, forward, backward, transfer, optimizer, 2))


def test_the_step_is_the_pipeline_then_the_optimizer_its_drain_does_not_hide(two_cores):
    p = predict(pipeline("pipeline/muon_pp2_dp2"), two_cores, profiled=False)
    assert isinstance(p, PipelinePrediction)
    optimizer = [s.optimizer_ms for s in p.stages]
    played = back_to_back([s.forward_ms for s in p.stages], [s.backward_ms for s in p.stages], list(p.transfer_ms), optimizer, 4)
    assert (p.pipeline_ms, p.step_ms) == (pytest.approx(played.pipeline), pytest.approx(played.step))
    assert p.pipeline_ms + optimizer[0] - 1e-9 <= p.step_ms <= p.pipeline_ms + max(optimizer) + 1e-9
    assert p.optimizer_exposed_ms == pytest.approx(p.step_ms - p.pipeline_ms)
    assert p.stage_optimizer_max_ms >= p.optimizer_ms  # the mean over ranks, as measured runs count it
    assert {r.step_ms for r in p.ranks} == {p.step_ms}  # back to back, every rank steps at the period
    for s in p.stages:
        assert s.bubble_ms == pytest.approx(p.pipeline_ms - s.compute_ms)
        assert s.compute_ms == pytest.approx(8 / 2 * (s.forward_ms + s.backward_ms))  # M = 4 per DP replica
    assert p.stages[-1].forward_ms > p.stages[0].forward_ms  # the head and loss weigh more than the embedding


def test_a_pipeline_stages_ranks_share_their_part_of_the_nodes_cores():
    """muon_pp2_dp2: 4 ranks on the 2 cores, 2 per stage, every stage computing at once: each stage's pair gets 1 core,
    so a micro-batch's forward and backward (no TP collective in them) take twice what they take with a core per rank."""
    cfg = pipeline("pipeline/muon_pp2_dp2")
    shared = predict(cfg, profile_from_dict(two_core_profile()), profiled=False)  # compute_share {2: 1.0, 4: 0.5}
    own = predict(cfg, profile_from_dict(two_core_profile(compute_share={"2": 1.0, "4": 1.0})), profiled=False)
    for slow, fast in zip(shared.stages, own.stages):
        assert (slow.forward_ms, slow.backward_ms) == pytest.approx((2 * fast.forward_ms, 2 * fast.backward_ms))


def test_a_stage_boundary_crosses_nodes_when_any_rank_sends_to_another_node():
    """A rank of stage s sends to the rank dp * tp above it. Stages of 2 ranks on nodes of 3: stage 0's ranks 0 and 1
    send to 2 (node 0) and 3 (node 1), so its boundary spans nodes though its own ranks share one; stage 1's 2, 3
    send to 4, 5 (node 1, but rank 2 is on node 0). Nodes of 4: stage 0 sends within node 0, stage 1 (2, 3 to 4, 5)
    across."""
    three, four = (profile_from_dict(two_core_profile(ranks_per_node=n)) for n in (3, 4))
    assert [boundary_scope(three, s, 2) for s in (0, 1)] == ["inter_node", "inter_node"]
    assert [boundary_scope(four, s, 2) for s in (0, 1, 2)] == ["intra_node", "inter_node", "intra_node"]
    assert boundary_scope(profile_from_dict(two_core_profile()), 5, 2) == "intra_node"  # one node holds every rank


def test_a_stage_row_states_its_bubble_as_a_fraction_of_the_pipeline_time():
    """pp = 2, M = 2, f = 1, b = 2 ms, free transfers: the pipeline lasts (M + pp - 1) (f + b) = 9 ms, a stage computes
    M (f + b) = 6 of them, its bubble is 3 ms: a fraction 3 / 9 = (pp - 1) / (M + pp - 1) of the pipeline."""
    assert one_f_one_b([1, 1], [2, 2], [0.0], 2).total == 9
    stage = StagePrediction(0, range(0, 2), True, False, 1.0, 2.0, 6.0, 3.0, 0.5, 0, ())
    row = stage.to_row(9.0)
    assert row["bubble_fraction"] == pytest.approx(1 / 3) and (row["blocks"], row["first_block"]) == (2, 0)


def test_a_heavier_head_stage_makes_the_step_longer_than_equal_stages(two_cores):
    p = predict(pipeline("pipeline/adamw_pp4"), two_cores, profiled=False)
    middle = p.stages[1]
    equal = one_f_one_b([middle.forward_ms] * 4, [middle.backward_ms] * 4, list(p.transfer_ms), 8).total
    assert p.pipeline_ms > equal


def test_a_pipeline_prediction_prints_and_dumps_its_stages(capsys):
    argv = ["predict", "--machine", "h100-multinode-ib400", "--optimizer", "muon", "--dp", "1", "--tp", "8", "--pp", "4"]
    argv += ["--preset", "large", "--hidden", "4096", "--layers", "32", "--heads", "32", "--ffn", "11008"]
    argv += ["--vocab", "32000", "--tokens-per-step", "32768", "--seq-len", "4096", "--micro-batches", "8"]
    assert main([*argv, "--model-dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "pp=4" in out and "24-31+head" in out and "1F1B" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["blocks"] for s in data["stages"]] == [8, 8, 8, 8]
    assert data["step_ms"] == pytest.approx(data["pipeline_ms"] + data["optimizer_exposed_ms"])
    assert data["optimizer_exposed_ms"] <= data["stage_optimizer_max_ms"] + 1e-9


# ---------------------------------------------------------------- validation on pipeline runs


def test_pipeline_runs_are_validated_with_their_pp(tmp_path):
    runs = PROFILE / "pipeline"
    if not (runs / "muon_pp4").is_dir():
        pytest.fail("no committed pipeline runs")
    for name in ("muon_pp4", "adamw_dp4"):
        shutil.copytree(runs / name, tmp_path / "cpu-2c-gloo" / "pipeline" / name, ignore=shutil.ignore_patterns("*.gz"))
    rows = {r["run"].rsplit("/", 1)[1]: r for r in validate(tmp_path, resolve_profile(str(MACHINE)))}
    assert (rows["muon_pp4"]["pp"], rows["adamw_dp4"]["pp"]) == (4, 1)
    assert abs(rows["muon_pp4"]["step_rel_error"]) < 0.5  # the table holds the error; this only says it is priced sanely
    pp4 = rows["muon_pp4"]
    assert 0 < pp4["predicted_optimizer_exposed_ms"] < pp4["predicted_step_ms"]  # stage 0's step is paid
    assert rows["adamw_dp4"]["predicted_optimizer_exposed_ms"] is None  # one stage: nothing to hide in


def test_trials_that_differ_in_pp_are_split_not_pooled(tmp_path):
    source = PROFILE / "pipeline" / "muon_pp2_dp2" / "trial0" / "config.json"
    if not source.is_file():
        pytest.fail("no committed pipeline runs")
    config = json.loads(source.read_text())
    folders = []
    for trial, pp in enumerate((2, 2, 1)):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        fields = {**config, "pp": pp, "trial": trial}
        (folder / "config.json").write_text(json.dumps(fields))
        folders.append(folder)
    warned = []
    sets = trial_sets("g/muon", [RunDir(f) for f in folders], warned.append)
    assert [len(members) for _, members in sets] == [2, 1]
    assert "pp=2" in warned[0] and "pp=1" in warned[0]


def test_old_prediction_records_read_as_one_stage(tmp_path):
    from muon_repro.analysis.costmodel_tables import costmodel_tables

    folder = tmp_path / "cpu-2c-gloo" / "costmodel"
    folder.mkdir(parents=True)
    old = pd.read_csv(PROFILE / "costmodel" / "predictions.csv").drop(columns=["pp"], errors="ignore").head(3)
    old.to_csv(folder / "predictions.csv", index=False)
    table = costmodel_tables([tmp_path])["predictions"]
    assert list(table["pp"]) == [1, 1, 1]


# ---------------------------------------------------------------- 7B at TP8 x PP4 x DP


@pytest.fixture(scope="module")
def scale_out() -> pd.DataFrame:
    return pd.DataFrame(pipeline_scale_out_rows())


@pytest.mark.slow  # the scale-out fixture prices the 7B pipeline at six GPU counts (~7 s)
def test_the_7b_pipeline_table_has_every_gpu_count_and_both_optimizers(scale_out):
    assert sorted(set(scale_out["gpus"])) == [32, 64, 128, 256, 512, 1024]
    assert len(scale_out) == 12 and set(scale_out["optimizer"]) == {"muon", "adamw"}
    assert (scale_out["tp"] == 8).all() and (scale_out["pp"] == 4).all()
    assert (scale_out["dp"] * 32 == scale_out["gpus"]).all()
    assert (scale_out["micro_batches"] * scale_out["dp"] == 1024).all()  # one 4,096-token sequence each, 4M tokens
    assert (scale_out["activation_bytes"] == 4096 * 4096 * 2).all()  # bf16 activations


@pytest.mark.slow  # the same table
def test_the_7b_pipeline_table_is_monotone_where_it_should_be(scale_out):
    for optimizer, rows in scale_out.sort_values("gpus").groupby("optimizer"):
        assert rows["step_ms"].is_monotonic_decreasing, optimizer  # more GPUs, same tokens: shorter steps
        assert rows["ideal_bubble_fraction"].is_monotonic_increasing  # fewer micro-batches per replica
        assert rows["bubble_fraction"].is_monotonic_increasing
        assert (rows["bubble_fraction"] >= rows["ideal_bubble_fraction"]).all()  # unequal stages, transfers
        assert (rows["stage_optimizer_max_ms"] >= rows["optimizer_ms"]).all()
        assert (rows["optimizer_exposed_ms"] <= rows["stage_optimizer_max_ms"] + 1e-6).all()
        assert (rows["optimizer_exposed_ms"] > 0).all()  # stage 0 ends the drain: its step is paid
    muon = scale_out[scale_out["optimizer"] == "muon"].sort_values("gpus")
    adamw = scale_out[scale_out["optimizer"] == "adamw"].sort_values("gpus")
    assert muon["optimizer_share"].is_monotonic_increasing  # Newton-Schulz shrinks slower than the pipeline
    assert (muon["step_ms"].to_numpy() > adamw["step_ms"].to_numpy()).all()
    assert (muon["muon_extra"] > 0).all() and adamw["muon_extra"].isna().all()


def test_a_gpu_count_that_does_not_split_is_refused():
    with pytest.raises(ValueError, match="48 GPUs do not split into TP8 x PP4 x DP: give a multiple of 32"):
        pipeline_config("muon", 48)
    with pytest.raises(ValueError, match="micro_batches"):
        replace(pipeline_config("muon", 32), micro_batches=0)


def test_the_pipeline_scale_out_refuses_a_run_shape(capsys):
    assert main(["predict", "--pipeline-scale-out", "--dp", "2"]) == 2
    assert "--pipeline-scale-out prices its own 7B runs; drop --dp" in capsys.readouterr().err
