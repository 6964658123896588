"""sampling: the sampler's less-travelled paths, one task each — n > 1 choices, logprobs with top_logprobs (chat
and completions), stop sequences, per-request seeds, presence/frequency/repetition penalties, max_tokens 1, and
max_tokens at the most the context allows. Streamed and whole answers alternate; answers are not judged (a
sampled answer has no single right text), only the request's outcome and timing.
"""

from soak.load import OpenAIUser, task
from soak.load.prompts import question, utf8_len
from soak.load.user import TEMPLATE_MARGIN_TOKENS


class Sampling(OpenAIUser):
    def ask(self, max_tokens: int | None, **params) -> None:
        """One chat of a short question; `max_tokens` None asks for all the context the question leaves (its
        bytes counted as tokens: no tokenizer makes more tokens than bytes of it)."""
        text = question(self.rng)
        room = self.max_model_len - TEMPLATE_MARGIN_TOKENS - utf8_len(text)
        max_tokens = max(1, room if max_tokens is None else min(max_tokens, room))
        self.client.chat([{"role": "user", "content": text}], max_tokens=max_tokens,
                         stream=self.rng.random() < 0.5, **params)

    @task(2)
    def n_choices(self):
        self.ask(self.rng.randint(16, 48), n=self.rng.choice((2, 4)), temperature=0.9)

    @task(2)
    def logprobs(self):
        self.ask(self.rng.randint(16, 48), logprobs=True, top_logprobs=self.rng.randint(1, 5))

    @task(1)
    def completion_logprobs(self):
        self.client.completion(question(self.rng), max_tokens=self.rng.randint(16, 48),
                               stream=self.rng.random() < 0.5, logprobs=self.rng.randint(1, 5))

    @task(2)
    def stop_sequences(self):
        self.ask(self.rng.randint(32, 96), stop=self.rng.sample([".", "\n", " the ", "?", ","], 2))

    @task(2)
    def seeded(self):
        self.ask(self.rng.randint(16, 48), seed=self.rng.randrange(2**31), temperature=0.8)

    @task(2)
    def penalties(self):
        self.ask(self.rng.randint(16, 48), presence_penalty=round(self.rng.uniform(-1, 1.5), 2),
                 frequency_penalty=round(self.rng.uniform(-1, 1.5), 2),
                 repetition_penalty=round(self.rng.uniform(1.0, 1.3), 2))

    @task(2)
    def max_tokens_one(self):
        self.ask(1)

    @task(1)
    def max_tokens_max(self):
        self.ask(None)
