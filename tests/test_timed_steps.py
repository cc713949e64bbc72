"""Steps timed with no profiler before the profiled ones, their collectives' wait and transfer, and the
shuffled order of each round of a sweep: on tiny configs with gloo (4 ranks), and on hand-made calls."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from tiny_sweep import CONFIGS as TINY_SWEEP
from tiny_sweep import copy_of

from muon_repro.analysis.timed_steps import split_timed_waits, timed_calls, timed_run_columns, timed_steps_table
from muon_repro.bench.configs import BenchConfig, from_dict, resolve
from muon_repro.bench.sweep import plan_recordings, record_local, round_order
from muon_repro.run_records import RankMetrics, RunConfig
from muon_repro.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
CONFIG = "layout_ablation/muon_dp2_tp2_bucketed"  # bucketed: every optimizer collective occurs, the model's TP ones too
TIMED = resolve(CONFIG, "tiny")
UNTIMED = replace(TIMED, name=f"{TIMED.name}_untimed", timed_steps=0, timed_warmup=0)  # as every run before timed steps
TIMED_FIELDS = ("timed_step_ms", "timed_fwd_bwd_ms", "timed_optimizer_ms", "timed_comm")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, tiny_sweep) -> dict[str, Path]:
    """The timed run from the shared tiny sweep, its untimed twin recorded here."""
    out = tmp_path_factory.mktemp("timed")
    (untimed,) = record_local([UNTIMED], out, "gloo", trials=1, progress=False)
    return {TIMED.key: copy_of(tiny_sweep[TIMED.key], out), UNTIMED.key: untimed.run_dir}


@pytest.fixture(scope="module")
def tables(recorded) -> dict[str, pd.DataFrame]:
    from muon_repro.table_set import build_tables

    return build_tables(list(recorded.values()), workers=2)


def _run_id(run_dir: Path) -> str:
    return f"{RunDir(run_dir).profile}/{TIMED.group}/{run_dir.parent.name}"


# ---------------------------------------------------------------- recording


@pytest.mark.slow
def test_timed_steps_are_recorded_before_the_profiled_ones_and_the_ledger_covers_only_those(recorded):
    run = recorded[TIMED.key]
    config = json.loads((run / "config.json").read_text())
    assert (config["timed_steps"], config["timed_warmup"], config["round_order"]) == (4, 1, config["round_order"])
    assert config["round_order"] in range(len(TINY_SWEEP))  # its place in the shuffled round
    ranks = json.loads((run / "metrics.json").read_text())["ranks"]
    assert len(ranks) == TIMED.world_size
    for rank in ranks:
        assert len(rank["timed_step_ms"]) == len(rank["timed_fwd_bwd_ms"]) == len(rank["timed_optimizer_ms"]) == 4
        assert len(rank["step_ms"]) == len(rank["loss"]) == TIMED.steps  # the profiled steps, as before
        for step, fwd_bwd, opt in zip(rank["timed_step_ms"], rank["timed_fwd_bwd_ms"], rank["timed_optimizer_ms"]):
            assert fwd_bwd > 0 and opt > 0 and step == pytest.approx(fwd_bwd + opt, abs=1e-6)
        comm = rank["timed_comm"]
        assert set(comm) == {"phases", "kinds", "groups", "step", "phase", "kind", "group", "start_ns", "end_ns"}
        assert len({len(comm[c]) for c in ("step", "phase", "kind", "group", "start_ns", "end_ns")}) == 1
        assert sorted(set(comm["step"])) == [0, 1, 2, 3]
        assert all(end > start for start, end in zip(comm["start_ns"], comm["end_ns"]))
        # The ledger holds the profiled steps only: the same calls in each, as many as each timed step made.
        ledger_steps = [rec["step"] for rec in rank["ledger"]]
        assert sorted(set(ledger_steps)) == list(range(TIMED.steps))
        per_step = {ledger_steps.count(s) for s in range(TIMED.steps)}
        assert per_step == {comm["step"].count(s) for s in range(4)}, "a timed step made other calls than a profiled one"
    log = (run / "log.txt").read_text().splitlines()
    assert sum(line.startswith("timed step ") for line in log) == 4
    assert sum(line.startswith("step ") for line in log) == TIMED.steps


@pytest.mark.slow
def test_a_run_without_timed_steps_writes_metrics_as_before(recorded):
    run = recorded[UNTIMED.key]
    config = json.loads((run / "config.json").read_text())
    assert (config["timed_steps"], config["timed_warmup"]) == (0, 0)
    for rank in json.loads((run / "metrics.json").read_text())["ranks"]:
        assert not set(TIMED_FIELDS) & set(rank)
        assert len(rank["step_ms"]) == len(rank["loss"]) == UNTIMED.steps
        assert sorted({rec["step"] for rec in rank["ledger"]}) == list(range(UNTIMED.steps))
    # Trained on batches 0.. from the start: its first profiled loss is the untrained model's, which the timed
    # run's profiled steps (on the batches after its 5 timed ones) never see.
    timed_first = RunDir(recorded[TIMED.key]).ranks[0].loss[0]
    assert RunDir(run).ranks[0].loss[0] > timed_first


# ---------------------------------------------------------------- analysis


@pytest.mark.slow
def test_timed_collectives_carry_the_traces_phases_and_split_into_wait_and_transfer(recorded, tables):
    run_dir = recorded[TIMED.key]
    run = _run_id(run_dir)
    ranks = RunDir(run_dir).ranks
    calls = timed_calls(ranks)
    traced = tables["collectives"][tables["collectives"]["run"] == run]
    for rank in range(TIMED.world_size):
        mine = calls[calls["rank"] == rank]
        assert set(mine["phase"]) == set(traced[traced["rank"] == rank]["phase"]), rank
        assert set(zip(mine["phase"], mine["kind"])) == set(zip(traced["phase"], traced["op"]))
    split = split_timed_waits(calls, TIMED.dp, TIMED.tp)
    assert split["matched"].all()  # every call found on every rank of its group
    sweep = RunDir(run_dir).config.sweep  # the command that recorded it, in both step tables: rounds pair within it
    for name in ("timed_steps", "steps"):
        rows = tables[name][tables[name]["run"] == run]
        assert sweep is not None and len(rows) and (rows["sweep"] == sweep).all(), name
    assert (split["wait_ns"] >= 0).all() and (split["transfer_ns"] >= 0).all()
    # One clock for the 4 processes: no rank leaves a blocking collective before the last one entered it.
    assert (split["end_ns"] >= split["latest_ns"]).all()
    assert (split["wait_ns"] == split["latest_ns"] - split["start_ns"]).all()

    timed = tables["timed_steps"]
    mine = timed[timed["run"] == run]
    assert len(mine) == TIMED.world_size * TIMED.timed_steps
    assert sorted(set(zip(mine["rank"], mine["step"]))) == [(r, s) for r in range(4) for s in range(4)]
    assert mine[["comm_ms", "comm_wait_ms", "comm_transfer_ms"]].notna().all().all()
    assert ((mine["comm_wait_ms"] + mine["comm_transfer_ms"] - mine["comm_ms"]).abs() < 1e-9).all()
    assert (mine["comm_ms"] <= mine["step_ms"]).all()
    by_rank_step = mine.set_index(["rank", "step"])
    for m in ranks:
        assert list(by_rank_step.loc[m.rank, "step_ms"]) == pytest.approx(m.timed_step_ms)

    row = tables["runs"].set_index("run").loc[run]
    per_step_slowest = mine.groupby("step")["step_ms"].max()
    assert row["timed_step_ms"] == pytest.approx(per_step_slowest.median())
    assert row["timed_optimizer_ms"] == pytest.approx(mine.groupby("step")["optimizer_ms"].mean().median())
    assert row["profiler_overhead"] == pytest.approx(row["step_ms"] / row["timed_step_ms"])
    assert row["rounds"] == 1 and row["trials"] == 1
    assert row["tokens_per_s"] == pytest.approx(row["tokens_per_step"] / row["timed_step_ms"] * 1000.0)  # no profiler


@pytest.mark.slow
def test_a_run_without_timed_steps_analyzes_with_nulls(recorded, tables, tmp_path):
    run = _run_id(recorded[UNTIMED.key])
    row = tables["runs"].set_index("run").loc[run]
    for column in ("timed_step_ms", "timed_optimizer_ms", "profiler_overhead", "rounds"):
        assert pd.isna(row[column]), column
    assert pd.notna(row["step_ms"])
    assert row["tokens_per_s"] == pytest.approx(row["tokens_per_step"] / row["step_ms"] * 1000.0)  # no timed steps
    assert (tables["timed_steps"]["run"] != run).all()

    # A folder of an old metrics.json alone (here: the timed run's, its timed fields taken out) has none either.
    old = tmp_path / TIMED.group / TIMED.name / "trial0"
    shutil.copytree(recorded[TIMED.key], old)
    metrics = json.loads((old / "metrics.json").read_text())
    for rank in metrics["ranks"]:
        for name in TIMED_FIELDS:
            del rank[name]
    (old / "metrics.json").write_text(json.dumps(metrics))
    from muon_repro.table_set import build_tables

    fresh = build_tables([old], workers=1)
    assert fresh["timed_steps"].empty and list(fresh["timed_steps"].columns) == list(tables["timed_steps"].columns)
    assert fresh["runs"][["timed_step_ms", "timed_optimizer_ms", "profiler_overhead", "rounds"]].isna().all().all()
    assert fresh["runs"]["step_ms"].notna().all()


@pytest.mark.slow
def test_rounds_after_the_traced_one_are_timed_only_and_join_their_run(tmp_path):
    from muon_repro.analysis.batch_read import analyze_paths
    from muon_repro.table_set import tables_of

    results = record_local([TIMED], tmp_path, "gloo", trials=3, traced_trials=1, progress=False)
    folders = {r.trial: r.run_dir for r in results}
    assert sorted(p.name for p in folders[0].iterdir() if p.name.startswith("rank")) == [
        f"rank{r}.json.gz" for r in range(TIMED.world_size)
    ]
    for k in (1, 2):
        assert not list(folders[k].glob("rank*")), "a timed-only round wrote a trace"
        config = json.loads((folders[k] / "config.json").read_text())
        assert (config["profile"], config["timed_steps"], config["trial"]) == (False, 4, k)
        ranks = RunDir(folders[k]).ranks
        assert all(len(m.timed_step_ms) == 4 and m.step_ms == [] and m.ledger == [] for m in ranks)
    assert [r.timed_step_ms is not None for r in results] == [True] * 3
    assert [r.step_ms is not None for r in results] == [True, False, False]

    analysis = analyze_paths([tmp_path], workers=1)
    assert not analysis.incomplete and len(analysis.runs) == 1 and len(analysis.timed_only) == 2
    tables = tables_of(analysis)
    run = tables["runs"].iloc[0]
    assert (run["trials"], run["rounds"]) == (1, 3)
    assert sorted(tables["timed_steps"]["trial"].unique()) == [0, 1, 2]
    assert sorted(tables["steps"]["trial"].unique()) == [0]  # the trace-based tables: the traced round only
    assert run["profiler_overhead"] > 0

    # A timed-only round analyzed without its run's traced one has no run to join: a word, not a silent drop.
    alone = analyze_paths([folders[1]], workers=1)
    assert not alone.runs and not alone.timed_only
    assert "no traced trial of it was analyzed" in alone.incomplete[0].message


def test_metrics_written_before_timed_steps_read_without_timed_fields_and_write_back_unchanged():
    (path,) = list((REPO / "traces").glob("*/comparison/muon_dp2_tp2/trial0/metrics.json"))
    for recorded in json.loads(path.read_text())["ranks"]:
        entry = {k: v for k, v in recorded.items() if k not in TIMED_FIELDS}  # as a run recorded before timed steps
        metrics = RankMetrics.from_dict(entry)
        assert (metrics.timed_step_ms, metrics.timed_fwd_bwd_ms, metrics.timed_optimizer_ms, metrics.timed_comm) == (
            [],
            [],
            [],
            {},
        )
        assert not set(TIMED_FIELDS) & set(metrics.to_dict())


def test_a_malformed_timed_comm_reads_as_none():
    good = {
        "phases": ["x"],
        "kinds": ["all_gather"],
        "groups": ["dp"],
        "step": [0],
        "phase": [0],
        "kind": [0],
        "group": [0],
        "start_ns": [1],
        "end_ns": [2],
    }
    assert RankMetrics.from_dict({"rank": 0, "timed_comm": good}).timed_comm == good
    for bad in ({**good, "end_ns": [2, 3]}, {**good, "phase": [1]}, {**good, "start_ns": [1.5]}, {**good, "phases": "x"}, []):
        assert RankMetrics.from_dict({"rank": 0, "timed_comm": bad}).timed_comm == {}, bad


def _calls(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["rank", "step", "phase", "kind", "group", "start_ns", "end_ns"])


def test_wait_is_the_last_arrival_of_the_group_and_transfer_the_rest():
    # dp=2 x tp=2: DP groups {0,2} {1,3}, TP groups {0,1} {2,3}.
    calls = _calls(
        [
            (0, 0, "p", "all_reduce", "tp", 100, 200),  # TP group {0,1}: rank 1 arrives last, at 150
            (1, 0, "p", "all_reduce", "tp", 150, 200),
            (2, 0, "p", "all_reduce", "tp", 10, 60),  # TP group {2,3}: its own collective, rank 3 last at 40
            (3, 0, "p", "all_reduce", "tp", 40, 60),
            (0, 0, "q", "all_gather", "dp", 300, 400),  # DP group {0,2}: second call of q on each
            (2, 0, "q", "all_gather", "dp", 280, 400),
            (0, 0, "q", "all_gather", "dp", 500, 700),
            (2, 0, "q", "all_gather", "dp", 650, 700),
            (1, 0, "q", "all_gather", "dp", 300, 350),  # DP group {1,3}: rank 3 never made the call
        ]
    )
    split = split_timed_waits(calls, dp=2, tp=2)
    assert list(split["wait_ns"]) == [50, 0, 30, 0, 0, 20, 150, 0, 0]
    assert list(split["transfer_ns"]) == [50, 50, 20, 20, 100, 100, 50, 50, 50]
    assert list(split["matched"]) == [True] * 8 + [False]


def test_throughput_is_of_the_unprofiled_step_wherever_one_was_timed():
    """tokens_per_s: over timed_step_ms when the run has timed steps (profiled ones cost 20-75% more on a GPU), over
    the profiled step_ms only for a run recorded without any; never profiled on one row and unprofiled on the next."""
    from muon_repro.analysis.runs_table import tokens_per_s

    runs = pd.DataFrame(
        {
            "tokens_per_step": [8192, 8192, 8192, None],
            "step_ms": [150.0, None, 200.0, 100.0],
            "timed_step_ms": [100.0, 80.0, None, 50.0],
        }
    )
    assert tokens_per_s(runs).tolist()[:3] == pytest.approx([81920.0, 102400.0, 40960.0])
    assert pd.isna(tokens_per_s(runs).iloc[3])


def test_runs_columns_take_the_median_over_rounds_of_the_median_over_steps():
    rows = []
    for trial, scale in ((0, 1.0), (1, 2.0), (2, 4.0)):
        for step in range(3):
            for rank, step_ms in enumerate((10.0 + step, 12.0 + step)):  # rank 1 is the slowest
                rows.append({"run": "r", "trial": trial, "rank": rank, "step": step, "step_ms": step_ms * scale})
                rows[-1]["optimizer_ms"] = rank + 1.0
    timed = pd.DataFrame(rows)
    # Per round the slowest rank's median: 13, 26 and 52 ms. Only rounds 0 and 2 were traced (profiled).
    profiled = pd.Series({0: 13.0 * 1.1, 2: 52.0 * 1.3})
    columns = timed_run_columns(timed, "r", profiled)
    assert columns == {
        "timed_step_ms": 26.0,
        "timed_optimizer_ms": 1.5,
        "timed_bubble_ms": None,  # no pipeline stages
        "profiler_overhead": pytest.approx(1.2),  # paired within each traced round: median of 1.1 and 1.3
        "rounds": 3,
    }
    assert timed_run_columns(timed, "r", pd.Series(dtype=float))["profiler_overhead"] is None
    assert timed_run_columns(timed, "other", profiled) == dict.fromkeys(columns)


# ---------------------------------------------------------------- configuration and sweep


def test_timed_steps_come_with_the_scale_and_not_for_runs_only_timed():
    assert (TIMED.timed_steps, TIMED.timed_warmup, TIMED.timed_total) == (4, 1, 5)
    cpu = resolve(CONFIG, "cpu")
    assert (cpu.timed_steps, cpu.timed_warmup, cpu.timed_total) == (8, 2, 10)
    timed_only = cpu.untraced()  # a trial of an untraced round: the timed steps and nothing after them
    assert (timed_only.profile, timed_only.timed_only, timed_only.timed_total, timed_only.profiled_steps) == (False, True, 10, 0)
    assert (cpu.timed_only, cpu.profiled_steps) == (False, cpu.steps)
    assert UNTIMED.timed_total == 0
    regime = replace(UNTIMED, profile=False)  # a regime point: no timed steps, its own steps timed without profiler
    assert (regime.timed_only, regime.profiled_steps) == (False, regime.steps)
    with pytest.raises(ValueError, match="needs timed steps"):
        UNTIMED.untraced()
    old = {k: v for k, v in cpu.to_dict().items() if not k.startswith("timed_")}  # a config.json from before
    assert from_dict(old).timed_total == 0
    assert from_dict(cpu.to_dict()) == cpu
    with pytest.raises(ValueError, match="timed_steps must be >= 0"):
        BenchConfig(group="g", name="n", optimizer="muon", dp=1, tp=1, timed_steps=-1)


def test_each_round_is_shuffled_by_its_pairs_index_and_records_its_order(tmp_path):
    cfgs = [resolve(key, "tiny") for key in ("comparison/adamw_dp2_tp2", "comparison/muon_dp2_tp2", CONFIG)]
    plan = plan_recordings(cfgs, tmp_path, trials=8, profile="p")
    again = plan_recordings(cfgs, tmp_path, trials=8, profile="p")
    assert [replace(rec, sweep=None) for rec in plan] == [replace(rec, sweep=None) for rec in again]  # reproducible
    assert len({rec.sweep for rec in plan}) == 1 and {rec.sweep for rec in plan} != {rec.sweep for rec in again}
    orders = set()
    for k in range(8):
        rnd = plan[3 * k : 3 * k + 3]
        assert {rec.trial for rec in rnd} == {k}  # round k is trial k of every configuration
        assert [rec.round_order for rec in rnd] == [0, 1, 2]
        expected = list(cfgs)
        random.Random(k // 2).shuffle(expected)
        expected = expected[::-1] if k % 2 else expected  # each pair of rounds in both orders
        assert expected == round_order(cfgs, k)
        assert [rec.cfg for rec in rnd] == (expected if k == 0 else [c.untraced() for c in expected])  # one traced round
        orders.add(tuple(rec.cfg.key for rec in rnd))
    assert len({order[0] for order in orders}) > 1  # no configuration always runs first


def test_any_two_configurations_run_in_either_order_equally_often_over_each_two_rounds():
    """Muon always before its twin would put any drift within a round into every round's ratio, the same way."""
    cfgs = [resolve(key, "tiny") for key in ("comparison/adamw_dp2_tp2", "comparison/muon_dp2_tp2", CONFIG)]
    for j in range(6):
        first, second = (round_order(cfgs, k) for k in (2 * j, 2 * j + 1))
        for a in cfgs:
            for b in cfgs:
                if a is not b:
                    assert (first.index(a) < first.index(b)) != (second.index(a) < second.index(b))


