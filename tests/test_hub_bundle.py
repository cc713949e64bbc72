"""``muon-repro bundle`` / ``verify``: layout, manifest, card, CITATION.cff, and what verify catches."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hub_support import DATE, REPO_ROOT, build, make_sources, muon_repro, source_args

from muon_repro.dataset.bundle import CODE_PATHS
from muon_repro.dataset.card import read_card_metadata
from muon_repro.dataset.croissant import croissant_fields
from muon_repro.dataset.manifest import check_manifest, parse_manifest, read_manifest, write_manifest
from muon_repro.dataset.verify import verify_bundle
from muon_repro.tables.files import list_files, sha256_file
from muon_repro.tables.schemas import SCHEMAS

TABLES = ["runs", "steps", "collectives", "comparisons", "claims", "environment"]


@pytest.fixture
def bundle(sources, tmp_path) -> Path:  # noqa: F811
    return build(sources, tmp_path / "dist" / "dataset", code=REPO_ROOT)  # the bundle command's own output, code and all


def _card_meta(bundle: Path) -> dict:
    return read_card_metadata((bundle / "README.md").read_text())


def test_layout_is_exactly_what_gets_published(bundle, sources):  # noqa: F811
    top = sorted(p.name for p in bundle.iterdir())
    data = ["CITATION.cff", "MANIFEST.sha256", "README.md", "analysis_scripts", "croissant.json", "docs", "figures"]
    assert top == sorted([*data, "metrics", "report", "traces", *CODE_PATHS])
    for name, folder in sources.items():
        assert [f"{name}/{p}" for p in list_files(folder)] == [p for p in list_files(bundle) if p.startswith(name + "/")]
        for rel in list_files(folder):
            assert (bundle / name / rel).read_bytes() == (folder / rel).read_bytes()
    # the code that made it, so that a download rebuilds itself (tests/test_rebuild_from_download.py)
    assert (bundle / "pyproject.toml").read_bytes() == (REPO_ROOT / "pyproject.toml").read_bytes()
    assert (bundle / "muon_repro" / "bench" / "runner.py").is_file() and not list(bundle.rglob("__pycache__"))


def test_manifest_lists_every_other_file_with_sha256_and_size(bundle):
    entries = read_manifest(bundle)
    assert [e.path for e in entries] == [p for p in list_files(bundle) if p != "MANIFEST.sha256"]
    for e in entries:
        assert (e.size, e.sha256) == sha256_file(bundle / e.path)
    assert check_manifest(bundle) == []


def test_check_manifest_names_a_resized_file_by_its_size_and_a_same_size_change_by_its_sha256(tmp_path):
    """Two listed files changed after the manifest was written: one grew a byte (named by its size), one had a byte
    replaced (same size, named by its sha256, as hashlib computes the old and the new). ``digests`` gets each listed
    file's sha256 as read now."""
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "b.txt").write_text("world")
    write_manifest(tmp_path)
    assert check_manifest(tmp_path) == []
    (tmp_path / "a.txt").write_text("jello")
    (tmp_path / "b.txt").write_text("worlds")
    old, new = (hashlib.sha256(text).hexdigest() for text in (b"hello", b"jello"))
    digests: dict[str, str] = {}
    assert check_manifest(tmp_path, digests=digests) == [
        f"a.txt: sha256 {new[:12]}..., MANIFEST.sha256 says {old[:12]}...",
        "b.txt: size 6 bytes, MANIFEST.sha256 says 5",
    ]
    assert digests == {"a.txt": new, "b.txt": hashlib.sha256(b"worlds").hexdigest()}


