"""The adapters with the providers' own SDKs (openai, anthropic, google-genai, mcp), talking to a
loopback fake of their APIs (tests/fakes/providers.py) that answers with recorded response
shapes and keeps the request bodies.

For each provider: the declarations pass the SDK's own types; a reply with several calls (one
that works, one that fails, one a gate vetoes, one to an unknown tool, one returning an image)
goes from the SDK's parsed object through `Nexus.invoke`; the results go back through the SDK;
and both request bodies the SDK sent match the provider's documented shape (shapes.json).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import anyio
import mcp_types
import openai
import pytest
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam
from fakes.providers import (
    Call,
    FakeProviders,
    Raw,
    anthropic_message,
    chat_completion,
    gemini_response,
    responses_response,
)
from google import genai
from google.genai import types as gtypes
from loop_tools import LOOP_TOOLS, PDF, PNG, NoDeletes, tally
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from nexus_core.adapters import StrictSchemaError, format_tool_call, format_tool_result, parse_tool_calls
from nexus_core.content import ImageContent, ResourceContent, TextContent
from openai.lib._pydantic import _ensure_strict_json_schema
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)
from openai.types.responses import FunctionToolParam, ResponseInputItemParam
from provider_shapes import assert_shape
from sdk_types import assert_model, assert_sdk_type

from nexus_core import Nexus, ToolCall, ToolResult, toolkit

#: the model's reply in every loop below: one call works, one fails, one is vetoed, one names a
#: tool that does not exist, one returns an image and a PDF
CALLS = [Call("get_weather", {"city": "Paris"}), Call("explode", {"reason": "disk on fire"}),
         Call("delete_file", {"path": "/etc/passwd"}), Call("launch_rockets", {"count": 3}),
         Call("render_chart", {"title": "Q3"})]
USER = "What is the weather in Paris? Also clean up, and chart Q3."


@pytest.fixture
def nx() -> Iterator[Nexus]:
    with toolkit([*LOOP_TOOLS, tally]) as nexus:
        nexus.register(NoDeletes())
        yield nexus


@pytest.fixture
def loop_nx() -> Iterator[Nexus]:
    with toolkit(LOOP_TOOLS) as nexus:
        nexus.register(NoDeletes())
        yield nexus


def check_outcomes(calls: list[ToolCall], results: list[ToolResult]) -> None:
    """What each of CALLS must come to through nx.invoke."""
    assert [c.name for c in calls] == [c.name for c in CALLS]
    assert [r.id for r in results] == [c.id for c in calls]
    weather, failed, vetoed, unknown, chart = results
    assert (weather.error, weather.output) == (None, "Paris: 22 degrees celsius, sunny")
    assert failed.error_kind == "exception" and "disk on fire" in failed.error
    assert vetoed.error_kind == "vetoed" and "deleting files is not allowed" in vetoed.error
    assert unknown.error_kind == "unknown_tool"
    assert chart.error is None and [type(b) for b in chart.content] == [TextContent, ImageContent, ResourceContent]


def openai_client(fake: FakeProviders) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.openai_base_url, api_key="test-key", max_retries=0)


# -- declarations: every format through the SDK's own types ---------------------------------------


def test_every_declaration_passes_the_sdks_own_types(nx: Nexus) -> None:
    for entry in nx.schemas("openai"):
        assert_sdk_type(entry, ChatCompletionFunctionToolParam)
        assert_shape(entry, "openai_tool")
    for entry in nx.schemas("openai-responses"):
        assert_sdk_type(entry, FunctionToolParam)
        assert_shape(entry, "responses_tool")
    for entry in nx.schemas("anthropic"):
        assert_sdk_type(entry, ToolParam)
        assert_shape(entry, "anthropic_tool")
    (gemini,) = nx.schemas("gemini")
    assert_model(gemini, gtypes.Tool)
    assert_shape([gemini], "gemini_tools")
    for entry in nx.schemas("mcp"):
        assert_model(entry, mcp_types.Tool)
        assert_shape(entry, "mcp_tool")


def test_the_options_pass_the_sdks_own_types_too(loop_nx: Nexus) -> None:
    for entry in loop_nx.schemas("openai", strict=True):
        assert_sdk_type(entry, ChatCompletionFunctionToolParam)
        assert_shape(entry, "openai_tool")
    for entry in loop_nx.schemas("openai-responses", strict=True, allowed_callers=["direct", "programmatic"]):
        assert_sdk_type(entry, FunctionToolParam)
        assert_shape(entry, "responses_tool")
        assert entry["strict"] is True and entry["allowed_callers"] == ["direct", "programmatic"]
    anthropic_tools = loop_nx.schemas("anthropic", allowed_callers={"get_weather": ["direct", "code_execution_20250825"]})
    for entry in anthropic_tools:
        assert_sdk_type(entry, ToolParam)
        assert_shape(entry, "anthropic_tool")
    assert [t["name"] for t in anthropic_tools if "allowed_callers" in t] == ["get_weather"]
    (gemini,) = loop_nx.schemas("gemini", json_schema=True)
    assert_model(gemini, gtypes.Tool)
    assert_shape([gemini], "gemini_tools")


# -- OpenAI Chat Completions ----------------------------------------------------------------------


def test_openai_chat_loop(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    fake_providers.script("openai.chat", chat_completion(calls=CALLS), chat_completion(text="Done: sunny in Paris."))
    client = openai_client(fake_providers)
    tools = loop_nx.schemas("openai")
    messages: list[Any] = [{"role": "user", "content": USER}]

    completion = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
    calls = parse_tool_calls(completion, "openai")  # the SDK's object, as it is
    assert [c.id for c in calls] == [tc.id for tc in completion.choices[0].message.tool_calls or []]
    results = [loop_nx.invoke(call) for call in calls]
    check_outcomes(calls, results)
    messages.append({"role": "assistant", "content": completion.choices[0].message.content,
                     "tool_calls": [format_tool_call(call, "openai") for call in calls]})
    messages += [format_tool_result(result, "openai", call=call) for call, result in zip(calls, results, strict=True)]
    for message in messages:
        assert_sdk_type(message, ChatCompletionMessageParam)

    final = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
    assert final.choices[0].message.content == "Done: sunny in Paris."

    first, second = fake_providers.requests_for("openai.chat")
    assert first.body["tools"] == tools
    for request in (first, second):
        assert_shape(request.body, "openai_chat_request")
    sent = second.body["messages"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == [c.id for c in calls]
    assert sent[1]["tool_calls"] == completion.model_dump(exclude_none=True)["choices"][0]["message"]["tool_calls"]
    chart = sent[-1]["content"]  # text only in Chat Completions: the image and PDF are named
    assert chart.startswith("Chart: Q3\n[image: image/png, 70 bytes] (not shown")
    assert "[resource file:///reports/q3.pdf: application/pdf" in chart


def test_openai_chat_stream(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    fake_providers.script("openai.chat", chat_completion(text="Let me look.", calls=CALLS[:2]),
                          chat_completion(calls=CALLS[:2]))
    client = openai_client(fake_providers)
    with client.chat.completions.stream(model="gpt-4o", messages=[{"role": "user", "content": USER}],
                                        tools=loop_nx.schemas("openai")) as stream:
        final = stream.get_final_completion()
    calls = parse_tool_calls(final, "openai")
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in CALLS[:2]]
    assert fake_providers.last("openai.chat").stream

    # a raw chunk holds half a call: refused, with what to do instead
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True))
    with pytest.raises(ValueError, match=r"chat\.completion\.chunk .* accumulate the stream first"):
        parse_tool_calls(chunks[2], "openai")


def test_openai_strict_mode_with_parse(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    # the model, bound by the strict schema, sends null for the optional `unit`
    fake_providers.script("openai.chat", chat_completion(calls=[Call("get_weather", {"city": "Oslo", "unit": None}),
                                                                 Call("render_chart", {"title": "Q4"})]))
    client = openai_client(fake_providers)
    tools = loop_nx.schemas("openai", strict=True)
    with pytest.raises(ValueError, match="is not strict"):  # the SDK's own check, on the plain schemas
        client.chat.completions.parse(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                      tools=loop_nx.schemas("openai"))
    completion = client.chat.completions.parse(model="gpt-4o", messages=[{"role": "user", "content": "Oslo?"}],
                                               tools=tools)
    sdk_call = (completion.choices[0].message.tool_calls or [])[0]
    assert sdk_call.function.parsed_arguments == {"city": "Oslo", "unit": None}

    calls = parse_tool_calls(completion, "openai", tools=loop_nx)
    assert calls[0].arguments == {"city": "Oslo"}  # the null stood for "left out"
    assert loop_nx.invoke(calls[0]).output == "Oslo: 22 degrees celsius, sunny"
    # without tools=, the null reaches the tool's own schema, which has no null
    unfixed = parse_tool_calls(completion, "openai")[0]
    assert loop_nx.invoke(unfixed).error_kind == "invalid_arguments"

    sent = fake_providers.last("openai.chat").body["tools"]
    assert sent == tools
    for entry in sent:
        assert entry["function"]["strict"] is True
        parameters = entry["function"]["parameters"]
        # the SDK's own strict rewrite (what `pydantic_function_tool` does) changes nothing
        assert _ensure_strict_json_schema(copy.deepcopy(parameters), path=(), root=copy.deepcopy(parameters)) \
            == parameters
        assert_strict(parameters)


_STRICT_KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "anyOf", "enum", "$ref",
                    "$defs", "description", "title", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                    "exclusiveMaximum", "multipleOf", "minItems", "maxItems"}


def assert_strict(schema: Any, path: str = "") -> None:
    """OpenAI's strict-mode rules, as its docs list them."""
    assert isinstance(schema, dict), path
    assert set(schema) <= _STRICT_KEYWORDS, f"{path}: {set(schema) - _STRICT_KEYWORDS} not allowed in strict mode"
    assert schema.keys() & {"type", "anyOf", "enum", "$ref"}, f"{path}: no type"
    if "properties" in schema:
        assert schema["additionalProperties"] is False, path
        assert schema["required"] == list(schema["properties"]), path
        for name, sub in schema["properties"].items():
            assert_strict(sub, f"{path}/properties/{name}")
    for key in ("items",):
        if key in schema:
            assert_strict(schema[key], f"{path}/{key}")
    for i, option in enumerate(schema.get("anyOf", [])):
        assert_strict(option, f"{path}/anyOf/{i}")
    for name, sub in schema.get("$defs", {}).items():
        assert_strict(sub, f"{path}/$defs/{name}")


