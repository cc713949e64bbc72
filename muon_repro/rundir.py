"""The run directory: the one contract between what records runs and what reads them.

A recorded run is one folder (written by :mod:`muon_repro.bench`, read by analysis, hub and the
pipeline; the report never opens one), under the hardware profile it was recorded on
(:mod:`muon_repro.hardware`; environment.json's ``profile`` says the same)::

    traces/<profile>/<group>/<name>/trial<k>/
        rank<r>.json.gz     one PyTorch profiler Chrome trace per rank (ui.perfetto.dev opens it)
        config.json         the resolved configuration, the trial, the backend, the device, the command line
        environment.json    what it ran on: hardware, software, git SHA, time of recording
        metrics.json        {"config": "<group>/<name>", "ranks": [one RankMetrics per rank]}
        log.txt             losses and step times as they went, worker stderr

Datasets recorded before profiles existed lie one level higher, ``traces/<group>/<name>/trial<k>/``
(the old layout); readers take a folder's profile from its environment.json, never from its place,
so both layouts, and a tree with some of each (``muon-repro migrate-layout``), read the same.

A run (a configuration) is recorded in several trials, each a folder of its own with the same
files; the analysis pools them. While a trial is being recorded it lives in the hidden sibling
``.trial<k>.partial`` and is renamed into place once every rank has finished, so a trial folder
that exists is complete.

The phases recorded in the traces, and the layout and overlap a run names, are in :mod:`muon_repro.phases`;
what config.json and metrics.json say, typed, is in :mod:`muon_repro.run_records`.
This module imports nothing heavy: no torch, no pandas.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from muon_repro.hardware import PROFILE_FIELD, UNKNOWN_PROFILE, profile_from_environment, profile_or_unknown, validate_profile_id
from muon_repro.run_records import RankMetrics, RunConfig
from muon_repro.tables.files import open_regular, write_atomic

# ---------------------------------------------------------------- file names

CONFIG_FILE = "config.json"
ENVIRONMENT_FILE = "environment.json"
METRICS_FILE = "metrics.json"
LOG_FILE = "log.txt"
RUN_FILES = (CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE, LOG_FILE)
"""Every file of a run folder besides the traces."""
TRACE_SUFFIX = ".json.gz"
_TRACE_NAME = re.compile(r"^rank(\d+)\.json(?:\.gz)?$")

# Convergence runs (``muon-repro converge``): traces/<profile>/convergence/<optimizer>_lr<lr>_steps<n>_seed<s>/
CONVERGENCE_GROUP = "convergence"
CONVERGENCE_FILE = "convergence.json"
"""A convergence run's one record: config, corpus facts, model shares, the curve, wall time."""
CONVERGENCE_LOG = LOG_FILE
CHECKPOINT_SUFFIX = ".pt"


def checkpoint_name(rank: int) -> str:
    """One rank's checkpoint of a convergence run while it trains (only ever in the hidden .partial folder)."""
    return f"checkpoint-rank{rank}{CHECKPOINT_SUFFIX}"


def trace_name(rank: int) -> str:
    """File name of one rank's trace: ``rank<r>.json.gz``."""
    return f"rank{rank}{TRACE_SUFFIX}"


def trace_rank(name: str) -> int | None:
    """The rank in a trace file name we wrote (``rank3.json.gz`` -> 3), else ``None``."""
    match = _TRACE_NAME.match(name)
    return int(match[1]) if match else None


# The cost model's folder beside the runs (``traces/<profile>/costmodel/``): the profile of the machine that
# recorded them (``muon-repro calibrate``) and what the model predicts (``muon-repro regimes``),
# as records the analysis turns into the calibration, predictions and regime tables.
COSTMODEL_DIR = "costmodel"
REGIMES_GROUP = "regimes"  # traces/<profile>/regimes/<point>/trial<k>/: the regime sweep's runs (muon_repro.bench.regimes)
MACHINE_FILE = "machine.json"
CALIBRATION_FILE = "machine.calibration.csv"  # calibrate's rows, beside the profile it wrote
PREDICTIONS_FILE = "predictions.csv"
REGIME_MODEL_FILE = "regime_model.csv"
THRESHOLDS_FILE = "regime_thresholds.csv"
PIPELINE_SCALE_OUT_FILE = "pipeline_scale_out.csv"  # the 7B model as TP8 x PP4 x DP, 32-1024 GPUs
ACCURACY_FILE = "ns_accuracy.json"  # a GPU's Newton-Schulz variants against the SVD (muon_repro.optim.polar_accuracy)
# Shipped machine profiles renamed since records were written (old name -> new): records naming the old one
# (regime_model.csv and regime_thresholds.csv's ``machine``) are read under the new name, and ``--machine`` takes both.
RENAMED_MACHINES = {"seed-4x-pcie4-x4": "4xRTXA4000-pcie-nccl", "wei-4x-pcie4-x4": "4xRTXA4000-pcie-nccl"}
_MEASURED_COMPUTE = "-compute"


