"""lora: requests naming a LoRA adapter as their model — the `--lora NAME=PATH` adapters, spread by Zipf rank (the
first given the most asked for; `--lora-zipf S`, 0 = even) — short chats and completions, streamed and whole.

With `--lora-churn-every`, soak unloads and reloads one adapter at each cycle (soak/load/lora.py); this scenario
keeps off that adapter for a short quiet time either side of its cycle, so a healthy server is never asked for an
adapter soak has just unloaded. With a single adapter, those requests go to the base model meanwhile.
"""

import time

from soak.load import OpenAIUser, task
from soak.load.lora import churn_schedule, pick_adapter
from soak.load.prompts import question


class Lora(OpenAIUser):
    def on_start(self):
        self.churn = churn_schedule(self.settings.adapters, self.settings.churn_every_s)

    def adapter(self) -> str:
        """This request's model: an adapter by Zipf rank, never the one being cycled (the base model if none)."""
        resting = self.churn.resting(time.time()) if self.churn is not None else None
        return pick_adapter(self.rng, self.settings.adapters, self.settings.adapter_zipf, resting) or self.model

    @task(3)
    def chat(self):
        _, max_tokens = self.fit(64, self.rng.randint(16, 64))
        self.client.chat([{"role": "user", "content": question(self.rng)}], max_tokens=max_tokens,
                         model=self.adapter(), stream=self.rng.random() < 0.75)

    @task(1)
    def completion(self):
        _, max_tokens = self.fit(64, self.rng.randint(8, 32))
        self.client.completion(question(self.rng), max_tokens=max_tokens, model=self.adapter())
