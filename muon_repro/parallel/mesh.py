"""The DP x TP (x PP) process grid: :class:`ParallelDims`, its sizes and this rank's process groups.

Ranks are laid out Megatron-style with tensor-parallel ranks adjacent, pipeline stages outermost
(:mod:`muon_repro.parallel.grid3d`)::

    global rank = pp_rank * (dp * tp) + dp_rank * tp + tp_rank

    tp=2, dp=2:   TP groups {0,1} {2,3}     DP groups {0,2} {1,3}

With ``pp > 1`` each stage is a DP x TP grid of its own: the ZeRO-1 optimizers shard over the stage's DP
group and gather over its TP group, whatever ``pp`` is.

Groups are objects handed to whoever communicates; nothing here is global. A group of size 1
holds no process group at all, and the collectives in :mod:`muon_repro.parallel.comm` are
no-ops on it, so the same code runs on one process without ``torch.distributed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch.distributed as dist

from muon_repro.parallel.comm import CommLedger, Group
from muon_repro.parallel.grid3d import check_sizes, coordinates_of, group_ranks


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
    """Data-parallel x tensor-parallel x pipeline-parallel sizes, and this rank's process groups.

    Construct it on every rank after ``torch.distributed.init_process_group`` (or without an
    initialized world when ``dp == tp == pp == 1``); a size that is not a positive integer, or sizes whose
    product is not the world size, raise ``ValueError``. ``ledger`` records every collective issued on
    ``dp_group`` and ``tp_group``; point-to-point sends on ``pp_group`` are not ledgered (the ledger knows
    collectives only). With ``pp == 1`` every PP group is one rank and holds no process group.
    """

    dp: int
    tp: int
    pp: int = 1
    ledger: CommLedger = field(default_factory=CommLedger)
    rank: int = field(init=False)
    pp_rank: int = field(init=False)
    dp_rank: int = field(init=False)
    tp_rank: int = field(init=False)
    tp_group: Group = field(init=False)
    dp_group: Group = field(init=False)
    pp_group: Group = field(init=False)

    def __post_init__(self) -> None:
        check_sizes(self.dp, self.tp, self.pp)
        self.rank = world_rank({"dp": self.dp, "tp": self.tp} | ({"pp": self.pp} if self.pp > 1 else {}))
        self.pp_rank, self.dp_rank, self.tp_rank = coordinates_of(self.rank, self.dp, self.tp)
        ranks = group_ranks(self.dp, self.tp, self.pp)
        self.tp_group = make_group("tp", ranks["tp"], self.rank, self.ledger)
        self.dp_group = make_group("dp", ranks["dp"], self.rank, self.ledger)
        self.pp_group = make_group("pp", ranks["pp"], self.rank, self.ledger)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1

    @property
    def prev_rank(self) -> int | None:
        """Global rank of the previous stage's member of this PP group (None on the first stage)."""
        return None if self.is_first_stage else self.pp_group.ranks[self.pp_rank - 1]

    @property
    def next_rank(self) -> int | None:
        """Global rank of the next stage's member of this PP group (None on the last stage)."""
        return None if self.is_last_stage else self.pp_group.ranks[self.pp_rank + 1]

    def close(self) -> None:
        """Destroy this rank's process groups. A sweep builds new ones for every recording in the
        same workers: left alive, each keeps its threads and connections, and a 110-recording sweep's steps
        grew about 1.5x slower from its first rounds to its last, unevenly between configurations."""
        destroy_groups((self.tp_group, self.dp_group, self.pp_group))

    def __repr__(self) -> str:
        pp, pp_rank = (f", pp={self.pp}", f", pp_rank={self.pp_rank}") if self.pp > 1 else ("", "")
        ranks = f"rank={self.rank}{pp_rank}, dp_rank={self.dp_rank}, tp_rank={self.tp_rank}"
        return f"ParallelDims(dp={self.dp}, tp={self.tp}{pp}, {ranks})"
