"""The report's limitations and caveats state what the tables show, measured, and of the profile they describe."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from muon_repro.report.caveats_section import loss_line
from muon_repro.report.data import ReportData, load

METRICS = Path(__file__).resolve().parents[1] / "metrics"


def test_the_runs_own_loss_is_measured_and_says_which_optimizer_does_not_fall():
    data = load(METRICS).of_profile("cpu-2c-gloo")
    runs = data.runs[data.runs["group"] == "comparison"]

    def losses(curves: dict[str, list[float]]) -> pd.DataFrame:
        """Per optimizer its loss per step, on every rank; a later round's losses differ (only the first is read)."""
        rows = [
            {"run": r["run"], "trial": trial, "rank": rank, "step": step, "loss": value + trial}
            for _, r in runs.iterrows()
            for trial in (0, 1)
            for rank in range(2)
            for step, value in enumerate(curves[str(r["optimizer"])])
        ]
        return pd.DataFrame(rows)

    falling = loss_line(replace(data, runs=runs, losses=losses({"muon": [3.0, 2.5, 2.0], "adamw": [7.0, 6.5, 6.0]})))
    assert "Muon 3.00 to 2.00 over 3 steps" in falling and "AdamW 7.00 to 6.00 over 3 steps" in falling
    assert falling.endswith("Both fall; the convergence section compares them at their best learning rates.")
    flat = loss_line(replace(data, runs=runs, losses=losses({"muon": [3.0, 2.5, 2.0], "adamw": [6.7, 6.9, 6.92]})))
    assert "AdamW 6.70 to 6.92" in flat and "AdamW's loss does not fall" in flat and "Muon's" not in flat
    assert loss_line(replace(data, losses=data.losses.iloc[:0])) is None


def test_the_overlap_bullet_quotes_the_async_claim_of_its_own_profile():
    from muon_repro.hardware import rows_of_profile
    from muon_repro.report.claims_section import claim_note
    from muon_repro.report.regimes_section import overlap_lines

    everything = load(METRICS)
    lines = overlap_lines(everything.of_profile("cpu-2c-gloo"))
    claims = rows_of_profile(everything.claims, "cpu-2c-gloo")
    assert lines[-1] == claim_note(claims[claims["claim_id"] == "async_slowdown"].iloc[0])
    assert "Rank 0's step (the only async trace published)" not in " ".join(lines)  # the study's row, not this one's


def test_the_communication_bullet_says_what_the_studys_own_traces_make_of_its_ratio():
    from muon_repro.report import derive
    from muon_repro.report.caveats_section import regimes
    from muon_repro.report.results_section import bytes_rows

    data = load(METRICS).of_profile("cpu-2c-gloo")
    said = " ".join(regimes(data, derive.state_by_run(data.ranks, data.runs["run"]), bytes_rows(data)[1]))
    study = data.claims[(data.claims["claim_id"] == "comm_time_dp2_tp2") & (data.claims["profile"] == "4xRTXA4000-pcie-nccl")]
    unequal = "on its own traces that figure compares unequal work" in said
    assert unequal == (study["verdict"].iloc[0] == "unequal work")
    assert "advantage" not in said


def test_the_communication_bullets_name_every_inversion_the_pipeline_group_has_too():
    """'Where the gains hold, vanish or invert' read the DP x TP groups alone and left unsaid the pipeline group's
    pairs where Muon's transfer time is below AdamW's (TP4, PP4, DP2·TP2·PP2 in the committed tables)."""
    from muon_repro.report import derive, style
    from muon_repro.report.caveats_section import regimes
    from muon_repro.report.results_section import bytes_rows
    from muon_repro.report.selection import pipeline_runs

    data = load(METRICS).of_profile("cpu-2c-gloo")
    said = " ".join(regimes(data, derive.state_by_run(data.ranks, data.runs["run"]), bytes_rows(data)[1]))
    comp = pipeline_runs(data.comparisons)
    below = comp[comp["comm_transfer_ms_ratio"] < 1]
    assert len(below)
    bullet = said.split("The pipeline group's runs", 1)[1].split("; as much or more at", 1)[0]
    for _, c in below.iterrows():
        assert f"{style.grid_label(int(c['dp']), int(c['tp']), int(c['pp']))} {c['comm_transfer_ms_ratio']:.2f}×" in bullet


