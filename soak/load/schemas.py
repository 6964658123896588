"""The JSON schemas and tools the `structured` and `tools` scenarios send (plain data, no Locust).

Schemas grow from one field to a wide, nested record, because a guided-decoding backend compiles each schema into
a grammar and caches it: the large ones are where compile time, cache growth and their leaks show.
"""

from __future__ import annotations

from typing import Any

STRING = {"type": "string"}


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A closed object schema; every property is required unless `required` says otherwise."""
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required, "additionalProperties": False}


ADDRESS = _object({"street": STRING, "city": STRING, "postcode": {"type": "string", "minLength": 3},
                   "country": {"type": "string", "enum": ["DE", "FR", "GB", "US", "JP"]}})
LINE_ITEM = _object({"sku": {"type": "string", "minLength": 3}, "quantity": {"type": "integer", "minimum": 1},
                     "unit_price": {"type": "number", "minimum": 0}})


def _wide_record(fields: int) -> dict[str, Any]:
    """A record of `fields` scalar fields of every type, three nested sections and an array of objects."""
    kinds = [STRING, {"type": "integer", "minimum": 0, "maximum": 10_000}, {"type": "number"},
             {"type": "boolean"}, {"type": "string", "enum": ["low", "medium", "high"]}]
    scalars = {f"field_{i:02d}": kinds[i % len(kinds)] for i in range(fields)}
    return _object({**scalars, "billing": ADDRESS, "shipping": ADDRESS,
                    "items": {"type": "array", "items": LINE_ITEM, "minItems": 2, "maxItems": 20},
                    "notes": {"anyOf": [STRING, {"type": "null"}]}})


# name → schema, smallest first.
SCHEMAS: dict[str, dict[str, Any]] = {
    "answer": _object({"answer": STRING}),
    "person": _object({"name": STRING, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                       "email": STRING, "tags": {"type": "array", "items": STRING, "minItems": 1},
                       "active": {"type": "boolean"}}),
    "order": _object({"order_id": STRING, "customer": _object({"id": {"type": "integer"}, "name": STRING,
                                                               "address": ADDRESS}),
                      "items": {"type": "array", "items": LINE_ITEM, "minItems": 1},
                      "status": {"type": "string", "enum": ["new", "paid", "shipped", "cancelled"]}}),
    "record_40": _wide_record(40),
}


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


TOOLS: list[dict[str, Any]] = [
    _tool("get_weather", "The current weather at a place.",
          _object({"location": STRING, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}})),
    _tool("search_documents", "Full-text search over the knowledge base.",
          _object({"query": STRING, "top_k": {"type": "integer", "minimum": 1, "maximum": 20},
                   "filters": _object({"author": STRING, "after": STRING}, required=[])}, required=["query"])),
    _tool("create_ticket", "Open a support ticket.",
          _object({"title": STRING, "priority": {"type": "string", "enum": ["p1", "p2", "p3"]},
                   "labels": {"type": "array", "items": STRING}, "assignee": _object({"id": {"type": "integer"},
                                                                                      "name": STRING})})),
]


def tool_names() -> list[str]:
    return [tool["function"]["name"] for tool in TOOLS]
