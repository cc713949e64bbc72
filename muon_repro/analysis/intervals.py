"""Interval arithmetic in numpy: unions, intersections, covered length inside windows.

Time accounting needs "how long was *any* of these intervals active", not sums of durations:
nested ops, several threads or streams and overlapping collectives would otherwise be counted
twice. Everything here works on sorted, disjoint segment lists (:class:`Segments`) built once
per category, so the per-step questions are ``searchsorted`` calls, not Python loops.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segments:
    """Disjoint, sorted half-open segments ``[starts[i], ends[i])``; ``cum[i]`` = length before i."""

    starts: np.ndarray
    ends: np.ndarray
    cum: np.ndarray

    @classmethod
    def empty(cls) -> Segments:
        z = np.zeros(0)
        return cls(z, z, np.zeros(1))

    @classmethod
    def union(cls, starts: np.ndarray, ends: np.ndarray) -> Segments:
        """Union of arbitrary intervals (any order, nested, overlapping, zero-length)."""
        starts = np.asarray(starts, dtype=np.float64)
        ends = np.asarray(ends, dtype=np.float64)
        keep = ends > starts
        starts, ends = starts[keep], ends[keep]
        if len(starts) == 0:
            return cls.empty()
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        run_end = np.maximum.accumulate(ends)
        # a new segment begins where an interval starts after everything before it has ended
        new = np.empty(len(starts), bool)
        new[0] = True
        new[1:] = starts[1:] > run_end[:-1]
        first = np.flatnonzero(new)
        seg_starts = starts[first]
        last = np.r_[first[1:] - 1, len(starts) - 1]
        seg_ends = run_end[last]
        return cls._from_disjoint(seg_starts, seg_ends)

    @classmethod
    def _from_disjoint(cls, starts: np.ndarray, ends: np.ndarray) -> Segments:
        cum = np.zeros(len(starts) + 1)
        np.cumsum(ends - starts, out=cum[1:])
        return cls(starts, ends, cum)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def total(self) -> float:
        return float(self.cum[-1])

    def covered_before(self, t: np.ndarray) -> np.ndarray:
        """Length of the union lying before each time in ``t``."""
        t = np.asarray(t, dtype=np.float64)
        if len(self.starts) == 0:
            return np.zeros(t.shape)
        i = np.searchsorted(self.starts, t, side="right") - 1
        inside = np.clip(t - self.starts[np.maximum(i, 0)], 0.0, None)
        inside = np.minimum(inside, (self.ends - self.starts)[np.maximum(i, 0)])
        return np.where(i >= 0, self.cum[np.maximum(i, 0)] + inside, 0.0)

    def covered(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Length of the union inside each window ``[lo[k], hi[k])``."""
        return np.maximum(self.covered_before(hi) - self.covered_before(lo), 0.0)

    def _combine(self, other: Segments, keep_both: bool) -> Segments:
        """Sweep both lists; keep where both are active (``keep_both``) or only ``self`` is."""
        if len(self) == 0 or (len(other) == 0 and keep_both):
            return Segments.empty()
        if len(other) == 0:
            return self
        n, m = len(self), len(other)
        bounds = np.concatenate([self.starts, self.ends, other.starts, other.ends])
        da = np.concatenate([np.ones(n), -np.ones(n), np.zeros(2 * m)])
        db = np.concatenate([np.zeros(2 * n), np.ones(m), -np.ones(m)])
        # at equal times apply ends before starts, so touching segments do not overlap
        order = np.lexsort((da + db, bounds))
        bounds, a, b = bounds[order], np.cumsum(da[order]), np.cumsum(db[order])
        active = (a > 0) & (b > 0) if keep_both else (a > 0) & (b <= 0)
        seg_starts, seg_ends = bounds[:-1][active[:-1]], bounds[1:][active[:-1]]
        keep = seg_ends > seg_starts
        return Segments.union(seg_starts[keep], seg_ends[keep])

    def intersect(self, other: Segments) -> Segments:
        """Segments covered by both."""
        return self._combine(other, keep_both=True)

    def subtract(self, other: Segments) -> Segments:
        """Segments covered by ``self`` and not by ``other``."""
        return self._combine(other, keep_both=False)

    def merge(self, other: Segments) -> Segments:
        """Union of two segment lists."""
        return Segments.union(np.concatenate([self.starts, other.starts]), np.concatenate([self.ends, other.ends]))


def innermost_enclosing(
    query_keys: np.ndarray,
    query_ts: np.ndarray,
    keys: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
) -> np.ndarray:
    """For each query (key, time), the index of the innermost interval with the same key
    that contains the time (``start <= t < end``), or -1.

    Intervals of one key are assumed properly nested or disjoint, as the scopes
    (``record_function``) on one thread are. Sweeps each key once with a stack; the inputs
    here are labels and collectives (thousands), not all events.
    """
    out = np.full(len(query_ts), -1, np.int64)
    if len(starts) == 0 or len(query_ts) == 0:
        return out
    by_key: dict[int, list[int]] = {}
    for i, k in enumerate(keys.tolist()):
        by_key.setdefault(k, []).append(i)
    queries_by_key: dict[int, list[int]] = {}
    for j, k in enumerate(query_keys.tolist()):
        if k in by_key:
            queries_by_key.setdefault(k, []).append(j)
    for k, qs in queries_by_key.items():
        idx = sorted(by_key[k], key=lambda i: (starts[i], -ends[i]))
        qs.sort(key=lambda j: query_ts[j])
        stack: list[int] = []
        p = 0
        for j in qs:
            t = query_ts[j]
            while p < len(idx) and starts[idx[p]] <= t:
                while stack and ends[stack[-1]] <= starts[idx[p]]:
                    stack.pop()
                stack.append(idx[p])
                p += 1
            while stack and ends[stack[-1]] <= t:
                stack.pop()
            if stack:
                out[j] = stack[-1]
    return out
