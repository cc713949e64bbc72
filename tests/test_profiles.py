"""Hardware profiles through the data flow: two profiles never pair, claims and the report have one per
profile, and migrating the old layout (all at once or group by group) leaves every table as it was."""

from __future__ import annotations

import csv
import html
import json
import re
import shutil
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from muon_repro.dataset.verify import LOCATION_COLUMNS
from muon_repro.migrate_layout import migrate, plan_migration, stale_record_rows
from muon_repro.rundir import COSTMODEL_DIR, ENVIRONMENT_FILE, PREDICTIONS_FILE, trial_folders
from muon_repro.table_set import build_tables
from muon_repro.tables.io import write_tables

REPO = Path(__file__).resolve().parents[1]
RUNS = ("comparison/muon_dp2_tp2", "comparison/adamw_dp2_tp2")  # the committed cpu-2c-gloo runs, one trial each
CPU, GPU = "cpu-2c-gloo", "8xH100-nvlink-nccl"


def committed(run: str) -> Path:
    """The committed trial0 of ``run``, in whichever layout the repository holds it."""
    found = [folder for key, folders in trial_folders(REPO / "traces").items() if key == f"{CPU}/{run}" for folder in folders]
    if not found:
        pytest.fail(f"the committed traces hold no {run}")
    return found[0]


def copy_run(run: str, dest: Path, profile: str | None = None) -> Path:
    """trial0 of a committed run copied to ``dest/<run>/trial0``; ``profile``: written into its environment.json."""
    target = dest / run / "trial0"
    shutil.copytree(committed(run), target)
    if profile is not None:
        env = json.loads((target / ENVIRONMENT_FILE).read_text())
        (target / ENVIRONMENT_FILE).write_text(json.dumps({**env, "profile": profile}))
    return target


@pytest.fixture(scope="module")
def two_profiles(tmp_path_factory) -> dict[str, pd.DataFrame]:
    """The two runs in the old layout (cpu-2c-gloo, derived) and again as a second profile in the new layout."""
    traces = tmp_path_factory.mktemp("two") / "traces"
    for run in RUNS:
        copy_run(run, traces)
        copy_run(run, traces / GPU, GPU)
    return build_tables([traces], workers=1)


@pytest.mark.slow  # end to end: analyzes copies of committed runs
def test_every_table_row_names_its_profile(two_profiles):
    runs = two_profiles["runs"]
    assert sorted(runs["run"]) == sorted(f"{p}/{r}" for p in (CPU, GPU) for r in RUNS)
    assert runs.set_index("run")["profile"].to_dict() == {f"{p}/{r}": p for p in (CPU, GPU) for r in RUNS}
    for name in ("steps", "collectives", "ranks", "phases", "timeline", "losses", "environment"):
        table = two_profiles[name]
        assert set(table["profile"]) == {CPU, GPU}, name
        assert all(run.startswith(f"{profile}/") for run, profile in zip(table["run"], table["profile"])), name


@pytest.mark.slow  # end to end: analyzes copies of committed runs
def test_muon_pairs_only_with_adamw_of_its_profile(two_profiles):
    comparisons = two_profiles["comparisons"]
    assert len(comparisons) == 2
    for row in comparisons.itertuples():
        assert row.muon_run.split("/")[0] == row.adamw_run.split("/")[0] == row.profile


@pytest.mark.slow  # end to end: analyzes copies of committed runs
def test_no_partner_from_another_profile(tmp_path):
    copy_run(RUNS[0], tmp_path / "traces", GPU)  # Muon alone on the GPU profile
    for run in RUNS:
        copy_run(run, tmp_path / "traces" / CPU)
    comparisons = build_tables([tmp_path / "traces"], workers=1)["comparisons"]
    assert comparisons["muon_run"].tolist() == [f"{CPU}/{RUNS[0]}"]


