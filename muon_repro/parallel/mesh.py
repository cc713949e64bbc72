"""The DP x TP process grid.

Ranks are laid out Megatron-style with tensor-parallel ranks adjacent::

    global rank = dp_rank * tp + tp_rank

    tp=2, dp=2:   TP groups {0,1} {2,3}     DP groups {0,2} {1,3}

Groups are objects handed to whoever communicates; nothing here is global. A group of size 1
holds no process group at all, and the collectives in :mod:`muon_repro.parallel.comm` are
no-ops on it, so the same code runs on one process without ``torch.distributed``.

The helpers below also build each pipeline stage's DP x TP grid in
:class:`~muon_repro.parallel.grid3d.ProcessGrid3D`; :class:`DataTensorGrid` is what the ZeRO-1 optimizers
take, which both grids are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch.distributed as dist

from muon_repro.parallel.comm import CommLedger, Group


class DataTensorGrid(Protocol):
    """The DP x TP view the ZeRO-1 optimizers read: a :class:`ParallelDims`, or one pipeline stage of a
    :class:`~muon_repro.parallel.grid3d.ProcessGrid3D` (its groups hold that stage's ranks only)."""

    dp: int
    tp: int
    dp_rank: int
    tp_rank: int
    dp_group: Group
    tp_group: Group
    rank: int
    ledger: CommLedger


def check_positive_sizes(owner: str, sizes: dict[str, int]) -> None:
    """``ValueError`` naming the first of ``sizes`` that is not a positive integer (as ``owner.name``)."""
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")


def world_rank(sizes: dict[str, int]) -> int:
    """This process's global rank, after checking that the product of ``sizes`` is the world size
    (without an initialized world: rank 0 of a world of one)."""
    initialized = dist.is_available() and dist.is_initialized()
    world_size = dist.get_world_size() if initialized else 1
    product = math.prod(sizes.values())
    if product != world_size:
        names = " * ".join(sizes)
        terms = " * ".join(f"{name}={value}" for name, value in sizes.items())
        raise ValueError(
            f"{names} must equal the world size: {terms} = {product}, but the world has {world_size} process(es); "
            f"launch {'*'.join(sizes)} workers or change {'/'.join(sizes)}"
        )
    return dist.get_rank() if initialized else 0


def dp_tp_group_ranks(dp: int, tp: int, first_rank: int = 0) -> dict[str, list[list[int]]]:
    """The TP and DP groups of a DP x TP grid of ranks ``first_rank ..``, TP ranks adjacent, as lists of
    global ranks in group-rank order (the order every rank creates them in)."""
    return {
        "tp": [[first_rank + d * tp + t for t in range(tp)] for d in range(dp)],
        "dp": [[first_rank + d * tp + t for d in range(dp)] for t in range(tp)],
    }


def make_group(name: str, ranks_of: list[list[int]], rank: int, ledger: CommLedger) -> Group:
    """Create every group of ``ranks_of`` and return the one that holds ``rank``.

    ``new_group`` is collective over the whole world, so every rank creates every group, in the same order.
    """
    handles = [dist.new_group(ranks) if len(ranks) > 1 else None for ranks in ranks_of]
    mine = next(k for k, ranks in enumerate(ranks_of) if rank in ranks)
    ranks = ranks_of[mine]
    return Group(name=name, ranks=tuple(ranks), rank=ranks.index(rank), process_group=handles[mine], ledger=ledger)


def destroy_groups(groups: tuple[Group, ...]) -> None:
    """Destroy the process groups this rank holds in ``groups`` (size-1 groups hold none)."""
    for group in groups:
        handle = group.process_group
        if handle is not None and handle != dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(handle)


@dataclass
class ParallelDims:
    """Data-parallel x tensor-parallel sizes, and the process groups built from them.

    Construct it on every rank after ``torch.distributed.init_process_group`` (or without an
    initialized world when ``dp == tp == 1``). ``ledger`` records every collective issued on
    ``dp_group`` and ``tp_group``.
    """

    dp: int
    tp: int
    ledger: CommLedger = field(default_factory=CommLedger)
    rank: int = field(init=False)
    dp_rank: int = field(init=False)
    tp_rank: int = field(init=False)
    dp_group: Group = field(init=False)
    tp_group: Group = field(init=False)

    def __post_init__(self) -> None:
        sizes = {"dp": self.dp, "tp": self.tp}
        check_positive_sizes("ParallelDims", sizes)
        self.rank = world_rank(sizes)
        self.dp_rank, self.tp_rank = divmod(self.rank, self.tp)
        ranks = dp_tp_group_ranks(self.dp, self.tp)
        self.tp_group = make_group("tp", ranks["tp"], self.rank, self.ledger)
        self.dp_group = make_group("dp", ranks["dp"], self.rank, self.ledger)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp

    def close(self) -> None:
        """Destroy this rank's DP and TP process groups. A sweep builds new ones for every recording in the
        same workers: left alive, each keeps its threads and connections, and a 110-recording sweep's steps
        grew about 1.5x slower from its first rounds to its last, unevenly between configurations."""
        destroy_groups((self.tp_group, self.dp_group))

    def __repr__(self) -> str:
        return f"ParallelDims(dp={self.dp}, tp={self.tp}, rank={self.rank}, dp_rank={self.dp_rank}, tp_rank={self.tp_rank})"
