import itertools

import pytest
import torch

from muon_repro.formulas import newton_schulz_flops
from muon_repro.optim import zeropower_via_newtonschulz5

SHAPES = [(64, 16), (16, 64), (32, 32), (3, 24, 40), (2, 2, 40, 24)]


def newton_schulz_float64(G: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """The quintic iteration written out again, per matrix, in float64."""
    a, b, c = 3.4445, -4.7750, 2.0315
    out = torch.empty_like(G, dtype=torch.float64)
    for index in itertools.product(*(range(d) for d in G.shape[:-2])):
        X = G[index].double()
        tall = X.shape[0] > X.shape[1]
        if tall:
            X = X.T
        X = X / (torch.linalg.matrix_norm(X) + 1e-7)
        for _ in range(steps):
            A = X @ X.T
            X = a * X + (b * A + c * A @ A) @ X
        out[index] = X.T if tall else X
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_singular_values_land_in_band(shape, dtype):
    G = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    X = zeropower_via_newtonschulz5(G, dtype=dtype)
    assert X.shape == G.shape and X.dtype == G.dtype
    s = torch.linalg.svdvals(X.double())
    # Quintic coefficients trade exact orthogonality for speed: singular values ~[0.68, 1.18].
    assert s.min() > 0.6 and s.max() < 1.25, (s.min().item(), s.max().item())


@pytest.mark.parametrize("shape", SHAPES)
def test_fp32_matches_float64_iteration(shape):
    G = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    X = zeropower_via_newtonschulz5(G, dtype=torch.float32)
    ref = newton_schulz_float64(G)
    assert torch.allclose(X.double(), ref, rtol=0, atol=2e-5), (X.double() - ref).abs().max()


def test_batched_equals_per_matrix():
    G = torch.randn(4, 24, 40, generator=torch.Generator().manual_seed(3))
    batched = zeropower_via_newtonschulz5(G, dtype=torch.float32)
    for i in range(4):
        assert torch.allclose(batched[i], zeropower_via_newtonschulz5(G[i], dtype=torch.float32), atol=1e-6)


def test_default_dtype_is_fp32_on_cpu():
    G = torch.randn(8, 16, generator=torch.Generator().manual_seed(4))
    assert torch.equal(zeropower_via_newtonschulz5(G), zeropower_via_newtonschulz5(G, dtype=torch.float32))


def test_rejects_vectors():
    with pytest.raises(ValueError, match=r"shape \(7,\)"):
        zeropower_via_newtonschulz5(torch.ones(7))


def test_flops_formula():
    # m <= n: per step 4 m^2 n + 2 m^3; transposition does not change the cost.
    assert newton_schulz_flops((16, 64), steps=1) == 4 * 16 * 16 * 64 + 2 * 16**3
    assert newton_schulz_flops((64, 16), steps=5) == 5 * (4 * 16 * 16 * 64 + 2 * 16**3)
    assert newton_schulz_flops((3, 16, 64), steps=1) == 3 * newton_schulz_flops((16, 64), steps=1)
