"""Quintic Newton-Schulz orthogonalization (Keller Jordan's coefficients, as in Moonlight).

Maps a matrix ``G = U S V^T`` to approximately ``U S' V^T`` with every singular value in
``S'`` pushed into a band around 1 (roughly [0.7, 1.2] after 5 steps), using only matmuls. Its FLOPs:
:func:`muon_repro.formulas.newton_schulz_flops`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_EPS = 1e-7
# Where :func:`orthogonalize_many` runs a shape's matrices as one batch: on accelerators, where each operator call is
# a kernel launch, and on the meta device, where the calls are counted (muon_repro.optim.op_calls). A CPU runs them
# one at a time, with the same bits: there a batch outgrows the caches one matrix fits in, and the step of the small
# preset took 13% longer batched (243 against 215 ms, one thread), while a call costs microseconds.
BATCHED_DEVICES = ("cuda", "meta")


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
    if tall:  # a contiguous copy: the matmuls then see one memory layout whichever way a matrix comes
        X = X.mT.contiguous()
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


def orthogonalize_many(
    matrices: Sequence[torch.Tensor],
    steps: int = 5,
    dtype: torch.dtype | None = None,
    *,
    scales: Sequence[float] | None = None,
    round_to: torch.dtype | None = None,
    batched: bool | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Orthogonalize every matrix of ``matrices`` (each ``[..., A, B]``: a batch of matrices is its matrices), those
    of one shape up to transposition in one batched chain (``batched``; default: on :data:`BATCHED_DEVICES`).

    Tall matrices are transposed so that each group shares an orientation (rows <= columns: the Gram matrix is the
    small one), stacked into one contiguous ``[n, rows, cols]`` batch and run through
    :func:`zeropower_via_newtonschulz5`'s batched path: the operator calls grow with the number of distinct shapes,
    not of matrices. Every matrix is computed as it is alone (the batched matmuls work slice by slice, and a tall
    matrix alone is transposed into the same contiguous layout), so no result depends on its batch-mates.
    ``round_to``: round the inputs to that dtype and back first (where a distributed step's gathers would).
    Returns the updates (views of each group's output, in the input's dtype, shape and order) and the RMS of each
    times its ``scales`` entry (default 1): 0-dim tensors, computed per group rather than matrix by matrix.
    """
    updates: list[torch.Tensor | None] = [None] * len(matrices)
    rms: list[torch.Tensor | None] = [None] * len(matrices)
    groups: dict[tuple, list[int]] = {}
    for i, m in enumerate(matrices):
        if m.ndim < 2:
            raise ValueError(f"orthogonalize_many takes matrices, got shape {tuple(m.shape)} at position {i}")
        rows, cols = sorted(m.shape[-2:])
        groups.setdefault((rows, cols, m.dtype, m.device), []).append(i)
    for (_, _, _, device), members in groups.items():
        if not (device.type in BATCHED_DEVICES if batched is None else batched):  # one at a time, the same bits
            for i in members:
                m = matrices[i] if round_to is None else matrices[i].to(round_to).to(matrices[i].dtype)
                updates[i] = zeropower_via_newtonschulz5(m, steps, dtype)
                size = updates[i].float().square().mean().sqrt()
                rms[i] = size * scales[i] if scales is not None else size
            continue
        wide = [i for i in members if matrices[i].size(-2) <= matrices[i].size(-1)]
        tall = [i for i in members if matrices[i].size(-2) > matrices[i].size(-1)]
        order = wide + tall
        plain = all(matrices[i].ndim == 2 for i in members)  # the usual case: one slice each, stacked in one call
        parts = [_stacked([matrices[i] for i in side], plain) for side in (wide, tall) if side]
        if tall:
            parts[-1] = parts[-1].mT
        batch = (parts[0] if len(parts) == 1 else torch.cat(parts)).contiguous()
        if round_to is not None and round_to != batch.dtype:
            batch = batch.to(round_to).to(matrices[members[0]].dtype)
        out = zeropower_via_newtonschulz5(batch, steps, dtype)
        sizes = _slices_rms(out, [1 if plain else _count(matrices[i]) for i in order])
        if scales is not None:
            sizes = sizes * torch.tensor([scales[i] for i in order], dtype=sizes.dtype, device=sizes.device)
        n_wide = sum(1 if plain else _count(matrices[i]) for i in wide)
        pieces = _unstacked(out[:n_wide], [matrices[i] for i in wide], plain) if wide else []
        if tall:
            pieces += _unstacked(out[n_wide:].mT, [matrices[i] for i in tall], plain)
        for i, u, r in zip(order, pieces, sizes.unbind(0)):
            updates[i], rms[i] = u, r
    return updates, rms  # type: ignore[return-value]


def _count(m: torch.Tensor) -> int:
    """Matrices in ``m`` (``[..., A, B]``)."""
    return m.numel() // (m.size(-2) * m.size(-1)) if m.numel() else 0


def _stacked(matrices: list[torch.Tensor], plain: bool) -> torch.Tensor:
    if plain:
        return torch.stack(matrices)
    return torch.cat([m.reshape(-1, *m.shape[-2:]) for m in matrices])


def _unstacked(out: torch.Tensor, like: list[torch.Tensor], plain: bool) -> list[torch.Tensor]:
    """``out``'s matrices back as tensors shaped like ``like`` (views)."""
    if plain:
        return list(out.unbind(0))
    pieces, k = [], 0
    for m in like:
        n = _count(m)
        pieces.append(out[k : k + n].reshape(m.shape))
        k += n
    return pieces


def _slices_rms(out: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """The RMS of each run of ``counts`` consecutive matrices of ``out``: one per input tensor."""
    square_means = out.float().square().mean(dim=(-2, -1))
    if all(n == 1 for n in counts):
        return square_means.sqrt()
    owner = torch.repeat_interleave(torch.arange(len(counts), device=out.device), torch.tensor(counts, device=out.device))
    sums = torch.zeros(len(counts), dtype=square_means.dtype, device=out.device).index_add_(0, owner, square_means)
    return (sums / torch.tensor(counts, dtype=square_means.dtype, device=out.device)).sqrt()
