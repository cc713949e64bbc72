"""What the study's rebuilt numbers and its claims' explanations say a value is, the value is.

From the study's committed traces: a ``measured_what`` that names a transfer time labels a transfer time (not
the NCCL kernel time, waits for the peers included), and the numbers the optimizer-share explanation says the
study divides give the study's share when divided.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from muon_repro.claims import STUDY_SHARE
from muon_repro.study.claims import study_claim_rows
from muon_repro.study.scopes import STEP
from muon_repro.study.sources import study_folder
from muon_repro.study.tables import study_tables

REPO = Path(__file__).resolve().parents[1]
COMMITTED = study_folder(REPO / "traces")
MS = re.compile(r"(\d+(?:\.\d+)?) ms")


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return study_tables([COMMITTED])  # the study's own traces alone


def _rank0_per_step(steps: pd.DataFrame, run: str, column: str, scopes: tuple[str, ...] = (STEP,)) -> float:
    """Rank 0's ``column`` summed over ``scopes``, mean over its steps (NaN when it has no value)."""
    sel = steps[steps["run"].str.endswith(f"/{run}") & (steps["rank"] == 0) & steps["scope"].isin(scopes)]
    return float(sel.groupby("step")[column].sum(min_count=1).mean())


def _within_rounding(printed: str) -> tuple[float, float]:
    """The interval a number printed with its digits stands for."""
    digits = len(printed.split(".")[1]) if "." in printed else 0
    half = 0.5 * 10.0**-digits
    return float(printed) - half, float(printed) + half


# ---------------------------------------------------------------- the rebuilt numbers' labels


def test_a_measured_label_naming_transfer_is_a_transfer_time(tables):
    method, steps = tables["study_method"], tables["study_steps"]
    labelled = method[method["measured_what"].fillna("").astype(str) != ""]
    comm_rows = labelled[labelled["number_id"].str.contains("comm_ms")]
    assert set(comm_rows["number_id"]) == {"comm_ms_muon", "comm_ms_adamw", "async_comm_ms_muon", "async_comm_ms_adamw"}
    for r in labelled.itertuples():
        what, value = str(r.measured_what), float(r.measured_per_step)
        kernel = _rank0_per_step(steps, str(r.study_run), "comm_ms")
        transfer = _rank0_per_step(steps, str(r.study_run), "comm_transfer_ms")
        if "transfer" in what:
            assert not np.isnan(transfer), f"{r.number_id}: labelled {what!r}, but its run has no transfer time"
            assert value == pytest.approx(transfer), f"{r.number_id}: labelled {what!r}, but {value} is not it"
        if value == pytest.approx(kernel) and not value == pytest.approx(transfer):
            assert "transfer" not in what and "waits" in what, f"{r.number_id}: kernel time with waits labelled {what!r}"
    # the audit's figures: rank 0's kernel time (13.75 ms) is not its transfer time (5.91 ms), and the async runs have none
    muon = comm_rows.set_index("number_id").loc["comm_ms_muon"]
    assert round(float(muon["measured_per_step"]), 2) == 13.75
    assert round(_rank0_per_step(steps, "muon_FULLSTEP_dp2_tp2", "comm_transfer_ms"), 2) == 5.91
    assert np.isnan(_rank0_per_step(steps, "muon_FULLSTEP_dp2_tp2_async", "comm_transfer_ms"))


def test_the_communication_measure_is_the_kernel_time_the_study_sums(tables):
    """Why the value (not the label) is kept: the study's communication sums its NCCL kernels whole, waits included;
    per step, rank 0's union of those kernels is at most their sum, and is it where they never overlap (synchronous)."""
    method, parts = tables["study_method"].set_index("number_id"), tables["study_method_parts"]
    for number_id in ("comm_ms_muon", "comm_ms_adamw", "async_comm_ms_muon", "async_comm_ms_adamw"):
        assert bool(method.loc[number_id, "rebuilt_matches"]), number_id
        kernels = parts[(parts["number_id"] == number_id) & (parts["category"] == "kernel (collective)")]["ms"].sum() / 5
        ours = float(method.loc[number_id, "measured_per_step"])
        assert ours <= kernels + 1e-6, number_id
        if not number_id.startswith("async"):
            assert ours == pytest.approx(kernels, rel=1e-6), number_id


# ---------------------------------------------------------------- the optimizer share's explanation


def test_the_optimizer_share_explanation_quotes_what_the_study_divides(tables):
    rows = pd.DataFrame(study_claim_rows(tables)).set_index("claim_id")
    row = rows.loc["optimizer_share"]
    text, share = str(row["explanation"]), float(row["study_method_value"])
    assert round(share, 3) == STUDY_SHARE.value
    sentence = next(s for s in text.split(". ") if s.startswith(f"The study's ~{STUDY_SHARE.percent}"))
    figures = MS.findall(sentence)
    assert len(figures) == 2, sentence
    (num_lo, num_hi), (den_lo, den_hi) = (_within_rounding(f) for f in figures)
    # a reader who divides the sentence's two figures gets the study's share, within their rounding
    assert num_lo / den_hi <= share <= num_hi / den_lo, (figures, share)
    assert f"{float(figures[0]) / float(figures[1]):.1%}" == STUDY_SHARE.percent
    # and they are rank 0's per step: the study's 5-step sums of rank 0's trace, divided by 5
    method = tables["study_method"].set_index("number_id")
    assert num_lo <= float(method.loc["optimizer_ms_muon", "rebuilt"]) / 5 <= num_hi
    assert den_lo - 0.05 <= float(method.loc["total_ms_muon", "rebuilt"]) / 5 <= den_hi + 0.05
    assert sentence.count("rank 0's") >= 2


def test_the_optimizer_share_explanation_says_whose_numbers_the_others_are(tables):
    rows = pd.DataFrame(study_claim_rows(tables)).set_index("claim_id")
    text = str(rows.loc["optimizer_share", "explanation"])
    first = text.split(". ")[0]
    busy, step = MS.findall(first)
    run = tables["study_runs"]
    run = run[run["run"].str.endswith("/muon_FULLSTEP_dp2_tp2")].iloc[0]
    # the means over the traced ranks (study_runs), which differ from rank 0's: so the text must say "mean"
    assert busy == f"{float(run['optimizer_gpu_busy_ms']):.1f}" and step == f"{float(run['step_ms']):.1f}"
    steps = tables["study_steps"]
    assert f"{_rank0_per_step(steps, 'muon_FULLSTEP_dp2_tp2', 'step_ms'):.1f}" != step
    assert f"means over the {int(run['ranks_traced'])} ranks" in first
