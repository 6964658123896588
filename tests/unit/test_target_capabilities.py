"""The capability table: which scenarios need which feature, which of a mix the server's answers stop, and how
answers are read and said."""

from __future__ import annotations

import json

from soak.load.scenarios import builtin_names
from soak.target.capabilities import (
    FEATURE_TEXT,
    SCENARIO_NEEDS,
    Capability,
    probe_adapters,
    server_message,
    unsupported,
)

ALL_ACCEPTED = {feature: Capability(feature, True, "HTTP 200") for feature in FEATURE_TEXT}


def test_every_row_names_a_builtin_scenario_and_a_probed_feature():
    assert set(SCENARIO_NEEDS) <= set(builtin_names())
    assert set(SCENARIO_NEEDS.values()) <= set(FEATURE_TEXT)
    rows = {name: SCENARIO_NEEDS.get(name) for name in ("structured", "tools", "multimodal", "mixed")}
    assert rows == {"structured": "json_schema", "tools": "tools", "multimodal": "images", "mixed": None}


def test_only_a_refused_feature_stops_a_scenario_that_needs_it():
    found = {**ALL_ACCEPTED, "images": Capability("images", False, "HTTP 400: text-only model"),
             "tools": Capability("tools", None, "HTTP 503: overloaded")}
    mix = ["mixed", "multimodal", "tools", "structured", "my_images.py"]
    lacking = unsupported(mix, found)
    assert [(item.scenario, item.feature, item.answer) for item in lacking] == [
        ("multimodal", "images", "HTTP 400: text-only model")]  # an unknown answer (a 503) stops nothing
    assert lacking[0].line() == ("scenario multimodal needs image_url content parts, which the server refused: "
                                 "HTTP 400: text-only model")
    assert unsupported(mix, ALL_ACCEPTED) == []


def test_adapters_are_the_models_listed_with_a_parent():
    models = [{"id": "base", "parent": None}, {"id": "sql-lora", "parent": "base"}, {"id": "chat-lora", "parent": "base"}]
    found = probe_adapters(models)
    assert (found.supported, found.names, found.answer) == (True, ("sql-lora", "chat-lora"), "2 listed by /v1/models")
    none = probe_adapters(models[:1])
    assert none.supported is False and none.describe() == "adapters: none (no adapter listed by /v1/models)"


def test_the_servers_message_is_read_from_openais_error_body_else_the_body():
    body = json.dumps({"error": {"message": "Model  does not\nsupport images", "type": "BadRequestError"}}).encode()
    assert server_message(body) == "Model does not support images"
    assert server_message(b"Not Found") == "Not Found"
    assert server_message(b"x" * 500) == "x" * 200 + "…"


def test_a_capability_says_what_was_answered():
    assert Capability("images", True, "HTTP 200").describe() == "images: accepted (HTTP 200)"
    assert Capability("tools", False, "HTTP 400: no").describe() == "tools: refused (HTTP 400: no)"
    assert Capability("json_schema", None, "no answer: timed out").describe() == "json_schema: unknown (no answer: timed out)"
    assert Capability("adapters", True, "1 listed", ("a",)).as_dict() == {
        "feature": "adapters", "supported": True, "answer": "1 listed", "names": ["a"]}


def test_a_local_text_only_models_config_settles_images_without_a_request_that_could_be_refused(tmp_path):
    from soak.target.capabilities import images_from_config

    text_only, vision, empty = tmp_path / "text", tmp_path / "vision", tmp_path / "empty"
    for folder in (text_only, vision, empty):
        folder.mkdir()
    (text_only / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                       "hidden_size": 128}))
    (vision / "config.json").write_text(json.dumps({"architectures": ["LlavaForConditionalGeneration"],
                                                    "vision_config": {}, "image_token_index": 32000}))
    models = [{"id": "tiny", "root": str(text_only)}, {"id": "llava", "root": str(vision)},
              {"id": "bare", "root": str(empty)}, {"id": "hub", "root": "org/some-model"}]
    answered = images_from_config(models, "tiny")
    assert answered is not None and answered.supported is False and answered.answer.startswith("not asked: ")
    assert str(text_only) in answered.answer and answered.request_id is None  # nothing was sent, nothing provoked
    for model in ("llava", "bare", "hub", "absent"):  # a picture part, no config, not local, not listed: ask
        assert images_from_config(models, model) is None
