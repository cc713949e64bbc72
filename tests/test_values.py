"""muon_repro.values: a count is an int >= 1 and an index an int >= 0, never a bool, a float or a string."""

from __future__ import annotations

import pytest

from muon_repro.values import is_count, is_index


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, 0, -1])
def test_is_count_refuses_what_is_not_a_whole_number_from_one(value):
    assert is_count(value) is False


@pytest.mark.parametrize("value", [1, 10**20])
def test_is_count_accepts_ints_from_one(value):
    assert is_count(value) is True


@pytest.mark.parametrize("value", [True, False, 0.0, "0", None, -1])
def test_is_index_refuses_what_is_not_a_whole_number_from_zero(value):
    assert is_index(value) is False


@pytest.mark.parametrize("value", [0, 1, 10**20])
def test_is_index_accepts_ints_from_zero(value):
    assert is_index(value) is True
