"""The rules a contribution is held to, checked without a Hub: names and paths, config.json's numbers, capped
messages, escaping, and refused symbolic links (muon_repro.contrib.untrusted, pr_checks, config_check, run_check)."""

from __future__ import annotations

import gzip
import json
import shutil
import time
from pathlib import Path

import pytest
from support.gzip_bombs import gzip_bomb
from support.run_links import link_outside
from test_contribute import PROFILE, make_run

from muon_repro.contrib.config_check import check_config
from muon_repro.contrib.limits import CONFIG_INT_RANGES, MAX_TRACE_EXPANSION, MAX_TRIAL, MAX_WORLD_SIZE
from muon_repro.contrib.pr_checks import RunPath, parse_run_path
from muon_repro.contrib.run_check import check_run, scan_runs
from muon_repro.contrib.untrusted import describe_ranks, escape_controls, shown
from muon_repro.rundir import SideFileError, load_json

REPO = Path(__file__).resolve().parents[1]
FOLDER = f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0"


def test_names_print_as_they_are_only_when_printable_ascii():
    assert shown("traces/cpu-2c-gloo/comparison/x/trial0/log.txt") == "traces/cpu-2c-gloo/comparison/x/trial0/log.txt"
    assert shown("\x1b[32mChecks passed\x1b[0m") == "'\\x1b[32mChecks passed\\x1b[0m'"
    assert shown("mu\u043en") == "'mu\\u043en'"  # a Cyrillic o that looks Latin
    assert "\n" not in shown("a\nChecks passed") and "\r" not in shown("\rx")
    assert escape_controls("ok \x1b[2J\u202e done\n") == "ok \\x1b[2J\\u202e done\n"


def test_rank_lists_are_ranges_not_one_number_each():
    assert describe_ranks([3, 2]) == "2, 3"
    assert describe_ranks(range(2, 1000)) == "2..999 (998 ranks)"
    many = describe_ranks(range(0, 40, 2))
    assert many.endswith("and 15 more range(s) (20 ranks)") and len(many) < 80


def test_a_run_path_is_checked_part_by_part():
    place = parse_run_path(f"{FOLDER}/rank1.json.gz")
    assert place == RunPath(PROFILE, "comparison", "muon_dp2_tp1", 0, "rank1.json.gz")
    assert isinstance(parse_run_path(f"traces/8xH100-nvlink-nccl/comparison/x.y/trial{MAX_TRIAL}/log.txt"), RunPath)
    refused = {
        "../../outside.txt": "added outside a run folder",
        "/etc/passwd": "added outside a run folder",
        "traces\\p\\g\\n\\trial0\\log.txt": "added outside a run folder",
        f"traces/{PROFILE}/mu\u043en/x/trial0/log.txt": "the group 'mu\\u043en' is not a valid name",
        f"traces/{PROFILE}/comparison/../trial0/log.txt": "the run name .. is not a valid name",
        f"traces/{PROFILE}/comparison/.hidden/trial0/log.txt": "the run name .hidden is not a valid name",
        f"traces/{PROFILE}/Comparison/x/trial0/log.txt": "the group Comparison is not a valid name",
        "traces/cpu\x1b[31m/comparison/x/trial0/log.txt": "the profile 'cpu\\x1b[31m' is not a valid profile id",
        f"traces/{PROFILE}/comparison/x/trial007/log.txt": "is not trial<k>",
        f"traces/{PROFILE}/comparison/x/trial{MAX_TRIAL + 1}/log.txt": "is not trial<k>",
        f"{FOLDER}/rank00.json.gz": "is not a run file",
        f"{FOLDER}/rank{MAX_WORLD_SIZE}.json.gz": "is not a run file",
        f"{FOLDER}/rank1.json": "is not a run file",
        f"{FOLDER}/log.txt\n": "is not a run file",
    }
    for path, reason in refused.items():
        why = parse_run_path(path)
        assert isinstance(why, str) and reason in why, (path, why)
        assert all(" " <= c <= "~" for c in why), why  # the contributor's text is escaped


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (10**12, "world_size is 1000000000000, outside 1 to 1024"),
        (10**6, "outside 1 to 1024"),
        (4.7, "world_size is 4.7 (a float), not an integer from 1 to 1024"),
        (4.0, "(a float), not an integer"),
        (True, "(a boolean), not an integer"),
        ("4", "(a str), not an integer"),
        (None, "(null), not an integer"),
        (0, "outside 1 to 1024"),
        (10**40, "a 41-digit number, outside 1 to 1024"),
    ],
)
def test_world_size_must_be_an_integer_in_range(value, said):
    checked = check_config({"group": "g", "name": "n", "world_size": value})
    assert checked.world_size is None
    assert any(said in p for p in checked.problems), checked.problems


