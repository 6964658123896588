"""bad_input: requests a server must refuse cleanly with a 4xx — and survive.

Malformed JSON, a prompt far beyond the context, max_tokens beyond the limit, an unknown model, empty
messages. Each request states the answer it expects (`Expect`): a 4xx (recorded with expected_error=True, a
success); for max_tokens beyond the limit, a 200 whose prompt and completion stay within the context is
accepted too. A 5xx or a hang is an error; any other 200 is a `validation_gap`, counted and named in the
summary, the report and the log (docs/load.md, "Expectations").
"""

from soak.load import Expect, OpenAIUser, task
from soak.load.prompts import question, text_of_bytes

# Bytes per context token that make a prompt too long even for a tokenizer that packs ~6 bytes a token.
OVERSIZE_BYTES_PER_TOKEN = 8
MALFORMED_JSON = Expect("malformed JSON: a 4xx")
PROMPT_TOO_LONG = Expect("prompt beyond the context: a 4xx")
UNKNOWN_MODEL = Expect("unknown model: a 4xx")
EMPTY_MESSAGES = Expect("empty messages: a 4xx")


class BadInput(OpenAIUser):
    @task
    def malformed_json(self):
        self.client.raw("/v1/chat/completions", b'{"model": "' + self.model.encode() + b'", "messages": [{"role": ',
                        expect_error=MALFORMED_JSON)

    @task
    def prompt_too_long(self):
        document = text_of_bytes(self.rng, self.max_model_len * OVERSIZE_BYTES_PER_TOKEN)
        self.client.chat([{"role": "user", "content": document}], max_tokens=16, expect_error=PROMPT_TOO_LONG)

    @task
    def max_tokens_too_large(self):
        expect = Expect(f"max_tokens beyond the context: a 4xx, or prompt + completion within {self.max_model_len} "
                        "tokens", max_total_tokens=self.max_model_len)
        self.client.chat([{"role": "user", "content": question(self.rng)}], max_tokens=self.max_model_len + 1000,
                         expect_error=expect)

    @task
    def unknown_model(self):
        self.client.chat([{"role": "user", "content": question(self.rng)}], max_tokens=16,
                         model="soak-no-such-model", expect_error=UNKNOWN_MODEL)

    @task
    def empty_messages(self):
        self.client.chat([], max_tokens=16, expect_error=EMPTY_MESSAGES)
