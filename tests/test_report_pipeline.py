"""The report's "3-D parallelism (DP x TP x PP)" section and its figure, from the committed tables: the grids, the
stages and the two claims are there; every number the section states is a table value; without a pipeline run
(a profile of single-device runs, tables older than ``runs.pp``) it is one sentence and nothing is drawn; and the
figures about the original study's DP x TP grid leave the pipeline group out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_report_abstract import numbers_in, unsupported

from muon_repro.report import stated
from muon_repro.report.data import load
from muon_repro.report.formatting import ms
from muon_repro.report.pipeline_section import (
    GRID_HEADER,
    NO_PIPELINE,
    PIPELINE_CLAIMS,
    STAGE_HEADER,
    deepest_muon_pipeline,
    has_pipeline,
    pipeline,
    pipeline_section,
)
from muon_repro.report.selection import pipeline_runs, representative_runs, study_runs, timeline_run

METRICS = Path(__file__).resolve().parents[1] / "metrics"


@pytest.fixture(scope="module")
def data():
    everything = load(METRICS)
    return everything.of_profile(everything.profiles[0])


def _cells(df: pd.DataFrame) -> list[float]:
    values: list[float] = []
    for col in df.columns:
        numeric = pd.to_numeric(df[col], errors="coerce").dropna()
        values += numeric.astype(float).tolist()
    return values


def pool(data) -> np.ndarray:
    """What the section may state: the pipeline runs' cells, their comparisons and stages, the environment's values,
    and the numbers of the claims' text (their explanations, validated by tests/test_explanation_numbers.py)."""
    runs = pipeline_runs(data.runs)
    values = _cells(runs) + _cells(data.stages) + [float(len(runs)), float(len(runs) // 2)]
    values += _cells(data.comparisons[data.comparisons["muon_run"].isin(runs["run"])])
    values += _cells(data.environment[data.environment["run"].isin(runs["run"])][["value"]])
    claims = data.claims[data.claims["claim_id"].isin(PIPELINE_CLAIMS)]
    values += _cells(claims)
    for cell in claims["explanation"].dropna().astype(str):
        values += [v for _, v, _ in numbers_in(cell)]
    numbers = data.stated_numbers
    values += numbers[(numbers["table"] == "claims") & numbers["row_id"].isin(PIPELINE_CLAIMS)]["value"].dropna().tolist()
    found = np.abs(np.array(values, dtype="float64"))
    return np.unique(found[np.isfinite(found)])


def _text(section: dict) -> list[str]:
    texts = [section["intro"], *section["meaning"]]
    texts += [cell for row in section["grid_rows"] + section["stage_rows"] for cell in row]
    texts += [p["said"] for c in section["claims"] for p in c["profiles"]]
    return texts


def test_the_section_shows_every_grid_every_muon_stage_and_both_claims(data):
    section = pipeline_section(data)
    assert section["present"]
    runs = pipeline_runs(data.runs)
    assert len(section["grid_rows"]) == len(runs[["dp", "tp", "pp"]].drop_duplicates()) == 7
    assert all(len(row) == len(GRID_HEADER) for row in section["grid_rows"])
    assert [row[0] for row in section["grid_rows"]] == ["DP4", "TP4", "DP2·TP2", "PP2·DP2", "PP2·TP2", "PP4", "DP2·TP2·PP2"]
    assert section["grid_rows"][-1][1] == "8"  # the 8-rank grid last, shown but not compared
    muon_stages = data.stages[data.stages["optimizer"] == "muon"]
    assert len(section["stage_rows"]) == len(muon_stages) and all(len(r) == len(STAGE_HEADER) for r in section["stage_rows"])
    assert [c["id"] for c in section["claims"]] == list(PIPELINE_CLAIMS)
    for c in section["claims"]:
        row = data.claims[(data.claims["claim_id"] == c["id"]) & (data.claims["profile"] == data.profile)].iloc[0]
        mine = next(p["said"] for p in c["profiles"] if p["profile"] == data.profile)
        assert str(row["verdict"]) in mine and "2 ranks per core" in mine
    meaning = " ".join(section["meaning"])
    assert "upper bound" in meaning and "not compared with the 4-rank grids" in meaning


def test_two_runs_of_one_grid_are_told_apart_and_the_grid_row_is_the_pipeline_groups(data):
    section = pipeline_section(data)
    labels = [f"{row[0]} stage {row[1]}" for row in section["stage_rows"]]
    assert len(labels) == len(set(labels)), labels  # no two stages read alike
    first, second = labels.index("PP4 (pipeline) stage 0"), labels.index("PP4 (pipeline_bubble) stage 0")
    assert second == first + 4  # each run's four stages together, the pipeline group's first
    runs = pipeline_runs(data.runs)
    pp4 = runs[(runs["optimizer"] == "muon") & (runs["pp"] == 4) & (runs["group"] == "pipeline")].iloc[0]
    grid_row = next(row for row in section["grid_rows"] if row[0] == "PP4")
    assert grid_row[3] == ms(pp4["timed_step_ms"], "runs.timed_step_ms")  # the pipeline group's, not the other


def test_every_number_in_the_section_is_a_table_value(data):
    section, values = pipeline_section(data), pool(data)
    bad = {text: unsupported(text, values) for text in _text(section)}
    assert not {t: b for t, b in bad.items() if b}, bad
    assert unsupported("PP4 stage 3: 4242.4242 ms", values) == ["4242.4242"]  # a hand-typed number is caught


def test_without_pipeline_runs_the_section_is_one_sentence_and_nothing_is_drawn(data):
    from dataclasses import replace

    without = replace(data, runs=study_runs(data.runs))
    assert pipeline_section(without) == {"present": False, "none": NO_PIPELINE}
    assert not has_pipeline(without.runs)
    older = replace(data, runs=data.runs.drop(columns=["pp"]))  # tables written before runs.pp
    assert not pipeline_section(older)["present"] and not has_pipeline(older.runs)
    one_device = load(METRICS).of_profile("1xH200-nccl")
    assert not pipeline_section(one_device)["present"]


def test_the_figure_draws_from_the_tables_and_states_the_claims(data, tmp_path, svg_only):
    said = stated.pipeline(data.claims, stated.profile_of(data.runs))
    assert set(said.values) == {f"claims.{cid}.measured_value" for cid in PIPELINE_CLAIMS}
    png = pipeline(data.runs, data.stages, data.claims, tmp_path / "pipeline")
    assert png.is_file() and png.with_suffix(".svg").is_file()
    svg = " ".join(png.with_suffix(".svg").read_text().split())
    for value in said.values.values():
        assert value in said.text and value in svg
    assert "DP2·TP2·PP2" in svg and "(8 ranks)" in svg


def test_the_study_figures_keep_to_the_original_groups(data):
    reps = representative_runs(data.runs)
    assert not reps.empty and "pipeline" not in set(reps["group"])
    assert (reps["pp"].fillna(1) == 1).all()
    assert str(timeline_run(data.runs)["group"]) != "pipeline"
    assert len(study_runs(data.runs)) + len(pipeline_runs(data.runs)) == len(data.runs)


def test_the_cost_model_part_prices_every_recorded_pipeline_and_the_7b_scale_out(data):
    from muon_repro.report.pipeline_section import SCALE_OUT_HEADER, pipeline_costmodel

    part = pipeline_costmodel(data)
    assert part["present"]
    predicted = data.predictions[data.predictions["pp"] > 1]
    assert len(part["validation_rows"]) == len(predicted) == len(pipeline_runs(data.runs)[lambda r: r["pp"] > 1])
    assert [row[0] for row in part["rows"]] == [f"{g:,}" for g in sorted(data.pipeline_scale_out["gpus"].unique())]
    assert all(len(row) == len(SCALE_OUT_HEADER) for row in part["rows"])
    labels = [row[0] for row in part["validation_rows"]]
    assert len(set(labels)) == len(labels), labels  # the pipeline and pipeline_bubble groups' PP4 told apart
    # the setting names the model by its parameters, regime_model's (pipeline_scale_out has no such column)
    cells = _cells(data.predictions) + _cells(data.pipeline_scale_out) + _cells(data.regime_model[["model_params"]])
    values = np.unique(np.abs(np.array(cells, dtype="float64")))
    texts = [part["setting"], *(cell for row in part["rows"] + part["validation_rows"] for cell in row)]
    bad = {text: unsupported(text, values) for text in texts}
    assert not {t: b for t, b in bad.items() if b}, bad
    from dataclasses import replace

    empty = replace(data, predictions=data.predictions.iloc[0:0], pipeline_scale_out=data.pipeline_scale_out.iloc[0:0])
    assert pipeline_costmodel(empty) == {"present": False}


def test_the_pipeline_timeline_draws_one_step_of_the_deepest_muon_pipeline_stage_by_stage(data, tmp_path, svg_only):
    from muon_repro.report import timeline_figures
    from muon_repro.report.timeline_figures import _rank_label

    run = deepest_muon_pipeline(data.runs)
    assert run.endswith("pipeline/muon_pp4")
    row = data.runs[data.runs["run"] == run].iloc[0]
    assert [_rank_label(row, r) for r in (0, 3)] == ["stage 0 (rank 0)", "stage 3 (rank 3)"]
    out = timeline_figures.timeline(data.timeline, data.runs, tmp_path / "pipeline_timeline", run=run)
    svg = out.with_suffix(".svg").read_text()
    assert "pipeline bubble (receives, flush)" in svg and "PP send (activations, gradients)" in svg
    with pytest.raises(ValueError, match="no Muon pipeline run"):
        deepest_muon_pipeline(study_runs(data.runs))


def test_each_grid_row_holds_its_runs_cells_column_by_column(data):
    """Per grid, Muon's then AdamW's step and optimizer step timed without the profiler, the comparison's timed step
    ratio (not the profiled one) and Muon's bubble wherever the grid has stages (PP2 too)."""
    from muon_repro.report.pipeline_section import grid_rows, pipeline_grids
    from muon_repro.report.results_section import comparison_ratio

    runs = pipeline_runs(data.runs)
    rows = grid_rows(data, runs)
    comparisons = data.comparisons.set_index("muon_run")
    assert (comparisons["timed_step_ms_ratio"] != comparisons["step_ms_ratio"]).any()  # the two ratios differ here
    for row, ((dp, tp, pp), g) in zip(rows, pipeline_grids(runs)):
        muon, adamw = (g[g["optimizer"] == name].iloc[0] for name in ("muon", "adamw"))
        cells = [ms(r[c]) for c in ("timed_step_ms", "timed_optimizer_ms") for r in (muon, adamw)]
        assert row[3:7] == cells, row
        assert row[7] == comparison_ratio(comparisons.loc[muon["run"]], "timed_step_ms_ratio"), row
        assert row[8] == ("no stages" if pp == 1 else ms(muon["timed_bubble_ms"])), row


def test_each_stage_row_holds_its_stages_cells_and_a_grid_label_only_a_shared_grid_extends(data):
    from muon_repro.report.pipeline_section import muon_stages, stage_rows

    runs = pipeline_runs(data.runs)
    rows, stages = stage_rows(data, runs), muon_stages(data.stages, runs)
    assert len(rows) == len(stages)
    for row, (_, s) in zip(rows, stages.iterrows()):
        assert row[1] == str(s["stage"]) and row[2].startswith(f"{s['blocks']} block")
        assert row[2].endswith(f" + {s['holds']}") if s["holds"] else "+" not in row[2]
        assert row[3:6] == [ms(s["timed_fwd_bwd_ms"]), ms(s["timed_bubble_ms"]), ms(s["timed_optimizer_ms"])], row
    assert {row[2] for row in rows} >= {"2 blocks + embedding", "2 blocks + head", "1 block"}
    # AdamW runs PP2·DP2 too: only another Muon run of the grid (PP4's two groups) puts a group in the label
    assert {row[0] for row in rows} == {"PP2·DP2", "PP2·TP2", "PP4 (pipeline)", "PP4 (pipeline_bubble)", "DP2·TP2·PP2"}


def test_the_intro_and_meaning_say_the_micro_batches_sequences_and_ranks_per_core_the_tables_give(data):
    section = pipeline_section(data)
    runs = pipeline_runs(data.runs)
    assert (runs["tokens_per_step"] == runs["dp"] * runs["micro_batches"] * runs["seq_len"]).all()
    assert f"in micro-batches of one sequence of {int(runs['seq_len'].iloc[0])} tokens" in section["intro"]
    eight = runs[runs["world_size"] == 8].iloc[0]
    cores = int(float(data.environment_of(str(eight["run"]))["host_cpu_cores"]))
    assert f"runs 8 ranks on the same {cores} cores, {8 // cores} ranks per core:" in " ".join(section["meaning"])


def test_the_pipeline_claims_are_said_for_every_profile_the_claims_table_holds(data):
    section = pipeline_section(data)
    profiles = set(data.claims["profile"].astype(str))
    assert len(profiles) > 1
    for claim in section["claims"]:
        assert {p["profile"] for p in claim["profiles"]} == profiles, claim["id"]


def test_the_cost_models_rows_hold_their_tables_cells_column_by_column(data):
    from muon_repro.report.formatting import percent
    from muon_repro.report.pipeline_section import pipeline_costmodel

    part = pipeline_costmodel(data)
    predicted = data.predictions[data.predictions["pp"] > 1].sort_values("run")
    for row, (_, p) in zip(part["validation_rows"], predicted.iterrows()):
        assert row[1:4] == [ms(p["measured_step_ms"]), ms(p["predicted_step_ms"]), percent(p["step_rel_error"], signed=True)]
        assert row[4:7] == [
            ms(p["measured_optimizer_ms"]),
            ms(p["predicted_optimizer_ms"]),
            percent(p["optimizer_rel_error"], signed=True),
        ]
    table = data.pipeline_scale_out
    for row in part["rows"]:
        at = table[table["gpus"] == int(row[0].replace(",", ""))]
        m, a = (at[at["optimizer"] == name].iloc[0] for name in ("muon", "adamw"))
        assert row[3:6] == [ms(m["step_ms"]), ms(a["step_ms"]), percent(m["optimizer_share"])], row
        assert row[6] == f"{ms(m['optimizer_exposed_ms'])} ({ms(m['stage_optimizer_max_ms'])})", row
        assert row[8] == f"{percent(m['bubble_fraction'])} ({percent(m['ideal_bubble_fraction'])})", row