def test_the_optimizer_bullet_says_compute_bound_only_where_newton_schulz_outweighs_the_collectives():
    from muon_repro.phases import NEWTON_SCHULZ, OPTIMIZER_COMM_PHASES
    from muon_repro.report import derive
    from muon_repro.report.caveats_section import _optimizer_weight
    from muon_repro.report.selection import study_runs

    data = load(METRICS).of_profile("cpu-2c-gloo")
    muon = study_runs(data.runs)
    muon = muon[muon["optimizer"] == "muon"]
    shares = pd.Series([derive.optimizer_share(r) for _, r in muon.iterrows()], dtype="float64")
    phases = data.phases
    comm, ns = phases["phase"].isin(OPTIMIZER_COMM_PHASES), phases["phase"] == NEWTON_SCHULZ
    light = phases.assign(ms_per_step=phases["ms_per_step"].where(~comm, 0.001))  # collectives take no time
    assert _optimizer_weight(replace(data, phases=light), muon, shares).startswith("Compute-bound optimizer:")
    dp2tp2 = phases["run"] == "cpu-2c-gloo/comparison/muon_dp2_tp2"
    slow_comm = light.assign(ms_per_step=light["ms_per_step"].where(~(dp2tp2 & ns), 0.001))  # and no Newton-Schulz
    said = _optimizer_weight(replace(data, phases=slow_comm), muon, shares)
    assert said.startswith("Muon's optimizer step:") and said.endswith("but Muon DP2·TP2, where the collectives take longer.")


def test_ranks_sharing_cores_are_said_only_where_the_runs_had_more_ranks_than_cores():
    from muon_repro.report.pipeline_section import meaning
    from muon_repro.report.readme import pipeline_said
    from muon_repro.report.selection import pipeline_runs

    everything = load(METRICS)
    data = everything.of_profile("cpu-2c-gloo")
    shared = "gives its core to another rank"
    assert any(shared in line for line in meaning(data, pipeline_runs(data.runs)))  # 4 ranks on 2 cores
    environment = data.environment.copy()
    environment.loc[environment["key"] == "host_cpu_cores", "value"] = "16"
    roomy = replace(data, environment=environment)
    assert not any(shared in line for line in meaning(roomy, pipeline_runs(roomy.runs)))
    said = "With more ranks than cores"
    assert said in pipeline_said(everything)
    claims = everything.claims.assign(outside_conditions=everything.claims["outside_conditions"].str.replace("per core", "x"))
    assert said not in pipeline_said(replace(everything, claims=claims))


def _cpu() -> ReportData:
    return load(METRICS).of_profile("cpu-2c-gloo")


def _with_ratio(comp: pd.DataFrame, muon_run: str, **columns: float) -> pd.DataFrame:
    """``comp`` with the pair of ``muon_run`` given ``columns``' values."""
    comp = comp.copy()
    for column, value in columns.items():
        comp.loc[comp["muon_run"] == muon_run, column] = value
    return comp


def test_the_communication_bullets_read_the_transfer_ratio_and_count_a_tie_as_as_much():
    """Muon communicating exactly as long as AdamW (1.00×) is "as much or more", never "less"; and where the analysis
    splits transfer time off, the bullets read comm_transfer_ms_ratio, not the comm_ms_ratio that includes the
    waits for slower ranks."""
    from muon_repro.report.caveats_section import _communication
    from muon_repro.report.selection import study_runs

    data = _cpu()
    run = "cpu-2c-gloo/comparison/muon_dp2_tp2"
    comp = _with_ratio(study_runs(data.comparisons), run, comm_transfer_ms_ratio=1.0, comm_ms_ratio=0.5)
    worse, *rest = _communication(data, comp)
    assert worse.startswith("Muon spends as much communication transfer time") and f"(1.00×, {run})" in worse
    assert not any(run in line for line in rest)


def test_the_pipeline_bullet_counts_a_tie_as_as_much_and_says_spread_only_where_muon_sends_no_more_bytes():
    """A pipeline-group pair at exactly 1.00× is "as much or more"; the note that a ratio below 1 is the spread of
    the times, not less traffic, names only the pairs without stages where Muon sends no more bytes than AdamW."""
    from muon_repro.report.caveats_section import _pipeline_communication
    from muon_repro.report.selection import pipeline_runs

    data = _cpu()
    comp = pipeline_runs(data.comparisons)
    tp4 = comp[(comp["tp"] == 4) & (comp["dp"] == 1) & (comp["pp"] == 1)]["muon_run"].iloc[0]
    dp4 = comp[(comp["dp"] == 4) & (comp["pp"] == 1)]["muon_run"].iloc[0]
    comp = _with_ratio(comp, dp4, comm_transfer_ms_ratio=1.0)
    more_bytes = _with_ratio(comp, tp4, comm_transfer_ms_ratio=0.9, comm_bytes_ratio=1.2)
    (said,) = _pipeline_communication(data, more_bytes)
    assert "DP4 1.00×" in said.split("as much or more at", 1)[1]
    assert "Where Muon sends no more bytes" not in said
    (said,) = _pipeline_communication(data, _with_ratio(more_bytes, tp4, comm_bytes_ratio=0.9))
    assert "Where Muon sends no more bytes than AdamW (TP4)" in said


