"""Pictures of the multimodal scenario: made from their spec alone, real PNG/JPEG of the asked size, distinct per
key; data URIs; the supply's fresh and popular pictures; and the scenario's fitting of sizes to the context."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from soak.load.images import (
    FORMATS,
    POPULAR,
    SIZES,
    ImageSpec,
    ImageSupply,
    data_uri,
    image_part,
    image_tokens,
    key_of,
    pixels,
    render,
)
from soak.load.scenarios import import_scenario_file, scenario_path


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("size", SIZES)
def test_a_picture_is_a_real_image_of_its_size_and_the_same_every_time(size, fmt):
    spec = ImageSpec(size, fmt, key_of(0, size, fmt, 0))
    data = render(spec)
    assert data == render(spec)
    with Image.open(io.BytesIO(data)) as image:
        assert (image.format, image.size, image.mode) == ({"png": "PNG", "jpeg": "JPEG"}[fmt], (size, size), "RGB")


def test_distinct_keys_are_distinct_pictures_even_where_the_gradients_agree():
    first, second = pixels(ImageSpec(64, "png", 1)), pixels(ImageSpec(64, "png", 2))
    assert not np.array_equal(first, second)
    # the key's bytes stand along the top edge, one grey block each
    assert first[0, 4 * 7, 0] == 1 and second[0, 4 * 7, 0] == 2


def test_a_data_uri_carries_the_rendered_bytes():
    spec = ImageSpec(64, "jpeg", 5)
    uri = data_uri(spec)
    assert uri.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(uri.partition(",")[2]) == render(spec)
    assert image_part(uri) == {"type": "image_url", "image_url": {"url": uri}}


@pytest.mark.parametrize(("spec", "said"), [
    ((4, "png", 0), "at least 8 pixels"), ((64, "gif", 0), "one of png, jpeg"), ((64, "png", -1), "8 bytes"),
])
def test_a_bad_spec_says_what_is_wrong(spec, said):
    with pytest.raises(ValueError, match=said):
        ImageSpec(*spec)


def test_image_tokens_count_28_pixel_patches():
    assert [image_tokens(size) for size in SIZES] == [9, 100, 784]


def made_keys(seed: int) -> tuple[ImageSupply, list[int]]:
    """A supply that hands out each picture's key instead of its data URI."""
    supply = ImageSupply(seed, make=lambda spec: spec.key, ahead=1)
    return supply, [supply.fresh(64, "png") for _ in range(5)]


def test_fresh_pictures_never_repeat_and_follow_from_the_seed():
    supply, keys = made_keys(seed=3)
    assert len(set(keys)) == 5
    assert made_keys(seed=3)[1] == keys
    assert set(made_keys(seed=4)[1]).isdisjoint(keys)  # another load worker's seed: other pictures
    assert supply.fresh(64, "jpeg") not in keys


def test_popular_pictures_are_the_same_whatever_the_seed():
    first, second = ImageSupply(1, make=lambda spec: spec.key), ImageSupply(2, make=lambda spec: spec.key)
    assert [first.popular(256, "png", i) for i in range(POPULAR)] == [second.popular(256, "png", i)
                                                                        for i in range(POPULAR)]
    assert first.popular(256, "png", POPULAR) == first.popular(256, "png", 0)
    assert len({first.popular(256, "png", i) for i in range(POPULAR)}) == POPULAR


def test_priming_makes_every_size_and_format_ahead():
    made: list[ImageSpec] = []
    supply = ImageSupply(0, make=lambda spec: made.append(spec) or spec.key, ahead=1)
    supply.prime()
    supply.fresh(768, "jpeg")  # waits for what priming started
    assert {(spec.size, spec.fmt) for spec in made} == {(size, fmt) for size in SIZES for fmt in FORMATS}


def test_the_scenario_shrinks_pictures_the_context_cannot_hold():
    within = import_scenario_file(scenario_path("multimodal")).within
    assert within((768,), 10_000) == [768]
    assert within((768,), 500) == [256]  # 784 tokens do not fit; 100 do
    assert within((256, 64), 105) == [256, 64]
    assert within((256, 64), 60) == [64, 64]
    assert within((768,), 5) == [64]  # nothing fits: the smallest
