"""Contributing runs as Hub pull requests (``muon-repro contribute``) and reviewing them (``muon-repro review``).

Everything runs against the fake Hub on 127.0.0.1 (tests/hub_support.py), never the real one.
The fast tests use small synthetic run folders (traces of one event, which the reader parses);
the round trip records a tiny Muon/AdamW pair with gloo so that the review can analyze it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hub_support import TOKEN
from huggingface_hub import CommitOperationAdd

from muon_repro.cli import main
from muon_repro.dataset.manifest import HEADER, MANIFEST_NAME, FileEntry, manifest_lines, parse_manifest

REPO = "test-org/muon-traces"
REPO_ROOT = Path(__file__).resolve().parents[1]
PROFILE = "cpu-2c-gloo"


def _trace(rank: int, world_size: int) -> bytes:
    doc = {
        "distributedInfo": {"rank": rank, "world_size": world_size, "backend": "gloo"},
        "traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0, "dur": 10}],
    }
    return gzip.compress(json.dumps(doc).encode(), mtime=0)


def make_run(folder: Path, *, name: str = "muon_dp2_tp1", world_size: int = 2, profile: str | None = PROFILE) -> Path:
    """A small complete run folder: side files and one parseable trace per rank."""
    folder.mkdir(parents=True)
    config = {
        "group": "comparison",
        "name": name,
        "key": f"comparison/{name}",
        "world_size": world_size,
        "dp": world_size,
        "tp": 1,
    }
    (folder / "config.json").write_text(json.dumps(config))
    environment = {"backend": "gloo", "host_cpu_cores": 2, **({"profile": profile} if profile else {})}
    (folder / "environment.json").write_text(json.dumps(environment))
    (folder / "metrics.json").write_text(json.dumps({"config": config["key"], "ranks": [{"rank": r} for r in range(world_size)]}))
    (folder / "log.txt").write_text("step 0\n")
    for rank in range(world_size):
        (folder / f"rank{rank}.json.gz").write_bytes(_trace(rank, world_size))
    return folder


def _entries(files: dict[str, bytes]) -> list[FileEntry]:
    return [FileEntry(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()]


def publish_main(hub_api, files: dict[str, bytes]) -> str:
    """A published dataset on the fake Hub: ``files`` and a MANIFEST.sha256 of them; returns main's head."""
    hub_api.create_repo(REPO, repo_type="dataset", exist_ok=True)
    files = {**files, MANIFEST_NAME: (HEADER + manifest_lines(_entries(files))).encode()}
    ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=d) for p, d in files.items()]
    return hub_api.create_commit(REPO, ops, commit_message="Publish v1.0.0", repo_type="dataset").oid


def folder_files(folder: Path, dest: str) -> dict[str, bytes]:
    return {f"{dest}/{p.name}": p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def open_pull_request(fake_hub, hub_api, files: dict[str, bytes], head: str) -> None:
    """A pull request from ``head`` adding ``files``, with main's manifest and a line for each of them."""
    files = {**files, MANIFEST_NAME: fake_hub.files(REPO)[MANIFEST_NAME] + manifest_lines(_entries(files)).encode()}
    ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=d) for p, d in files.items()]
    hub_api.create_commit(REPO, ops, commit_message="runs", repo_type="dataset", create_pr=True, parent_commit=head)


