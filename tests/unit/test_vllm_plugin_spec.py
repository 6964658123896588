"""soak's vLLM fault plugin, the parts that need no vLLM: fault specs, the variables that arm it, the settings
that take them, the token garbling and the written allocation, and that the plugin is inert when not armed."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from soak.config import resolve_config
from soak.errors import ConfigError
from soak.run.environment import capture_environment
from soak.target import make_target
from soak.vllm_plugin.engine_faults import (
    FaultError,
    FirstWorkClock,
    flipped,
    garble,
    leak_blocks,
    seam,
    wrap,
    written_bytes,
)
from soak.vllm_plugin.spec import FAULTS_ENV, PLUGIN_NAME, PLUGINS_ENV, VllmFaults, fault_environment, parse_faults


def test_each_fault_parses_to_its_field():
    faults = parse_faults(["rss-leak=1MiB", "kv-leak-on-abort", "hang-after=90s", "garble-after=2m"])
    assert faults == VllmFaults(rss_leak_bytes=1 << 20, kv_leak_on_abort=True, hang_after_s=90.0,
                                garble_after_s=120.0)
    assert parse_faults(["kv-leak-on-abort=1"]).kv_leak_blocks == 1
    assert parse_faults([]) == VllmFaults()


@pytest.mark.parametrize(("spec", "message"), [
    ("oom-now", "unknown fault 'oom-now'; known: rss-leak, kv-leak-on-abort, hang-after, garble-after"),
    ("rss-leak", "fault rss-leak needs a value: a byte size, e.g. rss-leak=1MiB"),
    ("rss-leak=lots", "fault rss-leak=lots: malformed byte size 'lots'"),
    ("rss-leak=0", "fault rss-leak=0: the value must be above 0"),
    ("hang-after=soon", "fault hang-after=soon: malformed duration 'soon'"),
    ("garble-after=0s", "fault garble-after=0s: the value must be above 0"),
    ("kv-leak-on-abort=0", "fault kv-leak-on-abort=0: the value must be nothing, or a block count"),
    ("kv-leak-on-abort=x", "fault kv-leak-on-abort=x: the value must be nothing, or a block count"),
])
def test_a_bad_fault_is_one_line_naming_it(spec, message):
    with pytest.raises(ConfigError) as caught:
        parse_faults([spec])
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_fault_given_twice_is_refused():
    with pytest.raises(ConfigError, match="fault rss-leak is given twice"):
        parse_faults(["rss-leak=1MiB", "rss-leak=2MiB"])


def test_the_environment_arms_the_plugin_and_keeps_the_users_plugins():
    assert fault_environment([], {}) == {}
    assert fault_environment(["rss-leak=1MiB", "hang-after=60s"], {}) == {FAULTS_ENV: "rss-leak=1MiB,hang-after=60s"}
    assert fault_environment(["hang-after=60s"], {PLUGINS_ENV: "lora_filesystem_resolver"}) == {
        FAULTS_ENV: "hang-after=60s", PLUGINS_ENV: f"lora_filesystem_resolver,{PLUGIN_NAME}"}
    assert fault_environment(["hang-after=60s"], {PLUGINS_ENV: PLUGIN_NAME})[PLUGINS_ENV] == PLUGIN_NAME


def test_the_setting_reaches_the_config_and_is_checked(tmp_path):
    config = resolve_config({"out": str(tmp_path), "duration": "5m", "model": "tiny", "vllm_fault": ("rss-leak=1MiB",)},
                            environ={})
    assert config.target.vllm_faults == ("rss-leak=1MiB",)
    with pytest.raises(ConfigError, match=r"vllm-fault.*unknown fault 'leak'"):
        resolve_config({"out": str(tmp_path), "duration": "5m", "model": "tiny", "vllm_fault": ("leak",)}, environ={})
    reference = resolve_config({"out": str(tmp_path), "duration": "5m", "vllm_fault": ("hang-after=1m",)}, environ={})
    with pytest.raises(ConfigError, match="it needs --model NAME"):
        make_target(reference, tmp_path)


def test_the_environment_record_names_the_planted_faults(tmp_path):
    faulty = resolve_config({"out": str(tmp_path), "duration": "5m", "model": "tiny",
                             "vllm_fault": ("kv-leak-on-abort",)}, environ={})
    assert capture_environment(faulty, [], [])["vllm_faults"] == ["kv-leak-on-abort"]
    clean = resolve_config({"out": str(tmp_path), "duration": "5m", "model": "tiny"}, environ={})
    assert "vllm_faults" not in capture_environment(clean, [], [])


def test_the_variable_takes_a_comma_separated_list(tmp_path):
    config = resolve_config({"out": str(tmp_path), "duration": "5m", "model": "tiny"},
                            environ={"SOAK_VLLM_FAULT": "kv-leak-on-abort,garble-after=30s"})
    assert config.target.vllm_faults == ("kv-leak-on-abort", "garble-after=30s")


def test_garbling_flips_the_lowest_bit_and_stays_in_the_vocabulary():
    assert [flipped(t, 1024) for t in (0, 1, 6, 1023)] == [1, 0, 7, 1022]
    assert flipped(1024, 1025) == 1023  # 1025 would be past the vocabulary
    batch = SimpleNamespace(outputs=[SimpleNamespace(new_token_ids=[10, 11]), SimpleNamespace(new_token_ids=[])])
    garble({0: batch}, 1024)
    assert [o.new_token_ids for o in batch.outputs] == [[11, 10], []]


class BlockBooks:
    """A stand-in for vLLM's KV cache manager: a request's blocks, and the pool they go back to."""

    def __init__(self, blocks: list[int]):
        self.blocks = blocks
        self.returned: list[int] = []
        self.block_pool = SimpleNamespace(free_blocks=lambda ordered: self.returned.extend(ordered))

    def pop_blocks_for_free(self, request):
        blocks, self.blocks = self.blocks, []
        return blocks


def test_an_aborted_requests_blocks_leave_the_books_but_not_for_the_pool():
    books = BlockBooks([1, 2, 3, 4])
    leak_blocks(books, request=None, kept_blocks=None)
    assert books.blocks == [] and books.returned == []
    books = BlockBooks([1, 2, 3, 4])
    leak_blocks(books, request=None, kept_blocks=1)
    assert books.returned == [3, 2, 1]  # all but the last go back, tail first as vLLM frees them
    books = BlockBooks([1])
    leak_blocks(books, request=None, kept_blocks=2)
    assert books.returned == []


def test_the_leaked_allocation_is_written_on_every_page():
    buffer = written_bytes(3 * 4096 + 10)
    assert len(buffer) == 3 * 4096 + 10
    assert all(buffer[offset] == 0x5A for offset in range(0, len(buffer), 4096))


def test_a_missing_seam_is_one_line_naming_it():
    assert seam(("soak.vllm_plugin.spec", "VllmFaults"), "__init__", "rss-leak") is VllmFaults
    with pytest.raises(FaultError, match="^--vllm-fault hang-after: this vLLM's VllmFaults has no method step;"):
        seam(("soak.vllm_plugin.spec", "VllmFaults"), "step", "hang-after")
    with pytest.raises(FaultError, match="^--vllm-fault rss-leak: this vLLM has no soak.nowhere.Scheduler"):
        seam(("soak.nowhere", "Scheduler"), "_free_request", "rss-leak")


def test_a_method_is_wrapped_once():
    class Engine:
        def step(self):
            return ["token"]

    def make(original):
        return lambda self: original(self) + ["extra"]

    wrap(Engine, "step", make)
    wrap(Engine, "step", make)  # a forked child inherits the patched class and loads the plugin again
    assert Engine().step() == ["token", "extra"]


def test_the_clock_starts_at_the_first_question():
    clock = FirstWorkClock()
    assert not clock.due(None)
    assert clock.due(0.0)
    assert not clock.due(3600.0)


def test_the_plugin_is_inert_and_imports_no_vllm_when_not_armed():
    code = ("import os, sys; os.environ.pop('SOAK_VLLM_FAULTS', None); import soak.vllm_plugin as p; p.register(); "
            "print(sorted(m for m in sys.modules if m == 'vllm' or m.startswith('vllm.') or m == 'torch'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
