"""Hardware profiles: one short id per kind of machine, so that every table row says where it came from.

A profile id names what decides whether two runs' times are comparable: the accelerator model and
how many there are per node, the number of nodes, how the accelerators of a node talk to each
other, and the collective backend. Without an accelerator it names the host's CPU cores instead::

    cpu-2c-gloo               2 CPU cores, gloo
    1xH100-nccl               one H100
    4xA100-pcie-nccl          4 A100s of one node, over PCIe
    8xH100-nvlink-nccl        8 H100s of one node, over NVLink
    2x8xH100-nvlink-nccl      2 nodes of 8 H100s

The id is derived once per recording from ``environment.json``'s fields
(:func:`profile_from_environment`); a user overrides it with ``--profile ID`` or the
``MUON_REPRO_PROFILE`` environment variable (:func:`resolve_profile`). It names the first level
of the dataset's layout, ``traces/<profile>/<group>/<name>/trial<k>/``, and is written into
``environment.json`` as ``profile`` so that folder and record never disagree.

Torch-free: the analysis reads profiles of recorded runs without importing torch.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

PROFILE_ENV_VAR = "MUON_REPRO_PROFILE"
PROFILE_FIELD = "profile"
"""environment.json's field holding the run's profile id."""

_PROFILE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_NVLINK = re.compile(r"\bNV\d+\b")
# Vendor words and memory sizes that say nothing about the chip: "NVIDIA H100 80GB HBM3" -> "H100".
_NOISE_WORDS = {
    "nvidia",
    "amd",
    "geforce",
    "tesla",
    "quadro",
    "instinct",
    "radeon",
    "pcie",
    "sxm",
    "sxm4",
    "sxm5",
    "nvl",
    "hbm3",
    "hbm3e",
    "hbm2",
    "hbm2e",
}
_MEMORY_WORD = re.compile(r"^\d+(gb|g)$", re.IGNORECASE)


def validate_profile_id(profile: str, *, source: str = "profile") -> str:
    """``profile`` if it can name a folder of the dataset, else a ``ValueError`` naming ``source``."""
    if not isinstance(profile, str) or not _PROFILE_ID.match(profile) or ".." in profile:
        raise ValueError(
            f"{source} {profile!r} is not a profile id: use 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit (e.g. cpu-2c-gloo, 4xA100-pcie-nccl)"
        )
    return profile


def accelerator_short_name(name: str) -> str:
    """The chip's model from a device name: ``"NVIDIA H100 80GB HBM3"`` -> ``"H100"``,
    ``"NVIDIA GeForce RTX 4090"`` -> ``"RTX4090"``."""
    words = [w for w in re.split(r"[\s_/-]+", name) if w]
    kept = [w for w in words if w.lower() not in _NOISE_WORDS and not _MEMORY_WORD.match(w)]
    short = "".join(re.sub(r"[^A-Za-z0-9.]", "", w) for w in (kept or words))
    return short or "gpu"


def interconnect_from_topology(topology: object) -> str | None:
    """``"nvlink"`` when ``nvidia-smi topo -m`` links two GPUs by NVLink (an ``NV<k>`` cell), ``"pcie"`` when it
    shows a GPU matrix without one, ``None`` when there is no matrix to read (no text, or not text at all)."""
    if not topology or not isinstance(topology, str):
        return None
    gpu_rows = [line for line in topology.splitlines() if re.match(r"^\s*GPU\d+\s", line)]
    if not gpu_rows:
        return None
    return "nvlink" if any(_NVLINK.search(row) for row in gpu_rows) else "pcie"


_BACKEND = re.compile(r"^[a-z][a-z0-9]{0,15}$")  # gloo, nccl, mpi, ucc, ...
MAX_COUNT = 1_000_000  # cores, devices per node, nodes: beyond any machine, short of a number that is no count


def _count(environment: Mapping[str, Any], field: str, default: int | None) -> int | None:
    """``environment[field]`` as a count of at least 1 (an int, or a float or string holding one), ``default`` when
    absent; a ValueError naming the field and the value otherwise."""
    value = environment.get(field)
    if value is None or value == "":
        return default
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
        whole = int(number) if math.isfinite(number) and number == int(number) else None
    except (TypeError, ValueError, OverflowError):
        whole = None
    if whole is None or not 1 <= whole <= MAX_COUNT:
        raise ValueError(f"environment.json's {field} is {value!r}, not a count from 1 to {MAX_COUNT:,}")
    return whole


def profile_from_environment(environment: Mapping[str, Any]) -> str:
    """The profile id a recording's ``environment.json`` describes (its ``profile`` field wins when present);
    a ValueError naming the field when one cannot make an id (a backend that is no name, a count that is no count),
    and the derived id checked as any other (so no field can make it a path)."""
    recorded = environment.get(PROFILE_FIELD)
    if recorded is not None and not isinstance(recorded, str):  # true or 1.5 would file the run under "True", "1.5"
        raise ValueError(f"environment.json's profile is {recorded!r}, not a profile id (text, such as cpu-2c-gloo)")
    if recorded:
        return validate_profile_id(recorded, source="environment.json's profile")
    backend = str(environment.get("backend") or "unknown").lower()
    if not _BACKEND.match(backend):
        raise ValueError(f"environment.json's backend is {environment.get('backend')!r}, not a backend name (gloo, nccl)")
    accelerator = environment.get("accelerator")
    if not accelerator:
        cores = _count(environment, "host_cpu_cores", None)
        derived = f"cpu-{cores}c-{backend}" if cores else f"cpu-{backend}"
        return validate_profile_id(derived, source="the profile environment.json describes")
    per_node = _count(environment, "accelerator_count", 1)
    nodes = _count(environment, "nodes", 1)
    chip = f"{per_node}x{accelerator_short_name(str(accelerator))}"
    if nodes > 1:
        chip = f"{nodes}x{chip}"
    link = None
    if per_node > 1:  # the topology matrix when recorded, else an ``interconnect`` a contributor states (pcie, nvlink)
        stated = environment.get("interconnect")
        link = interconnect_from_topology(environment.get("interconnect_topology")) or (
            stated if isinstance(stated, str) and stated in ("pcie", "nvlink") else None
        )
    derived = "-".join(part for part in (chip, link, backend) if part)
    return validate_profile_id(derived, source="the profile environment.json describes")


def described_profiles(environment: Mapping[str, Any]) -> set[str] | None:
    """The profile ids ``environment.json``'s hardware fields alone are consistent with (its ``profile`` field set
    aside): one id, or each interconnect where a node of several accelerators recorded none. None where the fields
    say too little to tell (no backend, or neither an accelerator nor a core count: a contributor's old folder that
    states its profile instead) or cannot make an id."""
    hardware = {k: v for k, v in environment.items() if k != PROFILE_FIELD}
    if not hardware.get("backend") or not (hardware.get("accelerator") or hardware.get("host_cpu_cores")):
        return None
    try:
        derived = profile_from_environment(hardware)
        if hardware.get("accelerator") and _count(hardware, "accelerator_count", 1) > 1 and derived.count("-") == 1:
            chip, backend = derived.split("-")  # no link recorded: either link is consistent with the fields
            return {derived, *(f"{chip}-{link}-{backend}" for link in ("pcie", "nvlink"))}
    except ValueError:
        return None
    return {derived}


def resolve_profile(environment: Mapping[str, Any], override: str | None = None) -> str:
    """The profile a new recording is filed under: ``override`` (``--profile``), else ``$MUON_REPRO_PROFILE``,
    else the one its environment describes."""
    if override:
        return validate_profile_id(override, source="--profile")
    from_env = os.environ.get(PROFILE_ENV_VAR)
    if from_env:
        return validate_profile_id(from_env, source=f"${PROFILE_ENV_VAR}")
    return profile_from_environment(environment)


UNKNOWN_PROFILE = "unknown"
"""The profile of traces that carry no ``environment.json`` (foreign traces, a lone trace file)."""


def profile_or_unknown(environment: Mapping[str, Any] | None) -> str:
    """:func:`profile_from_environment`, or :data:`UNKNOWN_PROFILE` for a folder without an environment."""
    return profile_from_environment(environment) if environment else UNKNOWN_PROFILE


ANSI_STYLE = re.compile(r"\x1b\[[0-9;]*m")  # a select-graphic-rendition sequence: style, no text


def topology_matrix(topology: str) -> str:
    """``nvidia-smi topo -m``'s matrix (environment.json ``interconnect_topology``) without the legend it always prints
    after it, and without the terminal's underline codes around its header: what the card and the report show (the
    run's environment.json keeps the whole text)."""
    head, _, _legend = topology.partition("\nLegend:")
    return ANSI_STYLE.sub("", head).rstrip()


