"""Newton-Schulz orthogonalization: the quintic Muon runs, and two variants of the iteration to compare it with.

Each maps a matrix ``G = U S V^T`` to approximately ``U S' V^T`` with every singular value in ``S'`` pushed towards 1,
using only matmuls, by composing odd polynomials ``p(x) = a x + b x^3 + c x^5`` applied to the singular values:

* ``quintic`` (the default): Keller Jordan's coefficients at every step, as in Moonlight; after 5 steps the singular
  values lie roughly in [0.7, 1.2] (it plateaus there: it does not converge to the polar factor). Its FLOPs:
  :func:`muon_repro.formulas.newton_schulz_flops`.
* ``polar_express``: the Polar Express's per-step polynomials (Amsel, Persson, Musco and Gower, 2025, arXiv
  2505.16932, Algorithm 1: each step's polynomial is the minimax-optimal one for the interval the previous steps left,
  with their safety factor 1.01 and the norm scaled by 1.01), which converge to the polar factor.
* ``gram``: the same Polar Express polynomials, iterated on the Gram matrix of the short side (Dao AI Lab's Gram
  Newton-Schulz): with ``X_k = Q_k X_0`` and ``R_k = X_k X_k^T``, a step is ``H = a I + b R + c R^2``,
  ``Q <- H Q``, ``R <- H R H``, all ``n x n`` (n: the short side), and ``X = Q X_0`` once at the end; it restarts
  (``X_0 <- Q X_0``, ``Q <- I``) after :data:`GRAM_RESTARTS` to shed the rounding the products accumulate. For a
  matrix ``n x m`` with ``m >> n`` it does up to ``8 n^3`` of work per step (less on the first step after a start
  and on the last; :func:`muon_repro.formulas.gram_newton_schulz_flops`), plus ``2 n^2 m`` at each start and at the
  end, where the others do ``4 n^2 m + 2 n^3`` per step.

Which one a run uses is ``ns_method`` (the optimizers' parameter, the benchmark's config field);
:mod:`muon_repro.optim.polar_accuracy` measures each against the SVD's exact polar factor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from muon_repro.phases import NS_METHODS

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_EPS = 1e-7
# Polar Express's degree-5 polynomials (its Algorithm 1), one per step; every step past the list repeats the last.
_POLAR_EXPRESS_RAW = (
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
)
POLAR_EXPRESS_SAFETY = 1.01
"""Each polynomial but the last is evaluated at ``x / 1.01`` (so rounding cannot push a singular value past the
interval it was optimized for), and the input norm is scaled by 1.01 too (the paper's half-precision guard)."""
POLAR_EXPRESS_COEFFICIENTS = tuple(
    (a / POLAR_EXPRESS_SAFETY, b / POLAR_EXPRESS_SAFETY**3, c / POLAR_EXPRESS_SAFETY**5) for a, b, c in _POLAR_EXPRESS_RAW[:-1]
) + (_POLAR_EXPRESS_RAW[-1],)
GRAM_RESTARTS = (2,)
"""Steps before which the Gram iteration starts again from ``Q X_0`` (Dao AI Lab's default: one restart, at step 2)."""
# Where :func:`orthogonalize_many` runs a shape's matrices as one batch: on accelerators, where each operator call is
# a kernel launch, and on the meta device, where the calls are counted (muon_repro.optim.op_calls). A CPU runs them
# one at a time: there a batch outgrows the caches one matrix fits in, and the step of the small preset took 13% longer
# batched (243 against 215 ms, one thread), while a call costs microseconds.
BATCHED_DEVICES = ("cuda", "meta")


def check_ns_method(method: str) -> str:
    """``method`` if it is one of :data:`NS_METHODS`, else a :class:`ValueError` naming them."""
    if method not in NS_METHODS:
        raise ValueError(f"ns_method must be one of {', '.join(NS_METHODS)}, got {method!r}")
    return method


def step_coefficients(method: str, steps: int) -> list[tuple[float, float, float]]:
    """The ``(a, b, c)`` of each of ``steps`` steps of ``method``."""
    if check_ns_method(method) == "quintic":
        return [NS_COEFFICIENTS] * steps
    schedule = POLAR_EXPRESS_COEFFICIENTS
    return [schedule[min(k, len(schedule) - 1)] for k in range(steps)]


def default_ns_dtype(device: torch.device | str) -> torch.dtype:
    """bf16 on CUDA (where tensor cores make it the fast path), fp32 elsewhere (exact tests on CPU)."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def zeropower_via_newtonschulz5(G: torch.Tensor, steps: int = 5, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Orthogonalize ``G`` (``[..., A, B]``, batched over leading dims) with ``steps`` quintic steps.

    Runs in ``dtype`` (default: :func:`default_ns_dtype` of ``G``'s device) and returns a tensor of
    ``G``'s dtype. Tall matrices are transposed so the Gram matrix ``X X^T`` is the small one.
    """
    return orthogonalize(G, steps, dtype, "quintic")


def orthogonalize(G: torch.Tensor, steps: int = 5, dtype: torch.dtype | None = None, method: str = "quintic") -> torch.Tensor:
    """Orthogonalize ``G`` (``[..., A, B]``, batched over leading dims) with ``steps`` steps of ``method`` (one of
    :data:`NS_METHODS`), in ``dtype`` (default: :func:`default_ns_dtype` of ``G``'s device); returns ``G``'s dtype."""
    if G.ndim < 2:
        raise ValueError(f"Newton-Schulz needs a matrix (or a batch of them), got shape {tuple(G.shape)}")
    if steps < 0:
        raise ValueError(f"Newton-Schulz steps must be >= 0, got {steps}")
    coefficients = step_coefficients(method, steps)
    X = G.to(dtype or default_ns_dtype(G.device))
    tall = G.size(-2) > G.size(-1)
    # Contiguous, rows <= columns: the matmuls see one memory layout whichever way (and with whatever strides, a
    # transposed parameter's gradient included) a matrix comes, so its bits do not depend on how it was stored.
    X = X.mT.contiguous() if tall else X.contiguous()
    norm = X.norm(dim=(-2, -1), keepdim=True)
    X = X / (norm + NS_EPS) if method == "quintic" else X / (norm * POLAR_EXPRESS_SAFETY + NS_EPS)
    batch = X.shape[:-2]
    if X.ndim > 3:
        X = X.reshape(-1, *X.shape[-2:])
    X = _gram_chain(X, coefficients) if method == "gram" else _odd_polynomial_chain(X, coefficients)
    X = X.reshape(*batch, *X.shape[-2:])
    if tall:
        X = X.mT
    return X.to(G.dtype)


def _odd_polynomial_chain(X: torch.Tensor, coefficients: Sequence[tuple[float, float, float]]) -> torch.Tensor:
    """``X <- a X + b (X X^T) X + c (X X^T)^2 X`` for each ``(a, b, c)``; ``X``: ``[A, B]`` or ``[n, A, B]``, A <= B.

    The element-wise terms ride in the matmuls' alpha/beta (one BLAS call each, no temporaries):
    ``B = b A + c A A``, ``X = a X + B X``."""
    mm, addmm = (torch.mm, torch.addmm) if X.ndim == 2 else (torch.bmm, torch.baddbmm)
    for a, b, c in coefficients:
        A = mm(X, X.mT)
        B = addmm(A, A, A, beta=b, alpha=c)
        X = addmm(X, B, X, beta=a)
    return X


def _gram_chain(X: torch.Tensor, coefficients: Sequence[tuple[float, float, float]]) -> torch.Tensor:
    """The same polynomials applied through the Gram matrix ``R = X X^T`` (``[A, A]``): ``X_k = Q_k X_0`` with
    ``H = a I + b R + c R^2``, ``Q <- H Q``, ``R <- H R H``, restarting from ``X_0 <- Q X_0`` at :data:`GRAM_RESTARTS`."""
    mm, addmm = (torch.mm, torch.addmm) if X.ndim == 2 else (torch.bmm, torch.baddbmm)
    eye = torch.eye(X.size(-2), dtype=X.dtype, device=X.device).expand_as(X[..., : X.size(-2)])
    Q: torch.Tensor | None = None  # None: the identity (no product yet since the last restart)
    R = mm(X, X.mT)
    for k, (a, b, c) in enumerate(coefficients):
        if k in GRAM_RESTARTS and Q is not None:
            X, Q = mm(Q, X), None
            R = mm(X, X.mT)
        H = addmm(R, R, R, beta=b, alpha=c) + a * eye
        Q = H if Q is None else mm(H, Q)
        if k + 1 < len(coefficients):
            R = mm(mm(H, R), H)
    return X if Q is None else mm(Q, X)


def orthogonalize_many(
    matrices: Sequence[torch.Tensor],
    steps: int = 5,
    dtype: torch.dtype | None = None,
    *,
    scales: Sequence[float] | None = None,
    round_to: torch.dtype | None = None,
    batched: bool | None = None,
    method: str = "quintic",
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Orthogonalize every matrix of ``matrices`` (each ``[..., A, B]``: a batch of matrices is its matrices), those
    of one shape up to transposition in one batched chain (``batched``; default: on :data:`BATCHED_DEVICES`).

    Tall matrices are transposed so that each group shares an orientation (rows <= columns: the Gram matrix is the
    small one), stacked into one contiguous ``[n, rows, cols]`` batch and run through :func:`orthogonalize`'s
    batched path (``method``: one of :data:`NS_METHODS`): the operator calls grow with the number of distinct
    shapes, not of matrices. No result depends on its batch-mates (the batched matmuls work slice by slice, and a
    tall matrix alone is transposed into the same contiguous layout). Whether the batched chain rounds exactly as the
    one-matrix chain (``bmm`` against ``mm``) is the backend's: on CPU they agree at the models' shapes but not on
    every small one (5 x 7 matrices differ in the last bits), so a CPU runs one matrix at a time.
    ``round_to``: round the inputs to that dtype and back first (where a distributed step's gathers would).
    Returns the updates (views of each group's output, in the input's dtype, shape and order) and the RMS of each
    times its ``scales`` entry (default 1): 0-dim tensors, computed per group rather than matrix by matrix.
    """
    check_ns_method(method)
    updates: list[torch.Tensor | None] = [None] * len(matrices)
    rms: list[torch.Tensor | None] = [None] * len(matrices)
    groups: dict[tuple, list[int]] = {}
    for i, m in enumerate(matrices):
        if m.ndim < 2:
            raise ValueError(f"orthogonalize_many takes matrices, got shape {tuple(m.shape)} at position {i}")
        rows, cols = sorted(m.shape[-2:])
        groups.setdefault((rows, cols, m.dtype, m.device), []).append(i)
    for (_, _, _, device), members in groups.items():
        if not (device.type in BATCHED_DEVICES if batched is None else batched):  # one at a time
            for i in members:
                m = matrices[i] if round_to is None else matrices[i].to(round_to).to(matrices[i].dtype)
                updates[i] = orthogonalize(m, steps, dtype, method)
                unscaled_rms = updates[i].float().square().mean().sqrt()
                rms[i] = unscaled_rms * scales[i] if scales is not None else unscaled_rms
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
        out = orthogonalize(batch, steps, dtype, method)
        slice_rms = _slices_rms(out, [1 if plain else _count(matrices[i]) for i in order])
        if scales is not None:
            slice_rms = slice_rms * _scales_of(slice_rms, [scales[i] for i in order])
        n_wide = sum(1 if plain else _count(matrices[i]) for i in wide)
        pieces = _unstacked(out[:n_wide], [matrices[i] for i in wide], plain) if wide else []
        if tall:
            pieces += _unstacked(out[n_wide:].mT, [matrices[i] for i in tall], plain)
        for i, u, r in zip(order, pieces, slice_rms.unbind(0)):
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


def _scales_of(rms: torch.Tensor, scales: list[float]) -> float | torch.Tensor:
    """What multiplies a shape group's RMS values: its one scale as a number (the scale is a function of the shape,
    so a group has one), else a tensor copied without waiting. A blocking host-to-device copy would synchronize a
    CUDA stream inside the optimizer step, for a statistic, and only Muon's step would pay it."""
    if len(set(scales)) == 1:
        return scales[0]
    return torch.tensor(scales, dtype=rms.dtype).to(rms.device, non_blocking=True)


def _slices_rms(out: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """The RMS of each run of ``counts`` consecutive matrices of ``out``: one per input tensor."""
    square_means = out.float().square().mean(dim=(-2, -1))
    if all(n == 1 for n in counts):
        return square_means.sqrt()
    owner = torch.repeat_interleave(torch.arange(len(counts), device=out.device), torch.tensor(counts, device=out.device))
    sums = torch.zeros(len(counts), dtype=square_means.dtype, device=out.device).index_add_(0, owner, square_means)
    return (sums / torch.tensor(counts, dtype=square_means.dtype, device=out.device)).sqrt()
