"""Least squares in plain floats (muon_repro.costmodel.least_squares): numpy's answer on full-rank designs, the
exact rational answer to rounding, and a rank-deficient or underdetermined design told apart rather than guessed."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from muon_repro.costmodel.least_squares import least_squares


def _exact(design: np.ndarray, target: np.ndarray) -> list[Fraction]:
    """The normal equations solved in rationals on the floats as given: the true least-squares solution."""
    a = [[Fraction(v) for v in row] for row in design.tolist()]
    b = [Fraction(v) for v in target.tolist()]
    n = len(a[0])
    m = [[sum(r[i] * r[j] for r in a) for j in range(n)] + [sum(r[i] * t for r, t in zip(a, b))] for i in range(n)]
    for k in range(n):  # Gauss-Jordan, exact
        pivot = next(i for i in range(k, n) if m[i][k] != 0)
        m[k], m[pivot] = m[pivot], m[k]
        m[k] = [v / m[k][k] for v in m[k]]
        for i in range(n):
            if i != k:
                m[i] = [v - m[i][k] * w for v, w in zip(m[i], m[k])]
    return [row[n] for row in m]


@pytest.mark.parametrize("shape", [(32, 6), (7, 2), (5, 5)])
def test_a_full_rank_design_gives_the_exact_solution_to_rounding(shape):
    rng = np.random.default_rng(sum(shape))
    design = rng.normal(size=shape) * rng.uniform(0.1, 10.0, size=shape[1])  # columns of unequal scale
    target = rng.normal(size=shape[0])
    fit = least_squares(design.tolist(), target.tolist())
    exact = _exact(design, target)
    assert fit.rank == shape[1] and fit.dependent == ()
    for got, want in zip(fit.solution, exact):
        assert abs(Fraction(got) - want) <= 1e-12 * max(abs(want), 1), (got, float(want))
    assert np.allclose(fit.solution, np.linalg.lstsq(design, target, rcond=None)[0], rtol=1e-12, atol=1e-14)


def test_a_column_the_others_span_is_named_left_at_zero_and_the_fit_still_least_squares():
    rng = np.random.default_rng(3)
    base = rng.normal(size=(12, 3))
    design = np.column_stack([base, base[:, 0] + 2 * base[:, 2]])  # the fourth is spanned by the first and third
    target = rng.normal(size=12)
    fit = least_squares(design.tolist(), target.tolist())
    assert fit.rank == 3 and len(fit.dependent) == 1 and fit.solution[fit.dependent[0]] == 0.0
    best = np.linalg.lstsq(design, target, rcond=None)[0]
    residual = np.linalg.norm(design @ np.array(fit.solution) - target)
    assert residual == pytest.approx(np.linalg.norm(design @ best - target), rel=1e-12)


def test_fewer_rows_than_columns_fit_exactly_with_the_rest_dependent():
    fit = least_squares([[1.0, 2.0, 0.5]], [4.0])
    assert fit.rank == 1 and len(fit.dependent) == 2
    assert sum(c * x for c, x in zip((1.0, 2.0, 0.5), fit.solution)) == pytest.approx(4.0, rel=1e-15)


@pytest.mark.parametrize(
    ("design", "target", "match"),
    [
        ([], [], "at least one row"),
        ([[1.0, 2.0], [3.0]], [1.0, 2.0], "rectangular"),
        ([[1.0], [2.0]], [1.0], "one target per row"),
        ([[1.0], [float("nan")]], [1.0, 2.0], "finite"),
        ([[1.0], [2.0]], [1.0, float("inf")], "finite"),
    ],
)
def test_a_malformed_design_is_refused_saying_what_is_wrong(design, target, match):
    with pytest.raises(ValueError, match=match):
        least_squares(design, target)
