"""Behaviours no other test pinned, each found by a hand-made mutant that survived the fast tier: of verify's checks on
a downloaded dataset (muon_repro.dataset.verify: a card that declares no configs, a citation without cff-version, a
croissant.json the manifest lists, a table too small or large to load, a config with fewer rows than the card says,
the trace index's lists, the run files it parses, tables' profiles, table_differences' pairing of rows, first row and
tolerance, a bundle without its code, which links are files), of the table files' writing and reading
(muon_repro.tables.files: the files a writer's manifest may name, staging folders kept or moved, a swap journal of
another output, outputs that overlap a source or need their parent written, a block between markers, listing a tree,
sizes for people) and of the original study's tables (muon_repro.study.tables: a protocol trial's number and device,
collectives matched only when their group is whole, transfer per scope, a run's row, a Muon rank's shard on any grid,
the threshold record's columns).

Every expected value is derived by hand from the documented definitions (the modules' docstrings, docs/publishing.md
and the study tables' schemas in muon_repro/tables/study_schemas.py)."""

from __future__ import annotations

import math
import os

import pandas as pd
import pytest
from test_trace_index import _report

from muon_repro.dataset.card import CARD_NAME
from muon_repro.dataset.citation import CFF_NAME
from muon_repro.dataset.croissant import CROISSANT_NAME
from muon_repro.dataset.manifest import write_manifest
from muon_repro.dataset.verify import (
    TRACE_INDEX,
    _one_line,
    _size_problem,
    check_card,
    check_traces,
    table_differences,
    trace_index_problems,
)
from muon_repro.tables.schemas import SCHEMAS

# ---------------------------------------------------------------- verify: the card, the citation, croissant.json


def test_a_card_that_declares_no_configs_and_a_citation_without_cff_version_are_named(tmp_path):
    (tmp_path / CARD_NAME).write_text("---\nconfigs: []\n---\n# card\n")
    (tmp_path / CFF_NAME).write_text("title: a dataset\n")  # YAML, but not the Citation File Format
    problems, meta = check_card(tmp_path)
    assert meta == {"configs": []}
    assert f"{CARD_NAME}: the YAML metadata declares no configs" in problems
    assert f"{CFF_NAME}: not a Citation File Format document (no cff-version)" in problems


def test_a_croissant_json_the_manifest_lists_is_checked_when_it_is_gone(tmp_path):
    (tmp_path / CARD_NAME).write_text("---\nconfigs: []\n---\n# card\n")
    (tmp_path / CROISSANT_NAME).write_text("{}")
    write_manifest(tmp_path)
    (tmp_path / CROISSANT_NAME).unlink()  # listed, then deleted: a bundle made before croissant.json lists none
    problems, _ = check_card(tmp_path)
    assert any(p.startswith(f"{CROISSANT_NAME}: missing") for p in problems), problems


def test_a_parquet_table_too_small_to_be_one_is_not_loaded_and_a_csv_is_not_judged(tmp_path):
    (tmp_path / "metrics").mkdir()
    for name in ("runs.parquet", "runs.csv"):
        (tmp_path / "metrics" / name).write_text("abc")
    problem = _size_problem(tmp_path, "metrics/runs.parquet")
    assert problem is not None and "3 bytes is no Parquet file" in problem
    assert _size_problem(tmp_path, "metrics/runs.csv") is None  # the limits are the Parquet tables'


def test_a_config_with_fewer_rows_than_the_card_says_fails(tmp_path, monkeypatch):
    """The row count the card's dataset_info says is the one a config must load, fewer as much as more. ``datasets``
    is stood in for (importing it costs seconds): a config that loads 2 rows where the card says 3."""
    import sys
    import types

    from muon_repro.dataset.verify import check_configs

    loaded = types.SimpleNamespace(num_rows=2, column_names=["run"])
    fake = types.SimpleNamespace(
        disable_progress_bars=lambda: None,
        logging=types.SimpleNamespace(set_verbosity_error=lambda: None),
        load_dataset=lambda *args, **kwargs: loaded,
    )
    monkeypatch.setitem(sys.modules, "datasets", fake)
    meta = {
        "configs": [{"config_name": "runs", "data_files": [{"split": "train", "path": "metrics/runs.csv"}]}],
        "dataset_info": [{"config_name": "runs", "splits": [{"name": "train", "num_examples": 3}]}],
    }
    lines, report = _report()
    check_configs(tmp_path, meta, report)
    ((line, ok),) = lines
    assert not ok and line.startswith("config 'runs': ") and line.endswith("; 2 rows, the card says 3")