def test_only_the_first_traced_rounds_are_profiled(tmp_path):
    cfgs = [TIMED, UNTIMED]  # UNTIMED has no timed steps to keep: it stays traced in every round
    plan = plan_recordings(cfgs, tmp_path, trials=4, profile="p", traced_trials=2)
    traced = {(rec.cfg.name, rec.trial) for rec in plan if rec.cfg.profile}
    assert traced == {(TIMED.name, 0), (TIMED.name, 1)} | {(UNTIMED.name, k) for k in range(4)}
    assert all(rec.label.endswith("(timed only)") == rec.cfg.timed_only for rec in plan)
    every = plan_recordings(cfgs, tmp_path, trials=4, profile="p", traced_trials=None)
    assert all(rec.cfg.profile for rec in every)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="traced trials must be a positive integer"):
            plan_recordings(cfgs, tmp_path, trials=4, profile="p", traced_trials=bad)


def test_the_traced_rounds_are_at_most_the_rounds_every_round_traced_included(tmp_path):
    """The traced rounds are the first of the rounds recorded: as many as the rounds is every round traced, one more
    is refused by name."""
    plan = plan_recordings([TIMED], tmp_path, trials=2, profile="p", traced_trials=2)
    assert [rec.cfg.profile for rec in plan] == [True, True]
    for traced in (3, 4):
        with pytest.raises(ValueError, match=f"--traced-trials {traced} is more than --trials 2"):
            plan_recordings([TIMED], tmp_path, trials=2, profile="p", traced_trials=traced)


