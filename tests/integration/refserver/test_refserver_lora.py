"""LoRA adapters on a real reference server: soak's load and unload calls change what /v1/models lists and which
model names are served, refusals carry vLLM's answers, lora-leak keeps its bytes per load, and a churn cycle
records its events."""

from __future__ import annotations

import pytest

from soak.config import LoraAdapter, resolve_config
from soak.contracts import EventKind
from soak.errors import TargetError
from soak.load.lora import ChurnSchedule, LoraChurn, load_adapter, load_at_start, unload_adapter

pytestmark = pytest.mark.timeout(120)

MiB = 2**20


class Events:
    """An event sink that keeps what it is given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict]] = []

    def event(self, kind, message, data=None) -> None:
        self.seen.append((str(kind), message, data or {}))


def listed(server) -> dict[str, dict]:
    return {card["id"]: card for card in server.get("/v1/models").json()["data"]}


def ask(server, model: str):
    return server.post("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "hi"}],
                                                "max_tokens": 2})


def test_adapters_load_list_serve_and_unload(start_refserver, tmp_path):
    server = start_refserver()
    sql = LoraAdapter(name="sql", path=str(tmp_path))
    assert ask(server, "sql").status_code == 404  # not loaded: vLLM's unknown model

    loaded = load_adapter(server.url, sql, {})
    assert loaded.ok and "added successfully" in loaded.answer, loaded
    cards = listed(server)
    assert cards["sql"]["parent"] == "soak-reference" and cards["sql"]["root"] == str(tmp_path)
    assert ask(server, "sql").status_code == 200

    again = load_adapter(server.url, sql, {})
    assert again.status == 400 and "already been loaded" in again.answer, again
    assert unload_adapter(server.url, sql, {}).ok
    assert "sql" not in listed(server) and ask(server, "sql").status_code == 404
    gone = unload_adapter(server.url, sql, {})
    assert gone.status == 404 and "cannot be found" in gone.answer, gone
    missing = load_adapter(server.url, LoraAdapter(name="x", path=str(tmp_path / "absent")), {})
    assert missing.status == 404 and "No adapter found" in missing.answer, missing


def test_lora_leak_keeps_bytes_per_load_that_unload_never_frees(start_refserver, tmp_path):
    server = start_refserver("--fault", "lora-leak=1MiB")
    adapter = LoraAdapter(name="a", path=str(tmp_path))
    for _ in range(3):
        assert load_adapter(server.url, adapter, {}).ok
        assert unload_adapter(server.url, adapter, {}).ok
    state = server.debug()
    assert state["lora_leak_bytes"] == 3 * MiB and state["adapter_loads"] == state["adapter_unloads"] == 3, state
    assert state["adapters"] == []


def test_a_churn_cycle_unloads_and_reloads_and_records_each_step(start_refserver, tmp_path):
    server = start_refserver()
    adapters = [LoraAdapter(name="a", path=str(tmp_path)), LoraAdapter(name="b", path=str(tmp_path / "gone"))]
    assert load_adapter(server.url, adapters[0], {}).ok
    events = Events()
    churn = LoraChurn(ChurnSchedule(("a", "b"), 60.0), adapters, lambda: server.url, {}, events)
    assert churn.cycle(4)  # cycle 4 cycles adapter a
    assert [kind for kind, _, _ in events.seen] == [EventKind.LORA_UNLOAD, EventKind.LORA_LOAD]
    assert "a" in listed(server)

    assert not churn.cycle(5)  # adapter b was never loaded and its path is gone: two refusals, no exception
    kinds, _, data = zip(*events.seen[2:])
    assert kinds == (EventKind.LORA_ERROR, EventKind.LORA_ERROR)
    assert data[0]["status"] == 404 and "cannot be found" in data[0]["answer"]
    assert data[1]["status"] == 404 and "No adapter found" in data[1]["answer"]


def test_at_start_soak_loads_what_is_not_listed_and_stops_on_a_refusal(start_refserver, tmp_path):
    server = start_refserver()
    config = resolve_config({"duration": "5m", "lora": [f"a={tmp_path}", f"b={tmp_path}"], "out": str(tmp_path)})
    assert load_adapter(server.url, config.load.loras[0], {}).ok  # listed before soak starts: used as it is
    loaded = load_at_start(config, server.url, list(listed(server)), {})
    assert [adapter.name for adapter, reply in loaded if reply.ok] == ["b"] and {"a", "b"} <= set(listed(server))

    bad = resolve_config({"duration": "5m", "lora": [f"c={tmp_path / 'absent'}"], "out": str(tmp_path)})
    with pytest.raises(TargetError) as refused:
        load_at_start(bad, server.url, list(listed(server)), {})
    message = str(refused.value)
    assert "could not load LoRA adapter c" in message and "HTTP 404: " in message and "No adapter found" in message
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in message and "\n" not in message