# ---------------------------------------------------------------- verify: one line, traces, the trace index


def test_one_line_keeps_a_text_of_the_limit_and_cuts_a_longer_one_to_the_limit():
    assert _one_line(ValueError("a\n  b")) == "a b"
    exact = "x" * 500
    assert _one_line(ValueError(exact)) == exact
    longer = _one_line(ValueError("y" * 501))
    assert len(longer) == 500 and longer.endswith("...") and longer.startswith("y" * 497)


def test_verify_parses_the_run_files_under_traces_and_no_json_elsewhere(tmp_path):
    run = tmp_path / "traces" / "p" / "g" / "r" / "trial0"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{not json")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "config.json").write_text("{not json")  # named like a run file, but no run's
    lines, report = _report()
    check_traces(tmp_path, report, workers=1)
    failed = [line for line, ok in lines if not ok]
    assert any(line.startswith("traces/p/g/r/trial0/config.json: not valid JSON") for line in failed), failed
    assert not any("report/config.json" in line for line in failed), failed


def _index(tmp_path, paths: list[str]):
    (tmp_path / "metrics").mkdir(exist_ok=True)
    pd.DataFrame({"path": paths}).to_parquet(tmp_path / "metrics" / "trace_files.parquet")
    return tmp_path / "metrics" / "trace_files.parquet"


def test_the_trace_index_lists_at_most_ten_of_each_then_the_counts(tmp_path):
    absent = [f"traces/p/g/a{i:02d}/trial0/rank0.json.gz" for i in range(11)]
    unindexed = [f"traces/p/g/u{i:02d}/trial0/rank0.json.gz" for i in range(10)]
    problems = trace_index_problems(_index(tmp_path, absent), unindexed)
    named = [p for p in problems if p.endswith("which is not in the bundle")]
    assert named == [f"{TRACE_INDEX} names {path}, which is not in the bundle" for path in absent[:10]]
    assert len([p for p in problems if " is not in " + TRACE_INDEX in p]) == 10
    assert problems[-1] == "11 indexed files absent, 10 traces not indexed in all"  # 11 + 10 > 20 named at most


def test_the_trace_index_counts_whenever_one_kind_had_more_than_ten(tmp_path):
    """trace_index_problems names "at most 10 of each, then the counts if either had more": 15 absent files and no
    unindexed trace name 10, then count all 15 (the other 5 would go unmentioned without it); 10 of each name all 20
    and count nothing."""
    absent = [f"traces/p/g/a{i:02d}/trial0/rank0.json.gz" for i in range(15)]
    problems = trace_index_problems(_index(tmp_path, absent), [])
    assert len(problems) == 11
    assert problems[-1] == "15 indexed files absent, 0 traces not indexed in all"
    unindexed = [f"traces/p/g/u{i:02d}/trial0/rank0.json.gz" for i in range(10)]
    problems = trace_index_problems(_index(tmp_path, absent[:10]), unindexed)
    assert len(problems) == 20
    assert not any(p.endswith(" in all") for p in problems)


# ---------------------------------------------------------------- verify: the tables of metrics/


def test_a_metrics_folder_of_csv_files_alone_holds_no_parquet_table(tmp_path):
    from muon_repro.dataset.verify import check_table_set

    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "runs.csv").write_text("run\n")
    lines, report = _report()
    check_table_set(tmp_path, report)
    assert lines == [("tables: metrics/ holds no Parquet table (a bundle has its tables there)", False)]


def test_a_table_whose_profile_is_no_profile_id_fails_the_table_set(tmp_path):
    """A profile names the folder figures/<profile>/ its figures go to: '../x' would leave it."""
    from muon_repro.dataset.verify import check_table_set

    (tmp_path / "metrics").mkdir()
    pd.DataFrame({"profile": ["../x"]}).to_parquet(tmp_path / "metrics" / "runs.parquet")
    lines, report = _report()
    check_table_set(tmp_path, report)
    ((line, ok),) = lines
    assert not ok and line.startswith("tables: ") and "runs.parquet: profile '../x' is not a profile id" in line


def _runs(rows: list[dict]) -> pd.DataFrame:
    base = {c: None for c in SCHEMAS["runs"].names}
    return SCHEMAS["runs"].conform(pd.DataFrame([base | row for row in rows]))


def test_table_differences_pair_rows_by_key_whatever_their_order():
    published = _runs([{"run": "g/a", "ranks": 2}, {"run": "g/b", "ranks": 4}])
    assert table_differences(published, published.iloc[::-1].reset_index(drop=True), "runs") == []


def test_table_differences_name_the_first_differing_row_by_its_key():
    published = _runs([{"run": "g/a", "ranks": 2}, {"run": "g/b", "ranks": 4}, {"run": "g/c", "ranks": 8}])
    fresh = published.assign(ranks=[2, 5, 9])  # rows g/b and g/c differ: the first is g/b
    assert table_differences(published, fresh, "runs") == [
        "runs.ranks: 2 value(s) differ, first at run=g/b: 4 in the bundle, 5 from the traces"
    ]


def test_table_differences_hold_floats_to_a_relative_1e9():
    published = _runs([{"run": "g/a", "step_ms": 100.0}])
    assert table_differences(published, published.assign(step_ms=100.0 * (1 + 1e-10)), "runs") == []
    (problem,) = table_differences(published, published.assign(step_ms=100.0 * (1 + 1e-7)), "runs")
    assert problem.startswith("runs.step_ms: 1 value(s) differ, first at run=g/a: 100.0 in the bundle")


# ---------------------------------------------------------------- verify: which code recorded each run


def test_a_bundle_without_its_code_counts_a_run_without_a_digest_as_legacy_not_as_its_own(tmp_path):
    import json

    from muon_repro.dataset.verify import check_sources

    run = tmp_path / "traces" / "p" / "g" / "r" / "trial0"
    run.mkdir(parents=True)
    (run / "environment.json").write_text(json.dumps({"git_sha": None, "git_dirty": None}))  # no source_sha256
    lines, report = _report()
    check_sources(tmp_path, report)
    assert lines == [
        (
            "source: this bundle carries no muon_repro/ (bundled before it carried its code); 0 recorded from a clean commit "
            "(git_sha), 0 with this bundle's muon_repro/, 1 from a changed or unknown tree before runs recorded their "
            "source digest",
            True,
        )
    ]


# ---------------------------------------------------------------- verify: links


def _cache_repo(tmp_path, folder: str):
    """A Hub cache repository's blobs/ (one blob) and a folder ``folder/<rev>`` beside it."""
    repo = tmp_path / "hub" / "datasets--o--n"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "blob0").write_text("data")
    tree = repo / folder / ("c" * 40)
    tree.mkdir(parents=True)
    return repo / "blobs", tree