def test_the_drain_idle_is_each_stage_s_wait_for_its_pipelines_last_backward():
    from muon_repro.analysis.timed_steps import drain_idle

    # two pipelines (DP replicas) of two stages, one step: stage 1 ends its last backward 3 ms before stage 0
    rows = pd.DataFrame(
        {
            "run": "r",
            "trial": 0,
            "step": 0,
            "rank": [0, 1, 2, 3],
            "stage": [0, 0, 1, 1],
            "pipeline": [(0, 0), (1, 0), (0, 0), (1, 0)],
            "last_backward_ns": [10_000_000, 20_000_000, 7_000_000, 19_000_000],
        }
    )
    out = drain_idle(rows)
    assert out["drain_idle_ms"].tolist() == [0.0, 0.0, 3.0, 1.0]
    assert not {"pipeline", "last_backward_ns"} & set(out.columns)
    unstamped = drain_idle(rows.assign(last_backward_ns=None))
    assert unstamped["drain_idle_ms"].isna().all()


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_the_drain_is_measured_where_the_host_clock_sees_a_backward_end(backend):
    """On NCCL a stage's host reads its clock after its last backward once the kernels are queued: what it took for
    the drain was launch skew, and the bubble claim priced Muon's hidden step with it."""
    from muon_repro.analysis.batch_read import Analysis
    from muon_repro.analysis.discover import RunInfo
    from muon_repro.run_records import RunConfig

    def stage(rank: int, last_backward_ns: int) -> RankMetrics:
        return RankMetrics(
            rank=rank, dp_rank=0, tp_rank=0, pp_rank=rank, timed_step_ms=[9.0], timed_fwd_bwd_ms=[6.0],
            timed_optimizer_ms=[3.0], timed_bubble_ms=[1.0], timed_last_backward_ns=[last_backward_ns],
        )  # fmt: skip

    config = RunConfig.from_dict({"group": "g", "name": "muon_pp2", "optimizer": "muon", "dp": 1, "tp": 1, "pp": 2})
    info = RunInfo(Path("p/g/muon_pp2/trial0"), "g", "muon_pp2", config, {0: stage(0, 9_000_000), 1: stage(1, 7_000_000)})
    info.environment = {"backend": backend, "nodes": 1}
    timed = timed_steps_table(Analysis(timed_runs=[info]))
    drains = timed.sort_values("rank")["drain_idle_ms"]
    if backend == "gloo":
        assert drains.tolist() == [0.0, 2.0]
    else:
        assert drains.isna().all() and (timed["comm_timing"].isna() | (timed["comm_timing"] == "host_launch")).all()


