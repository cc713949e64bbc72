"""The report's limitations and caveats state what the tables show, measured, and of the profile they describe."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from muon_repro.report.caveats_section import loss_line
from muon_repro.report.data import load

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