def test_links_to_blobs_are_files_only_in_a_snapshot_and_only_to_a_blob_that_is_there(tmp_path):
    from muon_repro.dataset.verify import bundle_links

    _, tree = _cache_repo(tmp_path, "not-snapshots")
    (tree / "README.md").symlink_to("../../blobs/blob0")
    assert bundle_links(tree) == [("README.md", "../../blobs/blob0")]  # not a snapshot: a link like any other
    _, snapshot = _cache_repo(tmp_path / "second", "snapshots")
    (snapshot / "README.md").symlink_to("../../blobs/blob0")
    (snapshot / "gone.txt").symlink_to("../../blobs/missing")  # into blobs/, but no blob
    assert bundle_links(snapshot) == [("gone.txt", "../../blobs/missing")]


def test_a_link_in_what_is_no_file_of_the_dataset_is_left_aside(tmp_path):
    from muon_repro.dataset.verify import bundle_links

    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "data.txt").symlink_to(tmp_path / "elsewhere")
    assert bundle_links(tmp_path) == [("data.txt", str(tmp_path / "elsewhere"))]


# ---------------------------------------------------------------- the study's tables

MS = 1_000_000  # ns


def _collective(step: int, start_ms: float, end_ms: float, *, group: str = "0,1", elements: int = 100, **more) -> dict:
    row = {"step": step, "scope": "AdamW_AllReduce", "op": "all_reduce", "group_ranks": group}
    row |= {"group_size": len(group.split(",")), "dtype": "float32", "elements": elements}
    row |= {"payload_bytes": 4 * elements, "ring_bytes": 4 * elements, "start_ns": int(start_ms * MS)}
    return row | {"end_ns": int(end_ms * MS)} | more


