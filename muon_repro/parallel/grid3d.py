"""The DP x TP x PP rank layout :class:`~muon_repro.parallel.mesh.ParallelDims` builds its process groups from.

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
stage the ranks are laid out as a DP x TP world of its own (:func:`dp_tp_group_ranks`, offset by
``pp_rank * dp * tp``); with ``pp = 1`` the layout is the DP x TP grid's.

A PP group joins the ranks with the same ``(dp_rank, tp_rank)`` in every stage: one replica's shard
travels through the stages along it. Its neighbours :attr:`ParallelDims.prev_rank` and
:attr:`ParallelDims.next_rank` are global ranks (what ``torch.distributed.isend``/``irecv`` take).

Plain integers, no torch: the groups themselves are :mod:`muon_repro.parallel.mesh`'s.
``python -m muon_repro.parallel.grid3d --dp 2 --tp 2 --pp 2`` prints the groups of a grid.
"""

from __future__ import annotations

import argparse

from muon_repro.values import is_count

AXES = ("tp", "dp", "pp")  # fastest-varying first: the order ranks are laid out in


def check_positive_sizes(owner: str, sizes: dict[str, int]) -> None:
    """``ValueError`` naming the first of ``sizes`` that is not a positive integer (as ``owner.name``)."""
    for name, value in sizes.items():
        if not is_count(value):
            raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")


def check_sizes(dp: int, tp: int, pp: int) -> None:
    """``ValueError`` naming the size that is not a positive integer."""
    check_positive_sizes("ParallelDims", {"dp": dp, "tp": tp, "pp": pp})


def dp_tp_group_ranks(dp: int, tp: int, first_rank: int = 0) -> dict[str, list[list[int]]]:
    """The TP and DP groups of a DP x TP grid of ranks ``first_rank ..``, TP ranks adjacent, as lists of
    global ranks in group-rank order (the order every rank creates them in)."""
    return {
        "tp": [[first_rank + d * tp + t for t in range(tp)] for d in range(dp)],
        "dp": [[first_rank + d * tp + t for d in range(dp)] for t in range(tp)],
    }


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
    the first stage to the last. The TP and DP groups are each stage's (:func:`dp_tp_group_ranks`), stage
    after stage. The order of groups is the order every rank creates them in.
    """
    check_sizes(dp, tp, pp)
    stages = [dp_tp_group_ranks(dp, tp, first_rank=rank_of(p, 0, 0, dp, tp)) for p in range(pp)]
    return {
        "tp": [group for stage in stages for group in stage["tp"]],
        "dp": [group for stage in stages for group in stage["dp"]],
        "pp": [[rank_of(p, d, t, dp, tp) for p in range(pp)] for d in range(dp) for t in range(tp)],
    }


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
