"""unicode: prompts full of emoji, right-to-left text, combining marks and control characters."""

from soak.load import OpenAIUser, task
from soak.load.prompts import unicode_text


class Unicode(OpenAIUser):
    @task(3)
    def chat(self):
        content = unicode_text(self.rng, min(self.rng.randint(32, 600), self.prompt_room_bytes(64)))
        self.client.chat([{"role": "user", "content": content}], max_tokens=self.rng.randint(16, 64))

    @task(1)
    def completion(self):
        prompt = unicode_text(self.rng, min(self.rng.randint(32, 300), self.prompt_room_bytes(48)))
        self.client.completion(prompt, max_tokens=self.rng.randint(16, 48))