def test_the_other_numbers_and_names_of_config_json():
    good = {"group": "comparison", "name": "muon_dp2_tp1", "world_size": 4, "dp": 2, "tp": 2, "trial": 3, "steps": 6}
    assert check_config(good).problems == () and check_config(good).world_size == 4
    assert "dp 2 x tp 1 is not world_size 4" in check_config({**good, "tp": 1}).problems[0]
    pipeline = {**good, "tp": 1, "pp": 2}  # PP2·DP2 on 4 ranks: the pipeline group's runs
    assert check_config(pipeline).problems == () and check_config(pipeline).world_size == 4
    assert "dp 2 x tp 2 x pp 2 is not world_size 4" in check_config({**good, "pp": 2}).problems[0]
    assert check_config({**good, "pp": 2, "world_size": 8}).problems == ()
    assert "trial is -1, outside 0 to" in check_config({**good, "trial": -1}).problems[0]
    assert "group 'gr\\u043eup' is not a valid name" in check_config({**good, "group": "gr\u043eup"}).problems[0]
    assert check_config({**good, "world_size": None, "dp": None}).world_size is None
    assert check_config({"group": "g", "name": "n"}).problems[0].startswith("has no 'world_size' (the number of ranks)")
    for key, (low, high) in CONFIG_INT_RANGES.items():
        assert check_config({**good, key: high + 1}).problems, key
    assert check_config({**good, "bucket_elems": None}).problems == ()  # null: the layout's own
    (problem,) = check_config({**good, "optimizer": "sgd"}).problems
    assert problem.startswith("optimizer is 'sgd', not one of muon, adamw: delete the trial folder")
    assert check_config({**good, "optimizer": "muon", "precision": "bf16", "overlap": "pipelined"}).problems == ()


def test_a_huge_world_size_costs_nothing_and_says_one_thing(tmp_path):
    run = make_run(tmp_path / "run")
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "world_size": 10**12}))
    started = time.perf_counter()
    found, problems = check_run(run)
    assert found is None and time.perf_counter() - started < 1
    assert [p.problem.split(",")[0] for p in problems] == ["world_size is 1000000000000"]


def test_missing_ranks_are_one_message_each_kind(tmp_path):
    run = make_run(tmp_path / "run")
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "world_size": 1000, "dp": 1000}))
    _, problems = check_run(run)
    said = [p.problem for p in problems]
    assert len(said) == 2, said
    assert said[0].startswith("names no metrics for rank(s) 2..999 (998 ranks) of world_size 1000")
    assert said[1].startswith("has no trace for ranks 2..999 (998 ranks) of world_size 1000")


