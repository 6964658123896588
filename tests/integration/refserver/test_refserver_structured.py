"""The reference server's structured answers, tool calls, n > 1 and logprobs, over real HTTP; and the planted
`invalid-output-after` fault that breaks them."""

from __future__ import annotations

import json

import jsonschema
import pytest

from soak.load.schemas import SCHEMAS, TOOLS, tool_names

pytestmark = pytest.mark.timeout(120)


def _schema_format(name: str) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}}


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_json_schema_answers_match_their_schema_streamed_and_whole(shared_refserver, name):
    whole = shared_refserver.chat(max_tokens=8, response_format=_schema_format(name))
    assert whole.status_code == 200, whole.text
    choice = whole.json()["choices"][0]
    jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMAS[name])
    assert choice["finish_reason"] == "stop"
    streamed = shared_refserver.stream_chat(max_tokens=8, response_format=_schema_format(name))
    assert streamed.done
    jsonschema.validate(json.loads(streamed.text), SCHEMAS[name])


def test_json_object_answer_is_an_object(shared_refserver):
    response = shared_refserver.chat(max_tokens=4, response_format={"type": "json_object"})
    assert isinstance(json.loads(response.json()["choices"][0]["message"]["content"]), dict)


def _streamed_call(result) -> tuple[str, str, str]:
    """(name, arguments, finish reason) of the one tool call a stream assembled."""
    name, arguments, finish = "", "", None
    for chunk in result.chunks:
        for choice in chunk.get("choices") or []:
            for call in choice.get("delta", {}).get("tool_calls") or []:
                name += call["function"].get("name") or ""
                arguments += call["function"].get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return name, arguments, finish


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "create_ticket"}}])
def test_tool_calls_name_a_tool_offered_with_valid_arguments(shared_refserver, choice):
    parameters = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
    whole = shared_refserver.chat(max_tokens=8, tools=TOOLS, tool_choice=choice).json()["choices"][0]
    [call] = whole["message"]["tool_calls"]
    assert whole["finish_reason"] == "tool_calls" and call["function"]["name"] in tool_names()
    jsonschema.validate(json.loads(call["function"]["arguments"]), parameters[call["function"]["name"]])
    name, arguments, finish = _streamed_call(shared_refserver.stream_chat(max_tokens=8, tools=TOOLS,
                                                                          tool_choice=choice))
    assert finish == "tool_calls" and name in tool_names()
    if isinstance(choice, dict):
        assert name == call["function"]["name"] == "create_ticket"
    jsonschema.validate(json.loads(arguments), parameters[name])


def test_tool_choice_none_answers_text_and_an_unknown_named_tool_is_a_400(shared_refserver):
    text = shared_refserver.chat(max_tokens=4, tools=TOOLS, tool_choice="none").json()["choices"][0]
    assert "tool_calls" not in text["message"] and text["message"]["content"]
    unknown = shared_refserver.chat(max_tokens=4, tools=TOOLS,
                                    tool_choice={"type": "function", "function": {"name": "no_such_tool"}})
    assert unknown.status_code == 400 and "no_such_tool" in unknown.json()["error"]["message"]


def test_n_choices_and_logprobs(shared_refserver):
    body = shared_refserver.chat(max_tokens=6, n=3, logprobs=True, top_logprobs=2, ignore_eos=True).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert body["usage"]["completion_tokens"] == 3 * 6
    entries = body["choices"][0]["logprobs"]["content"]
    assert entries and all(len(e["top_logprobs"]) == 2 and e["logprob"] < 0 for e in entries)
    streamed = shared_refserver.stream_chat(max_tokens=4, n=2, logprobs=True, ignore_eos=True)
    indexes = {c["index"] for chunk in streamed.chunks for c in chunk["choices"]}
    assert indexes == {0, 1}
    completion = shared_refserver.post("/v1/completions", {"prompt": "hi", "max_tokens": 3, "logprobs": 1,
                                                            "ignore_eos": True}).json()
    assert len(completion["choices"][0]["logprobs"]["token_logprobs"]) == 3


def test_invalid_output_fault_breaks_structured_answers_only(start_refserver):
    server = start_refserver("--fault", "invalid-output-after=0s")
    assert server.debug()["invalid_output"] is True
    answer = server.chat(max_tokens=4, response_format=_schema_format("person")).json()["choices"][0]
    with pytest.raises(ValueError):
        json.loads(answer["message"]["content"])
    name, arguments, _ = _streamed_call(server.stream_chat(max_tokens=4, tools=TOOLS, tool_choice="required"))
    assert name in tool_names()
    with pytest.raises(ValueError):
        json.loads(arguments)
    assert server.chat(max_tokens=4).status_code == 200  # a plain chat is untouched
