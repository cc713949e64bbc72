"""The original study's own runs: import, per-step reading, its method rebuilt, the claims judged on them.

Every published number of the study is pinned here, rebuilt from its committed traces by its own method.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from muon_repro.analysis.discover import find_traces
from muon_repro.claims import NOT_COMPARABLE, UNEQUAL_WORK
from muon_repro.hardware import profile_from_environment
from muon_repro.study.claims import ratio_interval, study_claim_rows, welch_log_ratio
from muon_repro.study.method import PUBLISHED_BY_ID, method_numbers, study_sums
from muon_repro.study.scopes import STEP, read_study_trace
from muon_repro.study.sources import (
    LICENSE_NAME,
    PROVENANCE_NAME,
    STUDY_FILES,
    STUDY_PROFILE,
    gzip_reproducibly,
    import_study,
    run_and_rank,
    study_folder,
)
from muon_repro.study.tables import StudyRun, _held_elements, study_tables

REPO = Path(__file__).resolve().parents[1]
COMMITTED = study_folder(REPO / "traces")


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return study_tables([COMMITTED])  # the study's own traces alone


@pytest.fixture(scope="module")
def rebuilt() -> dict[str, float]:
    rank0 = {run_and_rank(f.name)[0]: study_sums(f) for f in sorted(COMMITTED.glob("trace_*_rank0.json.gz"))}
    return method_numbers(rank0)


# ---------------------------------------------------------------- the files


def test_the_profile_is_derived_from_the_traces_and_the_study_text():
    assert STUDY_PROFILE == "4xRTXA4000-pcie-nccl"
    env = {"accelerator": "NVIDIA RTX A4000", "accelerator_count": 4, "backend": "nccl"}
    assert profile_from_environment(env) == "4xRTXA4000-nccl"  # no link without a topology or a stated one
    assert profile_from_environment(env | {"interconnect": "pcie"}) == STUDY_PROFILE
    assert profile_from_environment(env | {"interconnect": "../x"}) == "4xRTXA4000-nccl"  # not a link name: ignored


def test_every_committed_trace_is_the_published_file():
    names = sorted(p.name for p in COMMITTED.glob("trace_*.json.gz"))
    assert names == sorted(f"{n}.gz" for n in STUDY_FILES)
    for name, digest in STUDY_FILES.items():
        data = gzip.decompress((COMMITTED / f"{name}.gz").read_bytes())
        assert hashlib.sha256(data).hexdigest() == digest, name
        assert (COMMITTED / f"{name}.gz").read_bytes() == gzip_reproducibly(data), f"{name} is not gzipped reproducibly"
    notice = (COMMITTED / LICENSE_NAME).read_text()
    assert "MIT License" in notice and "Jen Wei" in notice
    assert PROVENANCE_NAME in {p.name for p in COMMITTED.iterdir()}


def _hub_layout(tmp_path: Path, plain: bool = True) -> Path:
    """A copy of the study's repository as published (traces/comparison/*.json, uncompressed)."""
    src = tmp_path / "download" / "traces" / "comparison"
    src.mkdir(parents=True)
    for name in STUDY_FILES:
        data = gzip.decompress((COMMITTED / f"{name}.gz").read_bytes())
        (src / name).write_bytes(data) if plain else (src / f"{name}.gz").write_bytes(gzip.compress(data))
    return tmp_path / "download"


@pytest.mark.slow  # end to end: imports the study folder twice (~2.5 s a case)
@pytest.mark.parametrize("plain", [True, False])
def test_import_rebuilds_the_committed_folder_byte_for_byte_and_twice_changes_nothing(tmp_path, plain):
    source = _hub_layout(tmp_path, plain)
    first = import_study(source, tmp_path / "traces")
    assert first.changed and first.folder == study_folder(tmp_path / "traces")
    for p in COMMITTED.iterdir():
        assert (first.folder / p.name).read_bytes() == p.read_bytes(), p.name
    assert sorted(p.name for p in first.folder.iterdir()) == sorted(p.name for p in COMMITTED.iterdir())
    assert not import_study(source, tmp_path / "traces").changed


def test_a_changed_file_is_refused_naming_it_and_nothing_is_written(tmp_path):
    source = _hub_layout(tmp_path)
    victim = source / "traces" / "comparison" / "trace_adamw_rank1.json"
    victim.write_bytes(victim.read_bytes().replace(b'"dur": 1', b'"dur": 2', 1))
    with pytest.raises(ValueError, match=r"trace_adamw_rank1\.json: sha256 [0-9a-f]{64} is not the published"):
        import_study(source, tmp_path / "traces")
    assert not (tmp_path / "traces").exists()


