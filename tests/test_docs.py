"""The repository carries its own method document, and everything users read cites it, never a file they do not have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from muon_repro.tables.reference import DOC_MARKER, doc_with_tables
from muon_repro.tables.schemas import SCHEMAS

REPO = Path(__file__).resolve().parents[1]
METHOD = REPO / "docs" / "method.md"


def test_method_doc_table_reference_matches_the_schemas():
    text = METHOD.read_text(encoding="utf-8")
    assert text == doc_with_tables(text), (
        "docs/method.md is out of date: run `python -m muon_repro.tables.reference docs/method.md`"
    )
    for name, schema in SCHEMAS.items():
        assert f"### `{name}`" in text
        assert all(f"| `{c.name}` |" in text for c in schema.columns), name


def test_table_reference_needs_its_marker():
    with pytest.raises(ValueError, match="tables: generated below"):
        doc_with_tables("# a document without the marker\n")
    assert doc_with_tables(f"head\n{DOC_MARKER}\nstale").startswith(f"head\n{DOC_MARKER}\n\n## Tables")


def test_anchors_cited_in_the_package_exist_in_the_method_doc():
    import re

    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", METHOD.read_text(), re.M)
    }
    cited = set()
    for path in [*(REPO / "muon_repro").rglob("*.py"), *(REPO / "muon_repro").rglob("*.j2")]:
        cited |= {(path.name, a) for a in re.findall(r"docs/method\.md#([a-z0-9-]+)", path.read_text(encoding="utf-8"))}
    assert cited, "nothing cites docs/method.md"
    missing = sorted((name, a) for name, a in cited if a not in headings)
    assert not missing, f"anchors cited but not in docs/method.md: {missing}"


@pytest.mark.parametrize("path", ["muon_repro", "README.md", "report/report.md", "dataset_card.md", "docs/method.md"])
def test_nothing_users_read_refers_to_the_internal_design_notes(path):
    target = REPO / path
    files = [p for p in target.rglob("*") if p.suffix in (".py", ".j2", ".md")] if target.is_dir() else [target]
    offenders = [str(p.relative_to(REPO)) for p in files if "DESIGN.md" in p.read_text(encoding="utf-8")]
    assert offenders == []


@pytest.mark.parametrize("target", ["README.md", "docs/regimes.md"])
def test_generated_blocks_match_the_committed_tables(target):
    from muon_repro.report.readme import TARGETS, with_blocks

    text = (REPO / target).read_text(encoding="utf-8")
    assert text == with_blocks(text, REPO / "metrics", TARGETS[target]), (
        f"{target}'s generated blocks are out of date: run `python -m muon_repro.report.readme`"
    )


def test_generated_blocks_need_their_markers(tmp_path):
    from muon_repro.report.readme import markers, with_blocks

    with pytest.raises(ValueError, match="claims: generated"):
        with_blocks("# a README without the markers\n", REPO / "metrics", ("claims",))
    only_claims = "\n".join(markers("claims"))
    with pytest.raises(ValueError, match="cost model: generated"):
        with_blocks(only_claims, REPO / "metrics", ("claims", "cost model"))


def test_the_benchmark_blocks_are_made_from_the_result_file_alone_without_the_metrics(tmp_path):
    """docs/performance.md's block reads the benchmark's result file it is given, not metrics/ (here none) nor the
    result file beside it (here none either)."""
    from muon_repro.report.readme import markers, with_blocks

    begin, end = markers("benchmark table")
    assert "generated from docs/analysis_benchmark.json" in begin and end == "<!-- benchmark table: end -->"
    committed = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    head, _, rest = committed.partition(begin)
    emptied = f"{head}{begin}\n{end}{rest.partition(end)[2]}"
    benchmark = REPO / "docs" / "analysis_benchmark.json"
    assert with_blocks(emptied, tmp_path / "metrics", ("benchmark table",), benchmark=benchmark) == committed


def test_the_3d_sentence_is_empty_for_a_profile_that_measured_neither_pipeline_claim(report_data):
    from dataclasses import replace

    from muon_repro.report.claims_section import claim_measured
    from muon_repro.report.readme import pipeline_said
    from muon_repro.report.stated import row_of

    said = pipeline_said(report_data)
    profile = report_data.profiles[0]
    for cid in ("hybrid_survives_pp", "bubble_hides_step"):  # each claim: its value and verdict, as the claims table
        row = row_of(report_data.claims, "claim_id", cid, profile)
        assert f"{claim_measured(row)}, {row['verdict']} (at most" in said
    assert said.startswith(f"3-D parallelism on {profile} (DP x TP x PP") and said.count("; ") == 1
    claims = report_data.claims
    without = claims[~claims["claim_id"].isin(["hybrid_survives_pp", "bubble_hides_step"])]
    assert pipeline_said(replace(report_data, claims=without)) == ""


def test_the_sweep_block_says_when_there_is_no_sweep_and_shows_a_missing_value_as_a_dash(report_data):
    from dataclasses import replace

    from muon_repro.report.readme import sweep_markdown
    from muon_repro.report.regime_figures import main_axis

    no_sweep = replace(report_data, regimes=report_data.regimes.iloc[0:0])
    assert sweep_markdown(no_sweep) == "No regime sweep in metrics/: `muon-repro regimes` records it."
    regimes = report_data.regimes.copy()
    main = main_axis(regimes)
    fewest, most = main["tokens_per_step"].min(), main["tokens_per_step"].max()
    regimes.loc[main.index[main["tokens_per_step"] == fewest], "optimizer_share"] = float("nan")
    regimes.loc[main.index[main["tokens_per_step"] == most], "muon_extra"] = float("nan")
    rows = sweep_markdown(replace(report_data, regimes=regimes)).splitlines()[2:]
    assert rows and all(row.split(" | ")[1] == "–" for row in rows)  # the share at the fewest tokens
    assert all(row.split(" | ")[3].startswith("– [") for row in rows)  # Muon's extra time at the most


def test_the_module_rewrites_every_generated_block_in_every_document_that_has_one(tmp_path, monkeypatch, capsys):
    """`python -m muon_repro.report.readme --root R` fills each block of each document of R that the repository's
    documents mark as generated (each block a stand-in here: which block lands where is checked, not its text)."""
    from muon_repro.report import readme

    monkeypatch.setattr(readme, "load", lambda metrics_dir: None)
    monkeypatch.setattr(readme, "BLOCKS", {name: lambda data, name=name: f"made {name}" for name in readme.BLOCKS})
    stand_ins = {name: lambda record, name=name: f"made {name}" for name in readme.BENCHMARK_BLOCKS}
    monkeypatch.setattr(readme, "BENCHMARK_BLOCKS", stand_ins)
    monkeypatch.setattr(readme, "load_benchmark", lambda path: {})
    marked = {}  # document: the blocks it marks as generated, in its order
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        names = re.findall(r"^<!-- ([a-z ]+): generated from ", path.read_text(encoding="utf-8"), re.MULTILINE)
        if names:
            marked[path.relative_to(REPO).as_posix()] = names
    assert marked["README.md"][:2] == ["regenerate", "claims"] and "docs/method.md" in marked
    (tmp_path / "docs").mkdir()
    for target, names in marked.items():
        (tmp_path / target).write_text("".join(f"{b}\nstale\n{e}\n" for b, e in map(readme.markers, names)), encoding="utf-8")
    assert readme.main(["--root", str(tmp_path), "--metrics", str(tmp_path / "metrics")]) == 0
    for target, names in marked.items():
        expected = "".join(f"{b}\nmade {name}\n{e}\n" for name, (b, e) in zip(names, map(readme.markers, names)))
        assert (tmp_path / target).read_text(encoding="utf-8") == expected, target
    assert capsys.readouterr().out.count("updated the ") == len(marked)


def test_a_generated_table_escapes_each_cell_and_leaves_out_the_dropped_column():
    """Cells may quote run text (a GPU's name): a '|' in one cannot add a column, a tag cannot open."""
    from muon_repro.report.readme import _table

    rows = [["GPU | evil", "<b>x</b>", "not shown"]]
    assert _table(["name", "value", "fails if"], rows, drop="fails if") == [
        "| name | value |",
        "|---|---|",
        "| GPU \\| evil | &lt;b>x&lt;/b> |",
    ]


def test_the_readme_is_short_and_never_calls_the_original_study_the_seed():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert "bird-of-paradise/muon-distributed-reproducibility" in text
    assert not re.search(r"\bthe seed\b|\bseed's\b|\|\s*seed\s*\|", text, re.IGNORECASE)


# "The seed" was this project's name for Jen Wei's study; a reader cannot know it, so the study is
# "Wei's study" where a label names it and "the original study" after that. Random seeds stay seeds.
SEED_AS_STUDY = re.compile(r"\bthe\s+seed\b(?!s)|\bseed's\b|\bseed:", re.IGNORECASE)
RANDOM_SEED = re.compile(  # random seeds in these forms: "each seed's runs", "(one seed: no interval)", "sharing the seed"
    r"\b(?:each|one|same)\s+seed(?:'s|:)|\bsharing\s+the\s+seed\b|\bits\s+index\s+the\s+seed\b", re.IGNORECASE
)


def seed_as_study(text: str, first_line: int = 1) -> list[str]:
    """Where ``text`` (its first line numbered ``first_line``) calls the original study "the seed", random seeds
    left out: ``<line>: <words>``."""
    blanked = RANDOM_SEED.sub(lambda m: re.sub(r"\S", " ", m.group()), text)  # same offsets, same line breaks
    found = []
    for m in SEED_AS_STUDY.finditer(blanked):
        line = first_line + text.count("\n", 0, m.start())
        found.append(f"{line}: {m.group()}")
    return found


def prose_of_python(path: Path) -> list[tuple[int, str]]:
    """The strings (docstrings and f-strings included) and comments of a Python file, with their first line: what a
    reader sees, without the code (``seed: int`` is an annotation, not a name for the study)."""
    import io
    import tokenize

    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    return [(t.start[0], t.string) for t in tokens if t.type in (tokenize.STRING, tokenize.COMMENT)]


def test_the_seed_check_tells_the_study_from_random_seeds():
    for said in ("the seed's ~1.1%", "The seed does not publish", "source seed: Jen Wei's", "checked against the\n   seed"):
        assert seed_as_study(said), said
    random_seeds = ("each seed's runs", "(one seed: no interval)", "from the same seed: they", "5 seeds", "the seeds compared")
    for said in (*random_seeds, "seed 0", "a pair sharing\n  the seed", "manual_seed(seed)", "seed_pairs"):
        assert not seed_as_study(said), said
    assert seed_as_study("a\nb, the seed's", first_line=10) == ["11: the seed"]


def test_no_user_facing_text_of_the_package_calls_the_original_study_the_seed():
    package = REPO / "muon_repro"
    offenders = []
    for path in sorted(package.rglob("*.py")):
        for line, text in prose_of_python(path):
            offenders += [f"{path.relative_to(REPO)}:{hit}" for hit in seed_as_study(text, line)]
    for path in sorted([*package.rglob("*.j2"), *package.rglob("*.json")]):
        offenders += [f"{path.relative_to(REPO)}:{hit}" for hit in seed_as_study(path.read_text(encoding="utf-8"))]
    assert offenders == [], "say 'the original study' (or \"Wei's study\" in a label), not 'the seed':\n" + "\n".join(offenders)


@pytest.mark.parametrize("path", sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")))
def test_no_document_calls_the_original_study_the_seed(path):
    offenders = [f"{path}:{hit}" for hit in seed_as_study((REPO / path).read_text(encoding="utf-8"))]
    assert offenders == [], "say 'the original study' (or \"Wei's study\" in a label), not 'the seed':\n" + "\n".join(offenders)


def _largest(name: str) -> int:
    return max(p.stat().st_size for p in (REPO / "traces").rglob(name))


@pytest.mark.parametrize(
    ("doc", "stated", "name"),
    [
        ("limits.md", r"the largest recorded is a `metrics.json` of ([\d.]+) KB", "metrics.json"),
        ("limits.md", r"a convergence record ([\d.]+) KB", "convergence.json"),
        ("contributing.md", r"\| `metrics.json` \| 16 MiB \| largest recorded: ([\d.]+) KB", "metrics.json"),
        ("contributing.md", r"\| `log.txt` \| 16 MiB \| largest recorded: ([\d.]+) KB", "log.txt"),
        ("contributing.md", r"\| `config.json` \| 64 KiB \| largest recorded: ([\d.]+) KB", "config.json"),
        ("contributing.md", r"\| `environment.json` \| 1 MiB \| largest recorded: ([\d.]+) KB", "environment.json"),
    ],
)
def test_the_largest_recorded_side_files_are_what_the_docs_say(doc, stated, name):
    """The limits are argued from the largest file recorded: a re-recording that grows one must move the docs."""
    found = re.search(stated, (REPO / "docs" / doc).read_text())
    assert found, f"docs/{doc} no longer states the largest {name}"
    said, largest = float(found[1]), _largest(name) / 1000
    decimals = len(found[1].partition(".")[2])
    assert abs(said - largest) <= 0.5 * 10**-decimals + 1e-9, f"docs/{doc} says {said} KB, the largest {name} is {largest:.1f} KB"


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        "python -m muon_repro.parallel.grid3d --dp 2 --tp 2 --pp 2",
        "python -m muon_repro.parallel.schedule --pp 2 --micro-batches 3",
    ],
)
def test_the_printing_modules_print_what_pipeline_md_shows_and_nothing_else(command):
    """Run as the doc says, each prints its block and no warning (grid3d warned that the package had imported it)."""
    import subprocess
    import sys

    doc = (REPO / "docs" / "pipeline.md").read_text()
    block = []  # the indented block after the sentence, blank lines inside it kept
    for line in doc.split(f"`{command}` prints:\n\n", 1)[1].splitlines():
        if line and not line.startswith("    "):
            break
        block.append(line.removeprefix("    "))
    done = subprocess.run(
        [sys.executable, "-W", "error", *command.split()[1:]], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.rstrip("\n") == "\n".join(block).rstrip("\n")
