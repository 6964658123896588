"""tools: chat requests offering tools (soak.load.schemas.TOOLS) under each `tool_choice` — auto, required, and
a named function — each answer checked: a tool call must name a tool offered (the named one, when named) with
arguments that parse as a JSON object matching its parameters; required and named need a call. Anything else is
an `invalid_output` error (`errors.invalid_output`). Streamed and whole answers alternate.
"""

from soak.load import OpenAIUser, task
from soak.load.schemas import TOOLS, tool_names
from soak.load.validate import tool_answer

ASKS = ("What's the weather in Lisbon right now?", "Find the documents about the billing migration.",
        "Open a ticket: the export page times out.", "Is it going to rain in Osaka?",
        "Search for the runbook on GPU resets.", "File a p2 ticket for the broken login link.")
MAX_TOKENS = 256  # a real model's call with its arguments fits


class Tools(OpenAIUser):
    def call(self, tool_choice) -> None:
        messages = [{"role": "system", "content": "Use a tool when one fits."},
                    {"role": "user", "content": self.rng.choice(ASKS)}]
        _, max_tokens = self.fit(64, MAX_TOKENS)
        self.client.chat(messages, max_tokens=max_tokens, stream=self.rng.random() < 0.5, tools=TOOLS,
                         tool_choice=tool_choice, validate=tool_answer(TOOLS, tool_choice))

    @task(2)
    def choice_auto(self):
        self.call("auto")

    @task(2)
    def choice_required(self):
        self.call("required")

    @task(2)
    def choice_named(self):
        self.call({"type": "function", "function": {"name": self.rng.choice(tool_names())}})