def test_a_missing_file_is_refused_naming_it(tmp_path):
    source = _hub_layout(tmp_path)
    (source / "traces" / "comparison" / "trace_muon_dp2_tp2_rank3.json").unlink()
    with pytest.raises(ValueError, match=r"trace_muon_dp2_tp2_rank3\.json \(or \.gz\) is missing"):
        import_study(source, tmp_path / "traces")


def test_a_failed_import_keeps_the_previous_folder(tmp_path):
    shutil.copytree(COMMITTED, study_folder(tmp_path / "traces"))
    source = _hub_layout(tmp_path)
    (source / "traces" / "comparison" / "trace_adamw_rank0.json").write_bytes(b"{}")
    with pytest.raises(ValueError, match="trace_adamw_rank0.json: sha256"):
        import_study(source, tmp_path / "traces")
    assert sorted(p.name for p in study_folder(tmp_path / "traces").iterdir()) == sorted(p.name for p in COMMITTED.iterdir())


def test_the_study_folder_is_left_to_its_own_reader():
    found = find_traces([REPO / "traces"])
    assert not any(STUDY_PROFILE in str(p) for p in found)


# ---------------------------------------------------------------- the study's method, rebuilt


@pytest.mark.parametrize(
    ("number_id", "published"),
    [
        ("comm_ms_muon", 139.53),
        ("comm_ms_adamw", 245.84),
        ("comm_ratio", 0.57),
        ("comm_calls_muon", 40),
        ("comm_calls_adamw", 110),
        ("comm_per_call_muon", 3.49),
        ("comm_per_call_adamw", 2.23),
        ("comm_calls_ratio", 0.36),
        ("comm_per_call_ratio", 1.57),  # of the averages as printed: 3.49 / 2.23 (unrounded, 1.56)
        ("fwd_bwd_ms_muon", 271),
        ("fwd_bwd_ms_adamw", 281),
        ("optimizer_ms_muon", 4.29),
        ("optimizer_ms_adamw", 1.46),
        ("total_ms_muon", 388.86),
        ("total_ms_adamw", 338.51),
        ("fwd_bwd_ratio", 0.96),
        ("optimizer_ratio", 2.94),
        ("total_ratio", 1.15),
        ("optimizer_share_muon", 0.011),
        ("async_comm_ms_muon", 294.09),
        ("async_comm_ms_adamw", 377.44),
        ("async_ratio_muon", 2.1),
        ("async_ratio_adamw", 1.5),
        ("multinode_comm_ms_muon", 418.59),
        ("multinode_comm_ms_adamw", 737.52),
        ("multinode_total_ms_muon", 694),
        ("multinode_total_ms_adamw", 1020),
    ],
)
def test_the_study_method_rebuilds_each_published_number(rebuilt, number_id, published):
    digits = PUBLISHED_BY_ID[number_id].digits
    assert round(rebuilt[number_id], digits) == published


def test_the_method_table_says_every_number_is_rebuilt_and_what_the_sums_hold(tables):
    method = tables["study_method"].set_index("number_id")
    assert method["rebuilt_matches"].all() and len(method) == 27  # Tables 5.1, 5.2, 6 and 7 and the README's share
    # an average per call is no total over the 5 steps: it has no per-step value
    assert method.loc[["comm_per_call_muon", "comm_per_call_adamw"], "rebuilt_per_step"].isna().all()
    assert method.loc["comm_ms_muon", "rebuilt_per_step"] == pytest.approx(method.loc["comm_ms_muon", "rebuilt"] / 5)
    parts = tables["study_method_parts"]
    adamw = parts[parts["number_id"] == "comm_ms_adamw"].set_index("category")
    # each NCCL kernel counted twice (the kernel and its GPU annotation), and AdamW's scope besides
    kernels = adamw.loc["kernel (collective)", "ms"]
    assert kernels == pytest.approx(adamw.loc["gpu_user_annotation (collective)", "ms"], rel=1e-5)
    assert adamw["events"].sum() == 110 and adamw["ms"].sum() == pytest.approx(245.838099)
    assert set(adamw.index) >= {"gpu_user_annotation (scope)", "user_annotation (scope)"}


# ---------------------------------------------------------------- per step


def test_every_trace_yields_five_steps_and_one_view_per_scope():
    paths = sorted(COMMITTED.glob("trace_*.json.gz"))
    assert len(paths) == sum(name.startswith("trace_") for name in STUDY_FILES)  # none moved away unchecked
    for path in paths:
        trace = read_study_trace(path)
        whole = trace.scopes[trace.scopes["scope"] == STEP]
        assert list(whole["step"]) == [0, 1, 2, 3, 4], path.name
        assert (whole["step_ms"] > 0).all()
        # a kernel counts in one scope at most: CPU and GPU annotations are one scope, never added
        inner = trace.scopes[trace.scopes["scope"] != STEP].groupby("step")["gpu_kernel_ms"].sum()
        assert (inner.to_numpy() <= whole.set_index("step")["gpu_kernel_ms"].to_numpy() + 1e-9).all(), path.name


