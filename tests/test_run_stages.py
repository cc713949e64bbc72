"""The stages of ``muon-repro run`` (muon_repro.job): what each stage asks of muon_repro.stages, which folders of
``--out`` it reads and writes, and what the bundle stage says of its checks. The stages' own work is replaced by
fakes that note how they were called (nothing is recorded, analyzed or drawn: these tests take a second)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from muon_repro import job, stages

PROFILE = "test-box"
META = SimpleNamespace(name="the dataset the card cites")  # what _meta gives the stages: passed on as it is


@pytest.fixture
def calls(monkeypatch) -> dict[str, tuple]:
    """Each stage of muon_repro.stages replaced: stage name -> (args, kwargs) of its call."""
    called: dict[str, tuple] = {}

    def fake(name: str, returns):
        def stage(*args, **kwargs):
            called[name] = (args, kwargs)
            return returns(*args, **kwargs) if callable(returns) else returns

        monkeypatch.setattr(stages, name, stage)

    def bundle(sources, meta, out):
        Path(out).mkdir(parents=True)
        (Path(out) / "MANIFEST.sha256").write_bytes(b"0123  README.md\n")
        return [SimpleNamespace(size=10), SimpleNamespace(size=5)], ["a warning"]

    fake("bench", [])
    fake("analyze", {"runs": []})
    fake("figures", {})
    fake("report", {})
    fake("card", lambda sources, meta, out: Path(out))
    fake("bundle", bundle)
    fake("verify", SimpleNamespace(ok=True, passed=["a", "b"], failed=[]))
    monkeypatch.setattr(job, "_meta", lambda plan: META)
    return called


@pytest.fixture
def protocols(monkeypatch) -> list[tuple]:
    """The study's protocols the bench stage records (their arguments); the study's traces are not filed."""
    from muon_repro.bench import study_record

    recorded: list[tuple] = []
    monkeypatch.setattr(study_record, "record_protocols", lambda *args, **kwargs: recorded.append((args, kwargs)) or [])
    monkeypatch.setattr(job, "file_the_study", lambda traces: f"filed in {traces}")
    return recorded


def test_the_bench_stage_records_the_plans_configurations_into_traces_as_asked(tmp_path, calls, protocols, capsys):
    plan = job.RunPlan(
        out=tmp_path,
        configs=("comparison",),
        trials=4,
        traced_trials=2,
        backend="gloo",
        force=True,
        progress=False,
        profile=PROFILE,
        command=("muon-repro", "run", "--force"),
    )
    job.stage_bench(plan)
    args, kwargs = calls["bench"]
    assert args == (("comparison",), tmp_path / "traces")
    assert kwargs == {
        "scale": "cpu",
        "trials": 4,
        "traced_trials": 2,
        "backend": "gloo",
        "force": True,
        "progress": False,
        "command": ("muon-repro", "run", "--force"),
        "profile": PROFILE,
    }
    assert capsys.readouterr().out.startswith(f"filed in {tmp_path / 'traces'}\n")  # the study's traces beside them
    assert protocols == []  # not the reference set: no study protocol


def test_the_bench_stage_records_the_studys_protocols_with_the_cpu_reference_only(tmp_path, calls, protocols):
    for scale, configs in (("tiny", ("reference",)), ("cpu", ("comparison", "study"))):
        job.stage_bench(job.RunPlan(out=tmp_path, scale=scale, configs=configs, progress=False))
    assert protocols == []
    plan = job.RunPlan(out=tmp_path, trials=5, backend="gloo", force=True, profile=PROFILE, progress=False)
    job.stage_bench(plan)
    ((args, kwargs),) = protocols
    assert args == (tmp_path / "traces",)
    assert kwargs == {
        "trials": 5,
        "backend": "gloo",
        "profile_id": PROFILE,
        "command": ["muon-repro", "bench", "--protocol", "study-both", "--trials", "5"],
        "progress": False,
    }


def test_from_analyze_each_stage_reads_and_writes_the_folders_of_out(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(job, "stage_bench", lambda plan: pytest.fail("--from analyze records nothing"))
    out = tmp_path / "run"
    job.run_job(job.RunPlan(out=out, first_stage="analyze", progress=False))
    assert calls["analyze"] == (([out / "traces"], out / "metrics"), {})
    assert calls["figures"] == ((out / "metrics", out / "figures"), {})
    assert calls["report"] == ((out / "metrics", out / "figures", out / "report"), {"meta": META})
    sources = calls["card"][0][0]
    assert calls["card"][0][1:] == (META, out / "dataset_card.md")
    assert calls["bundle"][0] == (sources, META, out / "dist" / "dataset")
    assert (sources.traces, sources.metrics, sources.figures, sources.report) == (
        out / "traces",
        out / "metrics",
        out / "figures",
        out / "report",
    )
    assert sources.code == job.REPO_ROOT  # the package that ran, not the folder the run writes
    assert (out / "MANIFEST.sha256").read_bytes() == b"0123  README.md\n"  # the bundle's, beside the artifacts
    assert calls["verify"][0] == (out / "dist" / "dataset",)


def test_the_bundle_takes_the_analysis_scripts_and_docs_of_out_when_it_has_its_own(tmp_path, calls):
    plan = job.RunPlan(out=tmp_path, progress=False)

    def shipped() -> tuple[Path, Path]:
        job.stage_card(plan)
        sources = calls["card"][0][0]
        return sources.analysis_scripts, sources.docs

    assert shipped() == (job.REPO_ROOT / "analysis_scripts", job.REPO_ROOT / "docs")
    (tmp_path / "analysis_scripts").mkdir()
    assert shipped() == (tmp_path / "analysis_scripts", job.REPO_ROOT / "docs")


def _checks(monkeypatch, failed: list[str]):
    def verify(bundle, *, echo):
        for line in ("ok README.md", *(f"FAILED {name}" for name in failed)):
            echo(line)
        return SimpleNamespace(ok=not failed, passed=["README.md"], failed=failed)

    monkeypatch.setattr(stages, "verify", verify)


def test_the_bundle_stage_prints_only_the_failed_checks_unless_verbose(tmp_path, calls, monkeypatch, capsys):
    _checks(monkeypatch, [])
    job.stage_bundle(job.RunPlan(out=tmp_path, progress=False))
    said = capsys.readouterr()
    assert "ok README.md" not in said.out and said.out.endswith(f"{tmp_path / 'dist' / 'dataset'}: all 1 checks passed.\n")
    assert "Bundle in" in said.out and ": 3 files, 15 bytes" in said.out  # the two entries and the manifest
    assert said.err == "warning: a warning\n"
    job.stage_bundle(job.RunPlan(out=tmp_path / "verbose", verbose=True, progress=False))
    assert "ok README.md\n" in capsys.readouterr().out


def test_a_bundle_that_fails_a_check_stops_the_run_naming_it(tmp_path, calls, monkeypatch, capsys):
    _checks(monkeypatch, ["rank0.json.gz: sha256 differs"])
    with pytest.raises(stages.StageError, match=r"1 check\(s\) failed: rank0.json.gz: sha256 differs"):
        job.stage_bundle(job.RunPlan(out=tmp_path, progress=False))
    out = capsys.readouterr().out
    assert "FAILED rank0.json.gz: sha256 differs" in out and "ok README.md" not in out


def test_run_passes_every_recording_option_it_is_given_to_the_plan(tmp_path, monkeypatch):
    from muon_repro.cli import main

    plans = []
    monkeypatch.setattr(job, "run_job", lambda plan: plans.append(plan) or {})
    monkeypatch.setattr(job, "_print_summary", lambda plan, seconds: None)
    argv = ["run", "--out", str(tmp_path), "--no-progress", "--scale", "tiny", "--configs", "comparison", "--backend", "gloo"]
    assert main([*argv, "--trials", "4", "--traced-trials", "2", "--force", "--profile", PROFILE]) == 0
    (plan,) = plans
    assert (plan.scale, plan.configs, plan.backend, plan.trials, plan.traced_trials, plan.force, plan.profile) == (
        "tiny",
        ("comparison",),
        "gloo",
        4,
        2,
        True,
        PROFILE,
    )
    assert plan.progress is False


def test_a_run_stopped_by_sigterm_in_the_bench_stage_exits_143(tmp_path, monkeypatch, capsys):
    import signal

    from muon_repro.bench.errors import BenchInterrupted
    from muon_repro.cli import main

    def stopped(plan):
        raise BenchInterrupted("interrupted, nothing kept for g/n/trial0 (1 of 1)", signal.SIGTERM)

    monkeypatch.setattr(job, "run_job", stopped)
    assert main(["run", "--out", str(tmp_path), "--no-progress"]) == 143
    assert capsys.readouterr().err == "muon-repro run: interrupted, nothing kept for g/n/trial0 (1 of 1)\n"


def test_run_refuses_a_configuration_that_cannot_be_built_at_its_scale_before_it_makes_any_folder(tmp_path):
    """A known name is not enough: at --scale tiny the model has 2 blocks, too few for 4 pipeline stages."""
    out = tmp_path / "out"
    plan = job.RunPlan(out=out, scale="tiny", configs=("pipeline/muon_pp4",))
    with pytest.raises(ValueError, match="config pipeline/muon_pp4: pp=4 stages need at least one block each"):
        plan.check_input()
    assert not out.exists()
    job.RunPlan(out=out, scale="tiny", configs=("pipeline/muon_pp2_dp2",)).check_input()


def test_a_citation_field_run_does_not_know_is_refused_by_name_with_the_ones_it_knows(tmp_path):
    with pytest.raises(ValueError, match="unknown citation field\\(s\\) colour, doi; choose from repo_id, version, date"):
        job.RunPlan(out=tmp_path, cite={"doi": "10.1/x", "colour": "red", "version": "1.0.0"})
    assert job.RunPlan(out=tmp_path, cite={"version": "1.0.0"}).cite == {"version": "1.0.0"}
