"""dataset: replays prompts from `--dataset FILE` (ShareGPT-style JSON or JSONL), picked at random per arrival.

Each request sends a record's system and first user turn; the recorded answer's length sets max_tokens.
"""

from soak.load import OpenAIUser, task
from soak.load.dataset import load_dataset


class Dataset(OpenAIUser):
    def on_start(self):
        self.items = load_dataset(self.settings.dataset_path)

    @task
    def replay(self):
        item = self.rng.choice(self.items)
        _, max_tokens = self.fit(0, item.max_tokens)
        self.client.chat(list(item.messages), max_tokens=max_tokens)
