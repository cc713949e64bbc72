"""The report's abstract: at most MAX_WORDS (210) words, and every number in it a value the tables hold.

A number of the abstract must be one of: a numeric cell of the committed tables (as is, percent, MB or
GFLOP, to the digits printed; ``655k`` and ``2.24M`` read as thousands and millions), a number a
table's text cell states (the claims' explanations, which the abstract's reasons come from, and
their ``stated_numbers``), or a count of a table's rows (runs, claims, checks, convergence runs, a
verdict's claims). A hand-typed figure fails, named.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from muon_repro.hardware import rows_of_profile
from muon_repro.report.abstract_section import MAX_WORDS, abstract, not_comparable_reasons, title_block
from muon_repro.report.data import TABLES, load

REPO = Path(__file__).resolve().parents[1]
SCALES = (1.0, 100.0, 1e-6, 1e-9)
SUFFIX = {"": 1.0, "k": 1e3, "M": 1e6}
# As tests/test_explanation_numbers.py reads a number, and k / M (count()'s thousands and millions).
NUMBER = re.compile(r"(?<![\w./\-])[+\-−]?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?([kM]?)(?![\w])")
TEXT_TABLES = ("claims", "checks")  # whose text cells the abstract may quote


def numbers_in(text: str) -> list[tuple[str, float, float]]:
    """Each number of ``text``: as printed, its value and the tolerance its digits give it."""
    found = []
    for m in NUMBER.finditer(text):
        whole, frac, suffix = m.group(1).replace(",", ""), m.group(2) or "", m.group(3)
        scale = SUFFIX[suffix]
        digits = len(frac) - 1 if frac else 0
        found.append((m.group(0), float(whole + frac) * scale, (0.5 * 10.0**-digits + 1e-9) * scale))
    return found


def pool_of(data) -> np.ndarray:
    """Every value the abstract may state: numeric cells, numbers in the claims' and checks' text, counts of rows."""
    values: list[float] = []
    for name in TABLES:
        df: pd.DataFrame = getattr(data, name)
        values.append(len(df))
        for col in df.columns:
            series = df[col]
            # the pool is a set: parsing each distinct cell once (the convergence table has 100k rows) is enough
            numeric = pd.to_numeric(pd.Series(series.unique(), dtype=series.dtype), errors="coerce")
            if numeric.notna().any():
                values.extend(numeric.dropna().astype(float).tolist())
            else:
                values.extend(float(n) for n in series.astype(str).value_counts().tolist())
                values.append(float(series.nunique()))
        if name in TEXT_TABLES:
            for col in df.select_dtypes(exclude="number").columns:
                for cell in df[col].dropna().astype(str):
                    values.extend(v for _, v, _ in numbers_in(cell))
            if name == "stated_numbers":
                values.extend(df["value"].dropna().astype(float).tolist())
    found = np.abs(np.array(values, dtype="float64"))
    return np.unique(found[np.isfinite(found)])


def unsupported(text: str, pool: np.ndarray) -> list[str]:
    return [
        printed
        for printed, value, tolerance in numbers_in(text)
        if not any(np.any(np.abs(pool * scale - abs(value)) <= tolerance) for scale in SCALES)
    ]


@pytest.fixture(scope="module")
def committed():
    if not (REPO / "metrics" / "claims.parquet").is_file():
        pytest.fail("no committed metrics: run `muon-repro run` to make them")
    data = load(REPO / "metrics")
    return data.of_profile(data.profiles[0])


def test_the_abstract_is_short_and_every_number_is_a_table_value(committed):
    text = abstract(committed)
    assert len(text.split()) <= MAX_WORDS, (len(text.split()), text)
    assert not unsupported(text, pool_of(committed)), f"numbers no table holds: {unsupported(text, pool_of(committed))}\n{text}"
    # what was measured and on what, the verdicts with why, the failing checks, the thresholds with ranges
    runs, claims = committed.runs, rows_of_profile(committed.claims, committed.profile)  # the view keeps every profile's
    assert f"{len(runs)} runs" in text and f"{len(claims)} claims" in text
    for verdict in claims["verdict"].astype(str).unique():
        assert verdict in text
    failing = committed.checks[committed.checks["holds"].notna() & ~committed.checks["holds"].fillna(True).astype(bool)]
    for check in failing["check"].astype(str):
        assert check.rstrip(".") in text or "consistency checks fail" in text
    if not committed.regime_thresholds.empty:
        assert "cost model" in text
        ranged = committed.regime_thresholds["range_coverage"].notna().any()
        assert bool(re.search(r"\d[kM]? \(\d[^)]*% range\)", text)) == ranged  # a range only with its coverage


def test_a_hand_typed_number_is_caught():
    pool = np.array([654516.5, 642675.9, 0.011, 11.0])
    assert unsupported("falls to 1.1% at 655k (643k–868k) in 11 runs", pool) == ["868k"]
    assert unsupported("2.24M", np.array([2243923.6])) == []
    assert unsupported("at 134M", np.array([2243923.6])) == ["134M"]


def test_not_comparable_reasons_are_said_once_with_their_claims():
    claims = pd.DataFrame(
        {
            "verdict": ["not comparable here"] * 3 + ["reproduced"],
            "outside_conditions": [
                "gloo on cpu, not cuda; 4 tokens per step per d_model, not 100+ (only a/b/c)",
                "gloo on cpu, not cuda; 2 ranks per core; 4 tokens per step per d_model, not 1,000+",
                "1.1 tokens per parameter, not 10+",
                "",
            ],
        }
    )
    assert not_comparable_reasons(claims) == [
        ("gloo on cpu, not cuda", 2),
        ("4 tokens per step per d_model, not 100+ or 1,000+", 2),
        ("2 ranks per core", 1),
        ("1.1 tokens per parameter, not 10+", 1),
    ]


def test_runs_without_their_tokens_per_step_say_so(committed):
    """Tables whose runs predate config.json's tokens per step crashed the abstract (and so the report and the card)."""
    from dataclasses import replace

    blank = replace(committed, runs=committed.runs.assign(tokens_per_step=pd.NA))
    assert "tokens per step not recorded" in abstract(blank)