def _dp2_timed_run(nodes: int, steps: int = 1) -> pd.DataFrame:
    """The ``timed_steps`` rows of a dp=2 gloo run on ``nodes`` hosts: in step 0 rank 0 enters a DP all-gather at
    1 ms, rank 1 at 2 ms, both leave at 4 ms; any further timed steps issue no collective."""
    from muon_repro.analysis.batch_read import Analysis
    from muon_repro.analysis.discover import RunInfo

    def rank(r: int, start_ns: int) -> RankMetrics:
        comm = {
            "phases": ["dp_gather"], "kinds": ["all_gather"], "groups": ["dp"],
            "step": [0], "phase": [0], "kind": [0], "group": [0], "start_ns": [start_ns], "end_ns": [4_000_000],
        }  # fmt: skip
        return RankMetrics(
            rank=r, dp_rank=r, tp_rank=0, timed_step_ms=[9.0] * steps, timed_fwd_bwd_ms=[6.0] * steps,
            timed_optimizer_ms=[3.0] * steps, timed_comm=comm,
        )  # fmt: skip

    config = RunConfig.from_dict({"group": "g", "name": "muon_dp2", "optimizer": "muon", "dp": 2, "tp": 1})
    info = RunInfo(Path("p/g/muon_dp2/trial0"), "g", "muon_dp2", config, {0: rank(0, 1_000_000), 1: rank(1, 2_000_000)})
    info.environment = {"backend": "gloo", "nodes": nodes}
    return timed_steps_table(Analysis(timed_runs=[info])).sort_values("rank")


