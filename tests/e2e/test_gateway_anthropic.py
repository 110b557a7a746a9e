"""Anthropic's Messages API through tokenmill-gateway, driven by the official `anthropic` package
against a real tokenmill-server: the gateway must not change what the server generates
(compared with a direct gRPC Generate of the same chat), the stream helpers must see
Anthropic's events in order and add up to the whole, errors come in Anthropic's shape."""
import json
import re

import anthropic
import jsonschema
import pydantic
import pytest

from gateway_harness import Gateway, backend_address
from server_harness import RPC_TIMEOUT_S, generate, pb2

SYSTEM = ("You are a helpful assistant for the tokenmill project. Answer briefly and "
          "precisely, in plain English, without lists or code unless asked for them.")


def grpc_chat(*messages):
    return pb2.Chat(messages=[pb2.ChatMessage(role=r, content=c) for r, c in messages])


def anthropic_client(gateway, api_key="unused"):
    return anthropic.Anthropic(base_url=gateway.url, api_key=api_key, max_retries=0,
                               timeout=RPC_TIMEOUT_S)


@pytest.fixture(scope="module")
def claude(gateway):
    return anthropic_client(gateway)


def test_message_equals_direct_grpc_generate(server, claude, model):
    _, text, responses = generate(server.stub, pb2.GenerateRequest(
        chat=grpc_chat(("system", SYSTEM), ("user", "What is 2 + 2?")), max_tokens=10))
    out = claude.messages.create(model=model, max_tokens=10, system=SYSTEM,
                                 messages=[{"role": "user", "content": "What is 2 + 2?"}])
    assert out.type == "message" and out.role == "assistant" and out.model == model
    assert out.id.startswith("msg")
    assert [block.type for block in out.content] == ["text"]
    assert out.content[0].text == text
    usage = responses[-1].usage
    length = responses[-1].finish_reason == pb2.FINISH_REASON_LENGTH
    assert out.stop_reason == ("max_tokens" if length else "end_turn")
    assert out.stop_sequence is None
    assert out.usage.output_tokens == usage.completion_tokens
    # Anthropic counts cache reads apart from the (uncached) input tokens.
    assert out.usage.input_tokens + out.usage.cache_read_input_tokens == usage.prompt_tokens


def test_system_blocks_with_cache_control_equal_the_system_string(claude, model):
    question = [{"role": "user", "content": [{"type": "text", "text": "Name a "},
                                             {"type": "text", "text": "color."}]}]
    as_string = claude.messages.create(model=model, max_tokens=8, system=SYSTEM,
                                       messages=[{"role": "user", "content": "Name a color."}])
    as_blocks = claude.messages.create(
        model=model, max_tokens=8, messages=question,
        system=[{"type": "text", "text": SYSTEM[:40]},
                {"type": "text", "text": SYSTEM[40:], "cache_control": {"type": "ephemeral"}}])
    assert as_blocks.content[0].text == as_string.content[0].text


def test_model_ends_its_turn(claude, model):
    out = claude.messages.create(model=model, max_tokens=200,
                                 messages=[{"role": "user", "content": "Hi!"}])
    assert out.stop_reason == "end_turn"
    assert 1 <= out.usage.output_tokens < 200


def test_stream_events_come_in_order_and_add_up_to_the_whole(claude, model):
    messages = [{"role": "user", "content": "Tell me about the sea."}]
    whole = claude.messages.create(model=model, max_tokens=16, system=SYSTEM, messages=messages)
    with claude.messages.stream(model=model, max_tokens=16, system=SYSTEM,
                                messages=messages) as stream:
        events = list(stream)
        final = stream.get_final_message()
    # The helper leaves out ping and adds a "text" event after each text delta.
    raw = [e.type for e in events if e.type != "text"]
    assert raw[:2] == ["message_start", "content_block_start"]
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert len(deltas) >= 2 and set(raw[2:-3]) == {"content_block_delta"}
    assert all(d.index == 0 and d.delta.type == "text_delta" for d in deltas)
    assert "".join(d.delta.text for d in deltas) == whole.content[0].text
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 16
    assert (final.usage.input_tokens + final.usage.cache_read_input_tokens ==
            whole.usage.input_tokens + whole.usage.cache_read_input_tokens)
    assert final.id == events[0].message.id
    # message_start carries the prompt's counts already, as Anthropic sends them.
    start = events[0].message.usage
    assert start.input_tokens + start.cache_read_input_tokens == (
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens)
    assert start.input_tokens > 0 and start.output_tokens <= 16


