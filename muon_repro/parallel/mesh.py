"""The DP x TP process grid.

Ranks are laid out Megatron-style with tensor-parallel ranks adjacent::

    global rank = dp_rank * tp + tp_rank

    tp=2, dp=2:   TP groups {0,1} {2,3}     DP groups {0,2} {1,3}

Groups are objects handed to whoever communicates; nothing here is global. A group of size 1
holds no process group at all, and the collectives in :mod:`muon_repro.parallel.comm` are
no-ops on it, so the same code runs on one process without ``torch.distributed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.distributed as dist

from muon_repro.parallel.comm import CommLedger, Group


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
        for name in ("dp", "tp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ParallelDims.{name} must be a positive integer, got {value!r}")
        initialized = dist.is_available() and dist.is_initialized()
        world_size = dist.get_world_size() if initialized else 1
        if self.dp * self.tp != world_size:
            raise ValueError(
                f"dp * tp must equal the world size: dp={self.dp} * tp={self.tp} = "
                f"{self.dp * self.tp}, but the world has {world_size} process(es); "
                "launch dp*tp workers or change dp/tp"
            )
        self.rank = dist.get_rank() if initialized else 0
        self.dp_rank, self.tp_rank = divmod(self.rank, self.tp)

        tp_ranks_of = [[d * self.tp + t for t in range(self.tp)] for d in range(self.dp)]
        dp_ranks_of = [[d * self.tp + t for d in range(self.dp)] for t in range(self.tp)]
        # new_group is collective over the whole world: every rank creates every group, in order.
        self.tp_group = self._make_group("tp", tp_ranks_of, self.dp_rank)
        self.dp_group = self._make_group("dp", dp_ranks_of, self.tp_rank)

    def _make_group(self, name: str, ranks_of: list[list[int]], mine: int) -> Group:
        handles = [dist.new_group(ranks) if len(ranks) > 1 else None for ranks in ranks_of]
        ranks = ranks_of[mine]
        return Group(
            name=name,
            ranks=tuple(ranks),
            rank=ranks.index(self.rank),
            process_group=handles[mine],
            ledger=self.ledger,
        )

    @property
    def world_size(self) -> int:
        return self.dp * self.tp

    def close(self) -> None:
        """Destroy this rank's DP and TP process groups. A sweep builds new ones for every recording in the
        same workers: left alive, each keeps its threads and connections, and a 110-recording sweep's steps
        grew about 1.5x slower from its first rounds to its last, unevenly between configurations."""
        for group in (self.tp_group, self.dp_group):
            handle = group.process_group
            if handle is not None and handle != dist.GroupMember.NON_GROUP_MEMBER:
                dist.destroy_process_group(handle)

    def __repr__(self) -> str:
        return f"ParallelDims(dp={self.dp}, tp={self.tp}, rank={self.rank}, dp_rank={self.dp_rank}, tp_rank={self.tp_rank})"