def test_side_files_nested_too_deeply_or_not_text_are_refused_by_name(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "environment.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    (run / "metrics.json").write_bytes(b"\xff\xfe{}")
    _, problems = check_run(run)
    by_file = {p.path.name: p.problem for p in problems}
    assert by_file["environment.json"].startswith("JSON nested deeper than 32 levels")
    assert by_file["metrics.json"].startswith("not valid JSON: 'utf-8' codec can't decode")


def test_a_side_file_the_analysis_would_refuse_is_refused_here(tmp_path):
    """Nesting Python's parser reads (60 levels) but the analysis refuses (load_json's depth limit): a contribution
    that passed here would stop on the maintainers' side."""
    run = make_run(tmp_path / "run")
    environment = json.loads((run / "environment.json").read_text())
    (run / "environment.json").write_text(json.dumps({**environment, "extra": json.loads("[" * 60 + "]" * 60)}))
    with pytest.raises(SideFileError):
        load_json(run / "environment.json")
    _, problems = check_run(run)
    assert [p.path.name for p in problems] == ["environment.json"]
    assert problems[0].problem.startswith("JSON nested deeper than 32 levels")


def test_symbolic_links_anywhere_are_refused_each_by_name(tmp_path):
    runs = tmp_path / "runs"
    run = make_run(runs / PROFILE / "comparison" / "muon_dp2_tp1" / "trial0")
    outside = link_outside(run / "log.txt", tmp_path / "secret.txt")
    (run.parent / "trial1").symlink_to(run, target_is_directory=True)
    scan = scan_runs(runs)
    assert not scan.runs  # the folder with a link is not read at all
    said = sorted(str(p) for p in scan.problems)
    assert len(said) == 2, said
    assert said[0].startswith(f"{run / 'log.txt'}: is a symbolic link (to {outside})")
    assert said[1].startswith(f"{run.parent / 'trial1'}: is a symbolic link")


def test_a_gzip_bomb_stops_at_64_times_its_compressed_size(tmp_path):
    run = make_run(tmp_path / "run")
    event = b'{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 1},'
    # 220 MB of events, which the reader takes
    bomb = gzip_bomb(run / "rank0.json.gz", b'{"traceEvents": [', event * 10_000, 250, tail=event[:-1] + b"]}")
    assert bomb.stat().st_size * MAX_TRACE_EXPANSION < 220e6
    started = time.process_time()  # CPU seconds: a loaded machine's wall time would make the limit flake
    _, problems = check_run(run)
    assert [p.path.name for p in problems] == ["rank0.json.gz"]
    assert problems[0].problem.startswith("past a limit of the trace reader (decompressed more than")
    assert time.process_time() - started < 10


def test_every_committed_runs_config_passes_the_contribution_check():
    """A contributor re-recording any of our configurations must not be refused: the pipeline runs' ranks are
    dp x tp x pp, the 8-rank ones too."""
    configs = sorted(REPO.glob("traces/*/*/*/trial0/config.json"))
    assert any(json.loads(c.read_text()).get("pp", 1) > 1 for c in configs)
    refused = {str(c): check_config(json.loads(c.read_text())).problems for c in configs}
    assert not {c: p for c, p in refused.items() if p}


# ---------------------------------------------------------------- the original study's protocol, replayed and contributed

PROTOCOL_RUN = REPO / "traces" / "cpu-2c-gloo" / "study_protocol" / "muon_FULLSTEP_dp2_tp2" / "trial0"


def test_a_study_protocol_run_is_contributed_with_the_files_it_has(tmp_path):
    """`muon-repro bench --protocol study` writes traces, config.json and environment.json (no metrics.json, no
    log.txt) under the study's run names, capitals included: contributed as they are."""
    folder = tmp_path / "runs" / "cpu-2c-gloo" / "study_protocol" / PROTOCOL_RUN.parent.name / "trial0"
    shutil.copytree(PROTOCOL_RUN, folder)
    scan = scan_runs(tmp_path / "runs")
    assert scan.problems == [] and len(scan.runs) == 1
    run = scan.runs[0]
    assert run.dest == f"traces/cpu-2c-gloo/study_protocol/{PROTOCOL_RUN.parent.name}/trial0"
    assert set(run.files) == {"config.json", "environment.json", *(f"rank{r}.json.gz" for r in range(4))}
    assert isinstance(parse_run_path(f"{run.dest}/rank3.json.gz"), RunPath)


def test_a_protocol_run_filed_under_another_group_is_refused_by_name(tmp_path):
    folder = tmp_path / "runs" / "cpu-2c-gloo" / "study_protocol" / PROTOCOL_RUN.parent.name / "trial0"
    shutil.copytree(PROTOCOL_RUN, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "group": "study_equal_work"}))
    problems = [str(p) for p in scan_runs(tmp_path / "runs").problems]
    assert len(problems) == 1 and "its protocol 'study' on 4 rank(s) files its runs under group study_protocol" in problems[0]


@pytest.mark.parametrize(
    "group, name, allowed",
    [
        ("study_protocol", "muon_FULLSTEP_dp2_tp2_async", True),
        ("study_equal_work_1rank", "adamw_FULLSTEP", True),
        ("comparison", "muon_FULLSTEP_dp2_tp2", False),  # the study's capitals only in the protocol's groups
        ("study_protocol", "Muon_dp2_tp2", False),  # and only its own names there
        ("study_protocol", "muon_FULLSTEP_dp2_tp2/../x", False),
    ],
)
def test_the_studys_run_names_are_allowed_in_its_protocols_groups_only(group, name, allowed):
    config = {"group": group, "name": name, "world_size": 4, "dp": 2, "tp": 2}
    assert (check_config(config).problems == ()) is allowed
    assert isinstance(parse_run_path(f"traces/p/{group}/{name}/trial0/rank0.json.gz"), RunPath) is allowed


