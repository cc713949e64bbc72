"""What the claims are measured on: one profile's tables, the runs chosen from them, and the same-work check.

Runs are compared only when they did the same work (:data:`SAME_WORK`): :func:`equal_work_twins` picks a Muon
run's AdamW partners among those that did on the same grid (:data:`SAME_GRID`), :func:`work_difference` says how two
runs differ, and :func:`check_same_work` refuses a pair that differs with an error naming both runs and the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from muon_repro.analysis.estimators import RunSteps, paired_rounds, step_source
from muon_repro.values import counted

# What two runs must share to be compared: the same model (a shape override keeps its base preset's name, so its
# width and parameters too), the same work, on the same kind of machine.
SAME_WORK = (
    "preset",
    "d_model",
    "model_params",
    "qkv",
    "tokens_per_step",
    "seq_len",
    "precision",
    "reduce_dtype",
    "cross_entropy",
    "backend",
    "device",
)
# What an optimizer's twin shares besides: the grid, ranks and micro-batches, so that the optimizer is all that differs.
# (Claims that compare grids, DP2·TP2 against DP4, pair runs of the same work on different grids.)
SAME_GRID = ("dp", "tp", "pp", "world_size", "micro_batches")


class UnequalWork(ValueError):
    """Two runs to be compared did different work; the message names both runs and the field, ``runs`` holds them."""

    def __init__(self, message: str, runs: tuple[pd.Series, ...] = ()) -> None:
        super().__init__(message)
        self.runs = runs


def work_difference(a: pd.Series, b: pd.Series, fields: tuple[str, ...] = SAME_WORK) -> str | None:
    """How two runs' work differs, naming both runs and the first field that does; None when it is the same."""
    for name in fields:
        va, vb = a.get(name), b.get(name)
        if is_missing(va) and is_missing(vb):
            continue
        if is_missing(va) or is_missing(vb) or va != vb:
            return (
                f"runs {a['run']} and {b['run']} did different work: {name} is {_shown(va)} vs {_shown(vb)}; "
                f"record them with the same {name} to compare them"
            )
    return None


def _shown(value: object) -> str:
    """A table cell as a message says it: a string quoted, a number plain (``32768``, not ``np.int64(32768)``)."""
    if is_missing(value):
        return "not recorded"
    return repr(value.item() if isinstance(value, np.generic) else value)


def check_same_work(a: pd.Series, b: pd.Series, fields: tuple[str, ...] = SAME_WORK) -> None:
    """Refuse to compare runs that did different work; the error names both runs and the field."""
    if (difference := work_difference(a, b, fields)) is not None:
        raise UnequalWork(difference, (a, b))


def equal_work_twins(run: pd.Series, candidates: pd.DataFrame) -> pd.DataFrame:
    """The ``candidates`` that did the same work as ``run`` on the same grid (:data:`SAME_WORK`, :data:`SAME_GRID`):
    the only partners an optimizer's run is compared with."""
    return candidates[[work_difference(run, c, SAME_WORK + SAME_GRID) is None for _, c in candidates.iterrows()]]


def twin_of(run: pd.Series, candidates: pd.DataFrame) -> pd.Series:
    """The first equal-work partner of ``run`` among non-empty ``candidates`` (:func:`first_run`'s order); when none
    did the same work on the same grid, :class:`UnequalWork` naming how the first of them differs (the claim reads
    ``unequal work``)."""
    twins = equal_work_twins(run, candidates)
    if twins.empty:
        check_same_work(run, first_run(candidates), SAME_WORK + SAME_GRID)
    return first_run(twins)


def dp2_tp2_pair(t: ProfileTables) -> tuple[pd.Series, pd.Series] | None:
    """The Muon run at dp=2, tp=2 without a pipeline and with blocking gathers (the original study's grid and
    algorithm; its async variant is another claim's) and the AdamW run beside it that did the same work on the same
    grid: what the DP2·TP2 claims and checks compare. None without a Muon run there or an AdamW run on its backend
    and device; :class:`UnequalWork` when no AdamW run there did the same work."""
    muon = first_run(without_pipeline(t.runs), optimizer="muon", dp=2, tp=2, overlap="none")
    if muon is None:
        return None
    adamw = t.runs[(t.runs["optimizer"] == "adamw") & (t.runs["dp"] == 2) & (t.runs["tp"] == 2)]
    adamw = adamw[(adamw["backend"] == muon["backend"]) & (adamw["device"] == muon["device"])]
    if adamw.empty:
        return None
    return muon, twin_of(muon, adamw)


