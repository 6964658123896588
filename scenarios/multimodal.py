"""multimodal: chats carrying pictures — `image_url` parts holding PNG and JPEG data URIs made here
(soak.load.images), 64², 256² and 768² pixels, one or two a message — for vision models. Image preprocessing and
the multimodal cache are paths no text request reaches: a share of the pictures (`repeat`) is drawn from a few
popular ones, so a server's cache is hit as well as filled; the rest are new every time. Streamed and whole
answers alternate.

A text-only model refuses image parts (vLLM: HTTP 400); soak asks before the load starts and stops, or drops
this scenario with --skip-unsupported (docs/load.md, "Capabilities").
"""

from soak.load import OpenAIUser, task
from soak.load.images import FORMATS, POPULAR, SIZES, ImageSupply, image_part, image_tokens
from soak.load.prompts import question

TEXT_TOKENS = 64  # room kept for the question beside the pictures
ASKS = ("Describe this picture.", "What colours are in the image?", "Is there any text in this image?",
        "Compare these pictures.", "What stands out in the image?")


def within(sizes: tuple[int, ...], room: int) -> list[int]:
    """The sizes to send in `room` prompt tokens: each one too large for what is left shrinks to the largest
    that fits (the smallest if none does)."""
    chosen = []
    for size in sizes:
        fits = [side for side in SIZES if side <= size and image_tokens(side) <= room] or [SIZES[0]]
        chosen.append(fits[-1])
        room -= image_tokens(fits[-1])
    return chosen


class Multimodal(OpenAIUser):
    repeat = 0.25  # share of pictures drawn from the POPULAR ones of their size and format (cache hits)

    def on_start(self):
        self.images = ImageSupply(self.settings.seed)
        self.images.prime()

    def picture(self, size: int) -> dict:
        """One image part: a popular picture `repeat` of the time, else a new one; PNG or JPEG at random."""
        fmt = self.rng.choice(FORMATS)
        if self.rng.random() < self.repeat:
            return image_part(self.images.popular(size, fmt, self.rng.randrange(POPULAR)))
        return image_part(self.images.fresh(size, fmt))

    def ask(self, sizes: tuple[int, ...]) -> None:
        """A question about pictures of these sizes (smaller ones where the context cannot hold them)."""
        _, max_tokens = self.fit(0, self.rng.randint(16, 64))
        sizes = within(sizes, self.fit(10**9, max_tokens)[0] - TEXT_TOKENS)
        content = [{"type": "text", "text": f"{question(self.rng)} {self.rng.choice(ASKS)}"}]
        content += [self.picture(size) for size in sizes]
        self.client.chat([{"role": "user", "content": content}], max_tokens=max_tokens,
                         stream=self.rng.random() < 0.5)

    @task(3)
    def small(self):
        self.ask((64,))

    @task(3)
    def medium(self):
        self.ask((256,))

    @task(1)
    def large(self):
        self.ask((768,))

    @task(1)
    def two_images(self):
        self.ask((256, 64))
