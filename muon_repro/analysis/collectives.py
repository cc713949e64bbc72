"""Collective operations by name: normalized kinds, phase labels, sizes, bus bandwidth.

Pure functions, no trace needed. The same collective is spelled differently by each source:
NCCL's ``Collective name`` (``_allgather_base``), ``c10d::`` ops (``c10d::_reduce_scatter_base_``),
``gloo:``/``nccl:`` annotations, NCCL kernel names (``ncclDevKernel_AllGather_RING_LL``) and our
phase labels (``dp_gather``); :func:`normalize_op` maps them all to one kind.

Bytes follow ``docs/method.md#communication-model`` (nccl-tests conventions): ``S`` is the full
array; the bytes one rank sends under the ring model are :func:`muon_repro.formulas.ring_bytes`, the
formula the byte ledger of :mod:`muon_repro.parallel.comm` records with; bus bandwidth
(``docs/method.md#bus-bandwidth``) is ``S / t`` times :func:`busbw_factor`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from muon_repro.phases import COARSE_PHASES, MUON_ONLY_PHASES, OPTIMIZER, PHASES
from muon_repro.tables.step_schemas import COMM_KINDS  # kinds with a time column of their own
from muon_repro.values import is_index

# Phase labels opened by muon_repro.parallel.comm, the model and the optimizers (muon_repro.phases).
OUR_LABELS = frozenset(PHASES)
_OUR_LABEL_PATTERN = re.compile(r"^(dp|tp)_[a-z0-9_]+$")
_STEP_PATTERN = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")

# ---------------------------------------------------------------- names


def _snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", camel).lower()


def normalize_op(raw: str) -> str | None:
    """Collective kind from any spelling: NCCL ``Collective name``, ``c10d::`` op, ``gloo:`` /
    ``nccl:`` annotation, NCCL kernel name or our phase label. ``None`` if not a collective.

    >>> [normalize_op(s) for s in ("_allgather_base", "c10d::_reduce_scatter_base_", "gloo:all_reduce",
    ...  "ncclDevKernel_AllGather_RING_LL(x)", "dp_gather", "wait")]
    ['all_gather', 'reduce_scatter', 'all_reduce', 'all_gather', 'all_gather', None]
    """
    s = raw.strip()
    if s.startswith(("ncclKernel_", "ncclDevKernel_")):
        token = s.split("(", 1)[0].split("_")
        s = _snake(token[1]) if len(token) > 1 else ""
    s = s.lower()
    for prefix in ("c10d::", "gloo:", "nccl:"):
        s = s.removeprefix(prefix)
    s = s.strip("_").replace("-", "_")
    if s in MUON_ONLY_PHASES:  # our gather labels
        return "all_gather"
    if "reduce_scatter" in s or "reducescatter" in s:
        return "reduce_scatter"
    if "all_gather" in s or "allgather" in s:
        return "all_gather"
    if "all_reduce" in s or "allreduce" in s:
        return "all_reduce"
    if "all_to_all" in s or "alltoall" in s:
        return "all_to_all"
    if "broadcast" in s:
        return "broadcast"
    if s in ("send", "recv", "sendrecv", "send_recv", "recv_anysource") or s.startswith(("send_", "recv_")):
        return "send_recv"
    if "barrier" in s:
        return "barrier"
    if s in ("reduce", "gather", "scatter"):
        return s
    return None


def is_receive(op: str, name: str) -> bool:
    """A point-to-point receive (``c10d::recv_``, ``gloo:recv``; ``op`` its :func:`normalize_op`): it sends
    nothing, whatever its size."""
    return op == "send_recv" and "recv" in name.lower() and "send" not in name.lower()


def kind_of(op: str) -> str:
    return op if op in COMM_KINDS else "other"


def label_phase(name: str) -> str | None:
    """Phase a user annotation stands for: one of ours, a coarse phase, or ``None``."""
    if name in OUR_LABELS or _OUR_LABEL_PATTERN.match(name):
        return name
    return coarse_phase(name)


def coarse_phase(name: str) -> str | None:
    """forward / backward / optimizer from our labels or common foreign annotations (``## forward ##``)."""
    for phase in COARSE_PHASES:
        if name in (phase, f"## {phase} ##"):
            return phase
    return OPTIMIZER if name.startswith("Optimizer.step#") else None


def step_number(name: str) -> int | None:
    match = _STEP_PATTERN.match(name)
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------- sizes

_DTYPES: dict[str, tuple[str, int]] = {}
for _canonical, _size, _aliases in (
    ("float32", 4, ("float", "float32", "Float", "torch.float32")),
    ("float64", 8, ("double", "float64", "Double", "torch.float64")),
    ("float16", 2, ("c10::Half", "Half", "half", "float16", "torch.float16")),
    ("bfloat16", 2, ("c10::BFloat16", "BFloat16", "bfloat16", "torch.bfloat16")),
    ("int64", 8, ("long int", "long", "Long", "int64", "long long int", "torch.int64")),
    ("int32", 4, ("int", "Int", "int32", "torch.int32")),
    ("int16", 2, ("short int", "short", "Short", "int16")),
    ("int8", 1, ("signed char", "Char", "int8")),
    ("uint8", 1, ("unsigned char", "Byte", "uint8")),
    ("bool", 1, ("bool", "Bool")),
    ("complex64", 8, ("c10::complex<float>", "ComplexFloat", "complex64")),
    ("complex128", 16, ("c10::complex<double>", "ComplexDouble", "complex128")),
):
    for _alias in _aliases:
        _DTYPES[_alias] = (_canonical, _size)


def dtype_info(raw: Any) -> tuple[str, int] | None:
    """(canonical name, bytes per element) for a profiler dtype string, else ``None``."""
    if not isinstance(raw, str) or not raw:
        return None
    if raw in _DTYPES:
        return _DTYPES[raw]
    if "float8" in raw.lower():
        return ("float8", 1)
    return None


def busbw_factor(op: str, group_size: int) -> float | None:
    """nccl-tests PERFORMANCE.md: busbw = algbw * factor."""
    n = group_size
    if n < 1:
        return None
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "send_recv", "gather", "scatter"):
        return 1.0
    return None