@pytest.mark.slow  # end to end: analyzes copies of committed runs
def test_claims_have_a_row_per_claim_and_profile(two_profiles):
    claims = two_profiles["claims"]
    per_claim = claims.groupby("claim_id")["profile"].apply(sorted)
    assert len(per_claim) >= 5 and all(p == sorted([CPU, GPU]) for p in per_claim)
    assert not claims.duplicated(["claim_id", "profile"]).any()
    both = claims.set_index(["claim_id", "profile"])["measured_value"].unstack()
    assert both[CPU].dropna().equals(both[GPU].dropna())  # the same traces measure the same on either profile


@pytest.mark.slow  # end to end: analyzes copies of committed runs
def test_report_claims_table_has_a_column_per_profile(two_profiles, tmp_path):
    from muon_repro.report.claims_section import claims_matrix, profiles_note
    from muon_repro.report.data import load
    from muon_repro.report.readme import claims_markdown

    write_tables(two_profiles, tmp_path / "metrics")
    data = load(tmp_path / "metrics")
    first, second = sorted((CPU, GPU))
    assert data.profiles == [first, second]  # a tie in runs: by name
    header, rows, notes = claims_matrix(data)
    assert [h for h in header if h.startswith((CPU, GPU))] == [
        f"{first}: measured (95% interval), verdict",
        f"{second}: measured (95% interval), verdict",
    ]
    assert all(len(row) == len(header) for row in rows) and len(notes) == len(rows)
    note = profiles_note(data)
    assert f"{first}: " in note and "described in the summary, sections and figures" in note
    assert f"{second}: " in note and "described in its claims column" in note
    assert data.of_profile(GPU).runs["run"].str.startswith(f"{GPU}/").all()
    # the report describes one profile's view: its runs are that profile's, its claims table still every profile's
    for view, other in ((first, second), (second, first)):
        view_header, view_rows, _ = claims_matrix(data.of_profile(view))
        assert [h.split(":")[0] for h in view_header if h.startswith((CPU, GPU))] == [view, other]
        assert all(len(row) == len(view_header) for row in view_rows)
    markdown = claims_markdown(data)
    assert f"| {CPU}: measured" in markdown and f"| {GPU}: measured" in markdown


@pytest.mark.slow
def test_figures_and_report_put_every_claim_of_every_profile_side_by_side(two_profiles, tmp_path):
    from muon_repro import stages
    from muon_repro.report.build import make_figures
    from muon_repro.report.claims_section import claim_short
    from muon_repro.report.figures import FIGURES

    write_tables(two_profiles, tmp_path / "metrics")
    paths = make_figures(tmp_path / "metrics", tmp_path / "figures")
    svg = paths["claims_by_profile"].with_suffix(".svg").read_text()
    measured = two_profiles["claims"].dropna(subset=["measured_value"])["claim_id"].unique()
    # each claim's panel titled in the claims table's words (its short), not by its id
    titles = html.unescape(svg)
    assert CPU in titles and GPU in titles and not any(claim_id in titles for claim_id in measured)
    assert all(line in titles for claim_id in measured for line in textwrap.wrap(claim_short(claim_id), 36))
    other = sorted((CPU, GPU))[1]  # a tie in runs: the first by name is the main profile
    assert (tmp_path / "figures" / other / "timeline.png").is_file()  # the other profile's own figures
    report = stages.report(tmp_path / "metrics", tmp_path / "figures", tmp_path / "report", formats=("md",))["md"].read_text()
    # numbered in order of appearance: the claims section's figure first, then the results' and the regimes'
    assert "*Figure 1.* Every claim measured on every hardware profile" in report
    figure_numbers = [int(n) for n in re.findall(r"^\*Figure (\d+)\.\*", report, flags=re.MULTILINE)]
    assert figure_numbers == list(range(1, len(figure_numbers) + 1))
    assert len(figure_numbers) > len(FIGURES) + 1  # the regime figures follow