@pytest.fixture
def hub_env(hub_api, monkeypatch):
    """The CLI's own HfApi() on the fake Hub (hub_api patched the endpoint), with a token from HF_TOKEN."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return hub_api


def _commits(fake_hub) -> list[tuple[str, str]]:
    return [(m, p) for m, p in fake_hub.requests if m == "POST" and ("/commit/" in p or "/preupload/" in p or "lfs" in p)]


# ---------------------------------------------------------------------- fast: synthetic runs


def test_dry_run_plans_both_layouts_and_sends_nothing(tmp_path, fake_hub, hub_env, capsys):
    head = publish_main(hub_env, {"README.md": b"# data\n", "traces/other/comparison/x/trial0/log.txt": b"x\n"})
    runs = tmp_path / "runs"
    make_run(runs / PROFILE / "comparison" / "muon_dp2_tp1" / "trial0")
    make_run(runs / "comparison" / "adamw_dp2_tp1" / "trial2", name="adamw_dp2_tp1", profile=None)  # old layout, no profile field
    (runs / "notes.txt").write_text("mine\n")
    before = len(_commits(fake_hub))

    assert main(["contribute", "--repo-id", REPO, "--runs", str(runs), "--dry-run"]) == 0
    out = capsys.readouterr().out
    print(out)
    assert _commits(fake_hub)[before:] == [] and fake_hub.get_repo(REPO).branches["main"] == head
    assert not fake_hub.get_repo(REPO).pull_requests
    # The old-layout run's profile comes from its environment.json (backend + cores), its trial from its folder.
    for dest in (f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0", f"traces/{PROFILE}/comparison/adamw_dp2_tp1/trial2"):
        for name in ("config.json", "environment.json", "metrics.json", "log.txt", "rank0.json.gz", "rank1.json.gz"):
            assert f"add     {dest}/{name}" in out
    assert f"append  {MANIFEST_NAME}: 12 line(s) after main's 2" in out
    lines = [ln.strip() for ln in out.splitlines()]
    trace = runs / PROFILE / "comparison" / "muon_dp2_tp1" / "trial0" / "rank1.json.gz"
    assert (
        f"{hashlib.sha256(trace.read_bytes()).hexdigest()}  {trace.stat().st_size}  "
        f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0/rank1.json.gz" in lines
    )
    assert str(runs / "notes.txt") in lines
    assert "Dry run: nothing was sent to the Hub." in out and TOKEN not in out


def test_incomplete_runs_are_refused_naming_each_problem(tmp_path, fake_hub, hub_env, capsys):
    publish_main(hub_env, {"README.md": b"# data\n"})
    runs = tmp_path / "runs"
    no_rank = make_run(runs / PROFILE / "comparison" / "muon_dp2_tp1" / "trial0")
    (no_rank / "rank1.json.gz").unlink()
    no_env = make_run(runs / PROFILE / "comparison" / "adamw_dp2_tp1" / "trial0", name="adamw_dp2_tp1")
    (no_env / "environment.json").unlink()
    short = make_run(runs / PROFILE / "comparison" / "muon_dp4" / "trial0", name="muon_dp4", world_size=4)
    (short / "metrics.json").write_text(json.dumps({"ranks": [{"rank": 0}, {"rank": 1}]}))
    (short / "rank3.json.gz").write_bytes(b"truncated")
    partial = make_run(runs / PROFILE / "comparison" / "muon_dp4" / ".trial1.partial", name="muon_dp4")
    requests = len(fake_hub.requests)

    assert main(["contribute", "--repo-id", REPO, "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert "5 problem(s) keep the runs" in err and "nothing was sent to the Hub" in err
    problems = [ln.strip()[2:] for ln in err.splitlines() if ln.strip().startswith("- ")]
    assert any(p.startswith(f"{no_rank / 'rank1.json.gz'}: missing: every rank of world_size 2 writes a trace") for p in problems)
    assert any(p.startswith(f"{no_env / 'environment.json'}: missing: it records the hardware") for p in problems)
    assert any(p.startswith(f"{short / 'metrics.json'}: names no metrics for rank(s) 2, 3 of world_size 4") for p in problems)
    assert any(p.startswith(f"{short / 'rank3.json.gz'}: does not parse as a profiler trace") for p in problems)
    assert any(p.startswith(f"{partial}: a trial still being recorded") for p in problems)
    assert all("delete" in p or "record" in p for p in problems)  # each says what to do
    assert fake_hub.requests[requests:] == []  # refused before any request


def test_overwriting_a_published_trial_is_refused(tmp_path, fake_hub, hub_env, capsys):
    runs = tmp_path / "runs"
    run = make_run(runs / PROFILE / "comparison" / "muon_dp2_tp1" / "trial0")
    published = make_run(tmp_path / "published", name="muon_dp2_tp1")
    head = publish_main(hub_env, folder_files(published, f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0"))

    assert main(["contribute", "--repo-id", REPO, "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0/config.json: main already has this file" in err
    assert f"rename {run} to {run.with_name('trial1')}" in err
    assert fake_hub.get_repo(REPO).branches["main"] == head and not fake_hub.get_repo(REPO).pull_requests

    run.rename(run.with_name("trial1"))  # as told: the next free trial number goes through
    assert main(["contribute", "--repo-id", REPO, "--runs", str(runs)]) == 0
    assert f"/datasets/{REPO}/discussions/1" in capsys.readouterr().out
    assert fake_hub.get_repo(REPO).branches["main"] == head


def test_each_conflicting_trial_is_told_a_free_folder_of_its_own(tmp_path, fake_hub, hub_env, capsys):
    """Two local trials that main already has were both told "rename to trial2": the second rename then collides."""
    runs = tmp_path / "runs"
    local = [make_run(runs / PROFILE / "comparison" / "muon_dp2_tp1" / f"trial{k}") for k in (0, 1)]
    published = make_run(tmp_path / "published", name="muon_dp2_tp1")
    publish_main(
        hub_env,
        {
            **folder_files(published, f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0"),
            **folder_files(published, f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial1"),
        },
    )
    assert main(["contribute", "--repo-id", REPO, "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert f"rename {local[0]} to {local[0].with_name('trial2')}" in err
    assert f"rename {local[1]} to {local[1].with_name('trial3')}" in err


def test_review_refuses_a_pull_request_that_changes_more_than_runs(tmp_path, fake_hub, hub_env, capsys):
    head = publish_main(hub_env, {"README.md": b"# data\n"})
    run = make_run(tmp_path / "run")
    dest = f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0"
    files = folder_files(run, dest)
    entries = _entries(files)
    entries[0] = FileEntry(entries[0].path, entries[0].size, "0" * 64)  # a line that does not match its file
    manifest = fake_hub.files(REPO)[MANIFEST_NAME] + manifest_lines(entries[:-1]).encode()  # and one file without a line
    files.update({MANIFEST_NAME: manifest, "README.md": b"# mine now\n", "traces/stray.txt": b"x"})
    ops = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=d) for p, d in files.items()]
    hub_env.create_commit(REPO, ops, commit_message="runs", repo_type="dataset", create_pr=True, parent_commit=head)

    assert main(["review", "--repo-id", REPO, "--pr", "1"]) == 1
    out = capsys.readouterr().out
    assert "Pull request #1 on test-org/muon-traces: 'runs' by fake-user, open; refs/pr/1" in out
    assert "README.md: changed by the pull request; a contribution changes only MANIFEST.sha256" in out
    assert "traces/stray.txt: added outside a run folder" in out
    assert f"{entries[0].path}: {entries[0].size} bytes, sha256 " in out
    assert f"{entries[-1].path}: added but has no line in {MANIFEST_NAME}" in out
    assert "traces/stray.txt: added but has no line" in out
    assert "Claims on profile" not in out  # nothing is analyzed once a check fails


def test_review_refuses_a_run_filed_under_another_profile(tmp_path, fake_hub, hub_env, capsys):
    head = publish_main(hub_env, {"README.md": b"# data\n"})
    run = make_run(tmp_path / "run", profile=None)  # its hardware fields alone give its profile
    (run / "environment.json").write_text(json.dumps({"backend": "gloo", "host_cpu_cores": 8}))
    files = folder_files(run, f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0")
    open_pull_request(fake_hub, hub_env, files, head)

    assert main(["review", "--repo-id", REPO, "--pr", "1"]) == 1
    out = capsys.readouterr().out
    assert "1 check(s) FAILED" in out
    assert (
        f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0: its own files file it under "
        "traces/cpu-8c-gloo/comparison/muon_dp2_tp1/trial0 (environment.json's profile"
    ) in out


def test_manifest_rules():
    from muon_repro.contrib.pr_checks import manifest_problems

    base = HEADER + manifest_lines(_entries({"a.txt": b"a"}))
    added = {e.path: e for e in _entries({"traces/p/g/n/trial0/log.txt": b"log"})}
    good = base + manifest_lines(list(added.values()))
    assert manifest_problems(base, good, added) == []
    assert "rewrites main's lines" in manifest_problems(base, good.replace("a.txt", "b.txt"), added)[0]
    assert "has no line" in manifest_problems(base, base, added)[0]
    assert "appended lines" in manifest_problems(base, base + "garbage\n", added)[0]


# ---------------------------------------------------------------------- the round trip, on recorded runs


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, tiny_sweep) -> dict[str, Path]:
    """A tiny AdamW and Muon run (DP2 x TP2, gloo, one trial each, from the shared sweep): config name -> trial folder."""
    from tiny_sweep import copy_of

    from muon_repro.bench.configs import resolve

    out = tmp_path_factory.mktemp("recorded")
    names = ("comparison/adamw_dp2_tp2", "comparison/muon_dp2_tp2")
    return {k: copy_of(tiny_sweep[resolve(k, "tiny").key], out) for k in names}


def convergence_records(profile: str) -> dict[str, bytes]:
    """The committed convergence records at the best learning rates (Muon 0.03, AdamW 0.003, seeds 0 and 1: the
    leading-steps claim needs two), filed under ``profile`` (their environment says so) as main would hold them."""
    records = {}
    for run in (f"{opt}_steps1000_seed{seed}" for opt in ("muon_lr0.03", "adamw_lr0.003") for seed in (0, 1)):
        (source,) = [p for p in (REPO_ROOT / "traces").rglob(f"convergence/{run}/convergence.json")]
        record = json.loads(source.read_text())
        record["environment"] = {**record.get("environment", {}), "profile": profile}
        records[f"traces/{profile}/convergence/{run}/convergence.json"] = json.dumps(record).encode()
    return records


def _profile_of(folder: Path) -> str:
    from muon_repro.hardware import profile_from_environment

    return profile_from_environment(json.loads((folder / "environment.json").read_text()))


@pytest.mark.slow
def test_contribute_then_review_round_trip(recorded, tmp_path, fake_hub, hub_env, capsys):
    from muon_repro import stages

    adamw, muon = recorded["comparison/adamw_dp2_tp2"], recorded["comparison/muon_dp2_tp2"]
    profile = _profile_of(muon)
    # main: the AdamW run and the claims measured on it alone (the Muon/AdamW comparisons are not measured yet)
    alone = tmp_path / "alone" / "traces" / profile / "comparison" / "adamw_dp2_tp2" / "trial0"
    shutil.copytree(adamw, alone)
    records = convergence_records(profile)
    for path, data in records.items():
        (tmp_path / "alone" / path).parent.mkdir(parents=True)
        (tmp_path / "alone" / path).write_bytes(data)
    stages.analyze([tmp_path / "alone" / "traces"], tmp_path / "metrics", workers=1)
    main_files = {
        **folder_files(adamw, f"traces/{profile}/comparison/adamw_dp2_tp2/trial0"),
        **records,
        "metrics/claims.parquet": (tmp_path / "metrics" / "claims.parquet").read_bytes(),
        "README.md": b"# data\n",
    }
    head = publish_main(hub_env, main_files)
    main_manifest = fake_hub.files(REPO)[MANIFEST_NAME]

    runs = tmp_path / "runs"
    shutil.copytree(muon, runs / profile / "comparison" / "muon_dp2_tp2" / "trial0")
    assert main(["contribute", "--repo-id", REPO, "--runs", str(runs), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert main(["contribute", "--repo-id", REPO, "--runs", str(runs)]) == 0
    sent = capsys.readouterr().out
    assert "Opened pull request #1: " in sent and f"muon-repro review --repo-id {REPO} --pr 1" in sent and TOKEN not in dry + sent

    # main has not moved; the pull request adds exactly the run's files and their manifest lines
    assert fake_hub.get_repo(REPO).branches["main"] == head and fake_hub.files(REPO)[MANIFEST_NAME] == main_manifest
    on_main, on_pr = fake_hub.files(REPO), fake_hub.files(REPO, "refs/pr/1")
    dest = f"traces/{profile}/comparison/muon_dp2_tp2/trial0"
    expected = folder_files(muon, dest)
    assert {p for p in on_pr if p not in on_main} == set(expected)
    assert all(on_pr[p] == d for p, d in expected.items())
    assert {p for p in on_main if on_pr.get(p) != on_main[p]} == {MANIFEST_NAME}
    assert on_pr[MANIFEST_NAME].startswith(main_manifest)
    appended = parse_manifest(on_pr[MANIFEST_NAME][len(main_manifest) :].decode())
    assert sorted(appended, key=lambda e: e.path) == sorted(_entries(expected), key=lambda e: e.path)
    details = hub_env.get_discussion_details(REPO, 1, repo_type="dataset")
    assert details.title == f"Contribute 1 run(s) recorded on {profile}" and dest in details.events[0].content

    assert main(["review", "--repo-id", REPO, "--pr", "1", "--workers", "1"]) == 0
    reviewed = capsys.readouterr().out
    print("--- contribute --dry-run\n" + dry + "--- review\n" + reviewed)
    assert f"Claims on profile {profile}: before = main's metrics/claims.parquet; after = main's 1 trial folder(s)" in reviewed
    rows = {ln.split()[0]: ln for ln in reviewed.splitlines() if ln.startswith("  ") and len(ln.split()) > 1}
    # Muon's step time against AdamW's needs both runs: measured only now.
    assert "now measured" in rows["latency_overhead"]
    # main's convergence records of the profile are analyzed again with the runs: the leading-steps claim stays measured
    assert "and its convergence and cost-model records" in reviewed and rows["muon_leading_steps"].endswith("  unchanged")
    assert rows["comm_time_dp2_tp2"].split()[1:3] == ["not", "measured"] and "now measured" in rows["comm_time_dp2_tp2"]


def test_claims_compared_per_profile():
    import pandas as pd

    from muon_repro.contrib.claims_diff import compare_claims
    from muon_repro.hardware import rows_of_profile as claims_of_profile

    def row(claim, value, low, high, verdict, profile=PROFILE):
        return {
            "profile": profile,
            "claim_id": claim,
            "measured_value": value,
            "measured_low": low,
            "measured_high": high,
            "verdict": verdict,
        }

    published = pd.DataFrame(
        [
            row("a", 0.5, 0.4, 0.7, "reproduced"),
            row("b", 1.2, 1.0, 1.4, "not reproduced"),
            row("c", None, None, None, "not measured"),
            row("d", 2.0, 1.0, 3.0, "inconclusive"),
            row("a", 9.0, 9.0, 9.0, "not reproduced", profile="1xH100-nccl"),
        ]
    )
    after = pd.DataFrame(
        [
            row("a", 0.55, 0.5, 0.6, "reproduced"),
            row("b", 0.5, 0.45, 0.55, "reproduced"),
            row("c", 3.0, 2.0, 4.0, "inconclusive"),
            row("e", None, None, None, "not measured"),
        ]
    )
    rows = {r[0]: r for r in compare_claims(claims_of_profile(published, PROFILE), after)}
    assert rows["a"][1:] == (
        "0.5 [0.4, 0.7] reproduced",
        "0.55 [0.5, 0.6] reproduced",
        "same verdict, value 0.5 -> 0.55, interval narrower (0.3 -> 0.1)",
    )  # the other profile's row left out
    assert rows["b"][3] == "verdict not reproduced -> reproduced"
    assert rows["c"][3] == "now measured: inconclusive"
    assert rows["d"][2:] == ("(no row)", "not re-measured here")
    assert rows["e"][3] == "new claim"
    # A claims table from before profiles existed is one profile: every row counts.
    assert len(claims_of_profile(published.drop(columns="profile"), "any")) == 5


def test_review_refuses_a_trial_that_copies_a_published_ones_measurements(tmp_path, fake_hub, hub_env, capsys):
    """A copy adds no measurement, yet pooled as a trial of its own it would narrow every interval it joins."""
    run = make_run(tmp_path / "run")
    head = publish_main(hub_env, folder_files(run, f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0"))
    files = folder_files(run, f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial1")  # the same bytes, another trial
    open_pull_request(fake_hub, hub_env, files, head)

    assert main(["review", "--repo-id", REPO, "--pr", "1"]) == 1
    out = capsys.readouterr().out
    copied = [line for line in out.splitlines() if "byte for byte" in line]
    assert [line.split(": byte")[0].rsplit("/", 1)[1] for line in copied] == ["metrics.json", "rank0.json.gz", "rank1.json.gz"]
    assert f"byte for byte traces/{PROFILE}/comparison/muon_dp2_tp1/trial0/rank0.json.gz" in out


def _published_and_its_copy(tmp_path: Path, hub_env, config: dict) -> tuple[str, Path]:
    """Main's head after publishing one trial, and a copy of that trial's folder with ``config`` in its config.json."""
    from test_analysis_inputs import write_run

    published = write_run(tmp_path / "main" / "comparison" / "muon_dp2_tp1" / "trial0")
    (published / "log.txt").write_text("step 0\n")
    head = publish_main(hub_env, folder_files(published, f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0"))
    added = tmp_path / "pr" / "trial1"
    shutil.copytree(published, added)
    (added / "config.json").write_text(json.dumps(json.loads((added / "config.json").read_text()) | config))
    return head, added


def test_review_refuses_a_published_trial_gzipped_again_and_re_spaced(tmp_path, fake_hub, hub_env, capsys):
    """No file of it is byte for byte the published one's, yet its traces are once decompressed."""
    head, added = _published_and_its_copy(tmp_path, hub_env, {"trial": 1})
    (added / "metrics.json").write_text(json.dumps(json.loads((added / "metrics.json").read_text()), indent=1))
    for trace in added.glob("rank*.json.gz"):
        trace.write_bytes(gzip.compress(gzip.decompress(trace.read_bytes()), mtime=1))
    files = folder_files(added, f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial1")
    open_pull_request(fake_hub, hub_env, files, head)

    assert main(["review", "--repo-id", REPO, "--pr", "1", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    run = f"traces/{PROFILE}/comparison/muon_dp2_tp1"
    assert "byte for byte" not in out and "2 check(s) FAILED" in out  # its two traces (these metrics time no step)
    for rank in (0, 1):
        said = f"profile {PROFILE}: {run}/trial1/rank{rank}.json.gz: is, once decompressed, the trace {run}/trial0/rank{rank}"
        assert said in out


def test_review_fails_a_trial_recorded_with_another_configuration_than_its_runs(tmp_path, fake_hub, hub_env, capsys):
    """Its steps would be pooled with the published trial's under one run: the analysis leaves it out, and the
    review says so as a failed check naming the trial and the fields."""
    head, added = _published_and_its_copy(tmp_path, hub_env, {"trial": 1, "layout": "bucketed"})
    (added / "metrics.json").write_text((added / "metrics.json").read_text() + "\n")
    for trace in added.glob("rank*.json.gz"):  # its own recording, not a copy: traces of its own
        doc = json.loads(gzip.decompress(trace.read_bytes())) | {"recorded_by": "another run"}
        trace.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=1))
    files = folder_files(added, f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial1")
    open_pull_request(fake_hub, hub_env, files, head)

    assert main(["review", "--repo-id", REPO, "--pr", "1", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "1 check(s) FAILED" in out
    assert (
        f"profile {PROFILE}, analyzed with main's runs: traces/{PROFILE}/comparison/muon_dp2_tp1/trial1: recorded with "
        "layout='bucketed' (trial0: 'contiguous'), unlike the first trial of run"
    ) in out
