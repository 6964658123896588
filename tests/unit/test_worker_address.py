"""`--master-bind` and `soak worker --master` addresses: HOST[:PORT], the port defaulting to Locust's 5557."""

from __future__ import annotations

import pytest

from soak.config import MASTER_PORT, resolve_config, split_address
from soak.errors import ConfigError


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.2", ("10.0.0.2", MASTER_PORT)), ("10.0.0.2:6000", ("10.0.0.2", 6000)),
    ("soak-master.soak.svc:5557", ("soak-master.soak.svc", 5557)), ("0.0.0.0:1", ("0.0.0.0", 1)),
])
def test_addresses_split_into_host_and_port(text, expected):
    assert split_address(text, MASTER_PORT) == expected


@pytest.mark.parametrize("text", ["", ":5557", "host:", "host:0", "host:65536", "host:http", "a b:1", "http://h:1"])
def test_a_bad_address_is_refused(text):
    with pytest.raises(ValueError, match="address"):
        split_address(text, MASTER_PORT)


def test_a_bad_master_bind_names_the_setting_and_where_it_came_from():
    with pytest.raises(ConfigError) as caught:
        resolve_config({"duration": "1m"}, environ={"SOAK_MASTER_BIND": "0.0.0.0:99999"})
    assert str(caught.value).startswith("invalid setting master-bind (SOAK_MASTER_BIND): address '0.0.0.0:99999'")


def test_workers_add_up_and_binding_defaults_to_loopback():
    config = resolve_config({"duration": "1m", "workers": 2, "expect_workers": 3}, environ={})
    assert config.load.worker_count == 5
    assert config.load.master_bind == f"127.0.0.1:{MASTER_PORT}" and config.load.worker_wait_s == 300.0
