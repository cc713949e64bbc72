"""One regeneration recipe: the card, the report, the README and docs/publishing.md print the same lines, none
re-records or names a machine's path, and ``muon-repro run --from analyze`` starts where the recipe says."""

from __future__ import annotations

from pathlib import Path

import pytest

from muon_repro import job
from muon_repro.recipe import RECIPE, recipe_text

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("document", ["dataset_card.md", "report/report.md", "README.md", "docs/publishing.md"])
def test_every_document_prints_the_one_recipe(document):
    assert recipe_text() in (REPO / document).read_text(encoding="utf-8"), f"{document}: regenerate it"


def test_the_recipe_records_nothing_and_stays_in_the_folder():
    for command, _ in RECIPE:
        assert "--force" not in command and " /" not in command and "~" not in command, command
    assert any(command == "muon-repro run --from analyze" for command, _ in RECIPE)


def test_run_from_a_stage_skips_the_stages_before_it(tmp_path, monkeypatch):
    called: list[str] = []
    monkeypatch.setattr(job, "STAGE_FUNCTIONS", {stage: (lambda plan, s=stage: called.append(s)) for stage in job.STAGES})
    seconds = job.run_job(job.RunPlan(out=tmp_path, first_stage="analyze"))
    assert called == ["analyze", "figures", "report", "card", "bundle"] and list(seconds) == called


def test_an_unknown_first_stage_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="unknown stage 'analyse'; choose one of bench, analyze"):
        job.RunPlan(out=tmp_path, first_stage="analyse")


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        ("muon_repro.egg-info/PKG-INFO", True),  # pip install -e . in the download
        ("muon_repro/__pycache__/job.cpython-311.pyc", True),
        (".pytest_cache/v/cache/nodeids", True),
        ("metrics/runs.parquet", False),
        ("muon_repro.egg-info", False),  # a file of that name is not an install's folder
        ("traces/cpu/g/r/trial0/rank0.json.gz", False),
        ("dataset_card.md", True),  # the rebuild's card, under its source name
        ("dist/dataset/README.md", True),  # the rebuilt bundle
        ("docs/dataset_card.md", False),
        ("dist", False),
    ],
)
def test_verify_skips_what_the_set_up_the_rebuild_and_the_tests_leave(path, ignored):
    from muon_repro.dataset.manifest import is_ignored

    assert is_ignored(path) is ignored


def test_runs_summary_gives_the_causes_only_when_asked():
    """`muon-repro run` reprinted every explanation; now the table, and the causes with --verbose."""
    metrics = REPO / "metrics"
    short, full = job.claims_summary(metrics), job.claims_summary(metrics, verbose=True)
    assert "muon-repro run --from bundle --verbose" in short and "Why (measured causes):" not in short
    assert "Why (measured causes):" in full and len(full) > len(short)
    assert short.splitlines()[0] == full.splitlines()[0]  # the same table heads both
    # each profile's rows under its own heading: the same claim's three verdicts are told apart
    headings = [line for line in short.splitlines() if line.startswith("[")]
    assert headings[0].endswith("the original study's published runs]") and len(headings) >= 2
    assert ", no upper end)" in short and "1–3%" in short  # the report's words: a one-sided lead, the claimed range
    # a run into another folder: the report there, and the command that prints the causes of that run's claims
    assert short.endswith("Why each verdict: report/report.md (claims), or muon-repro run --from bundle --verbose.")
    elsewhere = job.claims_summary(metrics, out=Path("my run"))
    said = "Why each verdict: my run/report/report.md (claims), or muon-repro run --out 'my run' --from bundle --verbose."
    assert elsewhere.endswith(said)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--trials", "0"], "--trials must be a positive integer, got 0"),
        (["--trials", "2", "--traced-trials", "3"], "--traced-trials must be a positive integer up to --trials 2, got 3"),
        (["--configs", "comparisn"], "comparisn"),
    ],
)
def test_run_refuses_a_bad_request_before_it_makes_any_folder(tmp_path, capsys, argv, said):
    """`run --trials 0 --out X` said so only after the bench stage had started, leaving X made and empty."""
    from muon_repro.cli import main

    out = tmp_path / "t0"
    assert main(["run", "--out", str(out), "--no-progress", *argv]) == 2
    assert said in capsys.readouterr().err and not out.exists()


