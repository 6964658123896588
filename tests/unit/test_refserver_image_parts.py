"""The reference server's image parts without HTTP: what a picture stands for in the prompt, what a chat with
pictures parses into, the 400s, the --no-… refusals, and image-leak kept once per distinct picture."""

from __future__ import annotations

import pytest

from soak.load.images import ImageSpec, data_uri, image_part
from soak.refserver.clock import ModelClock
from soak.refserver.faults import parse_faults
from soak.refserver.images import IMAGE_MARK, read_image_part
from soak.refserver.injector import FaultInjector
from soak.refserver.protocol import Limits, RequestError, parse_chat

LIMITS = Limits("soak-reference", 2048)


def chat(*parts: dict, **extra) -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, *parts]}], **extra}


def test_a_picture_stands_for_one_token_per_32_pixel_patch_drawn_from_its_digest():
    image = read_image_part(image_part(data_uri(ImageSpec(100, "png", 1))))
    assert (image.width, image.height, image.tokens) == (100, 100, 16)
    assert image.placeholder() == IMAGE_MARK + image.digest[:16]
    other = read_image_part(image_part(data_uri(ImageSpec(100, "png", 2))))
    assert other.digest != image.digest and other.placeholder() != image.placeholder()


def test_a_chat_with_pictures_carries_them_and_their_tokens():
    parts = [image_part(data_uri(ImageSpec(64, "jpeg", 3))), image_part(data_uri(ImageSpec(256, "png", 3)))]
    plain = parse_chat(chat(), LIMITS)
    request = parse_chat(chat(*parts), LIMITS)
    assert [(image.width, image.tokens) for image in request.images] == [(64, 4), (256, 64)]
    assert len(request.prompt_tokens) - len(plain.prompt_tokens) == 4 + 64 + 2 * len(IMAGE_MARK)
    assert plain.images == ()


@pytest.mark.parametrize(("part", "said"), [
    ({"type": "image_url"}, "needs {'image_url'"),
    ({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}, "only data:image/"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}, "not valid base64"),
])
def test_a_bad_image_part_is_a_400(part, said):
    with pytest.raises(RequestError) as caught:
        parse_chat(chat(part), LIMITS)
    assert caught.value.status == 400 and said in caught.value.message and caught.value.param == "messages"


def test_a_server_started_without_a_feature_refuses_it_with_a_400():
    refusing = Limits("soak-reference", 2048, frozenset({"images", "tools", "json_schema"}))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    for body, param in ((chat(image_part(data_uri(ImageSpec(64, "png", 0)))), "messages"),
                        (chat(tools=tools), "tools"), (chat(response_format=schema), "response_format")):
        with pytest.raises(RequestError) as caught:
            parse_chat(body, refusing)
        assert (caught.value.status, caught.value.param) == (400, param)
    assert parse_chat(chat(response_format={"type": "json_object"}), refusing).structured is not None


def test_image_leak_keeps_bytes_once_per_distinct_picture():
    injector = FaultInjector(parse_faults(["image-leak=64KiB"]), ModelClock(), seed=0, horizon_s=3600)
    injector.on_images(["a", "b"])
    injector.on_images(["a"])
    assert (injector.describe()["images_kept"], injector.describe()["image_leak_bytes"]) == (2, 2 * 64 * 1024)
    quiet = FaultInjector(parse_faults([]), ModelClock(), seed=0, horizon_s=3600)
    quiet.on_images(["a"])
    assert quiet.describe()["image_leak_bytes"] == 0