def test_every_installed_tool_in_every_format(tmp_path: Path, fake_providers: FakeProviders) -> None:
    # the tools of every installed plugin (shell, file, run_code, todo, question, skill)
    with Nexus.from_config({"workspace": str(tmp_path)}) as full:
        for entry in full.schemas("openai"):
            assert_sdk_type(entry, ChatCompletionFunctionToolParam)
        for entry in full.schemas("openai-responses", strict=True):
            assert_sdk_type(entry, FunctionToolParam)
            assert_shape(entry, "responses_tool")
        for entry in full.schemas("anthropic"):
            assert_sdk_type(entry, ToolParam)
            assert_shape(entry, "anthropic_tool")
        (gemini,) = full.schemas("gemini")
        assert_model(gemini, gtypes.Tool)
        assert_shape([gemini], "gemini_tools")
        for entry in full.schemas("mcp"):
            assert_model(entry, mcp_types.Tool)
            assert_shape(entry, "mcp_tool")
        tools = full.schemas("openai", strict=True)
        assert len(tools) >= 10
        for entry in tools:
            assert_strict(entry["function"]["parameters"], entry["function"]["name"])
        fake_providers.script("openai.chat", chat_completion(text="ok"))
        completion = openai_client(fake_providers).chat.completions.parse(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], tools=tools)
        assert completion.choices[0].message.content == "ok"


