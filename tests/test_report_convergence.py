"""The report's convergence section, line by line, on small hand-made tables whose every number is known.

tests/test_converge.py checks that the section's numbers are values of the tables the analysis makes; here each
line is checked for taking the right one: the sweep's last validation loss, the test loss at a run's end, the runs
at the best learning rate, the headline smoothing's per-seed ends, the budgets' censored seeds.
"""

from __future__ import annotations

import math

import pandas as pd

from muon_repro.report.convergence_section import (
    _best_run,
    _budget_lines,
    _choice_line,
    _interval,
    _ratio_lines,
    _span,
    _sweep_lines,
)

NAN = math.nan


def _curve(opt: str, lr: float, steps: int, *, best: bool, sweep: bool, seed: int = 0, val=(), test=()) -> list[dict]:
    """A run's rows of the joined convergence table: one per evaluated step (``val``, ``test``: per step, NaN where
    that split was not evaluated)."""
    return [
        {"optimizer": opt, "lr": lr, "steps": steps, "best_lr": best, "sweep": sweep, "seed": seed, "step": step}
        | {"val_loss": v, "test_loss": t}
        for step, v, t in zip(range(steps // len(val), steps + 1, steps // len(val)), val, test)
    ]


def _conv() -> pd.DataFrame:
    """Muon's sweep over two rates (1e-2 best), then two 8-step seeds at it evaluated halfway and at the end; AdamW's
    sweep of one rate and no long run."""
    rows = (
        _curve("muon", 1e-3, 4, best=False, sweep=True, val=(4.0, 3.6), test=(NAN, NAN))
        + _curve("muon", 1e-2, 4, best=True, sweep=True, val=(3.8, 3.1), test=(NAN, NAN))
        + _curve("muon", 1e-2, 8, best=True, sweep=False, seed=0, val=(3.3, 2.9), test=(3.35, 2.95))
        + _curve("muon", 1e-2, 8, best=True, sweep=False, seed=1, val=(3.2, 2.8), test=(3.25, 2.85))
        + _curve("adamw", 1e-3, 4, best=True, sweep=True, val=(4.1, 3.9), test=(NAN, NAN))
    )
    return pd.DataFrame(rows)


def test_the_sweep_line_gives_each_rates_last_validation_loss_and_the_test_loss_at_the_runs_end():
    muon, adamw = _sweep_lines(_conv())
    assert muon == (
        "Muon: sweep of 2 learning rates over 4 steps, final validation loss 0.001 → 3.600, 0.01 → 3.100 nats; best 0.01; "
        "final test loss of its 8-step runs: 2.950 (seed 0), 2.850 (seed 1)."
    )
    assert adamw.startswith("AdamW: sweep of 1 learning rates over 4 steps, final validation loss 0.001 → 3.900 nats")


def test_the_best_run_is_at_the_best_rate_of_the_length_asked_else_the_longest():
    conv = _conv()
    assert set(_best_run(conv, "muon")["lr"]) == {1e-2}  # not the 1e-3 sweep run
    assert set(_best_run(conv, "muon", steps=4)["steps"]) == {4} and set(_best_run(conv, "muon", steps=6)["steps"]) == {8}
    assert _best_run(conv.assign(best_lr=False), "muon").empty


def test_an_interval_names_its_open_end_and_a_span_runs_from_the_least_to_the_most():
    assert _interval(0.1, 0.034, None) == "+0.100 [+0.034, no upper end]"
    assert _interval(0.1, None, 0.2) == "+0.100 [no lower end, +0.200]"
    assert _interval(0.1, None, None) == "+0.100 (one seed: no interval)"
    assert _span(pd.Series([3.0, 1.0, 2.0, 10.0]), ".1f") == "1.0 to 10.0"
    assert _span(pd.Series([2.0, 2.01]), ".1f") == "2.0"


def _lead(muon_lr: float = 1e-2, adamw_lr: float = 1e-3) -> pd.DataFrame:
    """Leading steps joined with their summaries: one seed, two smoothings (0.05, the headline, and 0.3) whose ends
    differ, each with its end at Muon step 8 of 10."""
    rows = []
    for alpha, ratio in ((0.05, 0.5), (0.3, 0.25)):
        for step, at_end in ((8, True), (10, False)):
            rows.append(
                {"seed": 0, "alpha": alpha, "muon_step": step, "adamw_matching_step": 12, "at_end": at_end}
                | {"leading_ratio": ratio, "leading_ratio_flops": ratio / 2, "leading_ratio_wall": ratio / 4}
                | {"muon_lr": muon_lr, "adamw_lr": adamw_lr, "seeds": 1}
                | {"muon_gflop_per_step": 1.5, "adamw_gflop_per_step": 1.0, "muon_step_ms_median": 12.0}
                | {"adamw_step_ms_median": 10.0}
                | {
                    f"end_{c}_{s}": ratio
                    for c in ("leading_ratio", "leading_ratio_flops", "leading_ratio_wall")
                    for s in ("mean", "low", "high")
                }
                | {f"{o}_test_loss_{s}": 3.0 for o in ("muon", "adamw") for s in ("mean", "low", "high")}
            )
    return pd.DataFrame(rows)


def test_the_ratio_lines_give_the_smoothings_heaviest_first_and_each_seeds_end_at_the_headline():
    lines = _ratio_lines(_lead())
    assert [line.split(" on the")[0] for line in lines if line.startswith("Leading ratio")] == [
        "Leading ratio at the end, EWM alpha 0.3",
        "Leading ratio at the end, EWM alpha 0.05",
    ]
    # the headline (alpha 0.05) per seed: its own ratios, and Muon ending lower than AdamW ever got (step 8 < 10)
    assert lines[-1].startswith(
        "Per seed at alpha 0.05, in steps, FLOPs and wall clock: seed 0: +0.500, +0.250, +0.125 (Muon step 8 matched by "
        "AdamW step 12; Muon lower than AdamW ever got after it)"
    )
    at_last = _lead().assign(at_end=lambda d: d["muon_step"] == 10)  # AdamW matches Muon to the end
    assert "Muon lower than AdamW ever got" not in _ratio_lines(at_last)[-1]


def test_the_best_rates_coincide_only_when_they_are_equal():
    assert "Muon's is 0.01 and AdamW's 0.001, they do not coincide." in _choice_line(_lead())
    assert "Muon's is 0.001 and AdamW's 0.01, they do not coincide." in _choice_line(_lead(1e-3, 1e-2))
    assert "they coincide." in _choice_line(_lead(1e-3, 1e-3))


def test_a_budget_seed_censored_either_way_shows_its_bound_not_a_measured_lead():
    budget = pd.DataFrame(
        {
            "seed": [0, 1, 2],
            "budget_ratio": 1.0,
            "muon_steps": 10,
            "adamw_lr": 1e-3,
            "adamw_test_loss": 3.0,
            "muon_test_loss": 2.9,
            "lead": [0.5, NAN, NAN],
            "censored": ["none", "above", "below"],
            "lead_bound": [NAN, 2.0, -0.5],
            "seeds": 3,
            "lead_mean": 0.6,
            "lead_low": NAN,
            "lead_high": NAN,
        }
    )
    said = _budget_lines(budget)[1]
    assert "seed 0: +0.500; seed 1: censored above (+2.000); seed 2: censored below (-0.500)" in said
    assert "(2 seeds censored above and below, counted at the bound: no interval)" in said
