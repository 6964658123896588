"""cancel: streams that the client abandons at a random token, as impatient users do.

Each request disconnects after a random number of content chunks; the record says `cancelled`, which is
not an error. A server that keeps KV blocks of aborted requests shows it at the next idle probe.
"""

from soak.load import OpenAIUser, task
from soak.load.prompts import question, text_of_bytes


class Cancel(OpenAIUser):
    @task
    def walk_away(self):
        max_tokens = self.rng.randint(32, 256)
        room = self.prompt_room_bytes(max_tokens) - 200  # the question's bytes and then some
        content = text_of_bytes(self.rng, min(self.rng.randint(0, 400), room)) + "\n" + question(self.rng)
        self.client.chat([{"role": "user", "content": content}], max_tokens=max_tokens,
                         cancel_after_tokens=self.rng.randint(1, max_tokens - 1))
