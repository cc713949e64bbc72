"""Every number an explanation states is a value its tables hold.

The claims' and checks' explanations are prose around numbers. Each number must be one of:
a cell of the committed tables of the row's hardware profile (a phase's value: its mean over trials
and ranks, as the explanations quote it), at the scale it is printed in (as is, percent, MB or
GFLOP), to the digits printed; a value the ``stated_numbers`` table records for the row (the ratios,
intervals and aggregates no cell holds); or a constant written in the code that builds the
explanations (a claim's conditions, a unit's bytes). A number that is none of these (a stale or
hand-written figure) fails, with the claim and the number named.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.syntax_trees import tree_of

from muon_repro.tables.io import read_table

REPO = Path(__file__).resolve().parents[1]
METRICS = REPO / "metrics"
# The modules whose text the explanations are made of: their literal numbers are the code's constants.
WRITERS = (
    *("claims.py", "claim_measures.py", "pipeline_claims.py", "leading_claim.py", "claim_inputs.py", "checks.py"),
    "convergence.py",
)
# The tables whose cells an explanation may quote: those of the runs it names, and the whole of the small ones.
RUN_TABLES = ("runs", "ranks", "comparisons", "phases")
WHOLE_TABLES = ("regimes", "regime_thresholds", "predictions")
CONVERGENCE_TABLES = ("convergence", "convergence_runs", "leading_steps", "leading_summary")
CELL_TABLES = (*RUN_TABLES, *WHOLE_TABLES, *CONVERGENCE_TABLES, "claims", "checks")
RUN_ID = re.compile(r"[\w.\-]+/[\w.\-]+/[\w.\-]+")  # <profile>/<group>/<name>
SCALES = (1.0, 100.0, 1e-6, 1e-9)  # as is, percent, MB, GFLOP
# A number: not part of a name (dp2_tp2, 4xRTXA4000-pcie-nccl, 369m, 7b, f/2), commas as thousands separators.
NUMBER = re.compile(r"(?<![\w./\-])[+\-−]?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w])")


def numbers_in(text: str) -> list[tuple[str, float, int]]:
    """Each number of ``text``: as printed, its value and its digits after the point."""
    found = []
    for m in NUMBER.finditer(text):
        whole, frac = m.group(1).replace(",", ""), m.group(2) or ""
        found.append((m.group(0), float(whole + frac), len(frac) - 1 if frac else 0))
    return found


def code_constants() -> set[float]:
    """The numbers written in the modules that build the explanations: in their strings and as literals."""
    values: set[float] = set()
    for path in [REPO / "muon_repro" / "analysis" / name for name in WRITERS] + [REPO / "muon_repro" / "claims.py"]:
        tree = tree_of(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                values |= {v for _, v, _ in numbers_in(node.value)}
            elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
                values |= {abs(float(node.value)), abs(float(node.value)) * 100}
    return values


def _numbers(df: pd.DataFrame) -> list[np.ndarray]:
    return [pd.to_numeric(df[c], errors="coerce").to_numpy(dtype="float64") for c in df.select_dtypes("number").columns]


def table_values(tables: dict[str, pd.DataFrame], row: pd.Series) -> np.ndarray:
    """The cells a row's explanation may quote: every numeric cell of the runs its conditions name (their runs,
    ranks and comparisons rows, and each of their phases' means over trials and ranks), of the regime sweep and
    the cost model's tables, of its own row; for the convergence claim, each run's last evaluation and each
    seed's end of the leading ratio with the summaries over seeds."""
    profile = str(row["profile"])
    mine = {n: df[df["profile"] == profile] if "profile" in df.columns else df for n, df in tables.items()}
    runs = set(RUN_ID.findall(str(row.get("conditions", ""))))
    cells = _numbers(row.to_frame().T.infer_objects())
    for name in RUN_TABLES:
        df = mine[name]
        keys = ("muon_run", "adamw_run") if name == "comparisons" else ("run",)
        df = df[np.logical_or.reduce([df[k].isin(runs) for k in keys])]
        if name == "phases":
            numeric = [c for c in df.select_dtypes("number").columns if c not in ("trial", "rank")]
            df = df.groupby(["run", "phase"])[numeric].mean().reset_index()
        cells += _numbers(df)
    for name in WHOLE_TABLES:
        cells += _numbers(mine[name])
    if str(row.iloc[0]) == "muon_leading_steps":
        conv, lead = mine["convergence"], mine["leading_steps"]
        cells += _numbers(conv.sort_values("step").groupby("run").tail(1))
        cells += _numbers(lead[lead["at_end"].fillna(False).astype(bool)] if "at_end" in lead.columns else lead)
        cells += _numbers(mine["leading_summary"])
    values = np.concatenate(cells) if cells else np.array([])
    return np.unique(np.abs(values[np.isfinite(values)]))


def unsupported(text: str, pool: np.ndarray, constants: set[float]) -> list[str]:
    """The numbers of ``text`` that are neither a table value (at a scale, to the digits printed) nor a constant."""
    missing = []
    for printed, value, digits in numbers_in(text):
        value = abs(value)
        if value in constants:
            continue
        tolerance = 0.5 * 10.0**-digits + 1e-9
        if any(np.any(np.abs(pool * scale - value) <= tolerance) for scale in SCALES):
            continue
        missing.append(printed)
    return missing


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    names = [*CELL_TABLES, "phases", "stated_numbers"]
    if not all((METRICS / f"{n}.parquet").is_file() for n in names):
        pytest.fail("no committed metrics: run `muon-repro run` to make them")
    return {n: read_table(METRICS / f"{n}.parquet") for n in names}


@pytest.mark.parametrize("table", ["claims", "checks"])
def test_every_number_in_an_explanation_is_a_table_value(tables, table):
    constants = code_constants()
    failures = []
    rows, stated = tables[table], tables["stated_numbers"]
    assert len(rows), f"the committed {table} table is empty"
    for _, row in rows.iterrows():
        id_column = "claim_id" if table == "claims" else "check_id"
        mine = stated[(stated["table"] == table) & (stated["row_id"] == row[id_column]) & (stated["profile"] == row["profile"])]
        quoted = np.abs(mine["value"].to_numpy(dtype="float64"))
        bad = unsupported(str(row["explanation"]), np.concatenate([table_values(tables, row), quoted]), constants)
        if bad:
            failures.append(f"{table} {row.iloc[0]} ({row['profile']}): {', '.join(bad)}")
    assert not failures, "numbers no table holds:\n" + "\n".join(failures)


def test_a_hand_written_number_is_caught():
    pool = np.array([0.552, 0.631, 3.080])
    text = "Leading ratio 0.552 to 0.631; final loss 3.080 nats; its own toy run ended with AdamW ahead at 13k steps, then 13."
    assert unsupported(text, pool, constants=set()) == ["13"]  # '13k' is a name, but a bare 13 is a number
    assert unsupported("ratio 1.31 with waiting", np.array([1.3149]), set()) == []
    assert unsupported("ratio 1.31 with waiting", np.array([1.3251]), set()) == ["1.31"]
    assert unsupported("7.2% of the step, 14.16 MB", np.array([0.0721, 14_160_000.0]), set()) == []
    named = "cpu-2c-gloo/comparison/muon_dp2_tp2 at 366,478 tokens, 1 - f/2"
    assert numbers_in(named) == [("366,478", 366478.0, 0), ("1", 1.0, 0)]