def test_the_timed_steps_table_splits_each_ranks_collective_time_in_ms():
    """dp=2 on one host (gloo): rank 0 enters a DP all-gather at 1 ms, rank 1 at 2 ms, both leave at 4 ms. Rank 0's
    3 ms are 1 ms of wait for rank 1 and 2 ms of transfer; rank 1's 2 ms are all transfer."""
    timed = _dp2_timed_run(nodes=1)
    columns = ["rank", "comm_ms", "comm_wait_ms", "comm_transfer_ms"]
    assert timed[columns].values.tolist() == [[0, 3.0, 1.0, 2.0], [1, 2.0, 0.0, 2.0]]


def test_ranks_on_several_hosts_have_no_wait_or_transfer():
    """Hosts share no clock, so the wait for the group's last rank cannot be read off two hosts' stamps: on two nodes
    the wait and transfer are null, while each call's own time (one rank's clock) still counts. On one node rank 0's
    3 ms are 1 ms of wait and 2 ms of transfer."""
    one = _dp2_timed_run(nodes=1)
    assert one[["comm_ms", "comm_wait_ms", "comm_transfer_ms"]].values.tolist() == [[3.0, 1.0, 2.0], [2.0, 0.0, 2.0]]
    two = _dp2_timed_run(nodes=2)
    assert two["comm_ms"].tolist() == [3.0, 2.0]
    assert two["comm_wait_ms"].isna().all() and two["comm_transfer_ms"].isna().all()


