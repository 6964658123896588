"""long_context: prompts that fill 80–95 % of the model's context, with short answers (prefill-heavy)."""

from soak.load import OpenAIUser, task
from soak.load.prompts import text_of_bytes


class LongContext(OpenAIUser):
    @task
    def read_long_document(self):
        max_tokens = self.rng.randint(16, 64)
        room_tokens, max_tokens = self.fit(self.max_model_len, max_tokens)
        prompt_tokens = int(room_tokens * self.rng.uniform(0.80, 0.95))
        ask = "\n\nWhat is this text about?"
        document = text_of_bytes(self.rng, self.prompt_bytes(prompt_tokens) - len(ask))
        messages = [{"role": "user", "content": document + ask}]
        self.client.chat(messages, max_tokens=max_tokens)
