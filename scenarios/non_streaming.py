"""non_streaming: whole responses (stream=false); no TTFT or ITL, only end-to-end latency."""

from soak.load import OpenAIUser, task
from soak.load.prompts import question, text_of_bytes


class NonStreaming(OpenAIUser):
    @task(3)
    def chat(self):
        messages = [{"role": "user", "content": question(self.rng)}]
        self.client.chat(messages, max_tokens=self.rng.randint(16, 96), stream=False)

    @task(1)
    def completion(self):
        prompt = text_of_bytes(self.rng, min(self.rng.randint(64, 600), self.prompt_room_bytes(64)))
        self.client.completion(prompt, max_tokens=self.rng.randint(16, 64), stream=False)