# ---------------------------------------------------------------- what a run says it is


def with_environment(run: Path, **fields) -> Path:
    environment = json.loads((run / "environment.json").read_text())
    (run / "environment.json").write_text(json.dumps({k: v for k, v in (environment | fields).items() if v is not None}))
    return run


@pytest.mark.parametrize(
    "fields, described",
    [
        ({"host_cpu_cores": 64}, "cpu-64c-gloo:"),
        (
            {"accelerator": "NVIDIA H100 80GB HBM3", "accelerator_count": 8},
            "8xH100-gloo or 8xH100-nvlink-gloo or 8xH100-pcie-gloo:",
        ),
    ],
)
def test_a_profile_its_own_hardware_fields_do_not_describe_is_refused(tmp_path, fields, described):
    """Filed under cpu-2c-gloo, its steps would pool and compare with the 2-core runs."""
    run = with_environment(make_run(tmp_path / "run"), **fields)
    found, problems = check_run(run)
    assert found is None and [p.path.name for p in problems] == ["environment.json"]
    assert problems[0].problem.startswith("files the run under profile cpu-2c-gloo, but its hardware fields")
    assert f"describe {described}" in problems[0].problem


@pytest.mark.parametrize(
    "fields",
    [
        {},  # the fields describe the profile it states
        {"backend": None, "host_cpu_cores": None},  # an old folder that states its profile and no hardware
        {"profile": "4xA100-pcie-nccl", "backend": "nccl", "accelerator": "NVIDIA A100", "accelerator_count": 4},
    ],
    ids=["described", "stated-only", "link-not-recorded"],
)
def test_a_profile_the_hardware_fields_are_consistent_with_is_accepted(tmp_path, fields):
    run = make_run(tmp_path / "run")
    if fields.get("backend") == "nccl":  # config.json says the backend the environment does
        config = json.loads((run / "config.json").read_text())
        (run / "config.json").write_text(json.dumps(config | {"backend": "nccl"}))
    found, problems = check_run(with_environment(run, **fields))
    assert not problems and found is not None and found.profile == fields.get("profile", PROFILE)


def test_an_environment_of_another_backend_than_the_config_is_refused(tmp_path):
    run = make_run(tmp_path / "run")
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(config | {"backend": "nccl"}))
    found, problems = check_run(run)
    assert found is None and [p.problem for p in problems] == [
        "says backend gloo, but config.json says nccl: the two files come from different recordings; "
        + problems[0].problem.split("recordings; ", 1)[1]
    ]


def test_a_copy_of_a_published_or_another_added_measurement_is_refused():
    from muon_repro.contrib.pr_checks import copied_problems
    from muon_repro.dataset.manifest import FileEntry, manifest_lines

    trial = "traces/cpu-2c-gloo/comparison/muon_dp2_tp1"
    published = [FileEntry(f"{trial}/trial0/rank0.json.gz", 10, "a" * 64), FileEntry(f"{trial}/trial0/config.json", 5, "c" * 64)]
    added = {
        f"{trial}/trial7/rank0.json.gz": FileEntry(f"{trial}/trial7/rank0.json.gz", 10, "a" * 64),  # trial0's trace
        f"{trial}/trial7/rank1.json.gz": FileEntry(f"{trial}/trial7/rank1.json.gz", 10, "b" * 64),
        f"{trial}/trial8/rank1.json.gz": FileEntry(f"{trial}/trial8/rank1.json.gz", 10, "b" * 64),  # trial7's rank 1
        f"{trial}/trial7/config.json": FileEntry(f"{trial}/trial7/config.json", 5, "c" * 64),  # not a measurement
        f"{trial}/trial9/rank0.json.gz": None,  # refused before download
    }
    problems = copied_problems(manifest_lines(published), added)
    assert [p.split(":")[0] for p in problems] == [f"{trial}/trial7/rank0.json.gz", f"{trial}/trial8/rank1.json.gz"]
    assert f"byte for byte {trial}/trial0/rank0.json.gz (sha256 aaaaaaaaaaaa...)" in problems[0]
    assert f"byte for byte {trial}/trial7/rank1.json.gz" in problems[1]


