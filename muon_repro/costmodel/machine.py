"""Machine profiles as JSON files: decoded and validated into a
:class:`~muon_repro.costmodel.machine_profile.MachineProfile` (errors name the file and the field),
read, written, and found by the name of a shipped one (``profiles/*.json``) for ``--machine``.
This module imports nothing heavy (no torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from muon_repro.costmodel.machine_profile import CollectiveFit, MachineProfile, ProfileError, Source
from muon_repro.rundir import MAX_SIDE_FILE_DEPTH, RENAMED_MACHINES, TooDeep, loads_within_depth, write_json

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"


_REQUIRED = (
    "name",
    "device",
    "backend",
    "matmul_tflops",
    "newton_schulz_tflops",
    "elementwise_gbps",
    "op_overhead_us",
    "collectives",
)
_KNOWN = tuple(f.name for f in fields(MachineProfile))
_COLLECTIVE_REQUIRED = ("op", "alpha_us", "beta_gbps")
_COLLECTIVE_KNOWN = tuple(f.name for f in fields(CollectiveFit))
_SOURCE_REQUIRED = ("figure", "quote", "url")
_SOURCE_KNOWN = tuple(f.name for f in fields(Source))


def profile_from_dict(raw: Any, where: str = "machine profile") -> MachineProfile:
    """A validated profile from decoded JSON; errors name ``where`` (the file) and the field."""
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: a machine profile is a JSON object, got {type(raw).__name__}")
    _check_keys(raw, _KNOWN, _REQUIRED, where, "")
    values = dict(raw)
    try:
        values["collectives"] = tuple(
            _collective_from(c, where, i) for i, c in enumerate(_list(raw["collectives"], where, "collectives"))
        )
        values["sources"] = tuple(
            _source_from(s, where, i) for i, s in enumerate(_list(raw.get("sources", []), where, "sources"))
        )
        values["compute_share"] = _int_keys(raw.get("compute_share", {}), where, "compute_share", "a rank count")
        values["bandwidth_share"] = _int_keys(raw.get("bandwidth_share", {}), where, "bandwidth_share", "a rank count")
        values["size_curves"] = _size_curves_from(raw.get("size_curves", {}), where)
        values["arrival_jitter_us"] = _int_keys(raw.get("arrival_jitter_us", {}), where, "arrival_jitter_us", "a group size")
        values["arrival_jitter_curve_us"] = _nested_int_keys(
            raw.get("arrival_jitter_curve_us", {}), where, "arrival_jitter_curve_us", "a compute time in us"
        )
        return MachineProfile(**values)
    except ProfileError as exc:
        if str(exc).startswith(where):
            raise
        raise ProfileError(f"{where}: {exc}") from None
    except TypeError as exc:  # a field of the wrong JSON type (a list where a number goes, ...)
        raise ProfileError(f"{where}: {exc}") from None


def _collective_from(raw: Any, where: str, index: int) -> CollectiveFit:
    label = f"collectives[{index}]"
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: {label} must be an object with {', '.join(_COLLECTIVE_REQUIRED)}")
    _check_keys(raw, _COLLECTIVE_KNOWN, _COLLECTIVE_REQUIRED, where, f"{label}.")
    try:
        return CollectiveFit(**{**raw, "samples": _pairs(raw.get("samples", []), f"{label}.samples")})
    except ProfileError as exc:
        raise ProfileError(f"{where}: {label}: {exc}") from None


def _source_from(raw: Any, where: str, index: int) -> Source:
    label = f"sources[{index}]"
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: {label} must be an object with {', '.join(_SOURCE_REQUIRED)}")
    _check_keys(raw, _SOURCE_KNOWN, _SOURCE_REQUIRED, where, f"{label}.")
    return Source(**raw)


def _int_keys(raw: Any, where: str, name: str, what: str) -> dict[int, float]:
    """A JSON object keyed by integers written as strings (``{"4": 0.5}``)."""
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: {name} must be an object keyed by {what}, got {raw!r}")
    out = {}
    for key, value in raw.items():
        try:
            out[int(key)] = value
        except (TypeError, ValueError):
            raise ProfileError(f"{where}: {name} key {key!r} is not {what} (an integer)") from None
    return out


def _size_curves_from(raw: Any, where: str) -> dict[str, dict[int, float]]:
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: size_curves must be an object {{kind: {{operand elements: rate}}}}, got {raw!r}")
    return {kind: _int_keys(curve, where, f"size_curves.{kind}", "a token count") for kind, curve in raw.items()}


def _nested_int_keys(raw: Any, where: str, name: str, what: str) -> dict[int, dict[int, float]]:
    """``{"4": {"20000": 900.0}}``: integer keys at both levels (a group size, then ``what``)."""
    return {
        size: _int_keys(inner, where, f"{name}[{size}]", what)
        for size, inner in _int_keys(raw, where, name, "a group size").items()
    }


def _pairs(raw: Any, name: str) -> tuple[tuple[float, float], ...]:
    """JSON ``[[bytes, seconds], ...]`` as a tuple of pairs (what the dataclass holds and compares)."""
    if not isinstance(raw, (list, tuple)) or any(not isinstance(p, (list, tuple)) or len(p) != 2 for p in raw):
        raise ProfileError(f"{name} must be a list of [ring bytes per rank, seconds] pairs, got {raw!r}")
    return tuple((p[0], p[1]) for p in raw)


def _list(value: Any, where: str, name: str) -> list:
    if not isinstance(value, list):
        raise ProfileError(f"{where}: {name} must be a list, got {type(value).__name__}")
    return value


def _check_keys(raw: Mapping, known: tuple[str, ...], required: tuple[str, ...], where: str, prefix: str) -> None:
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ProfileError(
            f"{where}: unknown field(s) {', '.join(prefix + k for k in unknown)}; known fields: {', '.join(known)}"
        )
    missing = [k for k in required if raw.get(k) is None]
    if missing:
        raise ProfileError(
            f"{where}: missing figure(s) {', '.join(prefix + k for k in missing)}; every profile needs {', '.join(required)}"
        )


# ---------------------------------------------------------------- files and names


def named_profiles() -> dict[str, Path]:
    """The profiles shipped with the package, by name (the file name without ``.json``)."""
    return {p.stem: p for p in sorted(PROFILE_DIR.glob("*.json"))}


def read_profile(path: str | Path) -> MachineProfile:
    """A profile from a JSON file, validated; errors name the file."""
    path = Path(path)
    # Not rundir.load_json: that reads NaN as null, and a profile's NaN must be refused by the figure it stands for.
    # A profile nests 5 levels; deeper ones would overflow the recursion of an error message's repr.
    try:
        raw = loads_within_depth(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"machine profile {path} does not exist") from None
    except TooDeep:
        raise ProfileError(
            f"machine profile {path}: JSON nested deeper than {MAX_SIDE_FILE_DEPTH} levels (a profile nests 5): "
            "not a machine profile; give a file written by `muon-repro calibrate` or a shipped profile's name"
        ) from None
    except (OSError, ValueError) as exc:
        raise ProfileError(f"machine profile {path} is not readable JSON: {exc}") from None
    return profile_from_dict(raw, where=str(path))


def resolve_profile(spec: str | Path) -> MachineProfile:
    """``--machine``: a path to a profile, or the name of a shipped one (``h100-8x-nvlink``)."""
    path = Path(spec)
    if path.is_file():
        return read_profile(path)
    named = named_profiles()
    name = RENAMED_MACHINES.get(str(spec), str(spec))  # a shipped profile's older name still finds it
    if name in named:
        return read_profile(named[name])
    raise ProfileError(
        f"--machine {spec}: no such file and no shipped profile of that name; shipped profiles: {', '.join(named)}"
    )


def write_profile(profile: MachineProfile, path: str | Path) -> Path:
    """Write ``profile`` as JSON through a temporary file and an atomic rename."""
    path = Path(path)
    if path.is_dir():
        raise ProfileError(f"--out {path} is a folder; give a file name such as {path / 'machine.json'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, profile.to_dict())
    return path