def test_a_tool_that_cannot_be_strict_is_named(nx: Nexus) -> None:
    with pytest.raises(StrictSchemaError) as info:
        nx.schemas("openai", strict=True)
    assert info.value.tools == ["tally"]
    assert "'tally' at /properties/counts: an object without named properties" in str(info.value)


# -- OpenAI Responses -------------------------------------------------------------------------------


def test_openai_responses_loop(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    fake_providers.script("openai.responses", responses_response(calls=CALLS), responses_response(text="Done."))
    client = openai_client(fake_providers)
    tools = loop_nx.schemas("openai-responses")
    items: list[Any] = [{"role": "user", "content": USER}]

    response = client.responses.create(model="gpt-4.1", input=items, tools=tools)
    calls = parse_tool_calls(response, "openai-responses")
    assert [c.id for c in calls] == [item.call_id for item in response.output if item.type == "function_call"]
    results = [loop_nx.invoke(call) for call in calls]
    check_outcomes(calls, results)
    items += [format_tool_call(call, "openai-responses") for call in calls]  # rebuilt from ToolCalls
    outputs = [format_tool_result(result, "openai-responses", call=call)
               for call, result in zip(calls, results, strict=True)]
    for item in items + outputs:
        assert_sdk_type(item, ResponseInputItemParam)
    final = client.responses.create(model="gpt-4.1", input=items + outputs, tools=tools)
    assert final.output_text == "Done."

    first, second = fake_providers.requests_for("openai.responses")
    assert first.body["tools"] == tools and all(t["strict"] is False for t in tools)
    for request in (first, second):
        assert_shape(request.body, "responses_request")
    sent = second.body["input"]
    # the function_call items went back with the ids the API gave them
    assert [i["id"] for i in sent if i.get("type") == "function_call"] == \
        [item.id for item in response.output if item.type == "function_call"]
    sent_outputs = [i for i in sent if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in sent_outputs] == [c.id for c in calls]
    assert sent_outputs[0]["output"] == "Paris: 22 degrees celsius, sunny"
    chart = sent_outputs[-1]["output"]  # several content items: text, image, PDF
    assert [part["type"] for part in chart] == ["input_text", "input_image", "input_file"]
    assert chart[1]["image_url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert chart[2]["filename"] == "q3.pdf"
    assert base64.b64decode(chart[2]["file_data"].split(",", 1)[1]) == PDF


def test_openai_responses_stream_and_its_events(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    fake_providers.script("openai.responses", responses_response(text="Checking.", calls=CALLS[:3]))
    client = openai_client(fake_providers)
    from_events: list[ToolCall] = []
    with client.responses.stream(model="gpt-4.1", input=USER, tools=loop_nx.schemas("openai-responses")) as stream:
        for event in stream:
            if event.type == "response.output_item.done":
                from_events += parse_tool_calls(event, "openai-responses")
        final = stream.get_final_response()
    calls = parse_tool_calls(final, "openai-responses")
    assert [(c.id, c.name, c.arguments) for c in calls] == [(c.id, c.name, c.arguments) for c in from_events]
    assert [c.name for c in calls] == ["get_weather", "explode", "delete_file"]
    with pytest.raises(ValueError, match="'response.created' event is one piece of a stream"):
        parse_tool_calls({"type": "response.created", "response": final.model_dump()}, "openai-responses")


def test_a_programmatic_caller_is_sent_back(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    # with allowed_callers, the model's own code may call the tool; the output names the caller
    reply = responses_response(calls=[Call("get_weather", {"city": "Rome"})])
    reply["output"][0]["caller"] = {"type": "program", "caller_id": "ptc_123"}
    fake_providers.script("openai.responses", reply, responses_response(text="ok"))
    client = openai_client(fake_providers)
    tools = loop_nx.schemas("openai-responses", allowed_callers={"get_weather": ["programmatic"]})
    response = client.responses.create(model="gpt-4.1", input="Rome?", tools=tools)
    (call,) = parse_tool_calls(response, "openai-responses")
    assert call.metadata["provider_data"]["caller"] == {"type": "program", "caller_id": "ptc_123"}
    output = format_tool_result(loop_nx.invoke(call), "openai-responses", call=call)
    assert output["caller"] == {"type": "program", "caller_id": "ptc_123"}
    client.responses.create(model="gpt-4.1", input=[format_tool_call(call, "openai-responses"), output], tools=tools)
    sent = fake_providers.last("openai.responses").body
    assert_shape(sent, "responses_request")
    assert sent["input"][0]["caller"] == sent["input"][1]["caller"] == {"type": "program", "caller_id": "ptc_123"}
    assert [t.get("allowed_callers") for t in sent["tools"]] == [None, None, ["programmatic"], None]


# -- Anthropic Messages ---------------------------------------------------------------------------


def anthropic_client(fake: FakeProviders) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.anthropic_base_url, api_key="test-key", max_retries=0)


def test_anthropic_loop(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    fake_providers.script("anthropic.messages", anthropic_message(text="Let me check.", calls=CALLS),
                          anthropic_message(text="Done."))
    client = anthropic_client(fake_providers)
    tools = loop_nx.schemas("anthropic")
    messages: list[Any] = [{"role": "user", "content": USER}]

    message = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=messages, tools=tools)
    calls = parse_tool_calls(message, "anthropic")  # the SDK's Message
    assert calls == parse_tool_calls(message.content, "anthropic")  # or its content blocks
    results = [loop_nx.invoke(call) for call in calls]
    check_outcomes(calls, results)
    blocks = [format_tool_result(result, "anthropic", call=call) for call, result in zip(calls, results, strict=True)]
    for block in blocks:
        assert_sdk_type(block, ToolResultBlockParam)
    messages += [{"role": "assistant", "content": message.content}, {"role": "user", "content": blocks}]
    assert_sdk_type(messages[-1], MessageParam)
    final = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=messages, tools=tools)
    assert final.content[0].text == "Done."  # type: ignore[union-attr]

    first, second = fake_providers.requests_for("anthropic.messages")
    assert first.body["tools"] == tools
    for request in (first, second):
        assert_shape(request.body, "anthropic_request")
    sent = second.body["messages"][-1]["content"]
    assert [b["tool_use_id"] for b in sent] == [c.id for c in calls]
    assert [b["is_error"] for b in sent] == [False, True, True, True, False]
    caption, image, document = sent[-1]["content"]  # several blocks: text, image, document
    assert caption == {"type": "text", "text": "Chart: Q3"}
    assert image == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": base64.b64encode(PNG).decode()}}
    assert document["type"] == "document" and document["source"]["media_type"] == "application/pdf"


def test_anthropic_stream(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    fake_providers.script("anthropic.messages", anthropic_message(text="Checking.", calls=CALLS))
    client = anthropic_client(fake_providers)
    with client.messages.stream(model="claude-sonnet-4-6", max_tokens=1024, tools=loop_nx.schemas("anthropic"),
                                messages=[{"role": "user", "content": USER}]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    calls = parse_tool_calls(final, "anthropic")
    assert [(c.name, c.arguments) for c in calls] == [(c.name, dict(c.arguments)) for c in CALLS]
    start = next(e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use")
    with pytest.raises(ValueError, match="'content_block_start' event is one piece of a stream"):
        parse_tool_calls(start, "anthropic")


# -- Gemini -----------------------------------------------------------------------------------------


SIGNATURE = base64.b64encode(b"\xfb\xef\xbe opaque thought signature").decode()  # has + and / in it


def gemini_client(fake: FakeProviders) -> genai.Client:
    return genai.Client(api_key="test-key", http_options=gtypes.HttpOptions(base_url=fake.gemini_base_url))


def gemini_calls() -> list[Call]:
    calls = list(CALLS)
    calls[0] = Call("get_weather", {"city": "Paris"}, thought_signature=SIGNATURE)  # Gemini 3 signs the first
    calls[1] = Call("explode", {"reason": "disk on fire"}, gemini_id=False)  # older models send no id
    return calls


def lower_types(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v.lower() if k == "type" and isinstance(v, str) else lower_types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [lower_types(v) for v in value]
    return value


def test_gemini_loop(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    fake_providers.script("gemini.generate", gemini_response(calls=gemini_calls()), gemini_response(text="Done."))
    client = gemini_client(fake_providers)
    config = {"tools": loop_nx.schemas("gemini")}
    contents: list[Any] = [{"role": "user", "parts": [{"text": USER}]}]

    response = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    calls = parse_tool_calls(response, "gemini")
    results = [loop_nx.invoke(call) for call in calls]
    check_outcomes(calls, results)
    assert calls[0].metadata["provider_data"] == {"thoughtSignature": SIGNATURE}
    assert calls[1].metadata["provider_call_id"] is None
    # the model's turn rebuilt from the ToolCalls keeps the signature
    contents.append({"role": "model", "parts": [format_tool_call(call, "gemini") for call in calls]})
    contents.append({"role": "user", "parts": [format_tool_result(result, "gemini", call=call)
                                               for call, result in zip(calls, results, strict=True)]})
    for content in contents:
        assert_model(content, gtypes.Content)
    final = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    assert final.text == "Done."

    first, second = fake_providers.requests_for("gemini.generate")
    for request in (first, second):
        assert_shape(request.body, "gemini_request")
    assert lower_types(first.body["tools"]) == loop_nx.schemas("gemini")  # the SDK writes types in capitals
    model_turn, results_turn = second.body["contents"][1:]
    signature = model_turn["parts"][0]["thoughtSignature"]
    assert base64.urlsafe_b64decode(signature.replace("+", "-").replace("/", "_")) == base64.b64decode(SIGNATURE)
    responses = [part["functionResponse"] for part in results_turn["parts"]]
    assert [r.get("id") for r in responses] == [c.metadata["provider_call_id"] for c in calls]
    assert "id" not in responses[1]  # answered without an id, as it came
    assert responses[0]["response"] == {"output": "Paris: 22 degrees celsius, sunny"}
    assert responses[2]["response"]["error"].startswith("vetoed")
    chart = responses[-1]  # the SDK writes these parts under their proto field names
    assert [p["inline_data"]["mime_type"] for p in chart["parts"]] == ["image/png", "application/pdf"]
    assert base64.urlsafe_b64decode(chart["parts"][0]["inline_data"]["data"]) == PNG


def test_gemini_stream(fake_providers: FakeProviders, loop_nx: Nexus) -> None:
    fake_providers.script("gemini.generate", gemini_response(text="Let me see.", calls=gemini_calls()))
    client = gemini_client(fake_providers)
    calls: list[ToolCall] = []
    for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents=USER,
                                                       config={"tools": loop_nx.schemas("gemini")}):
        calls += parse_tool_calls(chunk, "gemini")  # Gemini sends each call whole, in some chunk
    assert [c.name for c in calls] == [c.name for c in CALLS]
    assert calls[0].metadata["provider_data"] == {"thoughtSignature": SIGNATURE}


def test_gemini_takes_a_map_argument_through_parameters_json_schema(fake_providers: FakeProviders,
                                                                    nx: Nexus) -> None:
    fake_providers.script("gemini.generate", gemini_response(calls=[Call("tally", {"counts": {"a": 2, "b": 3}})]))
    client = gemini_client(fake_providers)
    response = client.models.generate_content(model="gemini-2.5-flash", contents="tally a=2 b=3",
                                              config={"tools": nx.schemas("gemini")})
    (call,) = parse_tool_calls(response, "gemini")
    assert nx.invoke(call).output == "5"
    sent = fake_providers.last("gemini.generate").body["tools"][0]["functionDeclarations"]
    tally_decl = next(d for d in sent if d["name"] == "tally")
    # the SDK writes the field under its proto name, which the API takes as well as the camelCase one
    assert tally_decl["parameters_json_schema"]["properties"]["counts"] == {
        "type": "object", "additionalProperties": {"type": "integer"}}
    assert_shape(fake_providers.last("gemini.generate").body, "gemini_request")


# -- the SDK objects users have, in every form ------------------------------------------------------


def _forms(obj: Any) -> list[Any]:
    """An SDK object as users hold it: itself, dumped, as its JSON text read back."""
    return [obj, obj.model_dump(), obj.model_dump(mode="json", by_alias=True), json.loads(obj.model_dump_json())]


def test_parse_tool_calls_takes_every_form_users_have(fake_providers: FakeProviders) -> None:
    fake_providers.script("openai.chat", chat_completion(calls=CALLS[:2]))
    fake_providers.script("openai.responses", responses_response(text="hm", calls=CALLS[:2]))
    fake_providers.script("anthropic.messages", anthropic_message(text="hm", calls=CALLS[:2]))
    fake_providers.script("gemini.generate", gemini_response(text="hm", calls=gemini_calls()[:2]))
    completion = openai_client(fake_providers).chat.completions.create(model="m", messages=[{"role": "user",
                                                                                             "content": "x"}])
    response = openai_client(fake_providers).responses.create(model="m", input="x")
    message = anthropic_client(fake_providers).messages.create(model="m", max_tokens=9,
                                                               messages=[{"role": "user", "content": "x"}])
    gemini_sdk = gemini_client(fake_providers)  # held: the client closes its connection when collected
    gemini = gemini_sdk.models.generate_content(model="m", contents="x")
    expected = [(c.name, dict(c.arguments)) for c in CALLS[:2]]

    cases: dict[str, list[Any]] = {
        "openai": [*_forms(completion), completion.choices[0], completion.choices[0].message,
                   completion.choices[0].message.tool_calls, completion.to_dict()],
        "openai-responses": [*_forms(response), response.output, [item.model_dump() for item in response.output]],
        "anthropic": [*_forms(message), message.content, message.to_dict()["content"]],
        "gemini": [*_forms(gemini), gemini.candidates[0], gemini.candidates[0].content,  # type: ignore[index]
                   gemini.candidates[0].content.parts, gemini.function_calls,  # type: ignore[index, union-attr]
                   gemini.to_json_dict(), gemini.candidates[0].model_dump()],  # type: ignore[index]
    }
    for format, forms in cases.items():
        for i, form in enumerate(forms):
            calls = parse_tool_calls(form, format)
            assert [(c.name, c.arguments) for c in calls] == expected, (format, i)
    # snake_case and camelCase Gemini dicts keep the signature; response.function_calls has none to keep
    for form in (gemini.model_dump(), gemini.to_json_dict(), gemini):
        assert parse_tool_calls(form, "gemini")[0].metadata["provider_data"] == {"thoughtSignature": SIGNATURE}


@pytest.mark.parametrize(("value", "format", "message"), [
    ({"foo": 1}, "openai", "OpenAI: cannot find tool calls in a JSON object with keys 'foo'; expected a chat completion"),
    ({"role": "model", "parts": [{"functionCall": {"name": "x"}}]}, "openai", "it looks like format 'gemini'"),
    ({"type": "message", "role": "assistant", "model": "claude", "stop_reason": "tool_use",
      "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]}, "openai",
     "it looks like format 'anthropic'"),
    ({"choices": [{"message": {"role": "assistant", "tool_calls": []}}]}, "anthropic", "it looks like format 'openai'"),
    ({"object": "response", "output": []}, "openai", "it looks like format 'openai-responses'"),
    ({"candidates": [{"content": {"parts": []}}, {"content": {"parts": []}}]}, "gemini",
     "the response has 2 candidates (alternative replies); pass the candidate you continue with"),
    ({"choices": [{"message": {"role": "assistant"}}, {"message": {"role": "assistant"}}]}, "openai",
     "has 2 choices"),
    ([{"role": "user", "content": "hi"}], "openai", "cannot find tool calls in a list of 1 (object)"),
    ([{"role": "user", "content": "hi"}], "anthropic", "content block 0 is a JSON object with keys 'role', 'content'"),
    ("some text", "gemini", "Gemini: cannot find tool calls in a string 'some text'"),
    (42, "openai-responses", "cannot find tool calls in builtins.int"),
    ({"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}, "anthropic",
     "a JSON object of type 'server_tool_use'"),
    ({"role": "assistant", "content": None, "function_call": {"name": "x", "arguments": "{}"}}, "openai",
     "the deprecated functions API"),
])
def test_what_is_not_a_reply_is_an_error_never_an_empty_list(value: Any, format: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_tool_calls(value, format)
    assert message in str(info.value)


def test_replies_without_calls_are_empty_lists(fake_providers: FakeProviders) -> None:
    fake_providers.script("openai.chat", chat_completion(text="Hello."))
    fake_providers.script("openai.responses", responses_response(text="Hello."))
    fake_providers.script("anthropic.messages", anthropic_message(text="Hello."))
    fake_providers.script("gemini.generate", gemini_response(text="Hello."))
    assert parse_tool_calls(openai_client(fake_providers).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}]), "openai") == []
    assert parse_tool_calls(openai_client(fake_providers).responses.create(model="m", input="x"),
                            "openai-responses") == []
    assert parse_tool_calls(anthropic_client(fake_providers).messages.create(
        model="m", max_tokens=9, messages=[{"role": "user", "content": "x"}]), "anthropic") == []
    gemini = gemini_client(fake_providers)
    assert parse_tool_calls(gemini.models.generate_content(model="m", contents="x"), "gemini") == []


# -- MCP, through the mcp SDK's client and server over stdio ---------------------------------------

MCP_SERVER = '''
import json, os, sys
import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
sys.path.insert(0, {tests!r})
from loop_tools import LOOP_TOOLS, NoDeletes, get_weather_data
from nexus_core import toolkit
from nexus_core.adapters import format_tool_result, parse_tool_call

nx = toolkit([*LOOP_TOOLS, get_weather_data])
nx.register(NoDeletes())
log = open(os.environ["NEXUS_TEST_MCP_LOG"], "a", encoding="utf-8")

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in nx.schemas("mcp")])

async def call_tool(ctx, params):
    result = format_tool_result(nx.invoke(parse_tool_call(params, "mcp")), "mcp")
    log.write(json.dumps(result) + "\\n"); log.flush()
    return types.CallToolResult.model_validate(result)

server = Server("nexus-test", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
'''


def test_mcp_server_and_client(tmp_path: Path) -> None:
    tests = Path(__file__).parent
    script = tmp_path / "server.py"
    script.write_text(MCP_SERVER.format(tests=str(tests)), encoding="utf-8")
    log = tmp_path / "results.jsonl"
    env = {"NEXUS_TEST_MCP_LOG": str(log), "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)])}
    outcomes: dict[str, Any] = {}

    async def session() -> None:
        params = StdioServerParameters(command=sys.executable, args=[str(script)], env=env, cwd=str(tmp_path))
        async with Client(params) as client:
            listed = await client.list_tools()
            outcomes["tools"] = [t.name for t in listed.tools]
            for call in [*CALLS, Call("get_weather_data", {"location": "Oslo"})]:
                outcomes[call.name] = await client.call_tool(call.name, dict(call.arguments))

    anyio.run(session)
    assert outcomes["tools"] == ["delete_file", "explode", "get_weather", "get_weather_data", "render_chart"]
    assert outcomes["get_weather"].content[0].text == "Paris: 22 degrees celsius, sunny"
    assert [outcomes[n].is_error for n in ("explode", "delete_file", "launch_rockets")] == [True, True, True]
    chart = outcomes["render_chart"].content
    assert [block.type for block in chart] == ["text", "image", "resource"]
    assert base64.b64decode(chart[1].data) == PNG and chart[1].mime_type == "image/png"
    assert base64.b64decode(chart[2].resource.blob) == PDF
    structured = outcomes["get_weather_data"]
    assert structured.structured_content == {"temperature": 22.5, "conditions": "Partly cloudy", "humidity": 65}
    assert json.loads(structured.content[0].text) == structured.structured_content  # the same, as JSON text
    for line in log.read_text(encoding="utf-8").splitlines():
        assert_shape(json.loads(line), "mcp_call_tool_result")


# -- the fake itself --------------------------------------------------------------------------------


def test_the_fake_says_when_a_script_runs_out(fake_providers: FakeProviders) -> None:
    with pytest.raises(openai.BadRequestError, match="no scripted reply left for openai.chat"):
        openai_client(fake_providers).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert len(fake_providers.requests_for("openai.chat")) == 1
    fake_providers.script("anthropic.messages", Raw(429, {"type": "error", "error": {
        "type": "rate_limit_error", "message": "slow down"}}))
    with pytest.raises(anthropic.RateLimitError, match="slow down"):
        anthropic_client(fake_providers).messages.create(model="m", max_tokens=9,
                                                         messages=[{"role": "user", "content": "x"}])
    assert fake_providers.pending() == 0
    with pytest.raises(ValueError, match="unknown endpoint"):
        fake_providers.script("openai.chat.completions", {})