def test_a_recording_re_compressed_or_re_formatted_is_still_a_copy(tmp_path, monkeypatch):
    """The byte check above misses a trace gzipped again or a metrics.json written with other spacing: the trace once
    decompressed, and the step times to the last digit, give the recording away."""
    from muon_repro.contrib import pr_checks
    from muon_repro.contrib.pr_checks import recorded_again_problems

    def trial(name: str, metrics: dict, indent: int | None = None) -> tuple[str, Path]:
        folder = tmp_path / name
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(metrics, indent=indent))
        return f"traces/cpu-2c-gloo/comparison/muon_dp2_tp1/{name}", folder

    steps = {"ranks": [{"rank": 0, "step_ms": [10.25, 11.5], "timed_step_ms": [9.75]}, {"rank": 1, "step_ms": [10.5, 11.0]}]}
    other = {"ranks": [{"rank": 0, "step_ms": [10.25, 11.5], "timed_step_ms": [9.8]}, {"rank": 1, "step_ms": [10.5, 11.0]}]}
    published = dict([trial("trial0", steps)])
    added = dict(
        [
            trial("trial1", {"ranks": steps["ranks"][::-1]}, indent=2),  # trial0's, ranks in another order, re-spaced
            trial("trial2", other),  # one timed step differs: its own recording
            trial("trial3", other),  # trial2's
            trial("trial4", {"ranks": [{"rank": 0}, {"rank": 1}]}),  # times no step: nothing to compare
            trial("trial5", {"ranks": [{"rank": 0}, {"rank": 1}]}),
        ]
    )
    (published["traces/cpu-2c-gloo/comparison/muon_dp2_tp1/trial0"] / "rank1.json.gz").write_bytes(gzip.compress(b"{}", mtime=0))
    (added["traces/cpu-2c-gloo/comparison/muon_dp2_tp1/trial4"] / "rank0.json.gz").write_bytes(gzip.compress(b"{}", mtime=9))
    problems = recorded_again_problems(added, published)
    assert [p.split(":")[0].split("muon_dp2_tp1/")[1] for p in problems] == [
        "trial1/metrics.json",
        "trial3/metrics.json",
        "trial4/rank0.json.gz",
    ]
    assert "times every step of every rank as traces/cpu-2c-gloo/comparison/muon_dp2_tp1/trial0/metrics.json" in problems[0]
    assert "is, once decompressed, the trace traces/cpu-2c-gloo/comparison/muon_dp2_tp1/trial0/rank1.json.gz" in problems[2]
    # the trailers are only a first look: two traces of one size and CRC-32 are compared whole before a verdict
    (added["traces/cpu-2c-gloo/comparison/muon_dp2_tp1/trial5"] / "rank0.json.gz").write_bytes(gzip.compress(b"[]"))
    monkeypatch.setattr(pr_checks, "_gzip_trailer", lambda path: (0, 2))
    assert [p.split(":")[0].split("muon_dp2_tp1/")[1] for p in recorded_again_problems(added, published)] == [
        "trial1/metrics.json",
        "trial3/metrics.json",
        "trial4/rank0.json.gz",
    ]


@pytest.mark.parametrize(
    "entries, said",
    [
        ([{"rank": 0}, {"rank": 1}, {"rank": 1}], "names rank(s) 1 more than once"),
        ([{"rank": 0}, {"rank": 1}, {"rank": -7}], "names rank(s) -7, below 0"),
        ([{"rank": 0}, {"rank": 1}, "junk", 5], "its ranks list holds entries that are no objects"),
    ],
)
def test_metrics_naming_a_rank_twice_below_zero_or_as_no_object_are_refused(tmp_path, entries, said):
    """The analysis keys ranks by number: a second entry of rank 1 would silently stand for it."""
    run = make_run(tmp_path / "run")
    (run / "metrics.json").write_text(json.dumps({"config": "comparison/muon_dp2_tp1", "ranks": entries}))
    found, problems = check_run(run)
    assert found is None and [p.path.name for p in problems] == ["metrics.json"]
    assert problems[0].problem.startswith(said), problems[0].problem
