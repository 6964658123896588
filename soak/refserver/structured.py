"""Structured answers: JSON for `response_format`, a tool call for `tools`, and a broken one under the fault.

The reference model is random bytes, so it cannot be constrained token by token the way guided decoding is.
Instead the answer's text is decided when the request arrives — the smallest-effort valid instance of the schema
(every listed property, each at its simplest valid value) or a tool call with such arguments — and handed out a
few characters per generated token, the rest with the last one: timing and token counts stay the engine's own.
Under `invalid-output-after` the text is cut before its last character and left open with a comma: JSON that
does not parse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4
MAX_DEPTH = 8  # a recursive schema ($ref to itself) stops here with the simplest value
SIMPLE = {"string": "", "integer": 0, "number": 0, "boolean": True, "null": None, "array": [], "object": {}}


class SchemaError(ValueError):
    """A schema the generator cannot make an instance of (a $ref it cannot resolve)."""


@dataclass(frozen=True)
class Structured:
    """The answer decided for one request: JSON text, or a tool call (`tool_name` set) whose arguments it is."""

    text: str
    tool_name: str | None = None

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_name else "stop"

    def broken(self) -> Structured:
        """The same answer with its JSON left unfinished: the last character dropped, a dangling comma."""
        return Structured(self.text[:-1] + ",", self.tool_name)


def instance_of(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """A value valid under `schema` (a practical subset of JSON Schema: types, properties, items, enum, const,
    bounds, lengths, anyOf/oneOf/allOf, local $ref)."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return {}
    if "$ref" in schema:
        return instance_of(_resolve(schema["$ref"], root), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return instance_of(schema[key][0], root, depth + 1)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part if isinstance(part, dict) else {})
        return instance_of(merged, root, depth + 1)
    return _typed(schema, _type_of(schema), root, depth)


def _type_of(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    return str(kind)


def _typed(schema: dict[str, Any], kind: str, root: Any, depth: int) -> Any:
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: instance_of(sub, root, depth + 1) for name, sub in properties.items()}
    if kind == "array":
        count = int(schema.get("minItems", 0))
        return [instance_of(schema.get("items") or {}, root, depth + 1) for _ in range(count)]
    if kind == "string":
        return "x" * int(schema.get("minLength", 0))
    if kind in ("integer", "number"):
        return _number(schema, kind)
    return SIMPLE.get(kind)


def _number(schema: dict[str, Any], kind: str) -> int | float:
    """0, moved inside the bounds when they exclude it."""
    value = schema["minimum"] if "minimum" in schema else schema.get("exclusiveMinimum", -1) + 1
    value = max(value, 0) if "minimum" not in schema and "exclusiveMinimum" not in schema else value
    if "maximum" in schema:
        value = min(value, schema["maximum"])
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        value = schema["exclusiveMaximum"] - 1
    return int(value) if kind == "integer" else value


def _resolve(ref: Any, root: Any) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise SchemaError(f"only local $ref is supported, got {ref!r}")
    node = root
    for part in filter(None, ref[1:].split("/")):
        if not isinstance(node, dict) or part not in node:
            raise SchemaError(f"$ref {ref!r} does not resolve")
        node = node[part]
    return node


def json_answer(schema: dict[str, Any] | None) -> Structured:
    """The answer to `response_format`: an instance of the schema, or for json_object a small object."""
    value = instance_of(schema) if schema is not None else {"answer": "soak"}
    return Structured(json.dumps(value, separators=(",", ":")))


def tool_answer(name: str, parameters: dict[str, Any] | None) -> Structured:
    """A call of the tool `name` with arguments valid under its `parameters` schema."""
    arguments = instance_of(parameters) if parameters else {}
    return Structured(json.dumps(arguments, separators=(",", ":")), name)


class Emitter:
    """Hands a structured answer's text out: CHARS_PER_TOKEN characters per generated token, the rest at the end."""

    def __init__(self, structured: Structured) -> None:
        self.structured = structured
        self._sent = 0

    def next_piece(self, last: bool) -> str:
        end = len(self.structured.text) if last else min(self._sent + CHARS_PER_TOKEN, len(self.structured.text))
        piece = self.structured.text[self._sent:end]
        self._sent = end
        return piece
