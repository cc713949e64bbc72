"""The report's words say what its tables count, in the tables' numbers: the cost model's "7b" is named by its shape and
its parameters (regime_model.model_params), not as a 7B model; the pipeline runs are counted by group and their rounds
said group by group; no claim is labelled by its bare id; the stage table and the bubble claim say which statistic
each quotes; the transient buffers are in the checks' unit (MB); figures are numbered in the order they appear.

Rendered from the committed tables with stand-in figures (the words are checked, not the pixels)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from fake_figures import render_with_stand_ins

from muon_repro.report import pipeline_section, study_section
from muon_repro.report.claims_section import claim_short
from muon_repro.report.data import load
from muon_repro.report.pipeline_section import intro, pipeline_costmodel
from muon_repro.report.regimes_section import model_said, models_said, profiles_caption, scale_out_said
from muon_repro.report.selection import counted_by_group, pipeline_runs
from muon_repro.report.setup_section import micro_batches
from muon_repro.report.study_section import study_claims, study_sentence

REPO = Path(__file__).resolve().parents[1]
METRICS = REPO / "metrics"
SEVEN_B = re.compile(r"\b7B\b(?!-shaped)")  # "7B" as a model's size; "LLaMA-7B-shaped" names its shape


@pytest.fixture(scope="module")
def data():
    everything = load(METRICS)
    return everything.of_profile(everything.profiles[0])


@pytest.fixture(scope="module")
def report(committed_report) -> str:
    return committed_report


def _params(data, model: str) -> str:
    table = data.regime_model
    (params,) = set(table.loc[table["model"] == model, "model_params"].astype(int))
    return f"{params:,}"


def test_the_7b_model_is_named_by_its_shape_and_the_tables_parameters(data, report):
    params = _params(data, "7b")
    said = [scale_out_said(data.regime_model), profiles_caption(data.regime_model), models_said(data.regime_model)]
    said.append(pipeline_costmodel(data)["setting"])
    for text in said:
        assert "LLaMA-7B-shaped model" in text and params in text, text
        assert not SEVEN_B.search(text), text
    assert not SEVEN_B.search(report), SEVEN_B.search(report)
    assert report.count(f"LLaMA-7B-shaped model (7b, {params} parameters)") >= 4  # caption, thresholds, scale-out twice


def test_a_model_is_said_from_whatever_the_table_holds():
    table = pd.DataFrame({"kind": ["profile", "profile"], "model": ["7b", "other"], "model_params": [123, 4567]})
    assert model_said("7b", table) == "the LLaMA-7B-shaped model (7b, 123 parameters)"
    assert model_said("other", table) == "other (4,567 parameters)"
    assert model_said("7b", table.iloc[0:0]) == "the LLaMA-7B-shaped model (7b)"
    assert scale_out_said(table) == ""  # no scale-out rows: nothing said
    assert "Right: no scale-out:" in profiles_caption(table)


def test_the_pipeline_runs_are_counted_by_group_and_their_rounds_said_by_group(data):
    runs = pipeline_runs(data.runs)
    groups = runs["group"].value_counts()
    assert len(groups) > 1, "the committed tables hold the pipeline and pipeline_bubble groups"
    counted = f"{len(runs)} ({', '.join(f'{n} in {g}' for g, n in sorted(groups.items()))})"
    assert counted_by_group(runs) == counted
    text = intro(data, runs)
    assert f"The pipeline runs: {counted}," in text and "The pipeline group:" not in text
    for group, rows in runs.groupby("group"):
        rounds = ", ".join(map(str, sorted(set(rows["rounds"].astype(int)))))
        assert f"the {group} group in {rounds}" in text
    assert "pipeline group's" not in micro_batches(data) and counted in micro_batches(data)


def test_one_groups_rounds_are_said_once(data):
    runs = pipeline_runs(data.runs)
    one = runs[runs["group"] == "pipeline"]
    rounds = ", ".join(map(str, sorted(set(one["rounds"].astype(int)))))
    assert f"Each was timed without the profiler in {rounds} interleaved rounds." in intro(data, one)
    assert counted_by_group(one) == f"{len(one)} (pipeline)"


def test_no_claim_is_labelled_by_its_id(data, report):
    sentence = study_sentence(data)
    for c in study_claims(data):
        assert f"; {c['id']} " not in sentence and f", {c['id']} " not in sentence
    assert f"{claim_short('latency_overhead')} " in sentence  # the study sentence opens the abstract
    abstract = report.split("## Abstract", 1)[1].split("##", 1)[0]
    assert "latency_overhead" not in abstract


def test_the_stage_table_and_the_bubble_claim_say_which_statistic_they_quote(report):
    header = "| " + " | ".join(pipeline_section.STAGE_HEADER) + " |"
    assert header in report
    paragraph = report.split(header, 1)[0].strip().rsplit("\n\n", 1)[-1]  # the one just above the stages table
    assert "**median over rounds**" in paragraph and "**mean** over every timed step" in paragraph, paragraph


def test_the_transient_buffers_are_in_the_checks_unit(data, report):
    checks = data.checks[data.checks["check_id"] == "state_with_transients"]
    quoted = re.findall(r"\d+\.\d+ MB", str(checks["explanation"].iloc[0]))
    (line,) = [ln for ln in report.splitlines() if "transient Newton-Schulz gather buffers peak at" in ln]
    assert quoted and all(q in line for q in quoted) and "MiB" not in line, (quoted, line)


def test_figures_are_numbered_in_the_order_they_appear(report):
    numbers = [int(n) for n in re.findall(r"^\*Figure (\d+)\.\*", report, flags=re.MULTILINE)]
    assert numbers == list(range(1, len(numbers) + 1))


@pytest.mark.slow  # renders the report a second time
def test_the_study_protocol_recorded_here_is_shown_without_the_study_s_own_traces(tmp_path, monkeypatch):
    """A user's own run records the study's protocol (3 of its minutes) but has not imported the study's traces: the
    protocol table was inside the section's branch for those traces, so the report showed none of it."""
    monkeypatch.setattr(study_section, "study_profile", lambda data: None)  # as if `muon-repro study import` never ran
    text = render_with_stand_ins(METRICS, tmp_path)
    assert "No run of the original study was analyzed" in text and "The protocol or Muon?" in text
    assert "its protocol, recorded here" in text and "The cost model on the study's machine" not in text
    assert "`muon-repro study import --from DIR --out traces` files the study's 18 published traces beside these runs" in text


