"""Deterministic prompt synthesis: realistic English text of a chosen size, unicode torture text, length laws.

Everything takes a `random.Random`, so under a fixed `load.seed` each arrival gets the same prompt every run.
Sizes are in UTF-8 bytes: the reference server tokenises bytes (≈ 1 token per byte), and a byte budget is
never over a model limit on a real tokenizer either. `TokenRatio` learns the server's real tokens per byte
from usage so that "near max_model_len" means near it on any tokenizer.
"""

from __future__ import annotations

import functools
import math
import random

# Long prompts are cut from prose made once (`prose_corpus`): as much as most prompts, and few repeat a stretch of it.
CORPUS_BYTES = 256 * 1024
CORPUS_SEED = 20240917

WORDS = (
    "the a an of to in for on with by from about into over after under between through during without "
    "system model server request cache memory latency token stream batch queue worker engine kernel "
    "network client process thread buffer page block layer weight tensor graph scheduler metric "
    "report window budget error signal value result change release version test load traffic "
    "people team design plan method question answer story history river mountain city garden "
    "language music science market energy water light paper study evidence reason example "
    "explain describe compare measure improve reduce increase handle keep find show build run "
    "check write read send receive start stop grow share follow allow expect notice decide "
    "quick careful simple large small early late stable steady slow fast clear open hidden "
    "common rare useful strange honest modern ancient gentle heavy light warm cold bright "
    "because although while when where which that this these those every each many few"
).split()

QUESTIONS = (
    "Can you explain how {a} affects {b} in simple terms?",
    "What is the difference between {a} and {b}?",
    "Write a short note about {a} for a new colleague.",
    "Summarise the main risks of {a} when {b} grows.",
    "Give three tips to keep {a} stable under heavy {b}.",
    "Why would {a} slow down after many hours of {b}?",
    "Describe a simple experiment that measures {a}.",
    "Translate this idea into plain words: {a} depends on {b}.",
)
TOPICS = (
    "memory use", "request latency", "the page cache", "a message queue", "garbage collection",
    "river erosion", "city traffic", "bread baking", "sleep quality", "solar panels", "a chess opening",
    "the water cycle", "batch size", "network congestion", "a kitchen garden", "long meetings",
)

