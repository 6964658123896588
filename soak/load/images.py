"""Images for the `multimodal` scenario: PNG and JPEG pictures made here, sent as `image_url` data URIs.

Every picture follows from its `ImageSpec` alone (size, format, key): the same spec gives the same bytes on every
run and every load worker, so a run under a fixed `--seed` sends the same images, and sending a spec again sends
the same picture — what a server's multimodal cache keys on (the decoded pixels, not the bytes' name). The key is
stamped into the pixels, so two keys never make the same picture.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

SIZES = (64, 256, 768)  # square sides in pixels: a thumbnail, a photo preview, a full tile of most vision encoders
FORMATS = ("png", "jpeg")
MIME = {"png": "image/png", "jpeg": "image/jpeg"}
# Pixels per side of one image token when sizing a request against the context: 28 is Qwen2-VL's patch (the
# smallest of the common vision encoders, so the most tokens); a server that spends fewer tokens is inside it.
PATCH_PIXELS = 28
KEY_BYTES = 8  # the key is stamped into the picture as this many grey blocks
POPULAR = 8  # pictures per size and format that repeats are drawn from
AHEAD = 2  # fresh pictures per size and format made ahead of need


@dataclass(frozen=True)
class ImageSpec:
    """One picture: a `size` × `size` square in `fmt` (png or jpeg), whose pixels follow from `key`."""

    size: int
    fmt: str
    key: int

    def __post_init__(self) -> None:
        if self.size < 8:
            raise ValueError(f"an image needs at least 8 pixels a side, got {self.size}")
        if self.fmt not in FORMATS:
            raise ValueError(f"image format must be one of {', '.join(FORMATS)}, got {self.fmt!r}")
        if not 0 <= self.key < 2 ** (8 * KEY_BYTES):
            raise ValueError(f"image key must fit in {KEY_BYTES} bytes, got {self.key}")


def pixels(spec: ImageSpec) -> np.ndarray:
    """The picture as an RGB array: three gradients whose slopes and offsets come from the key, with the key's
    bytes stamped as grey blocks along the top edge (so distinct keys are distinct pictures)."""
    rng = np.random.default_rng(spec.key)
    slopes = rng.integers(1, 7, size=(2, 3), dtype=np.uint8)
    offsets = rng.integers(0, 256, size=3, dtype=np.uint8)
    ramp = np.arange(spec.size, dtype=np.uint8)
    image = np.empty((spec.size, spec.size, 3), dtype=np.uint8)
    for channel in range(3):  # uint8 arithmetic wraps: bands of colour, cheap to make at any size
        image[..., channel] = ramp[None, :] * slopes[0, channel] + ramp[:, None] * slopes[1, channel] + offsets[channel]
    block = max(spec.size // (2 * KEY_BYTES), 1)
    for index, value in enumerate(spec.key.to_bytes(KEY_BYTES, "big")):
        image[:block, index * block:(index + 1) * block] = value
    return image


def render(spec: ImageSpec) -> bytes:
    """The picture encoded as PNG (fast deflate) or JPEG (quality 85)."""
    from PIL import Image

    buffer = io.BytesIO()
    options: dict[str, Any] = {"compress_level": 1} if spec.fmt == "png" else {"quality": 85}
    Image.fromarray(pixels(spec), "RGB").save(buffer, spec.fmt.upper(), **options)
    return buffer.getvalue()


def data_uri(spec: ImageSpec) -> str:
    """The picture as a `data:image/…;base64,…` URI, as an `image_url` part carries it."""
    return f"data:{MIME[spec.fmt]};base64,{base64.b64encode(render(spec)).decode('ascii')}"


def image_part(uri: str) -> dict[str, Any]:
    """An OpenAI chat content part holding one image."""
    return {"type": "image_url", "image_url": {"url": uri}}


def image_tokens(size: int) -> int:
    """Prompt tokens a `size` × `size` picture may cost on a vision model (one per 28-pixel patch)."""
    return math.ceil(size / PATCH_PIXELS) ** 2


def key_of(*parts: object) -> int:
    """A picture's key from what names it (seed, size, format, number)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=KEY_BYTES).digest()
    return int.from_bytes(digest, "big")


class ImageSupply:
    """Data URIs for a scenario, made ahead of need in gevent's thread pool (Pillow and numpy let go of the GIL
    while they work), so that making a 768² PNG (~10 ms) never holds the event loop or delays a send.

    `fresh(size, fmt)` gives a picture not given before: the n-th of its size and format is keyed by (seed, size,
    format, n), so runs repeat and two load workers (each with its own seed) never send the same one.
    `popular(size, fmt, index)` gives one of `POPULAR` pictures keyed without the seed: the same on every worker
    and every run, which is what a server's multimodal cache should hit.
    """

    def __init__(self, seed: int, make: Callable[[ImageSpec], str] = data_uri, ahead: int = AHEAD) -> None:
        self.seed = seed
        self.make = make
        self.ahead = ahead
        self._made: dict[tuple[int, str], int] = {}
        self._queued: dict[tuple[int, str], deque] = {}
        self._popular: dict[ImageSpec, Any] = {}

    def prime(self, sizes: tuple[int, ...] = SIZES) -> None:
        """Start making the first pictures of every size and format (and the popular ones) before load."""
        for size in sizes:
            for fmt in FORMATS:
                self._fill(size, fmt)
                for index in range(POPULAR):
                    self._popular_result(size, fmt, index)

    def fresh(self, size: int, fmt: str) -> str:
        """The next picture of this size and format never given before."""
        uri = self._fill(size, fmt).popleft().get()
        self._fill(size, fmt)
        return uri

    def popular(self, size: int, fmt: str, index: int) -> str:
        """One of the few pictures repeats are drawn from (made once, then kept)."""
        return self._popular_result(size, fmt, index).get()

    def _fill(self, size: int, fmt: str) -> deque:
        queue = self._queued.setdefault((size, fmt), deque())
        while len(queue) <= self.ahead:
            queue.append(self._spawn(self._next_fresh(size, fmt)))
        return queue

    def _popular_result(self, size: int, fmt: str, index: int) -> Any:
        spec = ImageSpec(size, fmt, key_of("popular", size, fmt, index % POPULAR))
        if spec not in self._popular:
            self._popular[spec] = self._spawn(spec)
        return self._popular[spec]

    def _next_fresh(self, size: int, fmt: str) -> ImageSpec:
        number = self._made.get((size, fmt), 0)
        self._made[(size, fmt)] = number + 1
        return ImageSpec(size, fmt, key_of(self.seed, size, fmt, number))

    def _spawn(self, spec: ImageSpec) -> Any:
        import gevent

        return gevent.get_hub().threadpool.spawn(self.make, spec)