def _trace(rank: int, collectives: list[dict], *, steps: int = 2, world: int = 2, done: tuple[float, float] = (3.0, 5.0)):
    """One rank's StudyTrace of an AdamW full step: per step the whole step, FWD_BWD and AdamW's two optimizer scopes,
    whose GPU work ends ``done`` ms after each starts."""
    from muon_repro.study.scopes import STEP, StudyTrace

    rows = []
    for step in range(steps):
        for scope, gpu_done in ((STEP, 9.0), ("FWD_BWD", 4.0), ("AdamW_AllReduce", done[0]), ("AdamW_Step", done[1])):
            rows.append(
                {"step": step, "scope": scope, "start_ns": step * 100 * MS, "cpu_ms": 1.0, "gpu_busy_ms": 2.0 + rank}
                | {"gpu_kernel_ms": 2.0, "busy_ms": 2.0, "comm_ms": 0.0, "gpu_done_ms": gpu_done, "kernels": 1}
                | {"step_ms": 10.0 if scope == STEP else math.nan}
            )
    return StudyTrace(
        f"rank{rank}.json", rank, world, "full_step", "AdamW_Full_Training_Step", "adamw", pd.DataFrame(rows),
        pd.DataFrame(collectives), tuple(f"gpu{r}" for r in range(world)),
    )  # fmt: skip


def test_a_protocol_run_recorded_without_a_trial_is_trial_0_on_the_cpu(tmp_path):
    """A trial's number is config.json's ``trial``, else 0 (RunDir.trial); its device the recorded accelerator, or cpu."""
    import json

    from muon_repro.study.tables import RECORDED_HERE, recordings

    folder = tmp_path / "p" / "study_protocol" / "adamw"
    folder.mkdir(parents=True)
    config = {"protocol": "study", "group": "study_protocol", "name": "adamw", "dp": 2, "tp": 1, "backend": "gloo"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "environment.json").write_text(json.dumps({"accelerator": None}))
    ((rec,),) = [recordings([tmp_path])]
    assert (rec.trial, rec.device, rec.backend, rec.recorded_by, rec.grid) == (0, "cpu", "gloo", RECORDED_HERE, (2, 1))
    assert rec.files == () and rec.folder == folder


def test_a_collective_is_matched_only_when_every_rank_of_its_group_issued_it():
    """Ranks 0, 1 and 2 traced; group 0,1's first all-reduce is issued by both (matched, though rank 2 is not in the
    group), its second by rank 0 alone (no wait, no transfer)."""
    from muon_repro.study.tables import _match_across_ranks

    per_rank = [
        _trace(0, [_collective(0, 0, 5), _collective(1, 100, 101)], world=3),
        _trace(1, [_collective(0, 1, 5)], world=3),
        _trace(2, [], world=3),
    ]
    c = _match_across_ranks(per_rank)
    matched, alone = c[c["seq"] == 0], c[c["seq"] == 1]
    assert list(matched["wait_ms"]) == pytest.approx([1.0, 0.0]) and list(matched["transfer_ms"]) == pytest.approx([4.0, 4.0])
    assert len(alone) == 1 and alone["wait_ms"].isna().all() and alone["transfer_ms"].isna().all()


