"""Validating structured answers: JSON that parses and matches its schema, tool calls that name a tool offered."""

from __future__ import annotations

import json

import pytest

from soak.load.schemas import SCHEMAS, TOOLS
from soak.load.validate import Answer, ToolCall, invalid_message, json_answer, quote, tool_answer
from soak.refserver.structured import instance_of

PERSON = SCHEMAS["person"]
VALID_PERSON = {"name": "Ada", "age": 36, "email": "ada@example.org", "tags": ["math"], "active": True}


def test_valid_json_passes_and_broken_json_names_the_problem():
    assert json_answer(PERSON)(Answer(json.dumps(VALID_PERSON))) is None
    assert json_answer()(Answer('{"answer": 1}')) is None
    problem = json_answer(PERSON)(Answer('{"name": "Ada",'))
    assert problem.startswith("invalid JSON (")
    assert json_answer()(Answer("[1, 2]")) == "JSON is a list, not an object"


@pytest.mark.parametrize("change, where", [
    ({"age": -1}, "at age"),
    ({"age": "old"}, "at age"),
    ({"tags": []}, "at tags"),
    ({"extra": 1}, "at the top level"),
])
def test_an_answer_off_its_schema_says_where(change, where):
    problem = json_answer(PERSON)(Answer(json.dumps({**VALID_PERSON, **change})))
    assert problem.startswith("JSON does not match the schema") and where in problem


def test_a_truncated_answer_is_not_judged():
    assert json_answer(PERSON)(Answer('{"name": "Ad', finish_reason="length")) is None
    assert json_answer(PERSON)(Answer('{"name": "Ad', finish_reason="stop")) is not None


def _call(name: str, arguments: dict | str) -> Answer:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Answer("", (ToolCall(name, text),), "tool_calls")


def test_tool_calls_must_name_a_tool_offered_with_arguments_that_match():
    weather = {"location": "Lisbon", "unit": "celsius"}
    assert tool_answer(TOOLS, "auto")(_call("get_weather", weather)) is None
    assert "not a tool offered" in tool_answer(TOOLS, "auto")(_call("launch_rockets", {}))
    assert "arguments of get_weather: invalid JSON" in tool_answer(TOOLS, "auto")(_call("get_weather", '{"loc'))
    assert "does not match" in tool_answer(TOOLS, "auto")(_call("get_weather", {"location": "x", "unit": "K"}))


def test_required_and_named_tool_choices_need_the_right_call():
    plain = Answer("It is sunny.", (), "stop")
    assert tool_answer(TOOLS, "auto")(plain) is None
    assert tool_answer(TOOLS, "required")(plain) == "no tool call, though tool_choice required one"
    named = {"type": "function", "function": {"name": "create_ticket"}}
    problem = tool_answer(TOOLS, named)(_call("get_weather", {"location": "x", "unit": "celsius"}))
    assert problem == "tool call names 'get_weather', but tool_choice named 'create_ticket'"


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_the_reference_servers_instances_validate(name):
    # what the reference server answers must pass what the scenario checks, for every schema it is sent
    assert json_answer(SCHEMAS[name])(Answer(json.dumps(instance_of(SCHEMAS[name])))) is None


def test_the_message_quotes_the_start_of_the_answer():
    message = invalid_message("invalid JSON (x)", Answer("{" + "a" * 400))
    assert message.startswith("invalid JSON (x); answer: '{aaa") and message.endswith("…")
    assert quote("short") == "'short'"
    assert "get_weather({\"loc)" in invalid_message("bad", _call("get_weather", '{"loc'))