def test_the_reasons_are_said_of_the_claims_not_comparable_alone():
    """'4 not comparable here, 4 not measured, the runs being outside their conditions' tied the not measured claims
    to the conditions too (a user's own run)."""
    from muon_repro.report.abstract_section import _verdicts

    outside = "gloo on cpu, not cuda"
    mixed = pd.DataFrame({"verdict": ["not comparable here", "not measured"], "outside_conditions": [outside, ""]})
    assert _verdicts(mixed) == (
        "Of 2 claims, 1 not comparable here, 1 not measured; those not comparable here because the runs lie outside "
        "their conditions: gloo on cpu, not cuda (1 claim)."
    )
    alone = pd.DataFrame({"verdict": ["not comparable here"] * 2, "outside_conditions": [outside] * 2})
    said = "All 2 claims are not comparable here, the runs being outside their conditions: gloo on cpu, not cuda (2 claims)."
    assert _verdicts(alone) == said


def test_the_measured_on_sentence_counts_runs_models_and_convergence_runs_from_the_tables(committed):
    """Three model sizes are said as a range from the smallest to the largest; the convergence runs are counted as
    runs (the table has one row per evaluation), not rows."""
    from dataclasses import replace

    from muon_repro.report.abstract_section import _measured_on

    runs = committed.runs.iloc[:3].assign(model_params=[57_504, 4_196_608, 1_000_000])
    curves = pd.DataFrame({"run": ["a", "a", "a", "b", "b"]})
    said = _measured_on(replace(committed, runs=runs, convergence=curves))
    assert "GPTs of 57,504 to 4,196,608 parameters" in said
    assert "in 3 runs" in said and "loss in 2 convergence runs" in said