# Scripts and code points that break naive text handling: emoji (with ZWJ sequences, skin tones, flags),
# right-to-left scripts and direction overrides, combining marks, CJK, and C0/C1 control characters.
UNICODE_POOLS = (
    ("😀", "🚀", "🧪", "👩‍💻", "👍🏽", "🇯🇵", "🏳️‍🌈", "❤️", "🤖", "🫠"),
    ("مرحبا بالعالم", "كيف حالك اليوم", "שלום עולם", "מה שלומך", "\u202eelbisiv\u202c", "\u200fسلام\u200f"),
    ("e\u0301", "a\u0308\u0304", "Z\u0335\u0321\u0322a\u0337\u0347l\u0334\u0318g\u0336\u031fo", "n\u0303",
     "\u0915\u094d\u0937"),
    ("日本語のテキスト", "中文文本测试", "한국어 문장", "ภาษาไทย", "हिन्दी पाठ", "Ελληνικά κείμενα"),
    ("\t", "\r\n", "\x0b", "\x0c", "\x1b[31m", "\x7f", "\u0085", "\u2028", "\u200b", "\ufeff", "\x01"),
    ("∑∫√∞≠", "½ ¾ ⅞", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ﬁ ﬂ", "Ⅻ", "\U0001d49c\U0001d4b7"),
)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def sentence(rng: random.Random) -> str:
    """One plausible-looking sentence of 6–18 common words."""
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
    return " ".join(words).capitalize() + rng.choice((".", ".", ".", "?", "!"))


def _paragraph(rng: random.Random) -> str:
    """2–6 sentences."""
    return " ".join(sentence(rng) for _ in range(rng.randint(2, 6)))


@functools.cache
def prose_corpus() -> tuple[str, tuple[int, ...]]:
    """(prose of CORPUS_BYTES, the offset of each of its paragraphs), made once from a fixed seed.

    Long prompts are cut from it: drawing every word from the generator cost ~95 µs per KiB (1.8 ms for a 19 KiB
    prompt, more than the rest of the request), once per request on the load's event loop.
    """
    rng = random.Random(CORPUS_SEED)
    parts: list[str] = []
    starts: list[int] = []
    length = 0
    while length < CORPUS_BYTES:
        starts.append(length)
        parts.append(_paragraph(rng))
        length += len(parts[-1]) + 2
    return "\n\n".join(parts) + "\n\n", tuple(starts)


def text_of_bytes(rng: random.Random, size_bytes: int) -> str:
    """Prose of at most `size_bytes` UTF-8 bytes (ASCII, so also characters), cut at a word boundary.

    The first paragraph is drawn for this prompt alone, so no two prompts share a prefix (a server's prefix
    cache sees them as distinct as ever); the rest is the shared corpus read from one of its paragraphs on, drawn
    too, wrapping around for prompts longer than the corpus.
    """
    if size_bytes <= 0:
        return ""
    text = _paragraph(rng)
    if len(text) + 2 < size_bytes:
        corpus, starts = prose_corpus()
        start = starts[rng.randrange(len(starts))]
        need = size_bytes - len(text) - 2
        body = corpus[start:start + need]
        while len(body) < need:  # longer than what is left of the corpus: on from its beginning
            body += corpus[:need - len(body)]
        text = text + "\n\n" + body
    text = text[:size_bytes]
    cut = text.rfind(" ")
    return text[:cut] if cut > size_bytes // 2 else text


def question(rng: random.Random) -> str:
    """A short, natural chat question."""
    a, b = rng.sample(TOPICS, 2)
    return rng.choice(QUESTIONS).format(a=a, b=b)


def unicode_text(rng: random.Random, size_bytes: int) -> str:
    """Mixed-script text with emoji, RTL runs, combining and control characters, within `size_bytes`."""
    pieces: list[str] = []
    length = 0
    while True:
        piece = rng.choice(rng.choice(UNICODE_POOLS)) if rng.random() < 0.6 else rng.choice(WORDS)
        piece_len = utf8_len(piece) + 1
        if length + piece_len > size_bytes:
            break
        pieces.append(piece)
        length += piece_len
    return " ".join(pieces)


def lognormal_int(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    """A lognormal draw with the given median, clamped to [low, high]."""
    value = rng.lognormvariate(math.log(median), sigma)
    return int(min(max(value, low), high))


def pareto_int(rng: random.Random, minimum: float, alpha: float, low: int, high: int) -> int:
    """A Pareto draw (heavy tail, index `alpha`) scaled to start at `minimum`, clamped to [low, high]."""
    value = minimum * rng.paretovariate(alpha)
    return int(min(max(value, low), high))


class TokenRatio:
    """Prompt tokens per UTF-8 byte as the server counts them, learnt from usage; 1.0 until known.

    Keeps the largest ratio seen on prompts of at least `min_bytes`, so sizes derived from it stay on the
    safe side of a model's limit (chat-template overhead only pushes the ratio up).
    """

    def __init__(self, min_bytes: int = 512, min_samples: int = 3) -> None:
        self.min_bytes = min_bytes
        self.min_samples = min_samples
        self.samples = 0
        self.max_tokens_per_byte = 0.0

    def observe(self, prompt_bytes: int, prompt_tokens: int | None) -> None:
        if prompt_tokens is None or prompt_bytes < self.min_bytes:
            return
        self.samples += 1
        self.max_tokens_per_byte = max(self.max_tokens_per_byte, prompt_tokens / prompt_bytes)

    @property
    def tokens_per_byte(self) -> float:
        if self.samples < self.min_samples or self.max_tokens_per_byte <= 0:
            return 1.0
        return self.max_tokens_per_byte

    def bytes_for(self, tokens: int) -> int:
        """How many bytes of prose make about `tokens` prompt tokens (never more than that)."""
        return max(int(tokens / self.tokens_per_byte), 0)