def test_a_timed_step_without_collectives_spent_no_time_in_them():
    """A rank whose calls were stamped and that issued none in step 1 spent 0 ms in collectives there (an empty sum),
    which is known, not null."""
    timed = _dp2_timed_run(nodes=1, steps=2)
    step1 = timed[timed["step"] == 1]
    assert step1[["comm_ms", "comm_wait_ms", "comm_transfer_ms"]].values.tolist() == [[0.0, 0.0, 0.0]] * 2


@pytest.mark.slow
def test_the_runs_table_carries_the_busiest_ranks_optimizer_operator_calls(recorded, tables):
    for run_dir in recorded.values():
        run = _run_id(run_dir)
        ranks = tables["ranks"][tables["ranks"]["run"] == run]
        counts = ranks["optimizer_op_calls"].astype(int)
        assert (counts > 0).all() and len(counts) == TIMED.world_size
        assert tables["runs"].set_index("run").loc[run, "optimizer_op_calls"] == counts.max()
        assert tables["runs"].set_index("run").loc[run, "ns_method"] == "quintic"


def test_a_claims_conditions_say_how_each_run_was_recorded():
    """A traced run: its rounds and its traced trials' profiled steps; a timed-only run (the H200's 128k and 256k
    tokens): its rounds and that no trace was kept, never '2 traced x 0 profiled steps'."""
    from muon_repro.analysis.claim_inputs import describe_runs

    run = {"run": "p/g/r", "backend": "nccl", "device": "cuda", "ranks": 1, "tokens_per_step": 262144}
    traced = pd.Series({**run, "trials": 1, "steps": 2, "rounds": 2})
    timed = pd.Series({**run, "trials": 0, "steps": 0, "rounds": 2})
    assert "2 rounds timed without the profiler, 1 traced x 2 profiled steps" in describe_runs(traced)
    assert "2 rounds timed without the profiler, no trace kept, 262144 tokens/step" in describe_runs(timed)