def test_the_checks_sentence_counts_a_check_without_a_verdict_as_neither_holding_nor_failing():
    """A check whose ``holds`` is null (its runs absent) does not fail; a failing bound check states its value
    against the bound (``2.31, not below 1``), a failing equality its expected value."""
    from muon_repro.report.abstract_section import _checks

    checks = pd.DataFrame(
        {
            "check_id": ["state_accounting", "state_with_transients", "bytes_contiguous"],
            "check": ["State is the plan's.", "State with transients stays below AdamW's.", "Bytes agree."],
            "expected": [0.5, 1.0, 1.0],
            "measured_value": [0.5, 2.31106, float("nan")],
            "holds": pd.array([True, False, pd.NA], dtype="boolean"),
        }
    )
    assert _checks(checks) == ("1 of 3 consistency checks fails: State with transients stays below AdamW's (2.31, not below 1).")
    equality = checks.assign(holds=pd.array([False, True, True], dtype="boolean"), measured_value=[0.6, 0.9, 1.0])
    assert _checks(equality) == "1 of 3 consistency checks fails: State is the plan's (0.6, expected 0.5)."
    assert _checks(checks.assign(holds=pd.array([True, True, pd.NA], dtype="boolean"))) == "All 3 consistency checks hold."


def _thresholds_frame() -> pd.DataFrame:
    """Thresholds of two models on the study's machine and one on another machine, at the two claimed levels."""
    return pd.DataFrame(
        {
            "machine": ["4xRTXA4000-pcie-nccl"] * 3 + ["1xH200-nccl"],
            "metric": ["optimizer_share", "optimizer_share", "optimizer_share", "optimizer_share"],
            "level": [0.011, 0.011, 0.03, 0.011],
            "model": ["gpu-scale-369m", "7b", "gpu-scale-369m", "gpu-scale-369m"],
            "tokens_per_step": [635_426.0, 2_653_127.0, 228_273.0, 651_818.0],
            "tokens_per_step_low": [float("nan"), 1_900_000.0, float("nan"), float("nan")],
            "tokens_per_step_high": [900_000.0, float("nan"), float("nan"), float("nan")],
            "range_coverage": [0.9, 0.9, float("nan"), float("nan")],
        }
    )


def test_the_thresholds_sentence_reads_the_study_machine_at_the_claimed_level_for_every_model():
    """The optimizer share's threshold at the claim's own level (1.1%, not the 3% row) on the original study's GPUs
    (not the H200's row), each model in the table's order; a range open at one end says which grid end it passes."""
    from muon_repro.report.abstract_section import _thresholds

    claims = pd.DataFrame({"claim_id": ["optimizer_share"], "claimed_value": [0.011]})
    said = _thresholds(claims, _thresholds_frame())
    assert said == (
        "By the cost model (tokens per step, on the original study's 4 GPUs), Muon's optimizer share falls to 1.1% at "
        "635k (below the grid–900k, 90% range) for gpu-scale-369m and 2.65M (1.9M–beyond the grid, 90% range) for 7b."
    )
    first = _thresholds(claims, _thresholds_frame(), models=1)
    assert "for gpu-scale-369m." in first and "7b" not in first


def test_the_abstract_keeps_every_part_while_it_fits_the_word_limit_exactly(committed, monkeypatch):
    """The longest abstract (failing checks named, every model's thresholds) is kept when its words are exactly the
    limit; one word fewer and it falls back to a shorter form."""
    import muon_repro.report.abstract_section as section

    monkeypatch.setattr(section, "MAX_WORDS", 10_000)
    longest = abstract(committed)
    models = set(committed.regime_thresholds["model"].astype(str))
    assert all(f"for {model}" in longest for model in models), longest  # every model's thresholds, room allowing
    monkeypatch.setattr(section, "MAX_WORDS", len(longest.split()))
    assert abstract(committed) == longest
    monkeypatch.setattr(section, "MAX_WORDS", len(longest.split()) - 1)
    assert abstract(committed) != longest


def test_the_title_block_dates_the_report_by_the_newest_runs_day_and_numbers_keep_their_digits():
    from muon_repro.report.abstract_section import _number

    block = title_block(REPO, "2026-11-29T08:15:00+00:00", title="T", version="0.1.0", identity={"authors": ["A. B."]})
    assert block["date"] == "2026-11-29" and block["authors"] == "A. B."
    assert (_number(2.31106), _number(1.0), _number(1_234.0), _number(0.5)) == ("2.31", "1", "1,234", "0.5")