def _numel(dims: Any) -> int | None:
    """Elements of a tensor shape ``[d0, d1, ...]``; ``None`` if not a shape."""
    if not isinstance(dims, list) or not all(is_index(d) for d in dims):
        return None
    return math.prod(dims) if dims else 1


def numel_any(dims: Any) -> int | None:
    """Elements of a shape, or of a (nested) list of shapes summed (TensorList arguments)."""
    single = _numel(dims)
    if single is not None:
        return single
    if isinstance(dims, list) and dims:
        parts = [numel_any(d) for d in dims]
        if all(p is not None for p in parts):
            return sum(parts)  # type: ignore[arg-type]
    return None


def arg_at(dims: Any, i: int) -> Any:
    return dims[i] if isinstance(dims, list) and len(dims) > i else None


def first_dtype(types: Any, i: int) -> tuple[str, int] | None:
    value = arg_at(types, i)
    if isinstance(value, str):
        return dtype_info(value)
    return None


def c10d_sizes(op_name: str, dims: Any, types: Any) -> tuple[int | None, tuple[str, int] | None, int | None]:
    """(full elements S, dtype, group size or None) of a ``c10d::`` op from its Input Dims.

    Argument layouts (torch/csrc/distributed/c10d/Ops.cpp): ``_allgather_base_(output,
    input)``, ``_reduce_scatter_base_(output, input)``, ``allreduce_(tensors)``,
    ``broadcast_(tensors)``, ``allgather_(outputs[][], inputs[])``, ``reduce_scatter_(outputs[],
    inputs[][])``, ``alltoall_base_(output, input, ...)``.
    """
    base = op_name.removeprefix("c10d::").strip("_")
    if base in ("allgather_base", "allgather_into_tensor_coalesced"):
        out, inp = numel_any(arg_at(dims, 0)), numel_any(arg_at(dims, 1))
        n = out // inp if out is not None and inp else None
        return out, first_dtype(types, 0) or first_dtype(types, 1), n
    if base in ("reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
        out, inp = numel_any(arg_at(dims, 0)), numel_any(arg_at(dims, 1))
        n = inp // out if inp is not None and out else None
        return inp, first_dtype(types, 1) or first_dtype(types, 0), n
    if base in ("allgather", "allgather_coalesced"):
        return numel_any(arg_at(dims, 0)), first_dtype(types, 1), None
    if base == "reduce_scatter":
        return numel_any(arg_at(dims, 1)), first_dtype(types, 0), None
    if base in ("alltoall_base", "alltoall"):
        return numel_any(arg_at(dims, 1)), first_dtype(types, 1), None
    # allreduce_, allreduce_coalesced_, broadcast_, reduce_, send, recv_, ...
    return numel_any(arg_at(dims, 0)), first_dtype(types, 0), None
