"""prefix_multiturn: conversations that resend a growing history behind one shared system prompt.

Exercises the prefix cache: every request starts with the same long system prompt, and each turn of a
conversation resends all earlier turns. A conversation restarts after a few turns or when the next turn
would no longer fit the context.
"""

import random

from soak.load import OpenAIUser, task
from soak.load.prompts import question, text_of_bytes, utf8_len

CONVERSATIONS = 16
MAX_TURNS = 6
SYSTEM_PROMPT_TOKENS = 384


class PrefixMultiturn(OpenAIUser):
    def on_start(self):
        # The same system prompt for every conversation (and every run with the same seed).
        seeded = random.Random(self.settings.seed)
        self.system_prompt = "You are a careful assistant. Reference notes:\n" + text_of_bytes(
            seeded, self.prompt_bytes(min(SYSTEM_PROMPT_TOKENS, self.max_model_len // 4)))
        self.histories = {}

    @task
    def next_turn(self):
        slot = self.rng.randrange(CONVERSATIONS)
        max_tokens = self.rng.randint(16, 96)
        user = {"role": "user", "content": question(self.rng) + " " + text_of_bytes(self.rng, self.rng.randint(0, 300))}
        history = self.histories.get(slot, [])
        if len(history) >= 2 * MAX_TURNS or not self._fits(history + [user], max_tokens):
            history = []
        messages = [{"role": "system", "content": self.system_prompt}] + history + [user]
        reply = self.client.chat(messages, max_tokens=max_tokens)
        if reply.ok:
            self.histories[slot] = history + [user, {"role": "assistant", "content": reply.text}]
        else:
            self.histories.pop(slot, None)

    def _fits(self, turns, max_tokens):
        used_bytes = utf8_len(self.system_prompt) + sum(utf8_len(t["content"]) for t in turns)
        prompt_tokens, _ = self.fit(self.max_model_len, max_tokens)
        return used_bytes <= self.prompt_bytes(prompt_tokens) - 16 * len(turns)