def test_a_scope_whose_collectives_are_all_unmatched_has_no_transfer_time_not_zero():
    from muon_repro.study.scopes import STEP
    from muon_repro.study.tables import _match_across_ranks, _steps_with_transfer

    per_rank = [_trace(0, [_collective(0, 0, 5), _collective(1, 100, 101)]), _trace(1, [_collective(0, 2, 5)])]
    steps = _steps_with_transfer(per_rank, _match_across_ranks(per_rank)).set_index(["rank", "step", "scope"])
    transfer = steps["comm_transfer_ms"]
    assert transfer[(0, 0, "AdamW_AllReduce")] == pytest.approx(3.0) and transfer[(0, 0, STEP)] == pytest.approx(3.0)
    assert math.isnan(transfer[(0, 1, "AdamW_AllReduce")]) and math.isnan(transfer[(0, 1, STEP)])  # rank 0 alone
    assert math.isnan(transfer[(0, 0, "FWD_BWD")])  # no collective


def _two_steps_of_two_all_reduces(start_ms: float) -> list[dict]:
    return [
        _collective(step, step * 100 + start_ms, step * 100 + 5, elements=elements) for step in (0, 1) for elements in (100, 50)
    ]


def test_a_runs_row_takes_its_steps_ranks_and_optimizer_completion_as_documented(monkeypatch):
    """study_runs: steps in each trace (0 and 1: 2), ranks whose trace was published (2 of a world of 4), the busiest
    rank's ring bytes for the max (rank 1 sends 4 x 100 bytes more a step), the optimizer's completion per step as
    the last of its scopes' (3 ms, 5 ms: 5), FWD_BWD's GPU busy time per step (rank 0 2 ms, rank 1 3 ms: 2.5)."""
    from muon_repro.study import tables as study_tables_module

    extra = [_collective(step, step * 100 + 1, step * 100 + 5, group="1", elements=100) for step in (0, 1)]
    per_rank = [
        _trace(0, _two_steps_of_two_all_reduces(0), world=4),
        _trace(1, _two_steps_of_two_all_reduces(1) + extra, world=4),
    ]
    config = study_tables_module.StudyRun.from_name("adamw_FULLSTEP", 4)
    monkeypatch.setattr(study_tables_module, "_read_recording", lambda rec: (per_rank, config, None))
    rec = study_tables_module.Recording(
        "p/g/adamw_FULLSTEP", "p", "g", "adamw_FULLSTEP", 0, "study", study_tables_module.RECORDED_HERE, (), (4, 1),
        "gpu", "nccl",
    )  # fmt: skip
    run = study_tables_module.recording_rows(rec).run
    assert (run["dp"], run["tp"], run["world_size"], run["ranks_traced"], run["steps"]) == (4, 1, 4, 2, 2)
    assert run["ring_bytes_per_step"] == pytest.approx((600 + 1000) / 2)
    assert run["ring_bytes_per_step_max"] == pytest.approx(1000)
    assert run["optimizer_done_ms"] == pytest.approx(5.0)
    assert run["fwd_bwd_gpu_busy_ms"] == pytest.approx(2.5)
    assert run["step_ms"] == pytest.approx(10.0)


def test_a_muon_rank_holds_its_dp_gathers_array_divided_by_dp_on_any_grid():
    """DP 4 x TP 1: rank 1's DP group is every rank (TP inner: ranks 1 % 1, + 1, ... up to 4); its all-gather of 1,000
    elements takes a ZeRO shard of 1000 / 4 = 250 as input. (DP 2 x TP 2, the study's grid, cannot tell dp from tp.)"""
    from muon_repro.study.tables import StudyRun, _held_elements

    config = StudyRun.from_name("muon_FULLSTEP_dp4_tp1", 4)
    first_step = pd.DataFrame({"op": ["all_gather"], "group_ranks": ["0,1,2,3"], "group_size": [4], "elements": [1000]})
    assert _held_elements(first_step, config, rank=1) == 250


