"""soak: soak and stability tests for LLM inference servers, with verdicts."""

__version__ = "0.1.0"
