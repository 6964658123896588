"""chat_short: short chat questions with short answers, streamed — the everyday request."""

from soak.load import OpenAIUser, task
from soak.load.prompts import question


class ChatShort(OpenAIUser):
    @task
    def ask(self):
        messages = [{"role": "user", "content": question(self.rng)}]
        self.client.chat(messages, max_tokens=self.rng.randint(16, 64))