def test_a_muon_rank_whose_trace_leaves_a_group_unnamed_is_found_by_group_size():
    """DP 2 x TP 1 (rank 0's DP group "0,1"): the first collective names other ranks, the second names none. One
    unnamed group is enough to fall back on the size: the first DP-sized gather (600 elements) gives 600 / 2 = 300,
    where matching the named members alone would find no gather of "0,1" and give nothing."""
    from muon_repro.study.tables import StudyRun, _held_elements

    config = StudyRun.from_name("muon_FULLSTEP_dp2_tp1", 2)
    first_step = pd.DataFrame(
        {"op": ["all_gather"] * 2, "group_ranks": ["2,3", ""], "group_size": [2, 2], "elements": [600, 800]}
    )
    assert _held_elements(first_step, config, rank=0) == 300


def test_a_threshold_record_with_a_column_of_another_version_is_refused_by_name(tmp_path):
    """study fit writes the table's columns and no other: a column it does not write is a damaged record, to write
    again rather than to guess at."""
    from muon_repro.study.tables import _threshold_record, thresholds_record_path

    study = tmp_path / "traces" / "study-profile" / "comparison"
    path = thresholds_record_path(study)
    path.parent.mkdir(parents=True)
    path.write_text(",".join([*SCHEMAS["study_costmodel_thresholds"].names, "extra"]) + "\n")
    with pytest.raises(ValueError, match=r"columns missing \[\], unknown \['extra'\] for study_costmodel_thresholds"):
        _threshold_record([study])


# ---------------------------------------------------------------- the table files: a writer's set of files


def test_a_writer_removes_only_the_files_of_its_own_kind_its_manifest_names_inside_its_folder(tmp_path):
    """A previous run's manifest names the files it wrote; the next run removes those its new set lacks, as far as
    they are plainly its own: ending in its suffixes, inside the folder, nothing hidden. Anything else stays."""
    from test_output_folders import WRITER, _files_under, _write_set

    from muon_repro.tables.files import files_manifest

    out = tmp_path / "figures"
    _write_set(out, {"a.png": b"a"})
    kept = {"notes.txt": b"mine", ".hidden/x.png": b"hidden", "sub/.x.png": b"hidden file"}
    for rel, data in kept.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    manifest = out / files_manifest(WRITER)
    manifest.write_text(manifest.read_text() + "".join(f"{rel}\n" for rel in kept))  # as if it had written them
    _write_set(out, {"b.png": b"b"})
    files = _files_under(out)
    assert {rel: files.get(rel) for rel in kept} == kept
    assert "a.png" not in files and files["b.png"] == b"b"


def test_a_staging_folder_of_a_pid_this_system_cannot_have_is_kept(tmp_path):
    from muon_repro.tables.files import remove_stale_siblings

    out = tmp_path / "dataset"
    impossible = tmp_path / f".dataset.muon-repro-stage-{2**40}-0123abcd"  # past any pid_t
    impossible.mkdir()
    assert remove_stale_siblings(out) == [] and impossible.is_dir()


def test_a_staging_folder_takes_the_mode_of_the_folder_it_replaces(tmp_path):
    from muon_repro.tables.files import new_sibling_dir

    out = tmp_path / "dataset"
    out.mkdir()
    out.chmod(0o750)
    assert new_sibling_dir(out, "stage").stat().st_mode & 0o7777 == 0o750


def test_a_swap_journal_of_another_output_is_not_finished_into_this_one(tmp_path):
    """A dead writer's folder of old files beside ``figures`` whose journal names another output: not a swap
    put_files_in_place left for ``figures``, so nothing is moved into it."""
    import json

    from support.pids import dead_pid

    from muon_repro.tables.files import SWAP_JOURNAL, finish_interrupted_swaps

    out = tmp_path / "figures"
    out.mkdir()
    (out / "a.png").write_bytes(b"old")
    dead = dead_pid()
    stage, old = tmp_path / f".figures.muon-repro-stage-{dead}-0123abcd", tmp_path / f".figures.muon-repro-old-{dead}-89abcdef"
    stage.mkdir()
    (stage / "a.png").write_bytes(b"new")
    old.mkdir()
    journal = {"out": "other", "stage": stage.name, "stale": [], "entries": ["a.png"]}
    (old / SWAP_JOURNAL).write_text(json.dumps(journal))
    assert finish_interrupted_swaps(out) == []
    assert (out / "a.png").read_bytes() == b"old" and (stage / "a.png").read_bytes() == b"new"


