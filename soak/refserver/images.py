"""Image parts of chat messages: `image_url` data URIs read into what the server charges and caches by.

The server reads each picture's header (Pillow) for its size, charges preprocessing time by its pixels (in
`api.py`, before the request reaches the engine) and puts prompt tokens in its place: one per 32-pixel patch,
drawn from the picture's digest, so the same picture makes the same tokens (the prefix cache can hit them) and
a different one different tokens. The digest is of the bytes, which for pictures made the same way is the same
as keying by pixels.
"""

import base64
import binascii
import hashlib
import io
import math
from dataclasses import dataclass
from typing import Any

PATCH_PIXELS = 32
IMAGE_MARK = "<|image|>"
MAX_IMAGE_BYTES = 20 * 2**20  # larger data URIs are refused rather than decoded
DATA_PREFIX = "data:image/"


@dataclass(frozen=True)
class ImageInput:
    """One picture of a request: its digest (what the cache and the image-leak fault key on) and size."""

    digest: str
    width: int
    height: int
    size_bytes: int

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def tokens(self) -> int:
        """Prompt tokens the picture stands for: one per 32 × 32 patch."""
        return math.ceil(self.width / PATCH_PIXELS) * math.ceil(self.height / PATCH_PIXELS)

    def placeholder(self) -> str:
        """The prompt text standing for the picture: the image mark, then `tokens` characters of its digest."""
        repeats = self.tokens // len(self.digest) + 1
        return IMAGE_MARK + (self.digest * repeats)[:self.tokens]


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def read_image_part(part: dict) -> ImageInput:
    """The picture an `image_url` part holds; ValueError saying what is wrong with it (a 400)."""
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else None
    if not isinstance(url, str):
        raise ValueError("an image_url part needs {'image_url': {'url': ...}}")
    if not url.startswith(DATA_PREFIX) or ";base64," not in url:
        raise ValueError("only data:image/...;base64 URLs are accepted (this server fetches nothing)")
    payload = url.partition(";base64,")[2]
    if len(payload) * 3 // 4 > MAX_IMAGE_BYTES:
        raise ValueError(f"image larger than {MAX_IMAGE_BYTES // 2**20} MiB")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the image data URI is not valid base64") from None
    width, height = _dimensions(data)
    return ImageInput(hashlib.sha256(data).hexdigest(), width, height, len(data))


def _dimensions(data: bytes) -> tuple[int, int]:
    """Width and height from the picture's header (Pillow reads no more than it needs)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except (UnidentifiedImageError, OSError):
        raise ValueError("the image data is not a picture this server can read") from None
