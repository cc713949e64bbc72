"""tools.paired_versions' summary: the geometric-mean ratio of paired rounds and its t interval."""

from __future__ import annotations

import math

import pytest

from tools.paired_versions import summary


def _pair(old: float, new: float) -> dict:
    return {v: {"g/run": {"timed_optimizer_ms": ms, "timed_step_ms": 2 * ms}} for v, ms in (("old", old), ("new", new))}


def test_the_ratio_is_the_geometric_mean_of_the_pairs_and_its_interval_covers_it():
    pairs = [_pair(100, 90), _pair(200, 190), _pair(110, 95), _pair(105, 99)]  # a slow pair moves both versions
    s = summary(pairs)["g/run timed_optimizer_ms"]
    ratios = [0.9, 0.95, 95 / 110, 99 / 105]
    assert s["ratio"] == pytest.approx(math.exp(sum(map(math.log, ratios)) / 4))
    assert s["low"] < s["ratio"] < s["high"] < 1  # faster in every pair: the whole interval below 1
    assert (s["old_ms"], s["new_ms"], s["pairs"]) == (107.5, 97.0, 4)


def test_no_change_gives_an_interval_around_one():
    s = summary([_pair(100, 101), _pair(100, 99), _pair(120, 121), _pair(120, 119)])["g/run timed_step_ms"]
    assert s["low"] < 1 < s["high"]
