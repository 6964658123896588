"""mixed (the default): mostly short chat, plus heavy-tailed prompt and output lengths, some completions.

Lengths are drawn per arrival from `self.rng` (seeded by `--seed`) and capped to fit the model's context.
"""

from soak.load import OpenAIUser, task
from soak.load.prompts import lognormal_int, question, text_of_bytes, utf8_len


class Mixed(OpenAIUser):
    @task(6)
    def short_chat(self):
        messages = [{"role": "user", "content": question(self.rng)}]
        self.client.chat(messages, max_tokens=self.rng.randint(16, 64))

    @task(3)
    def long_tail_chat(self):
        prompt_tokens, max_tokens = self.fit(lognormal_int(self.rng, 300, 1.0, 16, 1 << 20),
                                             lognormal_int(self.rng, 128, 1.0, 8, 1 << 20))
        ask = "\n\n" + question(self.rng)
        document = text_of_bytes(self.rng, self.prompt_bytes(prompt_tokens) - utf8_len(ask))
        messages = [{"role": "user", "content": document + ask}]
        self.client.chat(messages, max_tokens=max_tokens)

    @task(1)
    def completion(self):
        prompt_tokens, max_tokens = self.fit(lognormal_int(self.rng, 200, 1.0, 16, 1 << 20),
                                             lognormal_int(self.rng, 96, 1.0, 8, 1 << 20))
        self.client.completion(text_of_bytes(self.rng, self.prompt_bytes(prompt_tokens)), max_tokens=max_tokens)
