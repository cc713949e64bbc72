"""How the report writes a number (report/formatting.py), at the examples its docstrings give and at each boundary
where the format changes: every figure and sentence goes through these, so one wrong digit here is wrong everywhere."""

from __future__ import annotations

import pytest

from muon_repro.report.data import MissingMetric
from muon_repro.report.formatting import count, gib, in_unit, mb, mib, ms, pct, percent, plain, ratio


def test_milliseconds_keep_three_significant_digits_up_to_100_either_sign():
    assert [ms(v) for v in (123.4, 99.96, 12.34, 10.0, 9.999, 1.234)] == [
        "123 ms",
        "100.0 ms",
        "12.3 ms",
        "10.0 ms",
        "10.00 ms",
        "1.23 ms",
    ]
    assert ms(-123.4) == "-123 ms" and ms(-12.34) == "-12.3 ms" and ms(12.34, signed=True) == "+12.3 ms"


def test_a_fraction_is_written_in_percent_with_its_sign():
    assert pct(0.336) == "33.6%" and pct(-0.05) == "-5.0%" and pct(0.05, signed=True) == "+5.0%"


@pytest.mark.parametrize(
    "fraction, said",
    [
        (0.012, "1.2%"),
        (0.5, "50%"),
        (1.03, "103%"),
        (0.0012, "0.12%"),
        (0.10, "10%"),
        (0.01, "1%"),
        (0.0, "0%"),
        (-0.034, "-3.4%"),
    ],
)
def test_a_percentage_has_two_significant_digits_and_never_an_exponent(fraction, said):
    assert percent(fraction) == said


def test_a_signed_percentage_and_more_digits():
    assert percent(0.034, signed=True) == "+3.4%" and percent(0.01234, digits=3) == "1.23%"


@pytest.mark.parametrize(
    "value, said",
    [(512, "512"), (999, "999"), (1000, "1k"), (1024, "1.02k"), (223_400, "223k"), (999_499, "999k"), (999_500, "1M")],
)
def test_a_count_is_written_in_thousands_and_millions_of_ten(value, said):
    assert count(value) == said
    assert count(1_290_000) == "1.29M"


def test_a_plain_number_has_no_exponent_and_whole_digits_from_its_limit():
    assert [plain(v) for v in (0.01, 1.0, 250.0, 999.4, 1000.0, 12345.6)] == ["0.01", "1", "250", "999", "1000", "12346"]


def test_bytes_are_written_in_mb_of_a_million_mib_and_gib_of_powers_of_two():
    assert mb(10_490_000) == "10.49 MB" and mib(3 * 2**20) == "3.0 MiB" and gib(3 * 2**30) == "3.0 GiB"
    assert mb(2**20) == "1.05 MB" and mib(1_000_000) == "1.0 MiB" and gib(1e9) == "0.9 GiB"


def test_the_studys_numbers_keep_the_decimals_it_published_by_unit():
    assert in_unit(0.011, "fraction") == "1.10%" and in_unit(0.5676, "ratio") == "0.568×"
    assert in_unit(40.0, "count") == "40" and in_unit(139.531, "ms") == "139.53 ms" and ratio(1.234) == "1.23×"


def test_a_missing_value_is_refused_by_name():
    with pytest.raises(MissingMetric, match="runs.step_ms"):
        ms(float("nan"), "runs.step_ms")
    with pytest.raises(MissingMetric, match="claims.measured_value"):
        percent(None, "claims.measured_value")