def measured_compute_machine(links: str, device: str) -> str:
    """The records' name of machine ``links``' interconnect priced with ``device``'s measured kernel rates."""
    return f"{links}+{device}{_MEASURED_COMPUTE}"


def split_measured_compute(machine: str) -> tuple[str, str] | None:
    """``(links, device)`` of a :func:`measured_compute_machine` name; None for any other machine."""
    links, plus, rest = machine.partition("+")
    return (links, rest.removesuffix(_MEASURED_COMPUTE)) if plus and rest.endswith(_MEASURED_COMPUTE) else None


STUDY_PROVENANCE_FILE = "original_study.json"  # beside the original study's imported traces (muon_repro.study.sources)
STUDY_TRACE_GLOB = "trace_*_rank*.json*"  # the study's own trace names, beside its provenance file
NON_TRACE_FILES = (*RUN_FILES, CONVERGENCE_FILE, MACHINE_FILE, ACCURACY_FILE, STUDY_PROVENANCE_FILE)
"""JSON files beside the runs that are not profiler traces: a run's side files, a convergence record, a machine profile,
a GPU's accuracy record, the original study's provenance record."""


def is_trace_file(name: str) -> bool:
    """Whether a file name looks like a profiler trace (ours or anyone's): ``*.json`` or ``*.json.gz``,
    not one of the run's side files, a convergence record or a machine profile, not hidden."""
    return name.endswith((".json", ".json.gz")) and name not in NON_TRACE_FILES and not name.startswith(".")


TRIAL_PREFIX = "trial"
_TRIAL_NAME = re.compile(rf"^{TRIAL_PREFIX}(\d+)$")


def trial_dir(run_dir: Path, trial: int) -> Path:
    """The folder of one trial of a run: ``<run>/trial<k>``."""
    return run_dir / f"{TRIAL_PREFIX}{trial}"


def trial_of(folder: Path) -> int | None:
    """The trial a folder holds (``trial2`` -> 2), else ``None`` (a run folder of a single recording)."""
    match = _TRIAL_NAME.match(folder.name)
    return int(match[1]) if match else None


def is_hidden_under(path: Path, root: Path) -> bool:
    """Whether ``path`` lies in (or is) a hidden file or folder below ``root``: a trial still being
    recorded (``.<name>.partial``) or a table set being written."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def trial_folders(root: Path) -> dict[str, list[Path]]:
    """The trial folders under ``root`` (those with a config file, hidden ones left out), sorted, by
    run key ``<profile>/<group>/<name>``: the profile from environment.json, then config.json's ``key``
    (``<group>/<name>``), else the folder's path below ``root``. Either layout reads the same. A folder whose
    environment.json describes no profile (:func:`~muon_repro.hardware.profile_from_environment` refuses it) is
    left out."""
    runs: dict[str, list[Path]] = {}
    for config in sorted(root.rglob(CONFIG_FILE)):
        folder = config.parent
        if is_hidden_under(folder, root):
            continue
        run = RunDir(folder)
        config_dict = run.config_dict  # read once: a property reads the file
        if config_dict.get(PROTOCOL_FIELD) in STUDY_PROTOCOLS:  # the study's protocol: muon_repro.study reads it
            continue
        key = config_dict.get("key") or folder.relative_to(root).as_posix()
        try:
            profile = run.profile
        except ValueError:  # an environment.json that describes no profile: the analysis reports the folder by name
            continue
        runs.setdefault(f"{profile}/{key}", []).append(folder)
    return runs


def partial_dir(final: Path) -> Path:
    """Where a run is recorded before it is renamed to ``final``."""
    return final.with_name(f".{final.name}.partial")


def expected_files(world_size: int, profiled: bool = True, *, side_files: tuple[str, ...] = RUN_FILES) -> list[str]:
    """A complete run folder's files: a run that was only timed (config ``profile`` false) has no traces; a study
    protocol's run has its own ``side_files`` (:data:`PROTOCOL_RUN_FILES`)."""
    return [*side_files, *(trace_name(r) for r in range(world_size) if profiled)]