def test_assistant_prefill_is_continued(server, claude, model):
    # Anthropic continues a final assistant message: the answer is what comes after it.
    chat = grpc_chat(("user", "What is 2 + 2?"), ("assistant", "The answer is"))
    chat.continue_final_message = True
    prompt = server.stub.Tokenize(pb2.TokenizeRequest(chat=chat)).prompt
    assert prompt.endswith("<|im_start|>assistant\nThe answer is"), prompt
    _, text, _ = generate(server.stub, pb2.GenerateRequest(chat=chat, max_tokens=8))
    out = claude.messages.create(model=model, max_tokens=8, messages=[
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "The answer is"}])
    assert out.content[0].text == text and text
    assert out.usage.input_tokens + out.usage.cache_read_input_tokens == len(
        server.stub.Tokenize(pb2.TokenizeRequest(chat=chat)).token_ids)


def test_stop_sequence_ends_the_text_before_it(claude, model):
    messages = [{"role": "user", "content": "Count from one to twenty in words."}]
    free = claude.messages.create(model=model, max_tokens=30, messages=messages).content[0].text
    words = free.replace(",", " ").split()
    stop = words[len(words) // 2]
    out = claude.messages.create(model=model, max_tokens=30, messages=messages,
                                 stop_sequences=[stop, "never-appears"])
    assert out.stop_reason == "stop_sequence" and out.stop_sequence == stop
    assert out.content[0].text == free[:free.index(stop)]


def test_count_tokens_equals_the_servers_tokenizer(server, claude, model):
    expected = server.stub.Tokenize(pb2.TokenizeRequest(
        chat=grpc_chat(("system", SYSTEM), ("user", "What is 2 + 2?")))).token_ids
    counted = claude.messages.count_tokens(
        model=model, system=SYSTEM, messages=[{"role": "user", "content": "What is 2 + 2?"}])
    assert counted.input_tokens == len(expected)
    out = claude.messages.create(model=model, max_tokens=1, system=SYSTEM,
                                 messages=[{"role": "user", "content": "What is 2 + 2?"}])
    assert out.usage.input_tokens + out.usage.cache_read_input_tokens == counted.input_tokens


def test_sampling_parameters_reach_the_server(claude, model):
    # This SDK passes temperature, top_p and top_k as extra body fields. Filters that leave one
    # token make sampling at temperature 1 greedy: dropped, the 12 sampled tokens would differ.
    messages = [{"role": "user", "content": "Write a short poem."}]
    greedy = claude.messages.create(model=model, max_tokens=12, messages=messages)
    for extra in ({"temperature": 1.0, "top_k": 1}, {"temperature": 1.0, "top_p": 1e-6}):
        out = claude.messages.create(model=model, max_tokens=12, messages=messages,
                                     extra_body=extra)
        assert out.content[0].text == greedy.content[0].text, extra


class City(pydantic.BaseModel):
    name: str
    country: str
    population: int


def test_output_format_is_structured_output(claude, model):
    out = claude.messages.parse(
        model=model, max_tokens=200, output_format=City,
        messages=[{"role": "user", "content": "Describe Paris as JSON."}])
    assert out.stop_reason == "end_turn"
    document = json.loads(out.content[0].text)
    jsonschema.validate(document, City.model_json_schema())
    assert out.parsed_output == City(**document)
    # The properties come in the order the schema lists them.
    assert list(document) == ["name", "country", "population"]


def test_raw_event_stream_has_anthropics_event_names_and_ping(gateway, model):
    body = {"model": model, "max_tokens": 6, "stream": True,
            "messages": [{"role": "user", "content": "Hello"}]}
    with gateway.http.stream("POST", "/v1/messages", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    events = [block.split("\n") for block in text.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    datas = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
    assert names == [d["type"] for d in datas]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert datas[0]["message"]["content"] == [] and datas[0]["message"]["stop_reason"] is None
    assert datas[-2]["usage"]["output_tokens"] == 6


WEATHER_TOOL = {"name": "get_weather", "description": "The current weather in a city.",
                "input_schema": {"type": "object",
                                 "properties": {"city": {"type": "string"},
                                                "unit": {"type": "string",
                                                         "enum": ["celsius", "fahrenheit"]}},
                                 "required": ["city", "unit"], "additionalProperties": False}}
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}


def test_forced_tool_use_round_trip(claude, client, model):
    first = claude.messages.create(model=model, max_tokens=100, messages=[QUESTION],
                                   tools=[WEATHER_TOOL],
                                   tool_choice={"type": "tool", "name": "get_weather"})
    assert first.stop_reason == "tool_use"
    uses = [block for block in first.content if block.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather"
    assert re.fullmatch(r"toolu_[A-Za-z0-9]{24}", uses[0].id), uses[0].id  # Anthropic's form
    jsonschema.validate(uses[0].input, WEATHER_TOOL["input_schema"])
    # The client runs the tool and answers with a tool_result block.
    result = json.dumps({"temperature": 21, "sky": "sunny"})
    answer = claude.messages.create(
        model=model, max_tokens=30, tools=[WEATHER_TOOL],
        messages=[QUESTION, {"role": "assistant", "content": first.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                "content": result}]}])
    # The same conversation through the chat completions API (an independent mapping).
    chat = client.chat.completions.create(
        model=model, max_tokens=30,
        tools=[{"type": "function", "function": {
            "name": "get_weather", "description": WEATHER_TOOL["description"],
            "parameters": WEATHER_TOOL["input_schema"]}}],
        messages=[QUESTION,
                  {"role": "assistant", "content": "", "tool_calls": [{
                      "id": uses[0].id, "type": "function",
                      "function": {"name": "get_weather",
                                   "arguments": json.dumps(uses[0].input)}}]},
                  {"role": "tool", "tool_call_id": uses[0].id, "content": result}])
    # The small model may well call the tool again: the whole turn must agree.
    message = chat.choices[0].message
    assert "".join(b.text for b in answer.content if b.type == "text") == (message.content or "")
    assert [(b.name, b.input) for b in answer.content if b.type == "tool_use"] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
    assert answer.stop_reason == {"stop": "end_turn", "length": "max_tokens",
                                  "tool_calls": "tool_use"}[chat.choices[0].finish_reason]


def test_streamed_tool_use_gives_input_json_deltas(claude, model):
    with claude.messages.stream(model=model, max_tokens=100, messages=[QUESTION],
                                tools=[WEATHER_TOOL], tool_choice={"type": "any"}) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    uses = [(i, b) for i, b in enumerate(final.content) if b.type == "tool_use"]
    assert uses
    index, use = uses[0]
    starts = [e for e in events if e.type == "content_block_start" and e.index == index]
    assert starts[0].content_block.type == "tool_use" and starts[0].content_block.input == {}
    assert starts[0].content_block.id == use.id
    fragments = [e.delta.partial_json for e in events
                 if e.type == "content_block_delta" and e.index == index]
    assert all(e.delta.type == "input_json_delta" for e in events
               if e.type == "content_block_delta" and e.index == index)
    assert json.loads("".join(fragments)) == use.input
    jsonschema.validate(use.input, WEATHER_TOOL["input_schema"])
    # Every block opened is closed, in order, before message_delta.
    opened = [e.index for e in events if e.type == "content_block_start"]
    closed = [e.index for e in events if e.type == "content_block_stop"]
    assert opened == closed == list(range(len(final.content)))


BAD = [
    # (body, status, Anthropic error type, words of the message)
    ({"messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error",
     "max_tokens: Field required"),
    ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, 400,
     "invalid_request_error", "max_tokens must be an integer in [1,"),
    ({"max_tokens": 5, "messages": []}, 400, "invalid_request_error", "messages: must be"),
    ({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, 400,
     "invalid_request_error", "messages.0.role"),
    ({"max_tokens": 5, "messages": [{"role": "user"}]}, 400, "invalid_request_error",
     "messages.0.content: Field required"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": 5}]}, 400,
     "invalid_request_error", "messages.0.content: must be a string or a list"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]}, 400,
     "invalid_request_error", "'image' blocks are not supported"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text"}]}]}, 400,
     "invalid_request_error", "messages.0.content.0.text"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"text": "x"}]}]}, 400,
     "invalid_request_error", "a content block is an object with a string `type`"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x", "name": "bob"}]}, 400,
     "invalid_request_error", "messages.0.name: Extra inputs are not permitted"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"},
                                    {"role": "assistant", "content": "The answer is "}]}, 400,
     "invalid_request_error", "cannot end with trailing whitespace"),
    ({"max_tokens": 5, "system": 5, "messages": [{"role": "user", "content": "x"}]}, 400,
     "invalid_request_error", "system: must be a string or a list"),
    ({"max_tokens": 5, "system": [{"type": "text", "text": "x", "cache_control": {"type": 1}}],
      "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error",
     "system.0.cache_control must be"),
    ({"max_tokens": 5, "stop_sequences": "x", "messages": [{"role": "user", "content": "x"}]},
     400, "invalid_request_error", "stop_sequences: must be a list"),
    ({"max_tokens": 5, "temperature": "hot", "messages": [{"role": "user", "content": "x"}]},
     400, "invalid_request_error", "temperature must be a number"),
    ({"max_tokens": 5, "temperature": -1, "messages": [{"role": "user", "content": "x"}]},
     400, "invalid_request_error", "temperature must be >= 0"),
    ({"max_tokens": 5, "top_k": -3, "messages": [{"role": "user", "content": "x"}]}, 400,
     "invalid_request_error", "top_k must be an integer"),
    ({"max_tokens": 5, "stream": "yes", "messages": [{"role": "user", "content": "x"}]}, 400,
     "invalid_request_error", "stream must be true or false"),
    ({"max_tokens": 5, "metadata": {"team": "x"}, "messages": [{"role": "user", "content": "x"}]},
     400, "invalid_request_error", "metadata.team: Extra inputs"),
    ({"max_tokens": 5, "mcp_servers": [], "messages": [{"role": "user", "content": "x"}]}, 400,
     "invalid_request_error", "Unrecognized request argument supplied: mcp_servers"),
    ({"max_tokens": 5, "thinking": {"type": "sometimes"},
      "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error",
     "thinking: must be"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
     400, "invalid_request_error", "messages.0.content.0.tool_use_id"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}, {"role": "assistant",
      "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]},
      {"role": "user", "content": "y"}]}, 400, "invalid_request_error",
     "messages.1.content.0.input: must be an object"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use"}]}]},
     400, "invalid_request_error", "not supported in user messages"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}, {"role": "assistant",
      "content": [{"type": "redacted_thinking", "data": "x"}]}, {"role": "user",
      "content": "y"}]}, 400, "invalid_request_error", "not supported in assistant messages"),
    ({"max_tokens": 5, "tools": [WEATHER_TOOL], "tool_choice": {"type": "tool", "name": "f"},
      "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error",
     "not in tools"),
    ({"max_tokens": 5, "tools": [WEATHER_TOOL, WEATHER_TOOL],
      "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error",
     "is given twice"),
    ({"max_tokens": 5, "tools": [WEATHER_TOOL], "tool_choice": {"type": "any"},
      "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
      "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error",
     "give one of them"),
    ({"max_tokens": 5, "output_config": {"format": {"type": "json_object"}},
      "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error",
     "output_config.format: must be"),
    ({"max_tokens": 5, "speed": "fast", "messages": [{"role": "user", "content": "x"}]}, 400,
     "invalid_request_error", "speed: only"),
    ({"max_tokens": 5, "tools": {"name": "x"}, "messages": [{"role": "user", "content": "x"}]},
     400, "invalid_request_error", "tools: must be a list"),
    ({"max_tokens": 5, "tools": [{"name": "f"}], "messages": [{"role": "user", "content": "x"}]},
     400, "invalid_request_error", "tools.0.input_schema: must be a JSON Schema object"),
    ({"max_tokens": 5, "tools": [{"type": "web_search_20250305", "name": "web_search"}],
      "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error",
     "tools.0.type: only custom tools"),
    ({"max_tokens": 5, "tool_choice": "auto", "messages": [{"role": "user", "content": "x"}]},
     400, "invalid_request_error", "tool_choice: must be"),
    ({"max_tokens": 5, "tool_choice": {"type": "tool"},
      "messages": [{"role": "user", "content": "x"}]}, 400, "invalid_request_error",
     "tool_choice.name"),
    ({"max_tokens": 5, "model": "claude-opus-4", "messages": [{"role": "user", "content": "x"}]},
     404, "not_found_error", "The model `claude-opus-4` does not exist"),
    ({"max_tokens": 100000, "messages": [{"role": "user", "content": "x"}]}, 400,
     "invalid_request_error", "lower max_tokens"),
]


@pytest.mark.parametrize("body,status,error_type,words", BAD,
                         ids=[f"messages-{i}" for i in range(len(BAD))])
def test_bad_body_gets_anthropics_error(gateway, body, status, error_type, words):
    response = gateway.http.post("/v1/messages", json=body)
    assert response.status_code == status, response.text
    answer = response.json()
    assert answer["type"] == "error"
    assert answer["error"]["type"] == error_type
    assert words in answer["error"]["message"]


def test_bad_count_tokens_body_and_bad_json_get_anthropics_error(gateway):
    response = gateway.http.post("/v1/messages/count_tokens",
                                 json={"messages": [{"role": "user", "content": "x"}],
                                       "max_tokens": 5})
    assert response.status_code == 400
    assert "Unrecognized request argument supplied: max_tokens" in \
        response.json()["error"]["message"]
    response = gateway.http.post("/v1/messages", content=b"{not json",
                                 headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["type"] == "error"
    response = gateway.http.get("/v1/messages")
    assert response.status_code == 405
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_sdk_raises_anthropics_exceptions(claude, model):
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(model=model, max_tokens=5, messages=[{"role": "user",
                                                                      "content": [{"type": "image"}]}])
    assert bad.value.status_code == 400 and bad.value.body["error"]["type"] == \
        "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=5,
                               messages=[{"role": "user", "content": "x"}])


def test_x_api_key_passes_the_gateways_key_check(server):
    with Gateway(backend_address(server), extra_args=["--api-key", "sesame"]) as gateway:
        model = gateway.client(api_key="sesame").models.list().data[0].id
        out = anthropic_client(gateway, api_key="sesame").messages.create(
            model=model, max_tokens=3, messages=[{"role": "user", "content": "Hi"}])
        assert out.usage.output_tokens >= 1
        with pytest.raises(anthropic.AuthenticationError) as refused:
            anthropic_client(gateway, api_key="wrong").messages.create(
                model=model, max_tokens=3, messages=[{"role": "user", "content": "Hi"}])
        assert refused.value.status_code == 401
        assert refused.value.body["error"]["type"] == "authentication_error"
        assert "x-api-key" in refused.value.body["error"]["message"]
