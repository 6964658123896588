"""bad_input: requests a server must refuse cleanly with a 4xx — and survive.

Malformed JSON, a prompt far beyond the context, max_tokens beyond the limit, an unknown model, empty
messages. A 4xx is the expected answer (recorded with expected_error=True, a success); a 5xx or a hang
is an error.
"""

from soak.load import OpenAIUser, task
from soak.load.prompts import question, text_of_bytes

# Bytes per context token that make a prompt too long even for a tokenizer that packs ~6 bytes a token.
OVERSIZE_BYTES_PER_TOKEN = 8


class BadInput(OpenAIUser):
    @task
    def malformed_json(self):
        self.client.raw("/v1/chat/completions", b'{"model": "' + self.model.encode() + b'", "messages": [{"role": ',
                        expect_error=True)

    @task
    def prompt_too_long(self):
        document = text_of_bytes(self.rng, self.max_model_len * OVERSIZE_BYTES_PER_TOKEN)
        self.client.chat([{"role": "user", "content": document}], max_tokens=16, expect_error=True)

    @task
    def max_tokens_too_large(self):
        self.client.chat([{"role": "user", "content": question(self.rng)}], max_tokens=self.max_model_len + 1000,
                         expect_error=True)

    @task
    def unknown_model(self):
        self.client.chat([{"role": "user", "content": question(self.rng)}], max_tokens=16,
                         model="soak-no-such-model", expect_error=True)

    @task
    def empty_messages(self):
        self.client.chat([], max_tokens=16, expect_error=True)