def test_a_collective_belongs_to_the_innermost_scope_around_it_and_a_cpu_scopes_busy_time_is_its_span():
    """A collective issued inside Attach_Grads, itself inside FWD_BWD, is Attach_Grads' (the scope that started last
    around it); where the CPU does the work (no GPU work in the trace), a scope's busy time is its CPU span."""
    from muon_repro.study.scopes import _innermost, _scope_row, _Spans

    inner = pd.DataFrame({"ts": [0.0, 50.0], "end": [100.0, 80.0], "name": ["FWD_BWD", "Attach_Grads"]})
    assert _innermost(inner, np.array([10.0, 60.0, 90.0, 200.0])) == ["FWD_BWD", "Attach_Grads", "FWD_BWD", ""]
    none = _Spans(*(np.zeros(0) for _ in range(4)))
    row = _scope_row(0, "FWD_BWD", 0.0, 100.0, 100.0, none, none, 0, on_gpu=False)
    assert row["busy_ms"] == 0.1 and row["gpu_busy_ms"] == 0.0 and row["gpu_done_ms"] == 0.1


def test_a_gloo_recordings_collectives_take_their_groups_from_the_grid():
    """A study-protocol run recorded here on gloo (DP2 x TP2, 5 steps): rank 1 gathers over its TP pair [0,1]
    (adjacent ranks) and over its DP pair [1,3] (strided), once a step each, as the study's grid places them."""
    trial = REPO / "traces" / "cpu-2c-gloo" / "study_protocol" / "muon_dp2_tp2" / "trial0"
    collectives = read_study_trace(trial / "rank1.json.gz", (2, 2)).collectives
    assert collectives.groupby("group_ranks").size().to_dict() == {"0,1": 5, "1,3": 5}


def test_steps_are_completion_to_completion_and_add_up_to_the_trace(tables, rebuilt):
    steps = tables["study_steps"]
    for name, total in (("adamw_FULLSTEP", "total_ms_adamw"), ("muon_FULLSTEP_dp2_tp2", "total_ms_muon")):
        rank0 = steps[(steps["run"].str.endswith(f"/{name}")) & (steps["rank"] == 0) & (steps["scope"] == STEP)]
        # the five periods run from the first step's start to the end of the last GPU work: the study's outer
        # scope (its "total per step", a total over the trace) plus the GPU work still queued when it ended
        tail = rank0["step_ms"].sum() - rebuilt[total]
        assert 0 <= tail < rank0["step_ms"].min(), (name, tail)
    # what each rank did, from its collectives: AdamW all-reduces all five full fp32 gradients
    ranks = tables["study_ranks"]
    adamw = ranks[ranks["run"].str.endswith("/adamw_FULLSTEP")]
    elements = 4096 * 4096 + 1024 * 324 + 456 * 1024 + 676 * 876 + 128 * 128
    assert (adamw["held_elements"] == elements).all()
    assert (adamw["payload_bytes_per_step"] == 4 * elements).all()