def test_a_report_without_the_studys_runs_gives_the_import_that_works_offline(report_data, tmp_path):
    """A user's own run (`muon-repro run --out my-run`) has none of the study's traces: its report named `muon-repro
    study import` without the --from or --hub it needs. It now gives the import into the runs' own traces folder, from
    the copy every checkout holds, and that copy imports."""
    from muon_repro.report.reproduce_section import study_import
    from muon_repro.study.sources import import_study

    said = study_import(report_data)
    assert said["command"] == "muon-repro study import --from DIR --out traces"
    assert said["dataset_copy"] == "traces/4xRTXA4000-pcie-nccl/comparison"
    copy = REPO / said["dataset_copy"]
    result = import_study(copy, tmp_path / "traces")  # byte for byte the dataset's own: the import is reproducible
    assert result.folder == tmp_path / said["dataset_copy"] and sum(f.startswith("trace_") for f in result.files) == 18
    assert all((result.folder / f).read_bytes() == (copy / f).read_bytes() for f in result.files)


def test_muons_extra_per_token_is_read_from_the_steps_timed_without_the_profiler(data, report):
    """The profiled medians put a user's AdamW step 1.94x slower than its timed one and Muon's extra at -5.3 µs per
    token beside the claims table's +115%: the line now reads the timed medians, as the claims do."""
    runs = data.runs.set_index("run")
    muon, adamw = runs.loc["cpu-2c-gloo/comparison/muon_dp2_tp2"], runs.loc["cpu-2c-gloo/comparison/adamw_dp2_tp2"]
    extra = (muon["timed_step_ms"] - adamw["timed_step_ms"]) / int(muon["tokens_per_step"]) * 1000
    said = f"Muon's extra over AdamW per token: {extra:+.1f} µs per token (the difference of the median step times timed "
    assert said in report


def test_no_sentence_runs_into_the_next(report):
    """A note joined to a paragraph by the template without a space read "and state.The comparisons table's ...":
    every sentence the report's parts join ends with a space or a line break before the next one."""
    joined = re.findall(r"[a-z)]\.[A-Z][a-z]+", report)
    assert not joined, joined
