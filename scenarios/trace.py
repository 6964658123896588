"""trace: replays `--trace FILE`, one request per trace row, at the row's arrival time (docs/load.md, "Trace replay").

Each request is a completion whose prompt is as long as the row's prompt tokens and whose max_tokens is its
output tokens (with ignore_eos, so the answer is that long), both capped to the context as other scenarios are.
Rows of a Mooncake trace that share hash ids share their prompts' first blocks of text, block for block.
"""

from soak.load import OpenAIUser, task
from soak.load.client import current_arrival
from soak.load.trace import MOONCAKE_BLOCK_TOKENS, trace_prompt


class Trace(OpenAIUser):
    def on_start(self):
        self.block_bytes = None

    def _block_bytes(self):
        """Bytes of one hash-id block: fixed once the server's tokens per byte is learnt, so blocks stay alike."""
        if self.block_bytes is None:
            size = max(self.prompt_bytes(MOONCAKE_BLOCK_TOKENS), 1)
            if self.token_ratio.samples >= self.token_ratio.min_samples:
                self.block_bytes = size
            return size
        return self.block_bytes

    @task
    def replay(self):
        arrival = current_arrival()
        row = arrival.item if arrival is not None else None
        if row is None:  # under plain Locust there is no trace to follow
            return
        prompt_tokens, max_tokens = self.fit(max(row.input_tokens, 1), max(row.output_tokens, 1))
        prompt = trace_prompt(row, self.prompt_bytes(prompt_tokens), self._block_bytes(), self.settings.seed, self.rng)
        self.client.completion(prompt, max_tokens=max_tokens, ignore_eos=True)