def test_each_rank_and_run_states_its_collectives_bytes_and_optimizer_per_traced_step(tables):
    """study_ranks over the 5 traced steps: AdamW all-reduces its 5 gradients once a step; a Muon rank holds half
    (DP 2) of its TP-local buffer (each TP-split matrix halved: 9,325,720 elements); study_runs takes the busiest
    rank's ring bytes for its max (ranks 2 and 3 gather 4 matrices over TP, ranks 0 and 1 one), and its optimizer's
    completion per step as the last of its scopes' (AdamW's all-reduce then its step), not their sum."""
    ranks = tables["study_ranks"]
    adamw = ranks[ranks["run"].str.endswith("/adamw_FULLSTEP")]
    assert (adamw["collectives_per_step"] == 5).all()
    assert set(adamw["collectives"]) == {"all_reduce over ranks [0,1,2,3] x5"}
    muon = ranks[ranks["run"].str.endswith("/muon_FULLSTEP_dp2_tp2")]
    tp_local = 2048 * 4096 + 1024 * 162 + 456 * 1024 + 676 * 438 + 64 * 128
    assert (muon["held_elements"] == tp_local // 2).all()
    runs = tables["study_runs"].set_index("name")
    assert runs.loc["muon_FULLSTEP_dp2_tp2", "ring_bytes_per_step_max"] == 27043272  # ranks 2 and 3's
    assert runs.loc["muon_FULLSTEP_dp2_tp2", "ring_bytes_per_step"] == (2 * 26102936 + 2 * 27043272) / 4
    steps = tables["study_steps"]
    scopes = steps[steps["run"].str.endswith("/adamw_FULLSTEP") & steps["scope"].isin(("AdamW_AllReduce", "AdamW_Step"))]
    done = scopes.pivot_table(index=["rank", "step"], columns="scope", values="gpu_done_ms")
    assert (done["AdamW_Step"] > done["AdamW_AllReduce"]).all()  # the step completes after the all-reduce
    assert runs.loc["adamw_FULLSTEP", "optimizer_done_ms"] == pytest.approx(done["AdamW_Step"].mean())


def test_a_muon_rank_holds_the_shard_its_dp_gather_shows_whichever_gather_comes_first():
    """At DP 2 x TP 2 a rank's TP gather has the DP gather's group size: the DP one is found by its members (rank 1:
    [1,3]), so a TP gather of a different matrix issued first does not set the state; a trace without group ranks
    falls back on the first collective of the DP group's size."""
    config = StudyRun.from_name("muon_FULLSTEP_dp2_tp2", 4)
    first_step = pd.DataFrame(
        {"op": ["all_gather", "all_gather"], "group_ranks": ["0,1", "1,3"], "group_size": [2, 2], "elements": [600, 1000]}
    )
    assert _held_elements(first_step, config, rank=1) == 500
    assert _held_elements(first_step.iloc[::-1], config, rank=1) == 500
    assert _held_elements(first_step.assign(group_ranks=["2,3", "0,2"]), config, rank=2) == 500
    assert _held_elements(first_step.assign(group_ranks=""), config, rank=1) == 300
    assert _held_elements(first_step.assign(group_ranks=["0,1", "0,2"]), config, rank=1) is None


def test_collectives_are_matched_across_ranks(tables):
    c = tables["study_collectives"]
    sync = c[c["run"].str.endswith("/muon_FULLSTEP_dp2_tp2")]
    assert sync["transfer_ms"].notna().all()
    assert (sync["wait_ms"] >= -1e-9).all() and np.allclose(sync["wait_ms"] + sync["transfer_ms"], sync["transfer_span_ms"])
    # one rank of every matched collective waited for no one
    first = sync.groupby(["group_ranks", "seq"])["wait_ms"].min()
    assert (first.abs() < 1e-9).all()
    async_only = c[c["run"].str.endswith("_async")]
    assert async_only["transfer_ms"].isna().all()  # rank 0 alone: no peer to match


# ---------------------------------------------------------------- the claims on the study's runs


def test_claims_on_the_study_profile(tables):
    rows = pd.DataFrame(study_claim_rows(tables)).set_index("claim_id")
    assert set(rows["profile"]) == {STUDY_PROFILE}
    decided = rows[~rows["verdict"].isin([NOT_COMPARABLE, "not measured"])]
    assert len(decided) >= 3, rows["verdict"]
    assert rows.loc["comm_time_dp2_tp2", "verdict"] == UNEQUAL_WORK
    assert not rows.loc["comm_time_dp2_tp2", "equal_work"]
    assert "109.1 MB" in rows.loc["comm_time_dp2_tp2", "work_difference"]
    assert rows.loc["optimizer_share", "verdict"] == "not reproduced"
    assert rows.loc["async_slowdown", "verdict"] == "not reproduced" and rows.loc["async_slowdown", "equal_work"]
    assert rows.loc["hybrid_beats_pure", "verdict"] == "not measured"
    for claim_id, published in (("comm_time_dp2_tp2", 0.57), ("optimizer_share", 0.011), ("async_slowdown", 2.1)):
        assert rows.loc[claim_id, "study_method_rebuilt"]
        assert rows.loc[claim_id, "study_method_value"] == pytest.approx(published, rel=0.05)


def test_the_verdict_follows_the_measurement(tables):
    """Scale Muon's optimizer kernels down 100x: the share falls inside the claim's region and is reproduced;
    give AdamW Muon's collectives: the comparison becomes equal work and gets a verdict from its interval."""
    steps = tables["study_steps"].copy()
    muon = steps["run"].str.endswith("/muon_FULLSTEP_dp2_tp2") & (steps["scope"] == "Muon_Step")
    steps.loc[muon, "busy_ms"] /= 100
    changed = dict(tables, study_steps=steps)
    rows = pd.DataFrame(study_claim_rows(changed)).set_index("claim_id")
    assert rows.loc["optimizer_share", "verdict"] == "reproduced"
    colls = tables["study_collectives"]
    adamw_run = colls.loc[colls["run"].str.endswith("/adamw_FULLSTEP"), "run"].iloc[0]
    muon_colls = colls[colls["run"].str.endswith("/muon_FULLSTEP_dp2_tp2")]
    same = pd.concat([colls[colls["run"] != adamw_run], muon_colls.assign(run=adamw_run)], ignore_index=True)
    rows = pd.DataFrame(study_claim_rows(dict(tables, study_collectives=same))).set_index("claim_id")
    assert bool(rows.loc["comm_time_dp2_tp2", "equal_work"])
    assert rows.loc["comm_time_dp2_tp2", "verdict"] in ("reproduced", "not reproduced", "inconclusive")
    # the explanations say what the work was, as the equal_work column does
    assert "Unequal work" not in rows.loc["comm_time_dp2_tp2", "explanation"]
    assert "The same work: Muon sends" in rows.loc["comm_time_dp2_tp2", "explanation"]
    assert "did the same work" in rows.loc["latency_overhead", "explanation"]


def test_our_optimizer_compute_leaves_out_the_nccl_kernels_the_study_counts_as_communication(tables):
    """Table 5.2 has communication and optimizer compute apart; AdamW_AllReduce is almost all NCCL."""
    method = tables["study_method"].set_index("number_id")
    steps = tables["study_steps"]
    full = steps[steps["run"].str.endswith("/adamw_FULLSTEP") & (steps["rank"] == 0)]
    per_scope = full.groupby("scope")[["gpu_kernel_ms", "comm_ms"]].sum() / full["step"].nunique()
    compute = sum(per_scope.loc[s, "gpu_kernel_ms"] - per_scope.loc[s, "comm_ms"] for s in ("AdamW_Step", "AdamW_AllReduce"))
    assert method.loc["optimizer_ms_adamw", "measured_per_step"] == pytest.approx(compute)
    assert compute < 0.25 * per_scope.loc["AdamW_AllReduce", "comm_ms"]  # the all-reduce's kernels are not compute
    assert "NCCL kernels left out" in method.loc["optimizer_ms_muon", "measured_what"]


def test_our_optimizer_compute_sums_its_kernels_where_they_overlap_less_its_nccl_kernels():
    """Muon_Step's kernels on two streams: 5 ms of kernel time, busy 4 ms, 1 ms of it NCCL's: 4 ms of compute (the
    kernels' time, as the study's method sums it, not the 3 ms of their union less NCCL's)."""
    from muon_repro.study.sources import GROUP
    from muon_repro.study.tables import _measured_per_step

    run = f"{STUDY_PROFILE}/{GROUP}/muon_FULLSTEP_dp2_tp2"
    row = {"run": run, "rank": 0, "scope": "Muon_Step", "gpu_kernel_ms": 5.0, "gpu_busy_ms": 4.0, "comm_ms": 1.0}
    measured = _measured_per_step(pd.DataFrame([row | {"step": step} for step in range(2)]))
    assert measured["optimizer_ms_muon"][0] == 4.0


def test_a_runs_forward_backward_is_its_kernels_busy_time_where_they_overlap():
    """study_runs' fwd_bwd_gpu_busy_ms: FWD_BWD's kernels on two streams, 5 ms of kernel time busy 3 ms of each step,
    is 3 ms (the union), not the 5 ms summed."""
    from types import SimpleNamespace

    from muon_repro.study.tables import ORIGINAL, Recording, StudyRun, _run_row

    name = "muon_FULLSTEP_dp2_tp2"
    rec = Recording(f"p/g/{name}", "p", "g", name, 0, "study", ORIGINAL, (), None, "cuda", "nccl")
    times = dict.fromkeys(("step_ms", "cpu_ms", "busy_ms", "gpu_done_ms", "comm_ms", "comm_transfer_ms"), 10.0)
    rows = [
        times | {"rank": 0, "step": step, "scope": scope, "gpu_busy_ms": 3.0, "gpu_kernel_ms": 5.0}
        for step in range(2)
        for scope in (STEP, "FWD_BWD", "Muon_Step")
    ]
    ranks = pd.DataFrame({"collectives_per_step": [2.0], "payload_bytes_per_step": [8.0], "ring_bytes_per_step": [4.0]})
    run = _run_row(rec, StudyRun.from_name(name, 4), [SimpleNamespace(world_size=4)], pd.DataFrame(rows), ranks)
    assert run["fwd_bwd_gpu_busy_ms"] == 3.0 and run["optimizer_gpu_busy_ms"] == 3.0 and run["steps"] == 2


def test_the_async_explanation_says_its_gathers_overlapped_newton_schulz(tables):
    """In the study's async trace the optimizer's kernels sum to more than the time the GPU was busy with them."""
    rows = pd.DataFrame(study_claim_rows(tables)).set_index("claim_id")
    said = rows.loc["async_slowdown", "explanation"]
    assert "unwaited, overlapping each other and Newton-Schulz" in said and "wait longer for the peers" not in said
    assert len(said.split()) <= 60


def test_the_async_explanation_says_unequal_work_when_the_runs_did_it(tables):
    colls = tables["study_collectives"].copy()
    colls.loc[colls["run"].str.endswith("_async"), "elements"] *= 2  # the naive async run gathers twice the elements
    rows = pd.DataFrame(study_claim_rows(dict(tables, study_collectives=colls))).set_index("claim_id")
    assert rows.loc["async_slowdown", "verdict"] == UNEQUAL_WORK
    assert "unequal work" in rows.loc["async_slowdown", "explanation"]
    assert "the same work" not in rows.loc["async_slowdown", "explanation"]


def test_runs_whose_collectives_are_not_in_the_tables_are_not_judged(tables):
    """Without the collectives table, whether the runs did the same work is unknown: not 'unequal work', no verdict."""
    rows = pd.DataFrame(study_claim_rows({k: v for k, v in tables.items() if k != "study_collectives"}))
    rows = rows.set_index("claim_id")
    for claim_id in ("comm_time_dp2_tp2", "async_slowdown", "latency_overhead"):
        assert rows.loc[claim_id, "verdict"] == "not measured", claim_id
        assert pd.isna(rows.loc[claim_id, "equal_work"]) and "study_collectives" in rows.loc[claim_id, "explanation"]


def test_rounds_are_paired_however_many_and_steps_never():
    """Per-round values pair by round at any count; the steps of one recording are never paired, at any count."""
    rng = np.random.default_rng(3)
    drift = pd.Series(np.exp(rng.normal(0, 0.3, 6)))  # each round's machine speed, shared by both runs of that round
    a, b = 0.5 * drift, drift
    _, low, high = ratio_interval(a, b, per_round=True)
    assert low == pytest.approx(0.5) and high == pytest.approx(0.5)  # pairing removes the shared drift
    # as many rounds each, not the same ones: round k pairs with round k, never with the k-th value
    _, low, high = ratio_interval(a.drop(index=0), b.drop(index=5), per_round=True)
    assert low == pytest.approx(0.5) and high == pytest.approx(0.5)
    _, low, high = ratio_interval(a[:3], b[:3], per_round=False)
    assert high - low > 0.1  # unpaired: the drift is in the interval


def _welch_coverage(step_correlation: float, studies: int = 2000, steps: int = 5, sd: float = 0.05) -> float:
    """How often welch_log_ratio's 95% interval over two recordings of ``steps`` steps holds their true ratio (0.6),
    the steps' log times an AR(1) series of ``step_correlation`` (0: independent steps)."""
    rng = np.random.default_rng(4)
    rho, truth, hits = step_correlation, 0.6, 0
    for _ in range(studies):
        logs = np.empty((2, steps))
        logs[:, 0] = sd * rng.standard_normal(2)
        for i in range(1, steps):
            logs[:, i] = rho * logs[:, i - 1] + np.sqrt(1 - rho**2) * sd * rng.standard_normal(2)
        _, low, high = welch_log_ratio(truth * np.exp(logs[0]), np.exp(logs[1]))
        hits += bool(low <= truth <= high)
    return hits / studies


def test_the_study_steps_interval_undercovers_when_steps_are_correlated():
    """The study recorded each run once: its claims' intervals are Welch's over the 5 steps of one recording. Over
    independent steps they cover at the nominal level (test_welch_interval_covers_the_true_ratio, below); over steps
    correlated 0.5 about 78%, as docs/method.md says (and a second recording's offset is in none of them)."""
    assert _welch_coverage(0.5) < 0.85


def test_the_verdicts_the_study_steps_interval_decides_hold_with_twice_its_width():
    """Where steps correlate, the steps' interval is too narrow (above): each verdict it decides on the committed
    study rows stays the same with the interval twice as wide (on the log scale for a ratio), as docs/method.md says."""
    import math

    from muon_repro.claims import CLAIMS, verdict
    from muon_repro.study.sources import STUDY_PROFILE
    from muon_repro.tables.io import read_table

    claims = read_table(Path(__file__).resolve().parents[1] / "metrics" / "claims.parquet")
    regions = {c.claim_id: c.region for c in CLAIMS}
    decided = claims[(claims["profile"] == STUDY_PROFILE) & claims["verdict"].isin(["reproduced", "not reproduced"])]
    assert len(decided) >= 1
    for row in decided.itertuples():
        value, low, high = float(row.measured_value), float(row.measured_low), float(row.measured_high)
        if row.unit_kind == "ratio":
            low, high = value * (low / value) ** 2, value * (high / value) ** 2
        else:
            low, high = value - 2 * (value - low), value + 2 * (high - value)
        assert verdict(low, high, regions[row.claim_id]) == row.verdict, row.claim_id
        assert math.isfinite(low) and math.isfinite(high)


def test_a_claim_made_elsewhere_is_judged_on_the_study_runs_only_inside_its_conditions(tables):
    """The study's own claims were made on its runs; the paper's 1-3% needs a step that trains on tokens, which the
    study's simulated step is not. Without that condition the same measurement gets a verdict from its numbers."""
    import dataclasses

    from muon_repro.claims import CLAIMS
    from muon_repro.study.claims import NO_TOKENS, outside_for_study

    by_id = {c.claim_id: c for c in CLAIMS}
    assert outside_for_study(by_id["optimizer_share"]) == ""  # the study's own: made on these runs
    assert outside_for_study(by_id["latency_overhead"]) == NO_TOKENS
    rows = pd.DataFrame(study_claim_rows(tables)).set_index("claim_id")
    # outside its conditions, and on runs that did unequal work: unequal work comes first, as on every profile
    assert rows.loc["latency_overhead", "verdict"] == UNEQUAL_WORK and rows.loc["latency_overhead", "equal_work"] is False
    assert rows.loc["latency_overhead", "outside_conditions"] == NO_TOKENS
    assert rows.loc["latency_overhead", "rule"].startswith(f"{UNEQUAL_WORK} when the compared runs did different work; else")
    assert rows.loc["optimizer_share", "rule"].startswith("on the study's own runs its conditions hold")
    latency = by_id["latency_overhead"]
    tokenless = dataclasses.replace(latency, made_under=dataclasses.replace(latency.made_under, min_tokens_per_d_model=None))
    assert outside_for_study(tokenless) == ""


def test_welch_interval_covers_the_true_ratio():
    rng = np.random.default_rng(7)
    truth, hits, n = 0.6, 0, 2000
    for _ in range(n):
        a = truth * np.exp(rng.normal(0, 0.15, 5))
        b = np.exp(rng.normal(0, 0.08, 5))
        _, low, high = welch_log_ratio(a, b)
        hits += low <= truth <= high
    assert 0.93 <= hits / n <= 0.97, hits / n


# ---------------------------------------------------------------- from the Hub (the fake one: tests never touch the real Hub)


@pytest.mark.slow
def test_import_from_the_hub(tmp_path, hub_api, fake_hub):
    """``muon-repro study import --hub`` downloads the study's traces as published and files them as --from does."""
    from hub_support import hub_env, muon_repro
    from huggingface_hub import CommitOperationAdd

    from muon_repro.study.sources import HUB_REPO

    hub_api.create_repo(HUB_REPO, repo_type="dataset")
    ops = [
        CommitOperationAdd(f"traces/comparison/{name}", gzip.decompress((COMMITTED / f"{name}.gz").read_bytes()))
        for name in STUDY_FILES
    ]
    ops.append(CommitOperationAdd("README.md", b"the study's card"))
    hub_api.create_commit(HUB_REPO, ops, commit_message="the study's files", repo_type="dataset")
    done = muon_repro(["study", "import", "--hub", "--out", str(tmp_path / "traces")], hub_env(tmp_path, fake_hub.url))
    assert done.returncode == 0, done.stderr
    assert "18 traces of the original study imported into" in done.stdout
    folder = study_folder(tmp_path / "traces")
    for p in COMMITTED.iterdir():
        assert (folder / p.name).read_bytes() == p.read_bytes(), p.name


def test_each_study_run_names_the_command_and_commit_that_recorded_it_or_none():
    """The runs of the study's protocol recorded here keep their command and commit (the card names them); the
    original study's traces keep neither, and nothing is made up for them."""
    runs = pd.read_parquet(REPO / "metrics" / "study_runs.parquet")
    ours, theirs = runs[runs["recorded_by"] == "muon_repro"], runs[runs["recorded_by"] != "muon_repro"]
    assert len(ours) and len(theirs)
    assert ours["command"].str.startswith("muon-repro bench --protocol").all() and ours["git_sha"].str.len().eq(40).all()
    assert theirs["command"].isna().all() and theirs["git_sha"].isna().all()


# ---------------------------------------------------------------- the statistics and the work, unit by unit


def test_welch_log_ratio_is_welchs_t_on_the_logs():
    """Reference values: scipy.stats.ttest_ind(log a, log b, equal_var=False) and its confidence interval."""
    a, b = np.array([10.0, 11.0, 12.0, 13.0, 15.0]), np.array([20.0, 20.5, 21.0, 23.0])
    assert welch_log_ratio(a, b) == pytest.approx((0.5727155324493789, 0.4732344347116691, 0.6931090745934843), rel=1e-12)
    assert np.isfinite(welch_log_ratio(np.array([10.0, 12.0]), np.array([20.0, 21.0]))).all()  # two a side suffice
    assert np.isnan(welch_log_ratio(np.array([10.0]), np.array([20.0, 21.0]))).all()


def _steps(run: str, values: dict[int, list[float]]) -> pd.DataFrame:
    """Rank 0's step times of ``run``, per round (trial) and step."""
    return pd.DataFrame(
        [
            {"run": run, "scope": STEP, "trial": trial, "step": step, "rank": 0, "step_ms": ms}
            for trial, per_step in values.items()
            for step, ms in enumerate(per_step)
        ]
    )


def test_rounds_are_the_units_from_two_rounds_on_and_paired_from_two_shared_ones():
    from muon_repro.study.claims import _per_step, in_rounds

    two_rounds = _steps("x", {0: [1.0, 3.0], 1: [5.0, 7.0]})
    assert _per_step(two_rounds, "x", (STEP,), "step_ms").to_dict() == {0: 2.0, 1: 6.0}
    one_round = pd.concat([two_rounds, _steps("y", {0: [1.0]})])
    assert in_rounds(one_round, "x") and not in_rounds(one_round, "x", "y")
    a, b = pd.Series([1.0, 2.0], index=[0, 1]), pd.Series([2.0, 4.0], index=[0, 1])
    assert ratio_interval(a, b, per_round=True) == pytest.approx((0.5, 0.5, 0.5))  # paired: no spread


def _collectives(run: str, steps: int = 1, extra: tuple[tuple[str, str], ...] = ()) -> list[dict]:
    """Rank 0's collectives of ``run``: one fp32 all-reduce a step, and ``extra`` (op, dtype) ones in step 0."""
    one = {"run": run, "rank": 0, "trial": 0, "group_ranks": "0,1"}
    return [{**one, "step": s, "op": "all_reduce", "dtype": "float32", "elements": 1000} for s in range(steps)] + [
        {**one, "step": 0, "op": op, "dtype": dtype, "elements": 10} for op, dtype in extra
    ]


def test_the_same_work_is_the_first_steps_collectives_plus_only_muons_bf16_gathers():
    from muon_repro.study.claims import _same_collectives, _work

    two_steps_against_one = pd.DataFrame(_collectives("a", steps=2) + _collectives("b"))
    assert _same_collectives(two_steps_against_one, "a", "b", [0], extra_gathers=False) is True

    def same(extra: tuple[tuple[str, str], ...]) -> bool | None:
        colls = pd.DataFrame(_collectives("muon", extra=extra) + _collectives("adamw"))
        return _same_collectives(colls, "muon", "adamw", [0], extra_gathers=True)

    assert same((("all_gather", "bfloat16"),)) is True
    assert same((("all_gather", "float32"),)) is False and same((("all_reduce", "bfloat16"),)) is False
    # Muon against Muon (async against sync): no extra gather is the other's work
    runs = pd.DataFrame([{"run": r, "name": r, "optimizer": "muon"} for r in ("async", "sync")])
    ranks = pd.DataFrame(
        [{"run": r, "rank": 0, "ring_bytes_per_step": 1.0, "collectives_per_step": 1.0} for r in ("async", "sync")]
    )
    colls = pd.DataFrame(_collectives("async", extra=(("all_gather", "bfloat16"),)) + _collectives("sync"))
    assert _work(runs, ranks, "async", "sync", colls=colls)[0] is False


def test_a_work_difference_is_written_only_for_unequal_work(tables):
    rows = pd.DataFrame(study_claim_rows(tables))
    assert (rows["equal_work"] == True).any()  # noqa: E712  (a nullable column)
    assert (rows.loc[rows["equal_work"] != False, "work_difference"] == "").all()  # noqa: E712


def test_the_async_explanation_says_the_kernels_overlapped_only_when_they_did(tables):
    """Overlap: Muon_Step's kernels add up to more than 1.01x the time the GPU was busy with them."""

    def says_overlap(factor: float) -> bool:
        steps = tables["study_steps"].copy()
        muon_step = steps["run"].str.endswith("_async") & (steps["scope"] == "Muon_Step")
        steps.loc[muon_step, "gpu_kernel_ms"] = steps.loc[muon_step, "gpu_busy_ms"] * factor
        rows = study_claim_rows({**tables, "study_steps": steps})
        return "overlapping each other" in next(r for r in rows if r["claim_id"] == "async_slowdown")["explanation"]

    assert says_overlap(1.05) and not says_overlap(1.0)


def test_a_set_recorded_on_one_rank_is_judged_on_the_one_rank_claims_only():
    from muon_repro.study.claims import ONE_RANK_CLAIMS, protocol_rows
    from muon_repro.tables.io import read_tables

    names = ("study_runs", "study_steps", "study_ranks", "study_collectives")
    recorded = read_tables(REPO / "metrics", names)
    one_rank = {}
    for name, df in recorded.items():  # the committed equal-work set as if recorded on one rank
        df = df[df["run"].str.startswith("cpu-2c-gloo/study_equal_work/")].copy()
        df["run"] = df["run"].str.replace("dp2_tp2", "dp1_tp1")
        if name == "study_runs":
            df["dp"], df["tp"] = 1, 1
        one_rank[name] = df
    rows = protocol_rows(one_rank)
    assert rows and {r["claim_id"] for r in rows} == set(ONE_RANK_CLAIMS)
