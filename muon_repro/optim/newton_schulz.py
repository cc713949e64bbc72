"""Quintic Newton-Schulz orthogonalization (Keller Jordan's coefficients, as in Moonlight).

Maps a matrix ``G = U S V^T`` to approximately ``U S' V^T`` with every singular value in
``S'`` pushed into a band around 1 (roughly [0.7, 1.2] after 5 steps), using only matmuls. Its FLOPs:
:func:`muon_repro.formulas.newton_schulz_flops`.
"""

from __future__ import annotations

import torch

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_EPS = 1e-7


def default_ns_dtype(device: torch.device | str) -> torch.dtype:
    """bf16 on CUDA (where tensor cores make it the fast path), fp32 elsewhere (exact tests on CPU)."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def zeropower_via_newtonschulz5(G: torch.Tensor, steps: int = 5, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Orthogonalize ``G`` (``[..., A, B]``, batched over leading dims) with ``steps`` quintic steps.

    Runs in ``dtype`` (default: :func:`default_ns_dtype` of ``G``'s device) and returns a tensor of
    ``G``'s dtype. Tall matrices are transposed so the Gram matrix ``X X^T`` is the small one.
    """
    if G.ndim < 2:
        raise ValueError(f"Newton-Schulz needs a matrix (or a batch of them), got shape {tuple(G.shape)}")
    if steps < 0:
        raise ValueError(f"Newton-Schulz steps must be >= 0, got {steps}")
    a, b, c = NS_COEFFICIENTS
    X = G.to(dtype or default_ns_dtype(G.device))
    tall = G.size(-2) > G.size(-1)
    if tall:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + NS_EPS)
    if X.ndim == 2:
        # The element-wise terms ride in the matmuls' alpha/beta (one BLAS call each, no
        # temporaries): B = b A + c A A, X = a X + B X.
        for _ in range(steps):
            A = X @ X.mT
            B = torch.addmm(A, A, A, beta=b, alpha=c)
            X = torch.addmm(X, B, X, beta=a)
    else:
        batch = X.shape[:-2]
        X = X.reshape(-1, *X.shape[-2:])
        for _ in range(steps):
            A = torch.bmm(X, X.mT)
            B = torch.baddbmm(A, A, A, beta=b, alpha=c)
            X = torch.baddbmm(X, B, X, beta=a)
        X = X.reshape(*batch, *X.shape[-2:])
    if tall:
        X = X.mT
    return X.to(G.dtype)
