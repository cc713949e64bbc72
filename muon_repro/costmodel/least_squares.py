"""Linear least squares in Python floats: the same bits on every CPU.

numpy's ``lstsq`` goes through LAPACK and OpenBLAS, which picks its kernels for the CPU it runs on, and kernels that
sum in another order round differently: the study profile's fit came out one unit in the last place apart on two
machines, which changed its table and so the stamp of every table a rebuild writes. The analysis's fits are small
(tens of rows, a handful of columns), so this one is Householder QR with column pivoting in plain floats, every inner
product summed by :func:`math.fsum` (correctly rounded): IEEE-754 arithmetic gives the same result wherever it runs,
in well under a millisecond. Imports nothing beyond the standard library.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LeastSquares:
    """The solution of ``min ||design @ x - target||``, the design's numerical rank, and the columns left at 0 because
    the others already span them (empty when the design has full column rank)."""

    solution: tuple[float, ...]
    rank: int
    dependent: tuple[int, ...]


def least_squares(design: Sequence[Sequence[float]], target: Sequence[float]) -> LeastSquares:
    """Solve ``min ||design @ x - target||_2`` by Householder QR with column pivoting (the largest remaining column
    first). A column whose remainder is within rounding of zero (below ``max(rows, columns) * eps`` of the largest
    column, numpy's default ``rcond``) depends on those before it: it gets 0 and is named in ``dependent``."""
    rows = [[float(v) for v in row] for row in design]
    b = [float(v) for v in target]
    if not rows or not rows[0]:
        raise ValueError("least squares needs at least one row and one column")
    width = len(rows[0])
    if any(len(row) != width for row in rows) or len(b) != len(rows):
        raise ValueError(
            f"least squares needs a rectangular design with one target per row, got {len(rows)} rows, {len(b)} targets"
        )
    if not all(math.isfinite(v) for row in rows for v in row) or not all(map(math.isfinite, b)):
        raise ValueError("least squares needs finite numbers in its design and target")
    height = len(rows)
    columns = [[row[j] for row in rows] for j in range(width)]
    order = list(range(width))
    rank, tolerance = 0, 0.0
    for k in range(min(height, width)):
        remainders = [_norm(columns[j][k:]) for j in range(k, width)]
        best = max(range(len(remainders)), key=remainders.__getitem__)  # first of equals: deterministic
        if k == 0:
            tolerance = max(height, width) * sys.float_info.epsilon * remainders[best]
        if remainders[best] <= tolerance:
            break
        p = k + best
        columns[k], columns[p], order[k], order[p] = columns[p], columns[k], order[p], order[k]
        reflector, diagonal = _reflector(columns[k][k:], remainders[best])
        length = math.fsum(v * v for v in reflector)
        for j in range(k + 1, width):
            _reflect(reflector, length, columns[j], k)
        _reflect(reflector, length, b, k)
        columns[k][k:] = [diagonal] + [0.0] * (height - k - 1)
        rank += 1
    pivoted = [0.0] * width
    for i in reversed(range(rank)):  # back substitution on R's leading rank x rank block
        pivoted[i] = (b[i] - math.fsum(columns[j][i] * pivoted[j] for j in range(i + 1, rank))) / columns[i][i]
    solution = [0.0] * width
    for position, column in enumerate(order):
        solution[column] = pivoted[position]
    return LeastSquares(tuple(solution), rank, tuple(sorted(order[rank:])))


def _norm(values: Sequence[float]) -> float:
    return math.sqrt(math.fsum(v * v for v in values))


def _reflector(x: list[float], norm: float) -> tuple[list[float], float]:
    """The Householder vector ``v`` taking ``x`` to ``(diagonal, 0, ..., 0)``; the diagonal's sign is opposite to
    ``x[0]``'s, so ``v[0] = x[0] - diagonal`` adds magnitudes and never cancels."""
    diagonal = -math.copysign(norm, x[0])
    return [x[0] - diagonal, *x[1:]], diagonal


def _reflect(v: list[float], length: float, column: list[float], k: int) -> None:
    """``column[k:] -= 2 v (v . column[k:]) / length``, in place (``length``: ``v . v``)."""
    scale = 2.0 * math.fsum(a * c for a, c in zip(v, column[k:])) / length
    for i, a in enumerate(v):
        column[k + i] -= scale * a
