"""The analysis on gloo traces recorded here (4 ranks, DP=2 x TP=2) with known collectives.

One launch records everything (see analysis_workers.py): an AdamW-like run and a Muon-like run
with two extra gathers. Sizes are known, so bytes, phases, group sizes, the ledger agreement
and the Muon/AdamW byte ratio are checked exactly.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from analysis_workers import ACTIVE, DP, KNOWN, TP

from muon_repro.formulas import ring_bytes
from muon_repro.table_set import build_tables
from muon_repro.tables.io import read_table, stamped_schema, write_tables
from muon_repro.tables.schemas import SCHEMAS
from muon_repro.tables.stamp import CSV_SHA256_KEY, GENERATION_KEY, table_stamp

REPO = Path(__file__).resolve().parents[1]
WORLD = DP * TP
STATE_BYTES = {"adamw": {"muon": 0, "adamw": 8000}, "muon": {"muon": 2000, "adamw": 4000}}  # 500 Muon + 500 AdamW elements


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    from analysis_workers import record_known_collectives

    from muon_repro.parallel.launch import launch

    out = tmp_path_factory.mktemp("gloo_traces")
    results = launch(record_known_collectives, WORLD, str(out))
    for optimizer in ("adamw", "muon"):
        run_dir = out / "known" / f"{optimizer}_dp2_tp2"
        config = {
            "group": "known",
            "name": run_dir.name,
            "optimizer": optimizer,
            "layout": "contiguous",
            "dp": DP,
            "tp": TP,
            "world_size": WORLD,
            "backend": "gloo",
            "device": "cpu",
            "steps": 3,
        }
        (run_dir / "config.json").write_text(json.dumps(config))
        ranks = [
            {
                "rank": r["rank"],
                "ledger": r["ledgers"][optimizer],
                "state_bytes": STATE_BYTES[optimizer],
                "held_state_bytes": sum(STATE_BYTES[optimizer].values()),  # as the storage census would measure it
                "held_buffer_bytes": 4000 + (4 if optimizer == "muon" else 0),  # Muon's one update-RMS scalar
                "shard": {
                    "layout": "contiguous",
                    "buckets": 1,
                    "shard_elems": 1000,
                    "muon_matrices": 2 if optimizer == "muon" else 0,
                    "ns_matrices": 1 if optimizer == "muon" else 0,
                    "dp_gathered_matrices": 0,
                    "muon_elems": 500 if optimizer == "muon" else 0,
                },
                "peak_memory_bytes": 123,
                "peak_memory_source": "process_max_rss",
                "loss": [7.5, 7.25, 7.0],
            }
            for r in results
        ]
        (run_dir / "metrics.json").write_text(json.dumps({"config": f"known/{run_dir.name}", "ranks": ranks}))
        (run_dir / "environment.json").write_text(
            json.dumps({"backend": "gloo", "host_cpu_cores": 2, "recorded_at": "2026-11-23T00:00:00"})
        )
    return out


@pytest.fixture(scope="module")
def tables(recorded) -> dict[str, pd.DataFrame]:
    return build_tables([recorded], workers=2)


def expected_rows(optimizer: str) -> dict[tuple[str, str], dict]:
    """(phase, op) -> calls, bytes, size_bytes, dtype, group size, per rank over the recorded steps."""
    out = {}
    for phase, op, group, n, dtype, only_muon in KNOWN:
        if only_muon and optimizer != "muon":
            continue
        size = DP if group == "dp" else TP
        elem = torch.empty((), dtype=dtype).element_size()
        out[(phase, op)] = {
            "calls": ACTIVE,
            "bytes": ACTIVE * ring_bytes(op, n, elem, size),
            "size_bytes": ACTIVE * n * elem,
            "dtype": str(dtype).removeprefix("torch."),
            "group_size": size,
        }
    return out


@pytest.mark.slow
def test_bytes_per_collective_equal_the_known_sizes(tables):
    coll = tables["collectives"]
    for optimizer in ("adamw", "muon"):
        expected = expected_rows(optimizer)
        for rank in range(WORLD):
            rows = coll[(coll["run"] == f"cpu-2c-gloo/known/{optimizer}_dp2_tp2") & (coll["rank"] == rank)]
            got = {(r.phase, r.op): r for r in rows.itertuples()}
            assert set(got) == set(expected), (optimizer, rank, set(got) ^ set(expected))
            for key, exp in expected.items():
                row = got[key]
                assert row.calls == exp["calls"], key
                assert row.bytes == exp["bytes"], key
                assert row.size_bytes == exp["size_bytes"], key
                assert row.dtype == exp["dtype"], key
                assert row.group_size == exp["group_size"], key
                assert row.source == "gloo", key  # every call matched to its gloo worker transfer
                assert row.ledger_bytes == row.bytes, key  # trace == run-time ledger
                assert row.steps == ACTIVE
                assert row.busbw_gbps > 0 and row.algbw_gbps > 0


@pytest.mark.slow
def test_phase_labels_and_steps(tables):
    steps = tables["steps"]
    assert len(steps) == 2 * WORLD * ACTIVE
    assert set(steps["step"]) == {1, 2}
    for col in ("forward_ms", "backward_ms", "optimizer_ms", "compute_ms", "comm_ms"):
        assert (steps[col] > 0).all(), col
    # the window parts add up inside each step (comm_ms counts transfers by launch step, whole)
    busy = steps["compute_window_ms"] + steps["comm_window_ms"] - steps["overlap_ms"]
    np.testing.assert_allclose((busy + steps["idle_ms"]).astype(float), steps["step_ms"].astype(float), rtol=1e-9, atol=1e-6)
    for col in ("compute_frac", "comm_frac", "exposed_comm_frac", "idle_frac", "optimizer_share"):
        assert steps[col].between(0, 1).all(), col
    for optimizer in ("adamw", "muon"):
        per_step = sum(e["bytes"] for e in expected_rows(optimizer).values()) // ACTIVE
        rows = steps[steps["run"] == f"cpu-2c-gloo/known/{optimizer}_dp2_tp2"]
        assert (rows["comm_bytes"] == per_step).all()
        assert (rows["comm_calls"] == len(expected_rows(optimizer))).all()
        assert rows["start_skew_ms"].notna().all() and (rows["start_skew_ms"] >= 0).all()
        assert rows["straggler_rank"].isin(range(WORLD)).all()
        assert rows["peak_mem_bytes"].notna().all()  # profile_memory=True: [memory] events


@pytest.mark.slow
def test_runs_comparisons_and_claims(tables):
    runs = tables["runs"].set_index("run")
    for optimizer in ("adamw", "muon"):
        r = runs.loc[f"cpu-2c-gloo/known/{optimizer}_dp2_tp2"]
        assert (r["optimizer"], r["dp"], r["tp"], r["backend"], r["device"], r["ranks"], r["steps"]) == (
            optimizer,
            DP,
            TP,
            "gloo",
            "cpu",
            WORLD,
            ACTIVE,
        )
        assert r["state_bytes"] == sum(STATE_BYTES[optimizer].values())
        assert r["step_ms_p10"] <= r["step_ms"] <= r["step_ms_p90"]
        assert 0 <= r["optimizer_share"] <= 1
    cmp = tables["comparisons"]
    assert len(cmp) == 1
    row = cmp.iloc[0]
    muon_bytes = sum(e["bytes"] for e in expected_rows("muon").values())
    adamw_bytes = sum(e["bytes"] for e in expected_rows("adamw").values())
    assert math.isclose(row["comm_bytes_ratio"], muon_bytes / adamw_bytes, rel_tol=1e-12)
    assert math.isclose(row["state_bytes_ratio"], 6000 / 8000)
    claims = tables["claims"].set_index("claim_id")
    dp_phases = ("dp_reduce_scatter", "dp_gather", "dp_all_gather")
    muon_dp = sum(e["bytes"] for (phase, _), e in expected_rows("muon").items() if phase in dp_phases)
    adamw_dp = sum(e["bytes"] for (phase, _), e in expected_rows("adamw").items() if phase in dp_phases)
    checks = tables["checks"].set_index("check_id")
    bytes_check = checks.loc["bytes_contiguous"]
    assert math.isclose(bytes_check["measured_value"], muon_dp / adamw_dp, rel_tol=1e-12)
    assert pd.isna(bytes_check["holds"])  # hand-made traces: no analytic bytes or ledger to hold the trace against
    assert bytes_check["in_claimed_region"] == (1 < muon_dp / adamw_dp <= 1.25)
    assert checks.loc["state_accounting", "measured_value"] == 0.5  # 2000 B of momentum where AdamW keeps 8000 - 4000
    assert checks.loc["state_accounting", "holds"]
    assert claims.loc["hybrid_beats_pure", "verdict"] == "not measured"


@pytest.mark.slow
def test_tables_round_trip_through_parquet_and_datasets(tables, tmp_path):
    import datasets
    import pyarrow.parquet as pq

    from muon_repro.analysis.costmodel_tables import COSTMODEL_TABLES

    write_tables(tables, tmp_path)
    # every trace table has rows; the cost model's and convergence's are empty here (no records beside these runs),
    # and timed_steps (these runs' metrics.json have no steps timed without the profiler)
    # and stages (no run here has pipeline stages)
    from muon_repro.study.tables import TABLES as STUDY_TABLES

    # and the study tables (neither the study's imported traces nor runs of its protocol are here)
    expected_empty = [
        "timed_steps",
        "stages",
        *COSTMODEL_TABLES,
        "convergence",
        "convergence_runs",
        "leading_steps",
        "leading_summary",
        "budget_match",
        *STUDY_TABLES,
    ]
    assert [name for name, df in tables.items() if df.empty] == expected_empty
    for name, df in tables.items():
        path = tmp_path / f"{name}.parquet"
        stamp = table_stamp(pq.read_schema(path).metadata)
        assert pq.read_schema(path).equals(
            stamped_schema(name, stamp[GENERATION_KEY], stamp[CSV_SHA256_KEY]), check_metadata=True
        )
        back = read_table(path)
        pd.testing.assert_frame_equal(back, df)
        assert (tmp_path / f"{name}.csv").exists()
        if df.empty:  # datasets cannot load a zero-row Parquet file (the card leaves such tables out of its configs)
            continue
        ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
        assert ds.num_rows == len(df)
        assert ds.column_names == SCHEMAS[name].names


@pytest.mark.slow
def test_cli_json_and_the_analysis_script(recorded, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "muon_repro", "analyze", str(recorded), "--json", "--out", str(tmp_path / "m")],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 2 * WORLD
    for obj in lines:
        for key in (
            "file",
            "rank",
            "backend",
            "steps",
            "step_ms",
            "compute_ms",
            "comm_ms",
            "comm_bytes",
            "exposed_comm_ms",
            "idle_ms",
        ):
            assert key in obj, key
        assert obj["backend"] == "gloo" and obj["steps"] == ACTIVE
        assert set(obj["comm_ms"]) >= {"total", "all_reduce", "all_gather", "reduce_scatter"}
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == sorted(
        [".muon-repro-output", *(f"{n}.{ext}" for n in SCHEMAS for ext in ("csv", "parquet"))]
    )  # the tables, and the marker that lets the next analyze replace them

    script = subprocess.run(
        [
            sys.executable,
            str(REPO / "analysis_scripts" / "performance_comparison.py"),
            str(recorded),
            "--out",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert script.returncode == 0, script.stderr
    assert "rank" in script.stdout and (tmp_path / "s" / "runs.parquet").exists()