def test_every_committed_run_has_its_machine_and_a_run_never_traced_counts_no_traced_trial():
    """The H200's 128k- and 256k-token runs kept no trace: the environment table still has their machine (a join of
    runs and environment keeps every run), and their traced trials are 0, as the runs table's trials column means."""
    from muon_repro.tables.io import read_table

    runs = read_table(REPO / "metrics" / "runs.parquet", "runs", check_set=False)
    environment = read_table(REPO / "metrics" / "environment.parquet", "environment", check_set=False)
    assert set(runs["run"]) == set(environment["run"])
    untraced = runs[runs["steps"] == 0]
    assert len(untraced) >= 4 and (untraced["trials"] == 0).all() and (untraced["rounds"] >= 2).all()


def test_the_committed_losses_are_filed_at_their_training_step():
    """The profiled steps' losses follow the steps timed without the profiler: a run's first recorded loss is at
    its training step timed_warmup + timed_steps, as its config.json says, never at 0 (the loss figure's x-axis)."""
    from muon_repro.tables.io import read_table

    losses = read_table(REPO / "metrics" / "losses.parquet", "losses", check_set=False)
    assert len(losses)
    for (run, trial), rows in losses.groupby(["run", "trial"]):
        config = json.loads((REPO / "traces" / run / f"trial{trial}" / "config.json").read_text())
        before = config.get("timed_warmup", 0) + config["timed_steps"] if config.get("timed_steps") else 0
        assert int(rows["step"].min()) == before, run
