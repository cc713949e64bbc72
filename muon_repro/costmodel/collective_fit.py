"""From the collective timings of a calibration's worlds to the profile's alpha-beta fits.

``t = alpha + bytes / beta`` per collective and group size, ``bytes`` what one rank sends by the
ring model (so beta is a bus bandwidth), fitted by least squares on relative error over the
sizes measured. Imports no torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from muon_repro.costmodel.machine_profile import CollectiveFit


@dataclass(frozen=True)
class AlphaBeta:
    """One fit: latency (s), bandwidth (bytes/s), and its root-mean-square relative error over the samples."""

    alpha_s: float
    beta_bytes_per_s: float
    rel_rmse: float


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float]) -> AlphaBeta:
    """Least squares of ``t = alpha + bytes / beta`` on relative error (each sample weighted by
    ``1/t``, so small and large sizes count alike); ``alpha`` is kept >= 0 (refit through 0)."""
    if len(nbytes) != len(seconds) or len(nbytes) < 2:
        raise ValueError(
            f"an alpha-beta fit needs at least 2 (bytes, seconds) samples of equal count, got {len(nbytes)} and {len(seconds)}"
        )
    import numpy as np

    x, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if np.any(t <= 0) or np.any(x < 0):
        raise ValueError("alpha-beta samples need positive times and non-negative byte counts")
    design = np.column_stack((1 / t, x / t))
    (alpha, inv_beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha, inv_beta = 0.0, float(np.sum(x / t) / np.sum((x / t) ** 2))
    if inv_beta <= 0:
        raise ValueError(
            f"collective times do not grow with the bytes ({list(zip(x.tolist(), t.tolist()))}); "
            "measure on a quieter machine or over larger sizes"
        )
    predicted = alpha + x * inv_beta
    return AlphaBeta(float(alpha), float(1 / inv_beta), float(np.sqrt(np.mean(((predicted - t) / t) ** 2))))


def collective_rows(result: dict) -> list[dict]:
    """One sample row per (op, group size, bytes): mean over ranks, median over repetitions (a step
    sums many collectives, so it sees their typical time, scheduling hiccups included)."""
    world = result["world_size"]
    by_key: dict[tuple[str, int, int], list[list[float]]] = {}
    for rank_samples in result["samples"]:
        for s in rank_samples:
            by_key.setdefault((s["op"], s["group_size"], s["bytes"]), []).append(s["times"])
    rows = []
    for (op, group_size, nbytes), per_rank in by_key.items():
        per_rep = [statistics.fmean(times) for times in zip(*per_rank)]
        rows.append(
            {
                "kind": "collective_sample",
                "op": op,
                "group_size": group_size,
                "world_size": world,
                "bytes": nbytes,
                "seconds": statistics.median(per_rep),
            }
        )
    return rows


def collective_fits(samples: list[dict]) -> tuple[list[CollectiveFit], list[dict]]:
    """An alpha-beta fit per (op, group size, world size) of the samples, and its table rows."""
    keys = sorted({(s["op"], s["group_size"], s["world_size"]) for s in samples})
    fits, rows = [], []
    for key in keys:
        op, group_size, world = key
        mine = sorted((s["bytes"], s["seconds"]) for s in samples if (s["op"], s["group_size"], s["world_size"]) == key)
        fit = fit_alpha_beta([b for b, _ in mine], [t for _, t in mine])
        alpha_us, beta_gbps = fit.alpha_s * 1e6, fit.beta_bytes_per_s / 1e9
        fits.append(
            CollectiveFit(
                op=op,
                alpha_us=alpha_us,
                beta_gbps=beta_gbps,
                group_size=group_size,
                world_size=world,
                samples=tuple((float(b), float(t)) for b, t in mine),
            )
        )
        rows.append(
            {
                "kind": "collective",
                "op": op,
                "group_size": group_size,
                "world_size": world,
                "alpha_us": alpha_us,
                "beta_gbps": beta_gbps,
                "fit_rel_rmse": fit.rel_rmse,
            }
        )
    return fits, rows
