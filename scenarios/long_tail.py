"""long_tail: heavy-tailed prompt and output lengths (lognormal and Pareto), capped at the model's context.

Most requests are modest; a few are very long in prompt, output or both — the ones that find leaks and
stalls. max_model_len is the context length: --max-context, else what the server states, else 2048.
"""

from soak.load import OpenAIUser, task
from soak.load.prompts import lognormal_int, pareto_int, text_of_bytes

HUGE = 1 << 20


class LongTail(OpenAIUser):
    @task(3)
    def lognormal(self):
        self._ask(lognormal_int(self.rng, 256, 1.2, 8, HUGE), lognormal_int(self.rng, 128, 1.0, 4, HUGE))

    @task(1)
    def pareto(self):
        self._ask(pareto_int(self.rng, 64, 1.1, 8, HUGE), pareto_int(self.rng, 32, 1.3, 4, HUGE))

    def _ask(self, prompt_tokens, max_tokens):
        prompt_tokens, max_tokens = self.fit(prompt_tokens, max_tokens)
        ask = "\n\nContinue this text."
        document = text_of_bytes(self.rng, self.prompt_bytes(prompt_tokens) - len(ask))
        messages = [{"role": "user", "content": document + ask}]
        self.client.chat(messages, max_tokens=max_tokens)
