"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of the
learning-curve analysis behind the leading-steps claim (muon_repro.analysis.convergence: the smoothing, the matching
of AdamW's step to Muon's loss, the end ratio, the tokens of a step, the best learning rates, the one-sided interval
over seeds, the records found) and of the cost model's step simulation (muon_repro.costmodel.predict).

Every expected value is derived by hand from the documented definitions (the modules' docstrings, docs/method.md
"Leading steps" and the convergence tables' schemas)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from support.convergence_records import write_record

from muon_repro.analysis.convergence import convergence_tables, end_ratio, ewm, find_records, leading_steps
from muon_repro.rundir import CONVERGENCE_FILE


def _matches(table: pd.DataFrame) -> list[int | None]:
    return [None if pd.isna(v) else int(v) for v in table["adamw_matching_step"]]


# ---------------------------------------------------------------- smoothing


def test_ewm_weighs_the_new_value_by_alpha_and_starts_at_the_first_value():
    # y_0 = 0; y_1 = 0.25 * 4 + 0.75 * 0 = 1; y_2 = 0.25 * 8 + 0.75 * 1 = 2.75
    assert ewm([0.0, 4.0, 8.0], 0.25) == pytest.approx([0.0, 1.0, 2.75])
    # alpha = 0.05: y_1 = 0.05 * 10 + 0.95 * 0 = 0.5 (not 9.5: alpha weighs the new value)
    assert ewm([0.0, 10.0], 0.05) == pytest.approx([0.0, 0.5])


def test_ewm_with_alpha_one_is_the_curve_itself_and_alpha_above_one_is_refused():
    assert ewm([3.0, 1.0, 2.0], 1.0) == pytest.approx([3.0, 1.0, 2.0])  # alpha in (0, 1]: 1 included
    with pytest.raises(ValueError, match="alpha"):
        ewm([1.0], 1.5)


# ---------------------------------------------------------------- matching steps


def test_a_nan_in_adamws_loss_never_matches_and_its_later_losses_still_do():
    # AdamW's step 2 has no loss: step 1 (3.0) matches Muon's 3.0, step 3 (2.0) Muon's 2.0; Muon's 1.0 is never reached
    t = leading_steps([3.0, 2.0, 1.0], [3.0, math.nan, 2.0])
    assert _matches(t) == [1, 3, None]
    assert list(t["leading_steps"].astype("float64").fillna(-99)) == [0, 1, -99]


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_muon_step_without_a_finite_loss_has_no_matching_adamw_step(bad):
    t = leading_steps([3.0, bad, 2.0], [4.0, 3.0, 2.0])
    assert _matches(t) == [2, None, 3]


def test_steps_that_repeat_are_refused():
    with pytest.raises(ValueError, match="increasing positive"):
        leading_steps([3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [1, 2, 2])


# ---------------------------------------------------------------- the end ratio


def test_when_adamw_never_reaches_any_muon_loss_the_end_ratio_is_unknown_and_muon_is_ahead():
    # AdamW's best (5.0) never gets to Muon's losses: no ratio, no step, and Muon beyond AdamW's reach at the end
    ratio, step, beyond = end_ratio(leading_steps([4.0, 3.0], [5.0, 5.0]))
    assert math.isnan(ratio) and step is None and beyond is True
    ratio, step, beyond = end_ratio(leading_steps([], []))  # no steps at all: nothing is ahead
    assert math.isnan(ratio) and step is None and beyond is False


# ---------------------------------------------------------------- the tables from records


def test_a_steps_tokens_are_the_tokens_trained_before_it_ends(tmp_path):
    # batch 4 x seq_len 8 = 32 tokens a step: step 0 (the evaluation before training) has 0, step 3 has 96
    write_record(tmp_path, "muon", 1e-2, 0, [5.0, 4.0, 3.0], 3.0, batch=4, seq_len=8)
    conv = convergence_tables([tmp_path])["convergence"].sort_values("step")
    assert list(conv["step"]) == [0, 1, 2, 3]
    assert list(conv["tokens"].astype(int)) == [0, 32, 64, 96]


def test_one_seed_whose_last_muon_loss_adamw_never_reached_makes_the_interval_over_seeds_one_sided(tmp_path):
    # Seeds 0 and 2: AdamW's loss lies below Muon's at every step, so it matches Muon's last step (a two-sided ratio).
    # Seed 1: the curves agree for three steps, then Muon's drops to 1 and AdamW's stays at 3: AdamW matches Muon's
    # step 3 (ratio 0) but never its step 4, so on that seed the end ratio is a lower bound and the interval has no
    # high end, though the other seeds' ratios are two-sided.
    for seed, muon, adamw in (
        (0, [5.0, 4.0, 3.0, 2.0], [4.0, 3.0, 2.0, 1.0]),
        (1, [5.0, 4.0, 3.0, 1.0], [5.0, 4.0, 3.0, 3.0]),
        (2, [5.0, 4.0, 3.0, 2.0], [4.5, 3.5, 2.5, 1.5]),
    ):
        write_record(tmp_path, "muon", 1e-2, seed, muon, 2.0)
        write_record(tmp_path, "adamw", 1e-3, seed, adamw, 2.0)
    summary = convergence_tables([tmp_path])["leading_summary"]
    headline = summary[summary["alpha"] == 0.05]
    assert sorted(headline["seed"]) == [0, 1, 2] and (headline["seeds"] == 3).all()
    for column in ("leading_ratio", "leading_ratio_flops", "leading_ratio_wall"):
        assert headline[f"end_{column}_low"].notna().all()
        assert headline[f"end_{column}_high"].isna().all()


def test_a_length_with_one_learning_rate_takes_its_optimizers_sweeps_best(tmp_path):
    # The sweep (4 steps): 1e-2 ends at validation loss 3.0, 1e-3 at 3.5, so 1e-2 is best. One 8-step run at 1e-3 alone
    # is no sweep of its own: its length takes the sweep's best, 1e-2, and that run is not at its best learning rate.
    write_record(tmp_path, "muon", 1e-2, 0, [5.0, 4.0, 3.5, 3.0], 3.0)
    write_record(tmp_path, "muon", 1e-3, 0, [5.0, 4.5, 4.0, 3.5], 3.5)
    write_record(tmp_path, "muon", 1e-3, 0, [5.0, 4.5, 4.0, 3.5, 3.4, 3.3, 3.2, 3.1], 3.1)
    runs = convergence_tables([tmp_path])["convergence_runs"]
    best = {(float(r.lr), int(r.steps)): bool(r.best_lr) for r in runs.itertuples()}
    assert best == {(1e-2, 4): True, (1e-3, 4): False, (1e-3, 8): False}


def test_a_record_in_a_hidden_folder_anywhere_below_the_root_is_not_found(tmp_path):
    kept = tmp_path / "box" / "convergence" / "run_a" / CONVERGENCE_FILE
    hidden = tmp_path / ".old" / "convergence" / "run_b" / CONVERGENCE_FILE  # only its top folder is hidden
    for path in (kept, hidden):
        path.parent.mkdir(parents=True)
        path.write_text("{}")
    assert find_records([tmp_path]) == [kept]


def test_a_run_that_stopped_before_its_last_step_has_no_final_test_loss():
    from muon_repro.analysis.convergence import _final_test_losses

    # Seed 0 ran its 4 steps (test loss 3.0 at step 4); seed 1 stopped at step 3, evaluated there (3.5): not final.
    conv = pd.DataFrame(
        {
            "optimizer": "muon",
            "lr": 1e-2,
            "steps": 4,
            "seed": [0, 0, 0, 0, 0, 1, 1, 1, 1],
            "step": [0, 1, 2, 3, 4, 0, 1, 2, 3],
            "test_loss": [6.0, None, None, None, 3.0, 6.0, None, None, 3.5],
        }
    )
    out = _final_test_losses(conv, "muon", 1e-2, [0, 1], 4)
    assert out[0] == 3.0 and math.isnan(out[1])


# ---------------------------------------------------------------- the cost model's step (muon_repro.costmodel.predict)


def test_on_a_gpu_a_stage_takes_the_larger_of_its_kernels_and_its_launches_not_their_sum():
    from muon_repro.costmodel.machine import resolve_profile
    from muon_repro.costmodel.predict import compute_seconds
    from muon_repro.costmodel.workload import Compute

    gpu = resolve_profile("h100-8x-nvlink")
    assert gpu.device != "cpu"
    host_s = 1000 * gpu.op_seconds(True)  # 1000 operator calls
    kernels_s = 1e12 / gpu.matmul_flops_per_s("fp32", 0)
    for flops, ops in ((1e12, 0), (0.0, 1000), (1e12, 1000)):  # kernels alone, launches alone, both
        want = max(kernels_s if flops else 0.0, host_s if ops else 0.0)
        assert compute_seconds(Compute(matmul_flops=flops, ops=ops), gpu, "fp32", True) == pytest.approx(want)


def test_processor_sharing_refuses_no_cores_with_why():
    from muon_repro.costmodel.predict import processor_sharing

    with pytest.raises(ValueError, match="cores"):
        processor_sharing([0.0], [1.0], 0.0)


def test_a_pipeline_stages_ranks_are_put_on_nodes_by_their_global_rank():
    from types import SimpleNamespace

    from muon_repro.costmodel.predict import _nodes

    # Two ranks a node; a stage of two ranks starting at global rank 1 holds global ranks 1 (node 0) and 2 (node 1).
    machine = SimpleNamespace(ranks_per_node=2)
    assert _nodes(machine, 2, first_rank=1) == [[0], [1]]
    assert _nodes(machine, 2, first_rank=2) == [[0, 1]]