def test_another_datasets_recipe_rebuilds_it_as_itself(tmp_path):
    """The rebuild line carries the dataset's own identity when it is not the project's; run takes those flags,
    checks them before recording, and cites them."""
    from muon_repro.dataset.citation import rebuild_arguments
    from muon_repro.dataset.meta import BundleMeta
    from muon_repro.recipe import REBUILD, recipe_lines

    meta = BundleMeta(
        repo_id="test-org/my-traces", version="1.2.0", date="2025-06-01", authors=("A. Author",), license="Apache-2.0"
    )
    line = recipe_lines(cite=rebuild_arguments(meta, REPO / "metrics"))[1]
    assert line.startswith(
        f"{REBUILD} --repo-id test-org/my-traces --version 1.2.0 --date 2025-06-01 --author 'A. Author' --license Apache-2.0"
    )
    assert recipe_lines()[1].startswith(f"{REBUILD}   ")  # the project's own: no flags

    plan = job.RunPlan(out=REPO, authors=("A. Author",), cite={"repo_id": "test-org/my-traces", "license": "Apache-2.0"})
    assert (job._meta(plan).repo_id, job._meta(plan).authors, job._meta(plan).license) == (
        "test-org/my-traces",
        ("A. Author",),
        "Apache-2.0",
    )
    with pytest.raises(ValueError, match="version"):
        job.RunPlan(out=tmp_path, cite={"version": "one"})


def test_a_run_files_the_studys_traces_beside_its_own_from_the_checkouts_copy(tmp_path):
    """`muon-repro run --out my-run` filed none of the original study's traces, so its claims table judged none of the
    study's claims on the runs they were made on. The bench stage now files them, checked, from this checkout's copy;
    a copy already there is left alone."""
    from muon_repro.study.sources import STUDY_FILES, study_folder

    shipped = study_folder(REPO / "traces")
    said = job.file_the_study(tmp_path / "traces")
    filed = study_folder(tmp_path / "traces")
    assert said.endswith(f"its {len(STUDY_FILES)} published traces filed in {filed} from {shipped} (sha256 as published)")
    assert sorted(p.name for p in filed.iterdir()) == sorted(p.name for p in shipped.iterdir())
    assert all((filed / p.name).read_bytes() == p.read_bytes() for p in shipped.iterdir())
    (filed / "trace_adamw_rank0.json.gz").write_bytes(b"mine")  # another copy: the analysis says what is wrong with it
    assert job.file_the_study(tmp_path / "traces") == f"the original study's traces: in {filed} already"
    assert (filed / "trace_adamw_rank0.json.gz").read_bytes() == b"mine"


def test_without_a_sound_copy_a_run_records_and_says_how_to_bring_the_study_in(tmp_path):
    from muon_repro.report.escape import shell_word
    from muon_repro.study.sources import STUDY_FILES, study_folder

    traces = tmp_path / "my run" / "traces"
    said = job.file_the_study(traces, shipped=tmp_path / "install")  # an install without the dataset
    assert said.endswith(f"`muon-repro study import --hub --out {shell_word(str(traces))}` downloads them")
    assert not (tmp_path / "my run").exists()
    damaged = study_folder(tmp_path / "checkout")
    damaged.mkdir(parents=True)
    for name in STUDY_FILES:  # a changed copy: refused by its sha256, nothing filed, the recording goes on
        (damaged / f"{name}.gz").write_bytes(b"not the published bytes")
    said = job.file_the_study(tmp_path / "out", shipped=tmp_path / "checkout")
    assert said.startswith("the original study's traces: not filed (") and "is not the published file's" in said
    assert not (tmp_path / "out").exists()
