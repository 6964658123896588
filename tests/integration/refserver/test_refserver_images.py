"""Image parts on the reference server over real HTTP: tokens and preprocessing time by size, the image-leak fault
kept per distinct picture, the --no-… switches that refuse a feature as a text-only or plain server does, and
soak's capability probes against both (and `soak doctor --target`)."""

from __future__ import annotations

import json
import socket
import time

import pytest
from click.testing import CliRunner

from soak.cli.doctor import doctor as doctor_command
from soak.config import resolve_config
from soak.errors import TargetError
from soak.load.images import ImageSpec, data_uri, image_part
from soak.run.capabilities import check_mix
from soak.run.doctor import check_target
from soak.target.capabilities import probe_capabilities, unsupported

pytestmark = pytest.mark.timeout(120)

KiB = 1024


def ask_with_images(server, *specs: ImageSpec, max_tokens: int = 2, stream: bool = False):
    content = [{"type": "text", "text": "What is in the picture?"}, *(image_part(data_uri(s)) for s in specs)]
    body = {"model": "soak-reference", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return server.post("/v1/chat/completions", body)


def timed(call) -> tuple[object, float]:
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def test_an_image_costs_tokens_by_patch_and_time_by_pixels(start_refserver):
    server = start_refserver("--image-cost", "1s")  # a second per megapixel: 768² costs about 0.59 s
    text_only = server.chat("What is in the picture?", max_tokens=2).json()["usage"]["prompt_tokens"]
    small, small_s = timed(lambda: ask_with_images(server, ImageSpec(64, "png", 1)))
    large, large_s = timed(lambda: ask_with_images(server, ImageSpec(768, "jpeg", 1)))
    assert small.status_code == large.status_code == 200, (small.text, large.text)
    # one token per 32-pixel patch, behind a 9-character mark
    assert small.json()["usage"]["prompt_tokens"] - text_only == 2 * 2 + len("<|image|>")
    assert large.json()["usage"]["prompt_tokens"] - text_only == 24 * 24 + len("<|image|>")
    assert large_s >= 0.59 and small_s < large_s - 0.4, (small_s, large_s)
    streamed = ask_with_images(server, ImageSpec(256, "png", 2), stream=True)
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")


def test_image_leak_keeps_bytes_per_distinct_picture(start_refserver):
    server = start_refserver("--fault", "image-leak=512KiB", "--image-cost", "0")
    first, again, other = ImageSpec(64, "png", 7), ImageSpec(64, "png", 7), ImageSpec(64, "jpeg", 7)
    assert ask_with_images(server, first, other).status_code == 200
    assert ask_with_images(server, again).status_code == 200  # the same picture: nothing more kept
    state = server.debug()
    assert state["images_kept"] == 2 and state["image_leak_bytes"] == 2 * 512 * KiB, state
    assert server.chat("plain text").status_code == 200
    assert server.debug()["image_leak_bytes"] == 2 * 512 * KiB


@pytest.mark.parametrize(("url", "said"), [
    ("http://example.com/cat.png", "only data:image/"),
    ("data:image/png;base64,not base64!", "not valid base64"),
    ("data:image/png;base64,aGVsbG8=", "not a picture"),
])
def test_a_bad_image_is_a_400_naming_what_is_wrong(shared_refserver, url, said):
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
            "max_tokens": 1}
    response = shared_refserver.post("/v1/chat/completions", body)
    assert response.status_code == 400 and said in response.json()["error"]["message"], response.text


def test_capabilities_of_a_full_server_and_of_one_refusing_each_feature(shared_refserver, start_refserver):
    found = probe_capabilities(shared_refserver.url, "soak-reference")
    assert {name: c.supported for name, c in found.items()} == {
        "adapters": False, "json_schema": True, "tools": True, "images": True}
    assert unsupported(["mixed", "structured", "tools", "multimodal"], found) == []

    plain = start_refserver("--no-images", "--no-tools", "--no-json-schema")
    found = probe_capabilities(plain.url, "soak-reference")
    assert [found[name].supported for name in ("json_schema", "tools", "images")] == [False, False, False]
    assert found["images"].answer == ("HTTP 400: soak-reference is a text-only model: it does not accept image_url "
                                      "content parts")
    lacking = unsupported(["chat_short", "multimodal", "tools", "structured"], found)
    assert [(item.scenario, item.feature) for item in lacking] == [
        ("multimodal", "images"), ("tools", "tools"), ("structured", "json_schema")]
    assert lacking[0].line().startswith("scenario multimodal needs image_url content parts, which the server "
                                        "refused: HTTP 400: ")
    # the switches refuse only what they name: plain text still answers
    assert plain.chat("hello").status_code == 200


def test_doctor_lists_what_a_target_accepts(start_refserver, tmp_path):
    text_only = start_refserver("--no-images")
    fake_vllm = tmp_path / "vllm"
    fake_vllm.write_text("#!/bin/sh\necho 0.11.0\n")  # a real vLLM's --version alone takes ~40 s
    fake_vllm.chmod(0o755)
    result = CliRunner().invoke(doctor_command, ["--out", str(tmp_path), "--json", "--vllm-bin", str(fake_vllm),
                                                 "--target", text_only.url])
    assert result.exit_code == 0, result.output
    checks = {check["name"]: check for check in json.loads(result.output)["checks"]}
    assert checks["target"]["detail"] == f"{text_only.url} serves soak-reference"
    assert {name: checks[f"target {name}"]["status"] for name in ("json_schema", "tools", "images")} == {
        "json_schema": "ok", "tools": "ok", "images": "warn"}
    assert "multimodal cannot run here" in checks["target images"]["detail"]
    assert checks["target adapters"]["detail"].startswith("LoRA adapters listed by /v1/models (entries with a "
                                                          "parent): none (no adapter listed by /v1/models)")


def test_doctor_fails_a_target_that_does_not_answer():
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    [check] = check_target(url)
    assert check.status == "fail" and check.detail.startswith(f"target {url} is unreachable: ")


def test_the_mix_keeps_what_the_server_accepts_only_when_told_to_skip(start_refserver, tmp_path):
    plain = start_refserver("--no-images", "--no-tools")

    def check(*scenarios: str, skip: bool = False):
        flags = {"scenario": list(scenarios), "duration": "1m", "out": str(tmp_path), "skip_unsupported": skip}
        return check_mix(resolve_config(flags, environ={}), plain.url, "soak-reference", {})

    with pytest.raises(TargetError, match=r"^scenario multimodal needs image_url content parts, which the server "
                                          r"refused: HTTP 400: .*; nothing was run \(leave it out of --scenario"):
        check("chat_short", "multimodal:2", "tools")
    mix = check("chat_short", "multimodal:2", "tools", "structured:3", skip=True)
    assert [(spec.name, spec.weight) for spec in mix.config.load.scenarios] == [("chat_short", 1), ("structured", 3)]
    assert [(item.scenario, item.feature) for item in mix.dropped] == [("multimodal", "images"), ("tools", "tools")]
    assert mix.data()["dropped"][0]["answer"].startswith("HTTP 400: soak-reference is a text-only model")
    assert "; dropped scenario tools needs tools with tool_choice auto" in mix.describe()
    with pytest.raises(TargetError, match="^every scenario of the mix needs what the server refused"):
        check("multimodal", "tools", skip=True)
    assert check("chat_short", "structured").dropped == ()
