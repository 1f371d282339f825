import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.spec import format_duration, format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("6h", 21600),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1d2h3m4s", 93784),
        ("1.5h", 5400),
        ("1h 30m", 5400),
        ("90", 90),
        (90, 90),
        (2.5, 2.5),
    ],
)
def test_duration_forms_parse_to_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "bad", ["-5m", "10x", "", "1h30", "m", "30m1h", "1e3", "0s", 0, -1, True, None, [5]]
)
def test_duration_rejects_negative_zero_unknown_units_and_other_types(bad):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


@given(st.integers(min_value=1, max_value=10**9))
def test_format_duration_round_trips_whole_seconds(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.floats(min_value=1e-6, max_value=1e12, allow_nan=False, allow_infinity=False))
def test_format_duration_round_trips_fractional_seconds(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_format_duration_uses_the_largest_units():
    assert format_duration(5400) == "1h30m"
    assert format_duration(90061) == "1d1h1m1s"
    assert format_duration(0.5) == "0.5s"


@pytest.mark.parametrize(
    ("text", "gb"),
    [
        ("32GB", 32),
        ("32gb", 32),
        ("512Gi", 512),
        ("8 GiB", 8),
        ("1TB", 1024),
        ("2Ti", 2048),
        ("512MB", 0.5),
        ("64", 64),
        (64, 64),
        (0.5, 0.5),
    ],
)
def test_size_forms_parse_to_gb(text, gb):
    assert math.isclose(parse_size(text), gb)


@pytest.mark.parametrize(
    "bad", ["32XB", "-1GB", "0", "GB", "32B", "1Gb2", "", True, None, {"a": 1}]
)
def test_size_rejects_bad_forms(bad):
    with pytest.raises(ValueError, match="size"):
        parse_size(bad)


@given(st.floats(min_value=1e-3, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_format_size_round_trips(gb):
    assert parse_size(format_size(gb)) == gb