def test_manifest_checks_with_coreutils(bundle):
    if shutil.which("sha256sum") is None:
        pytest.skip("no sha256sum")
    header = (bundle / "MANIFEST.sha256").read_text().splitlines()[2].lstrip("# ")
    out = subprocess.run(["bash", "-c", header], check=False, cwd=bundle, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(": OK") == len(read_manifest(bundle))


def test_card_yaml_parses_and_every_data_file_exists(bundle):
    meta = _card_meta(bundle)
    assert meta["license"] == "mit" and meta["pretty_name"] and meta["tags"] and meta["size_categories"] == ["n<1K"]
    configs = meta["configs"]
    assert [c["config_name"] for c in configs] == TABLES  # one per table, default first, traces are not configs
    assert [c for c in configs if c.get("default")] == [configs[0]] and configs[0]["config_name"] == "runs"
    for config in configs:
        for item in config["data_files"]:
            assert item["split"] == "train"
            assert item["path"] == f"metrics/{config['config_name']}.parquet"
            assert (bundle / item["path"]).is_file()
    # Rows in the card's dataset_info; columns and types in croissant.json (not repeated in the YAML: the card's size).
    assert [i["config_name"] for i in meta["dataset_info"]] == TABLES
    assert all("features" not in i and i["splits"][0]["num_examples"] >= 0 for i in meta["dataset_info"])
    documented = croissant_fields(bundle)
    for table in TABLES:
        assert [n for n, _ in documented[table]] == pq.read_schema(bundle / "metrics" / f"{table}.parquet").names


def test_card_sections(bundle):
    text = (bundle / "README.md").read_text()
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings == [
        "What this is",
        "Files and layout",
        "How to load each table",
        "Intended uses",
        "Limitations",
        "How to download",
        "How to open a trace in Perfetto",
        "How to regenerate",
        "Environment",
        "Checksums",
        "Citation",
        "License",
    ]
    assert 'runs = load_dataset("test-org/muon-traces", "runs", revision="v1.0.0", split="train")' in text
    others = ", ".join(f"`{table}`" for table in TABLES[1:])
    assert f"The other configs load the same way: {others}." in text
    assert "hf download test-org/muon-traces --repo-type dataset --revision v1.0.0" in text
    assert "ui.perfetto.dev" in text and "traces/comparison/muon_dp2_tp1/rank0.json.gz" in text
    # Column docs: every table listed with its rows and what it holds; its columns in docs/method.md and croissant.json.
    assert "| table | rows | what it holds |" in text and "croissant.json" in text
    # Regeneration: the command recorded in config.json, and the bundle command with these metadata.
    assert "muon-repro bench comparison --scale cpu" in text
    assert f"muon-repro bundle --repo-id test-org/muon-traces --version 1.0.0 --date {DATE}" in text
    # Environment: what environment.json holds, not the host name.
    assert "| host_cpu | Test CPU @ 2.0GHz |" in text and "secret-host" not in text
    # Checksums: in MANIFEST.sha256 only; the card says how many files it lists.
    entries = read_manifest(bundle)
    assert f"`MANIFEST.sha256` lists the sha256 and size of {len(entries)} files" in text
    assert not any(e.sha256 in text for e in entries)
    assert "| [`steps`](docs/method.md#steps) |" in text or not (bundle / "docs").is_dir()
    assert "@misc{muon_traces_1_0_0," in text and "arXiv:2502.16982" in text


def test_citation_cff_structure(bundle):
    cff = yaml.safe_load((bundle / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["message"] and cff["type"] == "dataset"
    assert cff["title"] and cff["version"] == "1.0.0" and cff["license"] == "MIT"
    assert datetime.date.fromisoformat(cff["date-released"]) == datetime.date.fromisoformat(DATE)
    assert all(isinstance(a, dict) and a.get("name") for a in cff["authors"])
    assert cff["repository-artifact"] == "https://huggingface.co/datasets/test-org/muon-traces"
    assert cff["url"].endswith("/tree/v1.0.0")


def test_verify_needs_a_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        verify_bundle(tmp_path / "nowhere")


def test_verify_passes_on_a_good_bundle(bundle):
    lines: list[str] = []
    result = verify_bundle(bundle, echo=lines.append)
    assert result.ok, result.failed
    assert sum(1 for line in lines if line.startswith("ok      config ")) == len(TABLES)
    assert sum(1 for line in lines if line.startswith("ok      trace ")) == 2


def test_verify_reports_each_problem(bundle):
    # A changed table (schema no longer the documented one), a corrupt trace, a missing file, an extra file.
    pq.write_table(pa.table({"other": pa.array([1])}), bundle / "metrics" / "steps.parquet")
    (bundle / "traces/comparison/muon_dp2_tp1/rank1.json.gz").write_bytes(b"\x1f\x8bnot really gzip")
    (bundle / "figures" / "comm_time.svg").unlink()
    (bundle / "stray.txt").write_text("?")
    result = verify_bundle(bundle)
    failed = "\n".join(result.failed)
    assert "metrics/steps.parquet: size" in failed or "metrics/steps.parquet: sha256" in failed
    assert "figures/comm_time.svg: listed in MANIFEST.sha256 but missing" in failed
    assert "stray.txt: present but not listed" in failed
    assert "config 'steps': load_dataset failed" in failed
    assert "trace traces/comparison/muon_dp2_tp1/rank1.json.gz" in failed
    assert not any("config 'runs'" in line for line in result.failed)


@pytest.mark.slow
def test_bundle_and_verify_commands(sources, tmp_path):  # noqa: F811
    out = tmp_path / "b"
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1748736000"}  # 2025-06-01
    done = muon_repro(["bundle", "--out", str(out), "--repo-id", "o/n", "--version", "2.0.0", *source_args(sources)], env)
    assert done.returncode == 0, done.stderr
    assert "date-released: '2025-06-01'" in (out / "CITATION.cff").read_text()
    ok = muon_repro(["verify", str(out)], env)
    assert ok.returncode == 0 and "all 14 checks passed" in ok.stdout, ok.stdout + ok.stderr  # the tables one set included
    (out / "metrics" / "claims.csv").write_text("tampered\n")
    bad = muon_repro(["verify", str(out)], env)
    assert bad.returncode == 1
    assert "FAILED  metrics/claims.csv: size" in bad.stdout and "1 check(s) FAILED" in bad.stderr


def test_rebuild_replaces_a_bundle_but_never_another_folder(sources, tmp_path):  # noqa: F811
    out = build(sources, tmp_path / "out")
    (sources["report"] / "report.md").write_text("# Report v2\n")
    build(sources, out, version="1.1.0")
    assert (out / "report" / "report.md").read_text() == "# Report v2\n" and check_manifest(out) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging leftovers

    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="muon-repro bundle did not write .*not exactly those a MANIFEST.sha256 in it lists"):
        build(sources, precious)
    (precious / "MANIFEST.sha256").write_text("")  # a manifest alone does not make a folder a bundle
    with pytest.raises(ValueError, match="did not write"):
        build(sources, precious)
    assert (precious / "notes.txt").read_text() == "mine"
    with pytest.raises(ValueError, match="overlaps the source .* \\(--metrics\\)"):
        build(sources, sources["metrics"] / "bundle")
    with pytest.raises(ValueError, match="overlaps the source .*muon_repro \\(--code\\)"):
        build(sources, REPO_ROOT / "muon_repro" / "bundle", code=REPO_ROOT)


def test_bad_inputs_are_clear_errors(sources, tmp_path):  # noqa: F811
    from muon_repro.dataset.bundle import Sources, build_bundle
    from muon_repro.dataset.meta import BundleMeta

    with pytest.raises(ValueError, match="invalid version '1.0'"):
        BundleMeta(repo_id="o/n", version="1.0", date=DATE)
    with pytest.raises(ValueError, match="invalid dataset repository id 'no-slash'"):
        BundleMeta(repo_id="no-slash", version="1.0.0", date=DATE)
    with pytest.raises(ValueError, match="invalid date"):
        BundleMeta(repo_id="o/n", version="1.0.0", date="June 1st")
    with pytest.raises(FileNotFoundError, match="--traces"):
        build_bundle(Sources(**{**sources, "traces": tmp_path / "none"}), BundleMeta(date=DATE), tmp_path / "o")
    empty = tmp_path / "empty_metrics"
    empty.mkdir()
    with pytest.raises(ValueError, match="no Parquet tables"):
        build_bundle(Sources(**{**sources, "metrics": empty}), BundleMeta(date=DATE), tmp_path / "o")
    with pytest.raises(ValueError, match="line 1"):
        parse_manifest("not a manifest line\n")


def test_card_tolerates_runs_the_tables_know_nothing_of(tmp_path):
    src = make_sources(tmp_path / "src", recorded=False)  # no command, no environment rows
    run = src["traces"] / "comparison" / "muon_dp2_tp1"
    (run / "environment.json").unlink()
    (run / "config.json").write_text("{not json")
    out = build(src, tmp_path / "out")
    text = (out / "README.md").read_text()
    assert "The runs recorded no `environment.json`." in text
    assert "muon-repro bench comparison" not in text
    # verify flags the broken run file but the card rendered.
    assert any("config.json: not valid JSON" in line for line in verify_bundle(out).failed)


def test_the_card_reads_the_runs_from_the_tables_not_the_run_folders(tmp_path):
    src = make_sources(tmp_path / "src")
    run = src["traces"] / "comparison" / "muon_dp2_tp1"
    (run / "environment.json").write_text('{"host_cpu": "what the run folder says now"}')
    (run / "config.json").write_text('{"command": ["muon-repro", "bench", "something-else"]}')
    text = (build(src, tmp_path / "out") / "README.md").read_text()
    assert "| host_cpu | Test CPU @ 2.0GHz |" in text and "what the run folder says now" not in text
    assert "muon-repro bench comparison --scale cpu" in text and "something-else" not in text
    assert "| host_memory_bytes | 25769803776 (25.8 GB) |" in text and "| git_dirty | no |" in text
    assert "`pip_freeze`: up to 2 entries, in `traces/" in text


def test_card_command_renders_the_bundle_readme(bundle, sources):  # noqa: F811
    from muon_repro.dataset.bundle import Sources, render_card_from_sources
    from muon_repro.dataset.meta import BundleMeta

    card = render_card_from_sources(Sources(**sources), BundleMeta(repo_id="test-org/muon-traces", version="1.0.0", date=DATE))
    assert card == (bundle / "README.md").read_text()


def test_the_committed_card_is_at_most_40_kb():
    """The card `muon-repro run` writes from the repository's own tables (dataset_card.md, which
    tests/test_artifacts.py rebuilds) stays a page a reader reads: checksums live in MANIFEST.sha256, column meanings
    in docs/method.md."""
    card = (Path(__file__).resolve().parents[1] / "dataset_card.md").read_bytes()
    assert len(card) <= 40_000, f"the card is {len(card)} bytes"
    # every table is listed with a link to its columns (docs/method.md ships in the bundle; croissant.json types them)
    assert all(f"[`{name}`](docs/method.md#{name})".encode() in card for name in SCHEMAS)
    # what was found comes first, in the report's words: the abstract, then the Hub's usual sections
    text = card.decode()
    assert text.index("## Findings") < text.index("## Files and layout") < text.index("## Limitations")
    assert "task_categories:\n- other" in text and "size_categories:" in text
    # its regeneration steps name every command that recorded the committed artifacts, as each recording kept it
    regenerate = card.decode().split("## How to regenerate", 1)[1]
    assert "muon-repro bench reference" in regenerate
    assert "muon-repro regimes --trials 3" in regenerate and "muon-repro converge" in regenerate


def test_the_card_lists_traced_runs_per_group():
    from muon_repro.dataset.run_info import RunDoc, describe_run_groups

    def ranks(folder: str, n: int) -> tuple[str, ...]:
        return tuple(f"traces/{folder}/rank{r}.json.gz" for r in range(n))

    study = "study/comparison"  # the original study's layout: every run's traces in one folder, named by run
    runs = [
        RunDoc("cpu/pipeline/muon_pp4/trial0", ranks("cpu/pipeline/muon_pp4/trial0", 4), 40),
        RunDoc("cpu/pipeline/muon_pp4/trial1", ranks("cpu/pipeline/muon_pp4/trial1", 4), 40),
        RunDoc("cpu/pipeline/adamw_pp4/trial0", ranks("cpu/pipeline/adamw_pp4/trial0", 2), 2),
        RunDoc("cpu/comparison/muon_dp2_tp2/trial0", ranks("cpu/comparison/muon_dp2_tp2/trial0", 1), 5),
        RunDoc(study, tuple(f"traces/{study}/trace_{n}_rank{r}.json.gz" for n in ("adamw", "muon_dp2_tp2") for r in (0, 1)), 7),
    ]
    groups = describe_run_groups(runs)
    assert [(g.folder, g.runs, g.trials, g.traces, g.size) for g in groups] == [
        ("cpu/pipeline/", 2, 3, 10, 82),
        ("cpu/comparison/", 1, 1, 1, 5),
        ("study/comparison/", 2, 2, 4, 7),
    ]


def test_the_card_shows_the_topology_matrix_without_its_legend():
    from muon_repro.hardware import topology_matrix

    topology = "GPU0\tGPU1\nGPU0\t X \tNV18\n\nLegend:\n\n  X    = Self\n  NV#  = bonded NVLinks\n"
    assert topology_matrix(topology) == "GPU0\tGPU1\nGPU0\t X \tNV18"
    assert topology_matrix("GPU0\t X") == "GPU0\t X"
    # nvidia-smi underlines the header on a terminal: the card shows the text, not the codes
    assert topology_matrix("\x1b[4mGPU0\tCPU Affinity\x1b[0m\nGPU0\t X") == "GPU0\tCPU Affinity\nGPU0\t X"


def test_the_committed_cards_files_table_counts_every_file_of_the_manifest():
    """Every file of the dataset is in a row of the card's files table (the package's source among them), and the
    rows add up to the files the manifest lists, itself included."""
    card = (REPO_ROOT / "dataset_card.md").read_text()
    table = card.split("## Files and layout", 1)[1].split("\n\n", 2)[1]
    counts = [int(line.split("|")[2]) for line in table.splitlines()[2:]]
    listed = len(read_manifest(REPO_ROOT))
    assert sum(counts) == listed + 1, (sum(counts), listed)
    assert all(f"| `{name}" in table for name in CODE_PATHS)


def test_the_committed_card_names_the_commit_of_every_kind_of_run():
    """Traced runs, the regime sweep, the study's protocol replayed: each recording's commit is on the card (the
    environment tables keep them whole), and the runs whose records name none are said."""
    import pandas as pd

    card = (REPO_ROOT / "dataset_card.md").read_text()
    said = card.split("The runs here were recorded", 1)[1].split("\n\n", 1)[0]
    env = pd.read_parquet(REPO_ROOT / "metrics" / "environment.parquet")
    shas = set(env.loc[env["key"] == "git_sha", "value"])
    for table in ("regimes", "study_runs", "convergence_runs"):
        shas |= set(pd.read_parquet(REPO_ROOT / "metrics" / f"{table}.parquet")["git_sha"].dropna())
    assert shas and all(f"`{sha[:12]}`" in said for sha in shas)
    assert pd.read_parquet(REPO_ROOT / "metrics" / "regimes.parquet")["git_sha"].notna().all()  # every sweep point
    unnamed = pd.read_parquet(REPO_ROOT / "metrics" / "convergence_runs.parquet")["git_sha"].isna().sum()
    assert (f"{unnamed} convergence runs name no commit" in said) == bool(unnamed)
    assert "muon-repro bench --protocol study-both" in card.split("## How to regenerate", 1)[1]


def test_the_committed_cards_environment_counts_every_run_once():
    """The card's environment table counted the traced trial folders alone: 4 H200 runs of 8 (the timed-only ones,
    which back the H200 claims, were left out) and 30 runs of 34."""
    import pandas as pd

    card = (REPO_ROOT / "dataset_card.md").read_text()
    env = pd.read_parquet(REPO_ROOT / "metrics" / "environment.parquet")
    profiles = env.loc[env["key"] == "profile"].drop_duplicates(["profile", "group", "name"])["value"].value_counts()
    assert len(profiles) > 1
    (row,) = [line for line in card.split("## Environment", 1)[1].splitlines() if line.startswith("| profile |")]
    for profile, runs in profiles.items():
        assert f"{profile} ({runs} runs)" in row, row


def test_a_report_folder_without_the_report_is_said(sources, tmp_path):  # noqa: F811
    from muon_repro.dataset.bundle import Sources, collect

    elsewhere = tmp_path / "notes"
    elsewhere.mkdir()
    (elsewhere / "draft.md").write_text("not the report")
    _, said = collect(Sources(**{**sources, "report": elsewhere}))
    assert any(f"--report {elsewhere}: no report.md" in line and "will not resolve" in line for line in said), said
    _, said = collect(Sources(**sources))
    assert not any("no report.md" in line for line in said)


def test_a_table_that_is_not_parquet_is_named_by_verify(tmp_path):
    """verify said pyarrow's "Parquet magic bytes not found" and no file."""
    from muon_repro.dataset.verify import check_table_set

    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "runs.parquet").write_bytes(b"garbage bytes, no footer")
    said = []
    check_table_set(tmp_path, lambda line, ok: said.append((line, ok)))
    ((line, ok),) = said
    assert not ok and line.startswith("tables: metrics/runs.parquet is not a Parquet table (")
    assert line.endswith("download the dataset again, or rebuild it (muon-repro run)")


def test_verify_refuses_a_report_that_cites_another_dataset(tmp_path):
    """A report rendered for the project's dataset, bundled for your own repository, cited the project's from inside
    yours: the card and CITATION.cff said one thing, the report another."""
    from muon_repro.dataset.citation import CFF_NAME, citation_cff, read_citation
    from muon_repro.dataset.verify import check_report_citation

    (tmp_path / "report").mkdir()
    shutil.copy(REPO_ROOT / "report" / "report.md", tmp_path / "report" / "report.md")
    said: list[tuple[str, bool]] = []
    shutil.copy(REPO_ROOT / CFF_NAME, tmp_path / CFF_NAME)  # the identity the committed report was rendered for
    check_report_citation(tmp_path, lambda line, ok: said.append((line, ok)))
    assert said == [(f"report/report.md: cites this dataset as {CFF_NAME} does (muon-repro/distributed-muon-traces 0.1.0)", True)]

    ours = dataclasses.replace(read_citation(REPO_ROOT / CFF_NAME), repo_id="test-org/my-traces", version="1.2.0")
    (tmp_path / CFF_NAME).write_text(citation_cff(ours))
    said.clear()
    check_report_citation(tmp_path, lambda line, ok: said.append((line, ok)))
    [(line, ok)] = said
    assert not ok
    assert "muon-repro report --repo-id test-org/my-traces --version 1.2.0 --date 2026-11-29 --author muon-repro" in line

    (tmp_path / "report" / "report.md").write_text("# Report\n")  # not one muon-repro report wrote: not judged
    said.clear()
    check_report_citation(tmp_path, lambda line, ok: said.append((line, ok)))
    assert said == []
