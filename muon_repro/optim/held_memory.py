"""What an optimizer holds in memory, measured by storage rather than by the names it gives its buffers.

A ledger that sums the tensors called ``momentum_buffer``, ``exp_avg`` and ``exp_avg_sq`` cannot see a copy of the
weights kept under another name, a second momentum, or a buffer allocated once and kept. So the census walks every
tensor the optimizer can reach (its ``state``, its attributes, and the lists, tuples, dicts and plain objects
inside them) and counts each distinct storage once, leaving out the model's own parameters (and their gradients),
which the optimizer points at but does not own:

    held_state_bytes   storages reachable from ``optimizer.state``: the optimizer state, whatever its keys
    held_buffer_bytes  every other storage it owns: flat gradient buffers, shards, kept gathers (a ZeRO-1
                       optimizer's flat parameter buffer is the model's parameters' storage, so it is left out)

Two tensors that share a storage (views of one flat buffer) count once; a storage reachable from both ``state`` and
an attribute counts as state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

_MAX_DEPTH = 8  # containers nest a few levels (param_groups -> dict -> list); deeper is not an optimizer's own


@dataclass(frozen=True)
class HeldMemory:
    state_bytes: int  # distinct storages reachable from optimizer.state
    buffer_bytes: int  # distinct storages reachable from its other attributes, not in state


def _tensors(obj: object, seen: set[int], depth: int = 0) -> Iterator[torch.Tensor]:
    """Every tensor reachable from ``obj`` through containers and plain objects' attributes."""
    if depth > _MAX_DEPTH or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield obj
        return
    if isinstance(obj, dict):
        children: Iterable[object] = (*obj.keys(), *obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = obj
    elif isinstance(obj, torch.nn.Module) or type(obj).__module__.startswith("torch._C"):
        return  # a module's tensors are the model's; torch's own handles (process groups) hold none of the optimizer's
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = vars(obj).values()
    elif hasattr(obj, "__slots__"):
        children = (getattr(obj, name) for name in obj.__slots__ if hasattr(obj, name))
    else:
        return
    for child in children:
        yield from _tensors(child, seen, depth + 1)


def _storages(tensors: Iterable[torch.Tensor]) -> dict[int, int]:
    """Distinct storages by data pointer, with their size in bytes (a tensor on the meta device has none)."""
    out: dict[int, int] = {}
    for t in tensors:
        if t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        out[storage.data_ptr()] = storage.nbytes()
    return out


def held_memory(optimizer: torch.optim.Optimizer) -> HeldMemory:
    """The bytes ``optimizer`` holds as state and as other buffers, each storage counted once, the model's
    parameters and gradients left out."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    model = _storages([*params, *(p.grad for p in params if p.grad is not None)])
    state = _storages(_tensors(optimizer.state, set()))
    others = {k: v for k, v in vars(optimizer).items() if k not in ("state", "param_groups")}
    buffers = _storages(_tensors(others, set()))
    state = {ptr: n for ptr, n in state.items() if ptr not in model}
    buffers = {ptr: n for ptr, n in buffers.items() if ptr not in model and ptr not in state}
    return HeldMemory(sum(state.values()), sum(buffers.values()))
