"""The claims are declared once (muon_repro.claims): no other module spells a claimed level, and the claims
table carries each region as numbers that the report reads as numbers."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from support.syntax_trees import parsed

from muon_repro.claims import BY_ID, CLAIMS, LEVELS, PAPER_LATENCY, STUDY_SHARE, Region, level_of, verdict
from muon_repro.report.claims_section import claim_region

PACKAGE = Path(__file__).resolve().parents[1] / "muon_repro"
DECLARATION = PACKAGE / "claims.py"
LEVEL_NUMBERS = {level.value for level in LEVELS}
# a level written as its source writes it, in a string that is not a docstring: "1.1%", "~1.1%", "3%", "1-3%"
LEVEL_TEXT = re.compile(r"(?<![\d.])(1\.1|3)%")


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
        if isinstance(node.body[0].value, ast.Constant)
    }


def level_literals(source: str) -> list[tuple[int, object]]:
    """(line, literal) of every claimed level spelled in ``source``: the number, or its percent in a string."""
    tree = parsed(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant):
            continue
        if isinstance(node.value, float) and node.value in LEVEL_NUMBERS:
            found.append((node.lineno, node.value))
        elif isinstance(node.value, str) and id(node) not in docs and LEVEL_TEXT.search(node.value):
            found.append((node.lineno, node.value))
    return found


def test_only_the_declaration_spells_a_level():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {value!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != DECLARATION
        for line, value in level_literals(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "a claimed level is spelled outside muon_repro/claims.py:\n" + "\n".join(offenders)


def test_the_scan_finds_a_level_in_code_and_in_text_but_not_in_a_docstring():
    source = '"""The ~1.1% of the study."""\nX = 0.011\ny = f"{v} against 3%"\nZ = 0.0111\n'
    assert [line for line, _ in level_literals(source)] == [2, 3]


def test_levels_read_as_their_sources_write_them():
    assert (STUDY_SHARE.percent, PAPER_LATENCY.percent) == ("1.1%", "3%")
    assert level_of(0.011) is STUDY_SHARE and level_of(0.03) is PAPER_LATENCY
    with pytest.raises(ValueError, match="not a declared level"):
        level_of(0.02)


def test_every_claim_is_declared_whole():
    assert len(BY_ID) == len(CLAIMS)
    for c in CLAIMS:
        assert c.unit_kind in ("ratio", "fraction", "change"), c.claim_id
        if c.prediction is not None:
            assert c.level is not None, f"{c.claim_id} is predicted at a level it does not declare"
        if c.claimed_value is not None and c.claim_id != "muon_leading_steps":
            # the claimed value agrees with the claim (the leading-steps claim states its value in FLOPs ratio)
            assert c.region.contains(c.claimed_value), c.claim_id


@pytest.mark.parametrize(
    ("region", "kind", "said"),
    [
        (Region(0.456, 0.684), "ratio", "[0.456×, 0.684×]"),
        (Region(1.0, 1.25, low_open=True), "ratio", "(1×, 1.25×]"),
        (Region(None, 0.03), "change", "≤ +3%"),
        (Region(0.0, 0.022), "fraction", "[0%, 2.2%]"),
        (Region(1.0, None), "ratio", "≥ 1×"),
        (Region(None, None), "ratio", "any value"),
    ],
)
def test_the_report_writes_the_region_from_its_numbers(region, kind, said):
    row = pd.Series({"claim_id": "c", "unit_kind": kind, **region.columns()})
    assert claim_region(row) == said


def test_the_verdict_follows_the_numeric_region():
    region = Region(1.0, 1.25, low_open=True)
    assert verdict(1.1, 1.2, region) == "reproduced"
    assert verdict(1.0, 1.0, region) == "not reproduced"  # the open end excludes it
    assert verdict(0.9, 1.1, region) == "inconclusive"
    assert verdict(math.nan, 1.1, region) == "not measured"


def test_the_committed_claims_table_carries_regions_as_numbers_and_no_json():
    claims = pd.read_csv(PACKAGE.parent / "metrics" / "claims.csv")
    assert {"region_low", "region_high", "region_low_open", "unit_kind"} <= set(claims.columns)
    assert not {"region", "quoted"} & set(claims.columns)
    for row in claims.itertuples():
        declared = BY_ID[row.claim_id].region
        assert (pd.isna(row.region_low) and declared.low is None) or row.region_low == pytest.approx(declared.low)
        assert (pd.isna(row.region_high) and declared.high is None) or row.region_high == pytest.approx(declared.high)


EXPLANATION_WORDS = 60  # the claims table's explanation: the measured cause, short; the report composes the rest


def test_the_committed_explanations_are_short_and_say_differences_in_their_own_column():
    claims = pd.read_csv(PACKAGE.parent / "metrics" / "claims.csv", keep_default_na=False)
    long = {(r.claim_id, r.profile): len(r.explanation.split()) for r in claims.itertuples()}
    assert {k: n for k, n in long.items() if n > EXPLANATION_WORDS} == {}
    for row in claims.itertuples():
        assert "Not comparable here" not in row.explanation and "Measured here" not in row.explanation
        # outside its conditions: not comparable, unless unequal work decided first (claims.judge)
        if row.verdict == "not comparable here" or row.outside_conditions:
            assert row.outside_conditions and row.verdict in ("not comparable here", "unequal work"), (row.claim_id, row.profile)
        for difference in filter(None, row.outside_conditions.split("; ")):
            assert ", not " in difference, f"{row.claim_id}: '{difference}' does not say what the claim had"


def test_the_report_says_why_a_claim_is_not_comparable_before_its_cause():
    from muon_repro.report.claims_section import claim_note

    row = pd.Series({"explanation": "Newton-Schulz does 9 GFLOP.", "outside_conditions": "gloo on cpu, not cuda"})
    assert claim_note(row) == "Not comparable here: gloo on cpu, not cuda. Measured here: Newton-Schulz does 9 GFLOP."
    assert claim_note(row.drop("outside_conditions")) == "Newton-Schulz does 9 GFLOP."
    unequal = claim_note(pd.concat([row, pd.Series({"verdict": "unequal work"})]))
    assert unequal.startswith("Unequal work, and outside the claim's conditions: gloo on cpu, not cuda.")


def test_every_claim_states_its_value_in_its_own_unit():
    """The claimed column and the measured column read in one unit: '~2× compute efficiency' beside a measured 95% was
    two quantities side by side; the claimed value, written as the claim's unit writes it, is in its text."""
    from muon_repro.report.claims_section import claim_number

    for c in CLAIMS:
        if c.claimed_value is None:
            continue
        written = claim_number(c.claimed_value, c.unit_kind, c.claim_id, "claimed_value", digits=0).lstrip("+")
        assert written in c.claimed_text, f"{c.claim_id}: {c.claimed_text!r} does not state {written}"


def test_a_claim_number_writes_ratios_to_two_decimals_and_changes_with_their_sign():
    """Pins claim_number's default digits: a ratio 1.6234 reads 1.62× (two decimals), a change keeps its sign
    (+12.3%, and −12.3% with the typographic minus)."""
    from muon_repro.report.claims_section import claim_number

    assert claim_number(1.6234, "ratio", "X") == "1.62×"
    assert claim_number(0.1234, "change", "X") == "+12.3%"
    assert claim_number(-0.1234, "change", "X") == "−12.3%"
