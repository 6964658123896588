"""Byte-level tokenizer: token ids 0–255 are UTF-8 bytes, a few ids above them are specials."""

import codecs

BOS_ID = 256
EOS_ID = 257
VOCAB_SIZE = 260  # 256 bytes, BOS, EOS and two unused specials


def encode(text: str) -> list[int]:
    """BOS followed by the UTF-8 bytes of `text` (a lone surrogate, valid in JSON, becomes `?`)."""
    return [BOS_ID, *text.encode("utf-8", errors="replace")]


class IncrementalDecoder:
    """Turns generated token ids into text one at a time.

    A multi-byte character may arrive over several tokens; its bytes are held back until it is
    complete, so every piece returned is valid UTF-8. Invalid sequences become U+FFFD.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        """Text completed by this token ('' for specials or a partial character)."""
        if token_id >= 256:
            return ""
        return self._decoder.decode(bytes((token_id,)))

    def finish(self) -> str:
        """Flush a dangling partial character (as U+FFFD)."""
        return self._decoder.decode(b"", final=True)
