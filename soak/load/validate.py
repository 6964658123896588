"""Checking structured answers: JSON that parses and matches its schema, tool calls that name a tool offered.

A scenario hands the client a validator (`json_answer(schema)`, `tool_answer(tools)`); the client calls it on
every successful answer, and an answer it rejects becomes an `invalid_output` error whose message says what was
wrong and quotes the start of the answer (docs/load.md, "Structured output"). A validator takes the `Answer`
and returns None when the answer is good, else the reason in a few words.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

QUOTE_CHARS = 160
# A reply cut at max_tokens is truncated, not wrong: guided decoding cannot close JSON it was not given room for.
TRUNCATED = "length"


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an answer: the function's name and its arguments as sent (a JSON text)."""

    name: str | None
    arguments: str


@dataclass(frozen=True)
class Answer:
    """What a validator sees of a successful answer: its text, its tool calls, why it finished."""

    text: str
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)
    finish_reason: str | None = None


Validator = Callable[[Answer], str | None]


def quote(text: str, most: int = QUOTE_CHARS) -> str:
    """The start of `text` as a one-line repr, cut at `most` characters with an ellipsis."""
    shown = repr(text[:most])
    return shown + "…" if len(text) > most else shown


def _parse(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, f"invalid JSON ({exc.msg} at char {getattr(exc, 'pos', '?')})"


def _schema_problem(value: Any, schema: dict[str, Any] | None) -> str | None:
    if schema is None:
        return None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the top level"
    return f"JSON does not match the schema at {where}: {error.message[:100]}"


def json_problem(text: str, schema: dict[str, Any] | None = None, *, require_object: bool = False) -> str | None:
    """Why `text` is not a valid answer: not JSON, not an object (with `require_object`), or off the schema."""
    value, problem = _parse(text)
    if problem:
        return problem
    if require_object and not isinstance(value, dict):
        return f"JSON is a {type(value).__name__}, not an object"
    return _schema_problem(value, schema)


def tool_problem(calls: tuple[ToolCall, ...], tools: list[dict[str, Any]], *, required: bool,
                 named: str | None = None) -> str | None:
    """Why these tool calls are not a valid answer to `tools`: none where one was required, a name not offered
    (or not the one `named`), arguments that are not a JSON object or miss the function's parameters."""
    if not calls:
        return "no tool call, though tool_choice required one" if required else None
    offered = {tool["function"]["name"]: tool["function"].get("parameters") for tool in tools}
    for call in calls:
        if call.name not in offered:
            return f"tool call names {call.name!r}, not a tool offered ({', '.join(sorted(offered))})"
        if named is not None and call.name != named:
            return f"tool call names {call.name!r}, but tool_choice named {named!r}"
        problem = json_problem(call.arguments, offered[call.name], require_object=True)
        if problem:
            return f"arguments of {call.name}: {problem}"
    return None


def json_answer(schema: dict[str, Any] | None = None) -> Validator:
    """A validator for `response_format` answers: an object (json_object), matching `schema` when given."""
    def validate(answer: Answer) -> str | None:
        if answer.finish_reason == TRUNCATED:
            return None
        return json_problem(answer.text, schema, require_object=True)

    return validate


def tool_answer(tools: list[dict[str, Any]], tool_choice: Any = "auto") -> Validator:
    """A validator for answers to `tools` under `tool_choice` ("auto", "required" or a named function)."""
    named = tool_choice["function"]["name"] if isinstance(tool_choice, dict) else None
    required = tool_choice == "required" or named is not None

    def validate(answer: Answer) -> str | None:
        if answer.finish_reason == TRUNCATED:
            return None
        return tool_problem(answer.tool_calls, tools, required=required, named=named)

    return validate


def invalid_message(problem: str, answer: Answer) -> str:
    """The record's error message: what was wrong, and the start of what the server said."""
    shown = answer.text
    if answer.tool_calls and not shown:
        shown = "; ".join(f"{call.name}({call.arguments})" for call in answer.tool_calls)
    return f"{problem}; answer: {quote(shown)}"