def without_pipeline(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with no pipeline stages (``pp`` 1; a table from before the column reads as none): the original
    study's grids, where its DP2·TP2 claims were made."""
    return runs[runs["pp"].fillna(1) == 1] if "pp" in runs.columns else runs


def is_missing(v: object) -> bool:
    """Whether a table cell holds no value (None, pandas' NA or NaN)."""
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def first_run(runs: pd.DataFrame, **where) -> pd.Series | None:
    """The first run matching ``where``, the original study's 'comparison' group and the contiguous layout first."""
    sel = runs
    for col, value in where.items():
        sel = sel[sel[col] == value]
    if sel.empty:
        return None
    order = sel.assign(_g=(sel["group"] != "comparison").astype(int), _l=(sel["layout"].fillna("") != "contiguous").astype(int))
    return order.sort_values(["_g", "_l", "run"], kind="stable").iloc[0]


def describe_runs(*rows: pd.Series) -> str:
    """The conditions of a measurement: each run with its backend, device, ranks, rounds, steps and tokens per step."""
    return "; ".join(
        f"{r['run']} ({r['backend']} on {r['device']}, {counted(int(r['ranks']), 'rank')}, {_recordings(r)}, "
        f"{int(r['tokens_per_step'])} tokens/step)"
        if not is_missing(r.get("tokens_per_step")) and not is_missing(r.get("trials"))
        else f"{r['run']}"
        for r in rows
    )


def _recordings(run: pd.Series) -> str:
    """How a run was recorded: its rounds timed without the profiler, and its traced trials' profiled steps."""
    if is_missing(run.get("steps")) or int(run["steps"]) == 0:  # timed only: its trials kept no trace
        rounds = run.get("rounds")
        timed = (
            counted(int(run["trials"]), "trial")
            if is_missing(rounds)
            else f"{counted(int(rounds), 'round')} timed without the profiler"
        )
        return f"{timed}, no trace kept"
    traced = f"{int(run['trials'])} traced x {int(run['steps']) // max(int(run['trials']), 1)} profiled steps"
    if is_missing(run.get("rounds")):
        return traced.replace(" traced x", " trials x")
    return f"{counted(int(run['rounds']), 'round')} timed without the profiler, {traced}"


@dataclass
class ProfileTables:
    """One hardware profile's rows of the analysis tables: all a claim is measured on."""

    runs: pd.DataFrame
    steps: pd.DataFrame
    ranks: pd.DataFrame
    phases: pd.DataFrame
    regimes: pd.DataFrame = field(default_factory=pd.DataFrame)  # the regime sweep, when one was recorded
    thresholds: pd.DataFrame = field(default_factory=pd.DataFrame)  # the cost model's regime_thresholds
    convergence: pd.DataFrame | None = None  # analysis/convergence.py's tables, when given
    leading: pd.DataFrame | None = None
    environment: pd.DataFrame = field(default_factory=pd.DataFrame)  # each trial's environment.json, flattened
    predictions: pd.DataFrame = field(default_factory=pd.DataFrame)  # the cost model against the recorded runs
    timed: pd.DataFrame = field(default_factory=pd.DataFrame)  # steps timed without the profiler (timed_steps)
    budget: pd.DataFrame | None = None  # budget_match: AdamW's longer budgets against Muon's final loss

    def step_source(self, run: pd.Series) -> pd.DataFrame:
        """Where a run's step times come from (:func:`~muon_repro.analysis.estimators.step_source`)."""
        return step_source(self.steps, self.timed, str(run["run"]))

    def comm_source(self, run: pd.Series) -> pd.DataFrame:
        """Where a run's communication times come from: on NCCL its traced kernels (the profiled steps), since its
        steps timed without the profiler hold only the host-side launch of each collective; else as :meth:`step_source`."""
        return self.steps if str(run.get("backend")).lower() == "nccl" else self.step_source(run)

    def unprofiled(self, *runs: pd.Series) -> bool:
        """Whether every one of ``runs`` was timed without the profiler."""
        return all(self.step_source(r) is self.timed for r in runs)

    def paired(self, column: str, how: str, *runs: pd.Series, comm: bool = False) -> tuple[np.ndarray, ...]:
        """Each run's value of ``column`` per round (median over its steps, reduced over ranks with ``how``),
        for the rounds every one of ``runs`` was recorded in: the pairs a paired interval is over. ``comm``: a
        communication time, taken from :meth:`comm_source`."""
        return paired_rounds(column, how, *self.sources(*runs, comm=comm))

    def sources(self, *runs: pd.Series, comm: bool = False) -> list[RunSteps]:
        """The runs' steps as one statistic over all of them reads them, from one source: their steps timed without
        the profiler when every one has them, else every run's profiled steps. The profiler costs Muon and AdamW
        unequally, so one run's timed steps against another's profiled ones would compare unlike times (a trial
        whose metrics.json was lost, a run recorded before timed steps). ``comm``: as :meth:`comm_source`."""
        if self.unprofiled(*runs):
            return [self.steps_of(run, comm=comm) for run in runs]
        return [(self.steps, str(run["run"])) for run in runs]

    def steps_of(self, run: pd.Series, *, comm: bool = False) -> RunSteps:
        """The run's steps as the estimators read them: (its step or communication source, its id)."""
        return (self.comm_source if comm else self.step_source)(run), str(run["run"])

    def phase_mean(self, run: pd.Series, phase: str, column: str) -> float:
        """The phase's ``column``, mean over trials and ranks; NaN when the run has no such phase (absent, not zero)."""
        rows = self.phases[(self.phases["run"] == run["run"]) & (self.phases["phase"] == phase)][column].dropna()
        return float(rows.astype("float64").mean()) if len(rows) else float("nan")

    def ranks_per_core(self, run: pd.Series) -> float | None:
        """Ranks per CPU core on a CPU run (its world size over the host's cores, the fewest any of its trials had:
        the most crowded); None when unknown or on GPUs."""
        if str(run.get("device")) != "cpu" or self.environment.empty:
            return None
        env = self.environment[(self.environment["run"] == run["run"]) & (self.environment["key"] == "host_cpu_cores")]
        cores = pd.to_numeric(env["value"], errors="coerce").dropna()
        if cores.empty or is_missing(run.get("world_size")) or cores.min() <= 0:
            return None
        return float(run["world_size"]) / float(cores.min())


def absent_or(value: float, text: str) -> str:
    """``text`` (a format of ``value``), or 'absent' when the run has no such phase: never a 0 it did not measure."""
    return "absent" if value != value else text


def ns_gflop(run: pd.Series) -> str:
    """The run's Newton-Schulz GFLOP per step on its busiest rank, as ``9.4``; 'unknown' when the run does not say."""
    flops = run.get("ns_flops_max_rank")
    return "unknown" if is_missing(flops) else f"{float(flops) / 1e9:.1f}"


@dataclass(frozen=True)
class Measurement:
    """A claim's measured value and 95% interval, the runs it was measured on, and what explains it."""

    value: float
    low: float
    high: float
    conditions: str
    explanation: str
    runs: tuple[pd.Series, ...] = ()  # the runs measured, whose conditions the claim's are compared with
    # The numbers the explanation quotes that no table cell holds (ratios, intervals, aggregates), by name: the
    # claims table keeps them (column quoted), so that every number an explanation states is a table value.
    quoted: dict[str, float] = field(default_factory=dict)
    # What a claim's conditions are compared with when no benchmark run was measured (the convergence runs'
    # training: params, tokens_trained; "run" names them).
    subject: pd.Series | None = None
    comm: bool = False  # measured on the runs' communication source (ProfileTables.steps_of(..., comm=True))
    # The runs the headline interval pairs, where ``runs`` also names one measured beside it (the async claim's
    # pipelined variant): the rounds counted and left out are theirs. None: all of ``runs``.
    paired: tuple[pd.Series, ...] | None = None

    @property
    def interval_runs(self) -> tuple[pd.Series, ...]:
        """The runs the value and interval are formed from."""
        return self.runs if self.paired is None else self.paired

    @classmethod
    def over_ranks(cls, values: pd.Series, conditions: str, explanation: str, runs: tuple[pd.Series, ...] = ()) -> Measurement:
        """A quantity that does not vary between steps: its median, and its range over ranks as the interval."""
        return cls(float(values.median()), float(values.min()), float(values.max()), conditions, explanation, runs)