def rows_of_profile(table: Any, profile: str) -> Any:
    """A table's rows of one hardware profile, renumbered (a table without a ``profile`` column, or
    ``None``, as it is). Pandas-agnostic here, so both the analysis and the report can use it."""
    if table is None or PROFILE_FIELD not in table.columns:
        return table
    return table[table[PROFILE_FIELD] == profile].reset_index(drop=True)


def run_key(profile: str, group: str, name: str) -> str:
    """A run's id in every table: ``<profile>/<group>/<name>`` (``<profile>/<name>`` without a group)."""
    return "/".join(part for part in (profile, group, name) if part)


def add_profile_argument(parser: Any, what: str = "hardware profile to file the recording under, OUT/<ID>/...") -> None:
    """The one ``--profile ID`` option of every recording command (bench, run, converge, calibrate, regimes); ``what``
    says what the ID does there."""
    parser.add_argument(
        "--profile",
        type=_profile_argument,
        default=None,
        metavar="ID",
        help=f"{what} (default: ${PROFILE_ENV_VAR}, else derived from this machine, e.g. cpu-2c-gloo or 8xH100-nvlink-nccl)",
    )


def _profile_argument(text: str) -> str:
    import argparse

    try:
        return validate_profile_id(text, source="--profile")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def ordered_profiles(runs_per_profile: Mapping[str, int]) -> list[str]:
    """Profiles with the most runs first (ties by name): the first is the one the report's prose describes."""
    return sorted(runs_per_profile, key=lambda p: (-runs_per_profile[p], p))


def profile_problems(folder: str | Path) -> list[str]:
    """The ``profile`` values of the tables of ``folder`` that are no profile id (figures of a profile are drawn in
    figures/<profile>/: a value such as ``../x`` would leave that folder). Reads that one column of each table."""
    import pyarrow.parquet as pq

    from muon_repro.tables.limits import table_size_problem

    problems = []
    for path in sorted(Path(folder).glob("*.parquet")):
        if too_large := table_size_problem(path):
            problems.append(too_large)
        elif PROFILE_FIELD in pq.read_schema(path).names:
            values = pq.read_table(path, columns=[PROFILE_FIELD]).column(0).unique().to_pylist()
            problems += invalid_profiles(values, f"{path}: profile")
    return problems


def invalid_profiles(values: Iterable[object], source: str) -> list[str]:
    """Why each of a table's ``profile`` values (named by ``source``) is no profile id; nulls and ``unknown`` pass."""
    problems = []
    for value in values:
        if value is None or value == UNKNOWN_PROFILE:
            continue
        try:
            validate_profile_id(str(value), source=source)
        except ValueError as exc:
            problems.append(str(exc))
    return problems
