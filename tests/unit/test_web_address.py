"""The live view's address: `--web` alone is loopback at a free port, an address is taken as given, and a bad
one is a one-line error naming the setting."""

from __future__ import annotations

import pytest

from soak.address import is_loopback, join_host_port, split_host_port
from soak.config import resolve_config
from soak.errors import ConfigError
from soak.run.live_view import exposure_note


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:0", ("127.0.0.1", 0)), ("0.0.0.0:8080", ("0.0.0.0", 8080)), (":9000", ("127.0.0.1", 9000)),
    ("localhost", ("localhost", 0)), ("[::1]:80", ("::1", 80)), ("::", ("::", 0)), ("[::]", ("::", 0)),
])
def test_addresses_split_into_host_and_port(text, expected):
    assert split_host_port(text) == expected
    assert split_host_port(join_host_port(*expected)) == expected


@pytest.mark.parametrize(("text", "says"), [
    ("8080", "bare number"), ("host:http", "port 'http'"), ("h:70000", "0 to 65535"), ("[::1]x", "[IPv6]:PORT"),
])
def test_a_bad_address_says_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
        split_host_port(text)


@pytest.mark.parametrize(("given", "expected"), [
    ({"web": "on"}, "127.0.0.1:0"), ({"web": "[::1]:8090"}, "[::1]:8090"), ({"web": ":8090"}, "127.0.0.1:8090"),
    ({}, None),
])
def test_the_web_setting_from_flags(given, expected):
    assert resolve_config({"duration": "1m", **given}, environ={}).web == expected


@pytest.mark.parametrize(("value", "expected"), [("1", "127.0.0.1:0"), ("true", "127.0.0.1:0"), ("off", None),
                                                 ("0", None), ("0.0.0.0:9", "0.0.0.0:9")])
def test_the_web_setting_from_the_environment(value, expected):
    assert resolve_config({}, environ={"SOAK_DURATION": "1m", "SOAK_WEB": value}).web == expected


def test_the_web_setting_in_toml_may_be_a_boolean(tmp_path):
    config = tmp_path / "soak.toml"
    config.write_text('duration = "1m"\nweb = true\n')
    assert resolve_config({"config": str(config)}, environ={}).web == "127.0.0.1:0"
    config.write_text('duration = "1m"\nweb = false\n')
    assert resolve_config({"config": str(config)}, environ={}).web is None


def test_a_bad_web_address_names_the_setting():
    with pytest.raises(ConfigError, match=r"invalid setting web \(--web\): address '8080' is a bare number"):
        resolve_config({"duration": "1m", "web": "8080"}, environ={})


def test_only_a_non_loopback_address_warns_of_exposure():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")
    assert exposure_note("127.0.0.1:0") is None and exposure_note("[::1]:80") is None
    assert "no authentication" in exposure_note("0.0.0.0:8090")