def test_the_layout_bullet_writes_each_layouts_bytes_over_the_contiguous_layouts():
    """Bucketed at 150 bytes against contiguous at 100 is 1.50×, whole-matrix at 80 is 0.80× (not the inverse)."""
    from muon_repro.report.caveats_section import _layout_bytes
    from muon_repro.report.selection import study_runs

    runs = study_runs(_cpu().runs)
    muon = runs[(runs["optimizer"] == "muon") & (runs["dp"] == 2) & (runs["tp"] == 2)]
    per_layout = {"contiguous": 100.0, "bucketed": 150.0, "whole_matrix": 80.0}
    totals = {str(r["run"]): per_layout[str(r["layout"])] for _, r in muon.iterrows()}
    (said,) = _layout_bytes(muon, totals)
    assert "bucketed 1.50×, whole-matrix 0.80×" in said


def test_the_state_bullets_count_adamws_two_moments_and_name_the_most_uneven_run():
    """Muon keeps one fp32 moment (4 bytes per element), AdamW two (8): 6 MB of Muon state and 2 MB of AdamW's are
    1.5M and 0.25M elements, 86% matrices, so the best ratio is 0.57×; the uneven-chunk bullet names the run whose
    largest rank holds the most over its mean (1.5×, not the 1.3× of another)."""
    from muon_repro.report.caveats_section import _state
    from muon_repro.report.selection import representative_runs, study_runs

    data = _cpu()
    runs = study_runs(data.runs)
    muon = runs[runs["optimizer"] == "muon"]
    first = next(str(r["run"]) for _, r in representative_runs(runs).iterrows() if r["optimizer"] == "muon")
    others = [str(u) for u in muon["run"] if str(u) != first]
    largest = {first: 1.0, others[0]: 1.5, others[1]: 1.3}
    state = pd.DataFrame(
        [
            {"run": u, "muon": 6e6, "adamw": 2e6, "largest": largest.get(u, 1.0) * 8e6, "transient": 0.0}
            for u in runs["run"].astype(str)
        ]
    )
    said = _state(data, runs, muon, state)
    assert said[0].startswith("Optimizer state: 86% of the parameters are hidden matrices")
    assert "so the best ratio here is 0.57×" in said[0]
    assert f"({others[0]}): ZeRO-1 chunks split the state unevenly" in said[1] and "12.00 MB" in said[1]


def test_the_round_to_round_spread_quotes_the_largest_spread():
    """The spread "up to" which rounds differ is the run whose round medians spread most (150 over 100 ms, 1.50×),
    not the least (1.10×)."""
    from muon_repro.report.caveats_section import limitations

    data = _cpu()
    runs = data.runs.iloc[:2]
    spread = {str(runs["run"].iloc[0]): (100.0, 110.0), str(runs["run"].iloc[1]): (100.0, 150.0)}
    timed = pd.DataFrame(
        [
            {"run": run, "trial": trial, "rank": rank, "step": step, "step_ms": medians[trial]}
            for run, medians in spread.items()
            for trial in (0, 1)
            for rank in (0, 1)
            for step in range(3)
        ]
    )
    said = " ".join(limitations(replace(data, runs=runs, timed_steps=timed)))
    assert "differs from another's by up to 1.50×" in said and "100 ms, 150 ms in its 2 rounds" in said


def test_the_limitations_count_the_profiled_steps_per_traced_round():
    """runs.steps counts the profiled steps over every traced round: 10 over 2 traced rounds are 2 trials × 5
    steps, not × 10."""
    from muon_repro.report.caveats_section import limitations

    data = _cpu()
    runs = data.runs.iloc[:1].assign(trials=2, steps=10)
    said = limitations(replace(data, runs=runs))
    assert any(line.startswith("Each run profiles 2 trials × 5 steps after warm-up") for line in said), said


def test_the_optimizer_weight_bullet_needs_every_muon_run_above_five_percent():
    """Muon's optimizer step is said to weigh on the step only where it is more than 5% of it on every Muon run of
    the DP x TP groups; one run at 1% leaves the bullet
    out."""
    from muon_repro.report import derive
    from muon_repro.report.caveats_section import regimes
    from muon_repro.report.results_section import bytes_rows

    data = _cpu()
    state, totals = derive.state_by_run(data.ranks, data.runs["run"]), bytes_rows(data)[1]
    weighed = ("Muon's optimizer step:", "Compute-bound optimizer:")
    assert any(line.startswith(weighed) for line in regimes(data, state, totals))
    runs = data.runs.copy()
    runs.loc[runs["run"] == "cpu-2c-gloo/comparison/muon_dp2_tp2", "optimizer_share"] = 0.01
    assert not any(line.startswith(weighed) for line in regimes(replace(data, runs=runs), state, totals))