def missing_files(run_dir: Path, world_size: int, profiled: bool = True) -> list[str]:
    return [name for name in expected_files(world_size, profiled) if not (run_dir / name).is_file()]


# ---------------------------------------------------------------- JSON side files


def write_json(path: Path, obj: Mapping[str, Any], *, compact: bool = False) -> None:
    """Write ``obj`` through a temporary file and an atomic rename (``compact``: no indentation,
    for records whose long number lists would otherwise take a line per value)."""
    write_atomic(path, json_text(obj, compact=compact))


def json_text(obj: Mapping[str, Any], *, compact: bool = False) -> str:
    """``obj`` as a record's JSON text (:func:`write_json`'s), for a writer of several files at once."""
    return json.dumps(obj, separators=(",", ":"), default=str) if compact else json.dumps(obj, indent=1, default=str)


# Side files are small: the largest recorded is a metrics.json of 942 KB (a convergence record 118 KB,
# environment.json 6 KB, config.json 1 KB); 16 MiB is 17 times that, and bounds what reading one costs
# (a contributed folder's files are anyone's).
MAX_SIDE_FILE_BYTES = 16 * 2**20
# The deepest recorded side file nests 5 levels (metrics.json, machine.json); past 32 a file is no record of
# ours. It keeps json's recursion (and flatten's, over environment.json) far from Python's recursion limit.
MAX_SIDE_FILE_DEPTH = 32


