"""The DP x TP x PP process grid: :class:`~muon_repro.parallel.mesh.ParallelDims` with pipeline stages.

Ranks are laid out as Megatron's default order (``tp-dp-pp``): tensor-parallel ranks adjacent, then data
parallel, pipeline stages outermost::

    global rank = pp_rank * (dp * tp) + dp_rank * tp + tp_rank

    dp=2, tp=2, pp=2:   stage 0 holds ranks 0-3, stage 1 ranks 4-7
                        TP groups {0,1} {2,3} {4,5} {6,7}
                        DP groups {0,2} {1,3} {4,6} {5,7}
                        PP groups {0,4} {1,5} {2,6} {3,7}

Why this order: TP all-reduces sit inside every layer's forward and backward, so its ranks are the
closest (one node, NVLink); DP moves the optimizer's reduce-scatter and all-gather once a step; PP moves
one activation per micro-batch between neighbours, the lightest traffic, so it may cross nodes. Inside a
stage the ranks are laid out exactly as :class:`ParallelDims` lays out a DP x TP world (offset by
``pp_rank * dp * tp``), so a stage is a DP x TP grid of its own: its TP and DP groups are built by
:mod:`muon_repro.parallel.mesh`'s own helpers (:func:`~muon_repro.parallel.mesh.dp_tp_group_ranks`,
:func:`~muon_repro.parallel.mesh.make_group`).

A PP group joins the ranks with the same ``(dp_rank, tp_rank)`` in every stage: one replica's shard
travels through the stages along it. Its neighbours :attr:`ProcessGrid3D.prev_rank` and
:attr:`ProcessGrid3D.next_rank` are global ranks (what ``torch.distributed.isend``/``irecv`` take).

:class:`ProcessGrid3D` is a :class:`~muon_repro.parallel.mesh.DataTensorGrid`, the protocol the ZeRO-1
optimizers take (``dp``, ``tp``, ``dp_rank``, ``tp_rank``, ``dp_group``, ``tp_group``, ``rank``,
``ledger``), as :class:`ParallelDims` is: handed to :class:`~muon_repro.optim.distributed.DistributedMuon`,
the optimizer shards over this stage's DP group and gathers over this stage's TP group. Groups of size 1
hold no process group, as in :mod:`muon_repro.parallel.mesh`.

``python -m muon_repro.parallel.grid3d --dp 2 --tp 2 --pp 2`` prints the groups of a grid.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from muon_repro.parallel.comm import CommLedger, Group
from muon_repro.parallel.mesh import check_positive_sizes, destroy_groups, dp_tp_group_ranks, make_group, world_rank

AXES = ("tp", "dp", "pp")  # fastest-varying first: the order ranks are laid out in


def check_sizes(dp: int, tp: int, pp: int) -> None:
    """``ValueError`` naming the size that is not a positive integer."""
    check_positive_sizes("ProcessGrid3D", {"dp": dp, "tp": tp, "pp": pp})


def rank_of(pp_rank: int, dp_rank: int, tp_rank: int, dp: int, tp: int) -> int:
    """The global rank at grid coordinates ``(pp_rank, dp_rank, tp_rank)``."""
    return (pp_rank * dp + dp_rank) * tp + tp_rank


def coordinates_of(rank: int, dp: int, tp: int) -> tuple[int, int, int]:
    """``(pp_rank, dp_rank, tp_rank)`` of a global rank (inverse of :func:`rank_of`)."""
    stage_rank, tp_rank = divmod(rank, tp)
    pp_rank, dp_rank = divmod(stage_rank, dp)
    return pp_rank, dp_rank, tp_rank


def group_ranks(dp: int, tp: int, pp: int) -> dict[str, list[list[int]]]:
    """Every group of each axis, as lists of global ranks in group-rank order.

    ``group_ranks(...)["pp"][k]`` is PP group ``k``: the ranks with ``dp_rank * tp + tp_rank == k``, from
    the first stage to the last. The TP and DP groups are each stage's, as :class:`ParallelDims` lays them
    out, stage after stage. The order of groups is the order every rank creates them in.
    """
    check_sizes(dp, tp, pp)
    stages = [dp_tp_group_ranks(dp, tp, first_rank=rank_of(p, 0, 0, dp, tp)) for p in range(pp)]
    return {
        "tp": [group for stage in stages for group in stage["tp"]],
        "dp": [group for stage in stages for group in stage["dp"]],
        "pp": [[rank_of(p, d, t, dp, tp) for p in range(pp)] for d in range(dp) for t in range(tp)],
    }


@dataclass
class ProcessGrid3D:
    """Data-parallel x tensor-parallel x pipeline-parallel sizes, and this rank's groups.

    Construct it on every rank after ``torch.distributed.init_process_group`` (or without an
    initialized world when ``dp == tp == pp == 1``). ``ledger`` records every collective on
    ``dp_group`` and ``tp_group``; point-to-point sends on ``pp_group`` are not ledgered (the ledger
    knows collectives only).
    """

    dp: int
    tp: int
    pp: int
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
        self.rank = world_rank({"dp": self.dp, "tp": self.tp, "pp": self.pp})
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
        """Destroy this rank's process groups (see :meth:`ParallelDims.close` for why a sweep must)."""
        destroy_groups((self.tp_group, self.dp_group, self.pp_group))

    def __repr__(self) -> str:
        return (
            f"ProcessGrid3D(dp={self.dp}, tp={self.tp}, pp={self.pp}, rank={self.rank}, "
            f"pp_rank={self.pp_rank}, dp_rank={self.dp_rank}, tp_rank={self.tp_rank})"
        )


def describe_grid(dp: int, tp: int, pp: int) -> str:
    """The groups of a grid, one axis a line, and each stage's ranks (what the module docstring draws)."""
    ranks = group_ranks(dp, tp, pp)
    lines = [f"dp={dp} tp={tp} pp={pp}: global rank = pp_rank * {dp * tp} + dp_rank * {tp} + tp_rank"]
    for s in range(pp):
        lines.append(f"  stage {s}: ranks {rank_of(s, 0, 0, dp, tp)}-{rank_of(s, dp - 1, tp - 1, dp, tp)}")
    for axis in reversed(AXES):
        groups = " ".join("{" + ",".join(map(str, g)) + "}" for g in ranks[axis])
        lines.append(f"  {axis.upper()} groups {groups}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m muon_repro.parallel.grid3d", description="Print a DP x TP x PP grid.")
    for axis in ("dp", "tp", "pp"):
        parser.add_argument(f"--{axis}", type=int, default=1, help=f"{axis.upper()} size (default 1)")
    args = parser.parse_args(argv)
    try:
        print(describe_grid(args.dp, args.tp, args.pp))
    except ValueError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
