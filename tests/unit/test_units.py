import pytest

from soak.errors import ConfigError
from soak.units import format_duration, parse_bytes, parse_duration


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("5m", 300), ("24h", 86400), ("1h30m", 5400), ("250ms", 0.25), ("2d", 172800), ("42", 42),
    ("1.5h", 5400),
])
def test_parse_duration_accepts_the_documented_forms(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "h", "1h 30m", "m5", "-5m", "5mm"])
def test_parse_duration_rejects_malformed_text_with_a_clear_message(text):
    with pytest.raises(ConfigError, match="duration"):
        parse_duration(text)


def test_format_duration_round_trips_whole_units():
    assert format_duration(5400) == "1h30m"
    assert format_duration(42.5) == "42.5s"
    assert parse_duration(format_duration(93784)) == 93784


@pytest.mark.parametrize("text, size", [("4096", 4096), ("512KiB", 524288), ("2MiB", 2097152), ("1.5GB", 1.5e9)])
def test_parse_bytes(text, size):
    assert parse_bytes(text) == size


def test_parse_bytes_rejects_garbage():
    with pytest.raises(ConfigError, match="byte size"):
        parse_bytes("lots")