# ---------------------------------------------------------------- the table files: refusing an output


def test_an_output_is_refused_when_it_is_inside_or_holds_a_source(tmp_path):
    from muon_repro.tables.files import check_apart

    source = tmp_path / "traces"
    for out in (source, source / "metrics", tmp_path):
        with pytest.raises(ValueError, match=r"^--out x overlaps the source .*traces \(--traces\); choose another folder$"):
            check_apart(out, "--out x", [("--traces", source)])
    check_apart(tmp_path / "metrics", "--out x", [("--traces", source)])  # beside it: apart


def test_a_folder_replaced_whole_needs_its_parent_writable(tmp_path, monkeypatch):
    """Replaced whole, a folder is swapped for a sibling: the place probed is its parent (here the one place that
    cannot be written; running as root, every folder can be, so the probe is stood in for)."""
    import errno
    import tempfile

    from muon_repro.tables import files as files_module

    out = tmp_path / "parent" / "out"
    out.mkdir(parents=True)
    real = tempfile.TemporaryDirectory

    def probe(*args, dir=None, **kwargs):
        if dir == out.parent:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(files_module.tempfile, "TemporaryDirectory", probe)
    files_module.check_out_folder(out, "--out out")  # written in place: its parent is not touched
    with pytest.raises(ValueError, match=r"^--out out: no permission to write in .*parent, so it cannot be written"):
        files_module.check_out_folder(out, "--out out", replaced_whole=True)


def test_an_output_file_is_refused_when_it_is_a_folder(tmp_path):
    from muon_repro.tables.files import check_out_file

    with pytest.raises(ValueError, match=r"^--card is a folder: give a file name, such as "):
        check_out_file(tmp_path, "--card")
    check_out_file(tmp_path / "card.md", "--card")


# ---------------------------------------------------------------- the table files: a block between markers


def test_a_block_needs_both_marker_lines_and_is_written_on_lines_of_its_own(tmp_path):
    from muon_repro.tables.files import with_block, write_block

    text = "head\n<!-- b -->\nold\n<!-- e -->\ntail\n"
    assert with_block(text, "<!-- b -->", "<!-- e -->", "\nnew\n", "claims") == "head\n<!-- b -->\nnew\n<!-- e -->\ntail\n"
    with pytest.raises(ValueError, match=r"^no '<!-- b -->' \.\.\. '<!-- x -->' lines to put claims between$"):
        with_block(text, "<!-- b -->", "<!-- x -->", "new", "claims")
    path = tmp_path / "README.md"
    path.write_text(text)
    write_block(path, ("<!-- b -->", "<!-- e -->"), "| a | b |", "the table")
    assert path.read_text() == "head\n<!-- b -->\n| a | b |\n<!-- e -->\ntail\n"


# ---------------------------------------------------------------- the table files: listing a tree, sizes


def test_a_tree_is_listed_as_its_regular_files_sorted_by_path(tmp_path):
    from muon_repro.tables.files import list_files

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("x")
    (tmp_path / "b").write_text("b")  # walked before a/x (the top folder first), listed after it
    os.mkfifo(tmp_path / "pipe")  # no regular file
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    assert list_files(tmp_path) == ["a/x", "b"]


@pytest.mark.parametrize(
    ("n", "said"),
    [(999, "999 B"), (1000, "1.0 kB"), (2048, "2.0 kB"), (3_400_000, "3.4 MB"), (5 * 10**15, "5000.0 TB")],
)
def test_sizes_for_people_are_powers_of_1000_with_one_decimal(n, said):
    from muon_repro.tables.files import human_size

    assert human_size(n) == said
