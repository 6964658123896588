"""structured: answers constrained to JSON — `response_format` json_object, and json_schema with schemas from one
field to a wide nested record (soak.load.schemas) — each answer checked: it must parse and match its schema, or
it is an `invalid_output` error (`errors.invalid_output`). Streamed and whole answers alternate.

An answer cut at max_tokens (finish_reason `length`) is not judged: guided decoding cannot close JSON it was
given no room for. max_tokens grows with the schema so that a real model's answer fits.
"""

from soak.load import OpenAIUser, task
from soak.load.prompts import question
from soak.load.schemas import SCHEMAS
from soak.load.validate import json_answer

# Output tokens each schema's answer gets (clamped to the context).
MAX_TOKENS = {"answer": 96, "person": 192, "order": 384, "record_40": 1024}


class Structured(OpenAIUser):
    def ask(self, name: str | None) -> None:
        """One request for JSON: json_object when `name` is None, else the schema `name`."""
        if name is None:
            response_format, schema, max_tokens = {"type": "json_object"}, None, 96
            ask = "Answer in JSON: an object with the key 'answer'."
        else:
            schema, max_tokens = SCHEMAS[name], MAX_TOKENS[name]
            response_format = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
            ask = f"Answer as a JSON {name} record."
        messages = [{"role": "user", "content": f"{question(self.rng)} {ask}"}]
        _, max_tokens = self.fit(64, max_tokens)
        self.client.chat(messages, max_tokens=max_tokens, stream=self.rng.random() < 0.5,
                         response_format=response_format, validate=json_answer(schema))

    @task(2)
    def json_object(self):
        self.ask(None)

    @task(3)
    def schema_answer(self):
        self.ask("answer")

    @task(2)
    def schema_person(self):
        self.ask("person")

    @task(2)
    def schema_order(self):
        self.ask("order")

    @task(1)
    def schema_record_40(self):
        self.ask("record_40")