def test_region_bounds_read_the_claims_table_regions():
    from muon_repro.report.profile_figures import region_bounds

    assert region_bounds(pd.Series({"region_low": 1.0, "region_high": 1.25})) == (1.0, 1.25)
    assert region_bounds(pd.Series({"region_low": pd.NA, "region_high": 0.5})) == (float("-inf"), 0.5)
    assert region_bounds(pd.Series({"region_low": 0.0, "region_high": None})) == (0.0, float("inf"))


@pytest.mark.slow  # end to end: analyzes copies of committed runs
def test_report_with_one_profile_names_it(tmp_path):
    from muon_repro.report.claims_section import claims_matrix
    from muon_repro.report.data import load

    for run in RUNS:
        copy_run(run, tmp_path / "traces")
    write_tables(build_tables([tmp_path / "traces"], workers=1), tmp_path / "metrics")
    header, _, _ = claims_matrix(load(tmp_path / "metrics"))
    assert header == ["claim", "source", "claimed", "agrees if in", f"measured on {CPU} (95% interval)", "verdict"]


# ---------------------------------------------------------------- migration


@pytest.fixture
def old_tree(tmp_path) -> Path:
    """Two runs, a convergence record and the cost model's records, in the old layout."""
    traces = tmp_path / "traces"
    for run in RUNS:
        copy_run(run, traces)
    records = [p for p in (REPO / "traces").rglob("convergence.json") if "steps300_seed0" in p.parent.name][:2]
    costmodel = next((REPO / "traces").rglob("costmodel/machine.json"), None)
    if len(records) < 2 or costmodel is None:
        pytest.fail("the committed traces hold no convergence records or cost-model folder")
    for record in records:
        shutil.copytree(record.parent, traces / "convergence" / record.parent.name)
    shutil.copytree(costmodel.parent, traces / "costmodel")
    return traces


def _without_location(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    return {name: df.drop(columns=[c for c in LOCATION_COLUMNS if c in df.columns]) for name, df in tables.items()}


def _assert_same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)


def test_dry_run_moves_nothing(old_tree):
    before = sorted(p.relative_to(old_tree) for p in old_tree.rglob("*"))
    moves = plan_migration(old_tree)
    assert {m.target.relative_to(old_tree).parts[:2] for m in moves} == {
        (CPU, "comparison"),
        (CPU, "convergence"),
        (CPU, "costmodel"),
    }
    assert sorted(p.relative_to(old_tree) for p in old_tree.rglob("*")) == before
    from muon_repro.cli import main

    assert main(["migrate-layout", "--traces", str(old_tree), "--dry-run"]) == 0
    assert sorted(p.relative_to(old_tree) for p in old_tree.rglob("*")) == before


def test_conflict_is_refused_naming_the_path_before_anything_moves(old_tree):
    blocker = old_tree / CPU / "convergence" / next((old_tree / "convergence").iterdir()).name
    blocker.mkdir(parents=True)
    with pytest.raises(ValueError, match="exists already; nothing was moved") as info:
        plan_migration(old_tree)
    assert str(blocker) in str(info.value)
    assert (old_tree / "comparison").is_dir() and not (old_tree / CPU / "comparison").exists()


def test_an_unreadable_environment_is_refused_naming_it_before_anything_moves(old_tree):
    environment = next((old_tree / "comparison").rglob("environment.json"))
    environment.write_text('{"hostname": "box",')
    with pytest.raises(ValueError, match="not valid JSON") as info:
        plan_migration(old_tree)  # not moved to unknown/, the profile an unreadable file would read as
    assert str(environment) in str(info.value) and "nothing was moved" in str(info.value)
    assert (old_tree / "comparison").is_dir() and not (old_tree / "unknown").exists()


def test_unknown_group_is_refused(old_tree):
    with pytest.raises(ValueError, match="--groups nope: no such folder"):
        plan_migration(old_tree, ["nope"])