class SideFileError(ValueError):
    """A side file that cannot be read as a record: the message names the file and says why."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def load_json(path: Path) -> dict[str, Any]:
    """A side file as a dict (NaN and Infinity read as null), or :class:`SideFileError` saying why
    not: missing or unreadable, larger than :data:`MAX_SIDE_FILE_BYTES`, not UTF-8 JSON, nested
    deeper than :data:`MAX_SIDE_FILE_DEPTH`, or not a JSON object. Reads at most the limit plus a byte."""
    try:
        with open_regular(path) as fh:  # a pipe named like a side file is refused, not waited on
            data = fh.read(MAX_SIDE_FILE_BYTES + 1)
    except OSError as exc:
        raise SideFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_SIDE_FILE_BYTES:
        raise SideFileError(
            path, f"larger than {MAX_SIDE_FILE_BYTES >> 20} MiB, the limit for a side file (ours are under 1 MB): not a record"
        )
    try:
        value = loads_within_depth(data.decode("utf-8"), parse_constant=lambda _: None)
    except TooDeep:
        raise SideFileError(
            path, f"JSON nested deeper than {MAX_SIDE_FILE_DEPTH} levels, the limit for a side file (ours nest 5): not a record"
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a number too long to convert
        raise SideFileError(path, f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SideFileError(path, f"not a JSON object (a {type(value).__name__})")
    return value


class TooDeep(ValueError):
    """JSON nested deeper than :data:`MAX_SIDE_FILE_DEPTH` levels: no record of ours."""


def loads_within_depth(text: str, **options: Any) -> Any:
    """``json.loads(text, **options)``, or :class:`TooDeep` when the value nests deeper than
    :data:`MAX_SIDE_FILE_DEPTH` (json itself gives up past Python's recursion limit)."""
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {MAX_SIDE_FILE_DEPTH} levels") from None
    if _nested_deeper(value, MAX_SIDE_FILE_DEPTH):
        raise TooDeep(f"JSON nested deeper than {MAX_SIDE_FILE_DEPTH} levels")
    return value


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` levels (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def read_json(path: Path) -> dict[str, Any] | None:
    """A side file as a dict; ``None`` when absent, unreadable or not an object (foreign folders
    have none; NaN and Infinity read as null). :func:`load_json` says why."""
    try:
        return load_json(path)
    except SideFileError:
        return None


# The original study's protocol replayed here (muon_repro.bench.study_protocol): config.json's field naming it, and the
# run group of each. Its folders are read by muon_repro.study, not as benchmark runs.
PROTOCOL_FIELD = "protocol"
STUDY_PROTOCOLS = ("study", "study-equal-work")
STUDY_PROTOCOL_GROUPS = {"study": "study_protocol", "study-equal-work": "study_equal_work"}
ONE_RANK_SUFFIX = "_1rank"  # the group of a protocol recorded on one rank (DP1·TP1), beside its 4-rank group


def protocol_group(protocol: str, world_size: int = 4) -> str:
    """The run group a study protocol's runs are filed under: its own on the study's 4 ranks, ``<group>_1rank`` on one."""
    return STUDY_PROTOCOL_GROUPS[protocol] + (ONE_RANK_SUFFIX if world_size == 1 else "")


# A protocol run's name, the study's way (bench.study_protocol.ProtocolRun.name_at): adamw, muon_dp2_tp2,
# adamw_FULLSTEP, muon_FULLSTEP_dp2_tp2_async, ... Its capitals are the study's; no other run name has them.
PROTOCOL_RUN_NAME = re.compile(r"(?:adamw|muon)(?:_FULLSTEP)?(?:_dp[1-9][0-9]{0,3}_tp[1-9][0-9]{0,3})?(?:_async)?")
PROTOCOL_RUN_FILES = (CONFIG_FILE, ENVIRONMENT_FILE)
"""Every file of a protocol run's folder besides the traces (it keeps no metrics.json or log.txt)."""


def protocol_groups() -> tuple[str, ...]:
    """Every group a study protocol's runs are filed under (on the study's 4 ranks and on one)."""
    return tuple(protocol_group(p, w) for p in STUDY_PROTOCOLS for w in (4, 1))


def protocol_of(folder: Path) -> str | None:
    """The study protocol a trial folder was recorded with (its config.json), None for anything else."""
    config = read_json(Path(folder) / CONFIG_FILE)
    value = config.get(PROTOCOL_FIELD) if config else None
    return value if value in STUDY_PROTOCOLS else None


def is_study_folder(folder: Path) -> bool:
    """Whether ``folder`` holds the original study's imported traces (its provenance file marks it)."""
    return (Path(folder) / STUDY_PROVENANCE_FILE).is_file()


def study_folders(paths: Iterable[str | Path]) -> list[Path]:
    """The folders holding the study's imported traces under ``paths`` (each once): a folder is searched with its
    subfolders; a file names no folder but its own, and that one only when the file is one of the study's traces
    beside its provenance file (the folder's runs are read together: the study's method and claims compare them).
    Nothing around a file is searched: ``analyze ~/Downloads/x.json`` must not read the whole of Downloads."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            if path.match(STUDY_TRACE_GLOB) and is_study_folder(path.parent):
                found.setdefault(path.parent, None)
            continue
        if not path.is_dir():
            continue
        markers = [path / STUDY_PROVENANCE_FILE] if is_study_folder(path) else sorted(path.rglob(STUDY_PROVENANCE_FILE))
        for marker in markers:
            if not any(part.startswith(".") for part in marker.relative_to(path).parts):  # staging folders
                found.setdefault(marker.parent, None)
    return list(found)


def protocol_folders(paths: Iterable[str | Path]) -> list[Path]:
    """The trial folders of study-protocol runs recorded here (their config.json names a protocol), each once."""
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            continue
        for config in sorted(path.rglob(CONFIG_FILE)):
            if any(part.startswith(".") for part in config.relative_to(path).parts):
                continue
            if protocol_of(config.parent):
                found.setdefault(config.parent, None)
    return list(found)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested fields (environment.json's) as one level, their keys joined with '.'."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# ---------------------------------------------------------------- one run folder


@dataclass
class RunDir:
    """A run folder, read through the typed views above. Missing side files read as empty.

    Each side file is parsed once, on first use (a view of the folder as it was then, until :meth:`write`); one that
    is there but cannot be read reads as empty too, and :meth:`unreadable_side_files` says why."""

    path: Path
    _side_files: dict[str, dict[str, Any] | SideFileError] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _parsed(self, name: str) -> dict[str, Any] | SideFileError:
        """A side file as parsed on first use, or the error that says why it could not be."""
        if name not in self._side_files:
            try:
                self._side_files[name] = load_json(self.path / name)
            except SideFileError as exc:
                self._side_files[name] = exc
        return self._side_files[name]

    def _side_file(self, name: str) -> dict[str, Any]:
        value = self._parsed(name)
        return {} if isinstance(value, SideFileError) else value

    def side_file_or_raise(self, name: str) -> dict[str, Any]:
        """A side file, or the :class:`SideFileError` that says why it cannot be read (a missing one too)."""
        value = self._parsed(name)
        if isinstance(value, SideFileError):
            raise value
        return value

    def unreadable_side_files(self) -> dict[str, SideFileError]:
        """The side files that are there but cannot be read (absent ones are not: a foreign folder has none), by name."""
        problems = {}
        for name in (CONFIG_FILE, ENVIRONMENT_FILE, METRICS_FILE):
            problem = self._parsed(name)
            if isinstance(problem, SideFileError) and (self.path / name).exists():
                problems[name] = problem
        return problems

    @property
    def config_dict(self) -> dict[str, Any]:
        return self._side_file(CONFIG_FILE)

    @property
    def config(self) -> RunConfig:
        return RunConfig.from_dict(self.config_dict)

    @property
    def environment(self) -> dict[str, Any]:
        return self._side_file(ENVIRONMENT_FILE)

    @property
    def trial(self) -> int:
        """Which recording of its configuration this is (its round of a sweep), as the analysis numbers it: the
        folder's name (``trial2``; a contributor renumbers a trial by renaming its folder), else config.json's
        ``trial`` (a run recorded without trial folders), else 0."""
        named = trial_of(self.path)
        return named if named is not None else (self.config.trial or 0)

    @property
    def profile(self) -> str:
        """The hardware profile environment.json names or describes (``unknown`` without one)."""
        return profile_or_unknown(self.environment)

    @property
    def ranks(self) -> list[RankMetrics]:
        raw = self._side_file(METRICS_FILE).get("ranks")
        if not isinstance(raw, list):
            return []
        return [RankMetrics.from_dict(entry, i) for i, entry in enumerate(raw) if isinstance(entry, Mapping)]

    def recorded_steps(self) -> list[tuple[float, float]]:
        """Each recorded step (after the profiler's wait and warm-up) that every rank timed: the slowest
        rank's ``step_ms`` (a step lasts as long as its slowest rank) and the mean over ranks of ``optimizer_ms``."""
        ranks, cfg = self.ranks, self.config
        first = (cfg.wait or 0) + (cfg.warmup or 0)
        steps = []
        for step in zip(*(zip(r.step_ms[first:], r.optimizer_ms[first:]) for r in ranks)):
            if all(s is not None and o is not None for s, o in step):
                steps.append((max(s for s, _ in step), math.fsum(o for _, o in step) / len(step)))
        return steps

    def timed_steps(self) -> list[tuple[float, float]]:
        """Each step timed without the profiler (``timed_*``) that every rank timed (a value that reads as no time
        leaves its step out, as :meth:`recorded_steps` does): the slowest rank's step and
        the mean over ranks of the optimizer step, as :meth:`recorded_steps`; empty for a run without them."""
        ranks = self.ranks
        steps = []
        for step in zip(*(zip(r.timed_step_ms, r.timed_optimizer_ms) for r in ranks)):
            if all(s is not None and o is not None for s, o in step):
                steps.append((max(s for s, _ in step), math.fsum(o for _, o in step) / len(step)))
        return steps if ranks and all(r.timed_step_ms for r in ranks) else []

    def write(self, config: Mapping[str, Any], environment: Mapping[str, Any], ranks: list[RankMetrics], log: str) -> None:
        """Write the side files (rank 0 does, once every rank's metrics are gathered)."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / LOG_FILE).write_text(log, encoding="utf-8")
        write_json(self.path / METRICS_FILE, {"config": config.get("key"), "ranks": [r.to_dict() for r in ranks]})
        write_json(self.path / CONFIG_FILE, dict(config))
        write_json(self.path / ENVIRONMENT_FILE, dict(environment))
        self._side_files.clear()


# ---------------------------------------------------------------- profiles of records beside the runs


def convergence_profile(record: Mapping[str, Any]) -> str:
    """A convergence run's hardware profile: its environment's ``profile``, else derived from the cores and
    backend it recorded (records written before profiles existed ran on CPU)."""
    env = record.get("environment") if isinstance(record.get("environment"), Mapping) else {}
    if env.get(PROFILE_FIELD):
        return profile_from_environment(env)
    return profile_from_environment({"host_cpu_cores": env.get("cpu_count"), "backend": record.get("backend")})


def costmodel_profile(folder: Path) -> str:
    """The profile of a costmodel folder's records that carry none (written before profiles existed): the
    name of the machine profile calibrated beside them, else ``unknown``."""
    machine = read_json(folder / MACHINE_FILE) or {}
    name = machine.get(PROFILE_FIELD) or machine.get("name")
    try:
        return validate_profile_id(str(name)) if name else UNKNOWN_PROFILE
    except ValueError:
        return UNKNOWN_PROFILE