@pytest.mark.slow  # end to end: analyzes the tree three times (~7 s)
def test_partial_migration_gives_the_same_tables(old_tree):
    old = _without_location(build_tables([old_tree], workers=1))
    migrate(plan_migration(old_tree, ["comparison", "costmodel"]))
    assert (
        (old_tree / "convergence").is_dir()
        and (old_tree / CPU / "comparison").is_dir()
        and not (old_tree / "comparison").exists()
    )
    partial = _without_location(build_tables([old_tree], workers=1))
    migrate(plan_migration(old_tree))
    assert sorted(p.name for p in old_tree.iterdir()) == [CPU]
    full = build_tables([old_tree], workers=1)
    assert all(str(p).startswith(f"{old_tree.name}/{CPU}/") or f"/{CPU}/" in str(p) for p in full["runs"]["path"])
    full = _without_location(full)
    _assert_same(partial, full)
    _assert_same(old, full)
    assert len(full["convergence"]) and len(full["calibration"]) and len(full["comparisons"]) == 1
    assert plan_migration(old_tree) == []  # nothing left in the old layout


def test_migration_names_the_predictions_rows_that_still_name_a_moved_folder(old_tree, capsys):
    """The cost model's record names each run's folder: after the move those rows are stale, and the
    command says how many and how to write the records again (a row of an unmoved folder is not counted)."""
    record = old_tree / COSTMODEL_DIR / PREDICTIONS_FILE
    with open(record, newline="", encoding="utf-8") as f:
        template = next(csv.DictReader(f))
    paths = [
        f"traces/{RUNS[0]}",
        f"/elsewhere/traces/{RUNS[1]}/trial0",
        f"traces/{CPU}/{RUNS[0]}",
        f"traces/{CPU}/regimes/muon_x",
    ]
    with open(record, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(template))
        writer.writeheader()
        writer.writerows({**template, "path": path} for path in paths)
    assert stale_record_rows(old_tree, plan_migration(old_tree, ["convergence"])) == {}
    from muon_repro.cli import main

    assert main(["migrate-layout", "--traces", str(old_tree)]) == 0
    moved_record = old_tree / CPU / COSTMODEL_DIR / PREDICTIONS_FILE
    assert moved_record.is_file() and not record.exists()
    out = capsys.readouterr().out
    assert f"note: 2 row(s) of {moved_record} name their run's old folder in the 'path' column" in out, out
    assert f"muon-repro regimes --records-only --out {old_tree}" in out


def test_bench_skips_an_unmigrated_trial_of_its_profile_instead_of_recording_it_again(old_tree):
    """`muon-repro run` on a tree migrated group by group: a complete old-layout trial of the same
    profile is where the plan looks (so it is skipped); another profile records into the new layout."""
    from muon_repro.bench.configs import resolve
    from muon_repro.bench.sweep import is_complete, plan_recordings

    cfg = resolve(RUNS[0], "cpu")
    (mine,) = plan_recordings([cfg], old_tree, 1, profile=CPU)
    assert mine.final == old_tree / RUNS[0] / "trial0" and is_complete(mine.final, cfg)
    (theirs,) = plan_recordings([cfg], old_tree, 1, profile=GPU)
    assert theirs.final == old_tree / GPU / RUNS[0] / "trial0" and not theirs.final.exists()


def test_a_one_sided_interval_is_drawn_to_the_panel_edge():
    """The leading claim's low end with no upper end: drawn from its end off the panel, not left out as a bare point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from muon_repro.report.profile_figures import _claim_panel

    rows = pd.DataFrame(
        {"measured_value": [0.955], "measured_low": [0.034], "measured_high": [float("nan")], "verdict": ["inconclusive"]},
        index=[CPU],
    )
    fig, ax = plt.subplots()
    _claim_panel(ax, "muon_leading_steps", rows, [CPU], (1.5, float("inf")))
    arrows = [t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]
    assert len(arrows) == 1
    assert arrows[0].xyann[0] == pytest.approx(0.034) and arrows[0].xy[0] == pytest.approx(ax.get_xlim()[1])
    plt.close(fig)
