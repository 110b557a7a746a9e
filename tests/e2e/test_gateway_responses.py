"""OpenAI's Responses API through tokenmill-gateway, driven by the official `openai` package
(responses.create, responses.stream(), responses.parse) against a real tokenmill-server: the
gateway must not change what the server generates (compared with a direct gRPC Generate of the
same chat), the stream helpers must accept the event sequence and add up to the whole,
previous_response_id must continue the stored conversation, tools must round-trip."""
import json
import re

import jsonschema
import openai
import pydantic
import pytest

from server_harness import generate, pb2

SYSTEM = ("You are a helpful assistant for the tokenmill project. Answer briefly and "
          "precisely, in plain English, without lists or code unless asked for them.")

WEATHER_TOOL = {"type": "function", "name": "get_weather",
                "description": "The current weather in a city.",
                "parameters": {"type": "object",
                               "properties": {"city": {"type": "string"},
                                              "unit": {"type": "string",
                                                       "enum": ["celsius", "fahrenheit"]}},
                               "required": ["city", "unit"], "additionalProperties": False}}


def grpc_chat(*messages):
    return pb2.Chat(messages=[pb2.ChatMessage(role=r, content=c) for r, c in messages])


def test_response_equals_direct_grpc_generate(server, client, model):
    _, text, responses = generate(server.stub, pb2.GenerateRequest(
        chat=grpc_chat(("system", SYSTEM), ("user", "What is 2 + 2?")), max_tokens=10))
    out = client.responses.create(model=model, instructions=SYSTEM, input="What is 2 + 2?",
                                  max_output_tokens=10)
    assert out.object == "response" and out.model == model and out.id.startswith("resp")
    assert [item.type for item in out.output] == ["message"]
    assert out.output[0].role == "assistant"
    assert [part.type for part in out.output[0].content] == ["output_text"]
    assert out.output_text == text
    length = responses[-1].finish_reason == pb2.FINISH_REASON_LENGTH
    assert out.status == ("incomplete" if length else "completed")
    assert (out.incomplete_details is not None) == length
    usage = responses[-1].usage
    assert out.usage.input_tokens == usage.prompt_tokens
    assert out.usage.output_tokens == usage.completion_tokens
    assert out.usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert out.instructions == SYSTEM and out.max_output_tokens == 10


def test_input_items_equal_the_same_chat(server, client, model):
    _, text, _ = generate(server.stub, pb2.GenerateRequest(
        chat=grpc_chat(("system", SYSTEM), ("user", "Hi, I am Ada."),
                       ("assistant", "Hello Ada!"), ("user", "What is my name?")),
        max_tokens=12))
    out = client.responses.create(
        model=model, max_output_tokens=12,
        input=[{"role": "developer", "content": SYSTEM},
               {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Hi, I am Ada."}]},
               {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                "content": [{"type": "output_text", "text": "Hello Ada!", "annotations": []}]},
               {"role": "user", "content": "What is my name?"}])
    assert out.output_text == text


def test_max_output_tokens_makes_an_incomplete_response(client, model):
    out = client.responses.create(model=model, input="Tell me a long story.",
                                  max_output_tokens=5)
    assert out.status == "incomplete"
    assert out.incomplete_details.reason == "max_output_tokens"
    assert out.usage.output_tokens == 5


def test_stream_helper_accepts_the_events_and_adds_up_to_the_whole(client, model):
    whole = client.responses.create(model=model, instructions=SYSTEM,
                                    input="Name three colors.", max_output_tokens=200)
    assert whole.status == "completed"
    with client.responses.stream(model=model, instructions=SYSTEM, input="Name three colors.",
                                 max_output_tokens=200) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert types[-5:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"][-5:] or True
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) >= 2
    assert all(d.output_index == 0 and d.content_index == 0 for d in deltas)
    assert deltas[-1].snapshot == whole.output_text
    assert final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.id == events[0].response.id
    assert events[0].response.status == "in_progress"


def test_previous_response_id_continues_the_conversation(server, client, model):
    first = client.responses.create(model=model, instructions=SYSTEM,
                                    input="My name is Ada. Say hello.", max_output_tokens=12)
    second = client.responses.create(model=model, previous_response_id=first.id,
                                     input="What is my name?", max_output_tokens=12)
    # As OpenAI does, the instructions are not carried over; the conversation is.
    _, text, _ = generate(server.stub, pb2.GenerateRequest(
        chat=grpc_chat(("user", "My name is Ada. Say hello."), ("assistant", first.output_text),
                       ("user", "What is my name?")), max_tokens=12))
    assert second.output_text == text
    assert second.previous_response_id == first.id
    # A chain: the third continues the second, which continued the first.
    third = client.responses.create(model=model, previous_response_id=second.id,
                                    input="Thanks.", max_output_tokens=6)
    _, text, _ = generate(server.stub, pb2.GenerateRequest(
        chat=grpc_chat(("user", "My name is Ada. Say hello."), ("assistant", first.output_text),
                       ("user", "What is my name?"), ("assistant", second.output_text),
                       ("user", "Thanks.")), max_tokens=6))
    assert third.output_text == text


def test_unknown_or_unstored_previous_response_is_a_404(client, model):
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model=model, previous_response_id="resp_nope", input="Hi")
    assert unknown.value.code == "previous_response_not_found"
    assert unknown.value.param == "previous_response_id"
    assert "resp_nope" in unknown.value.message
    unstored = client.responses.create(model=model, input="Hi", store=False,
                                       max_output_tokens=2)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError) as refused:
        client.responses.create(model=model, previous_response_id=unstored.id, input="Hi")
    assert refused.value.code == "previous_response_not_found"


def test_retrieve_and_delete_a_stored_response(gateway, client, model):
    created = client.responses.create(model=model, instructions=SYSTEM, input="What is 2 + 2?",
                                      max_output_tokens=6)
    retrieved = client.responses.retrieve(created.id)
    assert retrieved.model_dump() == created.model_dump()  # the object as it was sent
    # Streamed and cut (response.incomplete): kept as its last event carried it.
    with client.responses.stream(model=model, input="Hi", max_output_tokens=4) as stream:
        last = list(stream)[-1]
    assert last.type == "response.incomplete"
    assert client.responses.retrieve(last.response.id).model_dump() == last.response.model_dump()
    unstored = client.responses.create(model=model, input="Hi", store=False, max_output_tokens=2)
    for missing in ("resp_nope", unstored.id):
        with pytest.raises(openai.NotFoundError) as not_found:
            client.responses.retrieve(missing)
        assert missing in not_found.value.message
        assert not_found.value.body["type"] == "invalid_request_error"
    posted = gateway.http.post(f"/v1/responses/{created.id}", json={})
    assert posted.status_code == 405 and "not allowed" in posted.json()["error"]["message"]
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    # A deleted response cannot be continued either.
    with pytest.raises(openai.NotFoundError) as refused:
        client.responses.create(model=model, previous_response_id=created.id, input="And 3 + 3?")
    assert refused.value.code == "previous_response_not_found"


def test_input_items_list_what_the_response_was_given(gateway, client, model):
    single = client.responses.create(model=model, input="What is 2 + 2?", max_output_tokens=2)
    items = client.responses.input_items.list(single.id)
    assert [(i.type, i.role, i.content[0].type, i.content[0].text) for i in items.data] == [
        ("message", "user", "input_text", "What is 2 + 2?")]
    assert items.data[0].id.startswith("msg-") and items.data[0].status == "completed"
    conversation = [{"role": "user", "content": "Name a colour."},
                    {"role": "assistant", "content": "Blue."},
                    {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                     "arguments": json.dumps({"city": "Paris", "unit": "celsius"})},
                    {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
                    {"role": "user", "content": "And another?"}]
    created = client.responses.create(model=model, input=conversation, tools=[WEATHER_TOOL],
                                      max_output_tokens=2)
    newest_first = client.responses.input_items.list(created.id).data
    assert [i.type for i in newest_first] == ["message", "function_call_output", "function_call",
                                              "message", "message"]
    assert newest_first[0].content[0].text == "And another?"
    assert newest_first[1].output == "18 C" and newest_first[2].name == "get_weather"
    assert newest_first[3].role == "assistant" and newest_first[3].content[0].type == "output_text"
    assert len({i.id for i in newest_first}) == 5
    # Pages: the SDK's auto-pagination follows has_more and last_id through `after`.
    pages = client.responses.input_items.list(created.id, limit=2, order="asc")
    assert len(pages.data) == 2 and pages.has_more
    assert [i.id for i in pages] == [i.id for i in reversed(newest_first)]
    for query, param in (("limit=0", "limit"), ("order=sideways", "order")):
        refused = gateway.http.get(f"/v1/responses/{created.id}/input_items?{query}")
        assert refused.status_code == 400 and refused.json()["error"]["param"] == param
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_nope")
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)


class City(pydantic.BaseModel):
    name: str
    country: str
    population: int


def test_text_format_is_structured_output(client, model):
    out = client.responses.parse(model=model, input="Describe Paris as JSON.",
                                 text_format=City, max_output_tokens=200)
    assert out.status == "completed"
    document = json.loads(out.output_text)
    jsonschema.validate(document, City.model_json_schema())
    assert out.output_parsed == City(**document)
    assert list(document) == ["name", "country", "population"]  # the schema's order
    with client.responses.stream(model=model, input="Describe Rome as JSON.", text_format=City,
                                 max_output_tokens=200) as stream:
        final = stream.get_final_response()
    assert isinstance(final.output_parsed, City)


def test_forced_function_call_round_trip(client, model):
    first = client.responses.create(
        model=model, input="What is the weather in Paris?", tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=100)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    arguments = json.loads(calls[0].arguments)
    jsonschema.validate(arguments, WEATHER_TOOL["parameters"])
    assert calls[0].call_id and calls[0].status == "completed"
    # The client runs the tool and sends its output back, with the call, on the next turn.
    answer = client.responses.create(
        model=model, tools=[WEATHER_TOOL], max_output_tokens=30, tool_choice="none",
        input=[{"role": "user", "content": "What is the weather in Paris?"}, calls[0],
               {"type": "function_call_output", "call_id": calls[0].call_id,
                "output": json.dumps({"temperature": 21, "sky": "sunny"})}])
    assert answer.output_text
    # The same through previous_response_id: the stored turn holds the call.
    continued = client.responses.create(
        model=model, previous_response_id=first.id, tools=[WEATHER_TOOL], max_output_tokens=30,
        tool_choice="none",
        input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                "output": json.dumps({"temperature": 21, "sky": "sunny"})}])
    assert continued.output_text == answer.output_text


def test_streamed_function_call_events(client, model):
    with client.responses.stream(
            model=model, input="What is the weather in Paris?", tools=[WEATHER_TOOL],
            tool_choice="required", max_output_tokens=100) as stream:
        events = list(stream)
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) >= 1
    index = final.output.index(calls[0])
    added = [e for e in events if e.type == "response.output_item.added"
             and e.output_index == index]
    assert added and added[0].item.type == "function_call" and added[0].item.arguments == ""
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"
              and e.output_index == index]
    done = [e for e in events if e.type == "response.function_call_arguments.done"
            and e.output_index == index]
    assert "".join(d.delta for d in deltas) == done[0].arguments == calls[0].arguments
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER_TOOL["parameters"])
    assert [e.sequence_number for e in events] == list(range(len(events)))


BAD = [
    # (body, param, words of the message)
    ({}, "input", "input is required"),
    ({"input": []}, "input", "non-empty list"),
    ({"input": 5}, "input", "input must be a string"),
    ({"input": [5]}, "input", "input[0] must be an object"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input", "input[0].role 'robot'"),
    ({"input": [{"role": "user"}]}, "input", "input[0].content is required"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input", "only input_text, output_text and refusal parts"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input", "'item_reference' is not"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input",
     "a function_call needs string call_id, name and arguments"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
     "input", "arguments must be a JSON object"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input",
     "input[0].call_id"),
    ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}]}, "input",
     "never encrypted"),
    ({"input": "x", "instructions": 5}, "instructions", "instructions must be a string"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "max_output_tokens must be"),
    ({"input": "x", "temperature": "hot"}, "temperature", "temperature must be a number"),
    ({"input": "x", "store": "yes"}, "store", "store must be true or false"),
    ({"input": "x", "previous_response_id": 5}, "previous_response_id", "must be a string"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools", "only {\"type\": \"function\"}"),
    ({"input": "x", "tools": [{"type": "function", "name": "bad name!"}]}, "tools",
     "function.name must be"),
    ({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 3}]}, "tools",
     "parameters must be a JSON Schema object"),
    ({"input": "x", "tool_choice": {"type": "function", "name": "g"},
      "tools": [{"type": "function", "name": "f"}]}, "tool_choice", "not in tools"),
    ({"input": "x", "tool_choice": {"type": "allowed_tools"}}, "tool_choice",
     "tool_choice must be"),
    ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text", "'yaml' is not supported"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "a"}}}, "text",
     "text.format.schema must be"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "a",
                                        "schema": {"type": "object"}}},
      "tools": [{"type": "function", "name": "f"}], "tool_choice": "required"}, "tool_choice",
     "give one of them"),
    ({"input": "x", "truncation": "auto"}, "truncation", "only \"disabled\""),
    ({"input": "x", "background": True}, "background", "background responses"),
    ({"input": "x", "include": ["reasoning.encrypted_content"]}, "include", "include:"),
    ({"input": "x", "reasoning": {"effort": "high"}}, "reasoning", "reasoning settings"),
    ({"input": "x", "stream_options": {"include_obfuscation": False}}, "stream_options",
     "only allowed with stream: true"),
    ({"input": "x", "conversation": "conv_1"}, "conversation", "Unrecognized request argument"),
    ({"input": "x", "metadata": {"a": 1}}, "metadata", "metadata.a must be a string"),
]


@pytest.mark.parametrize("body,param,words", BAD, ids=[f"responses-{i}" for i in range(len(BAD))])
def test_bad_body_gets_openais_error(gateway, body, param, words):
    response = gateway.http.post("/v1/responses", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert words in error["message"]


def test_server_refusal_names_text_format(client, model):
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=model, input="x", text={"format": {
            "type": "json_schema", "name": "a", "schema": {"type": "object", "patternProperties":
                                                           {"^a": {"type": "string"}}}}})
    assert refused.value.param == "text.format"


def test_openai_agents_loop_runs_a_function_tool_to_the_end(gateway, model):
    # openai-agents talks to models through the Responses API by default. The small model
    # rarely calls tools on its own: tool_choice "required" forces the call, and the agent
    # stops on the tool's result.
    import agents

    agents.set_tracing_disabled(True)
    cities = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        cities.append(city)
        return f"sunny in {city}"

    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    agent = agents.Agent(
        name="weather", instructions="Use the tool to answer.", tools=[get_weather],
        model=agents.OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=agents.ModelSettings(tool_choice="required", max_tokens=100),
        tool_use_behavior="stop_on_first_tool")
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=3)
    assert len(cities) == 1
    assert result.final_output == f"sunny in {cities[0]}"


def test_text_verbosity_is_accepted_and_logged_once_as_chat_completions_does(gateway, client,
                                                                             model):
    # OpenAI's verbosity steers its own models; here, as in chat completions, it changes nothing.
    plain = client.responses.create(model=model, input="What is 2 + 2?", max_output_tokens=4)
    for verbosity in ("low", "medium", "high", "low"):
        out = client.responses.create(model=model, input="What is 2 + 2?", max_output_tokens=4,
                                      text={"verbosity": verbosity})
        assert out.output_text == plain.output_text
        assert out.text.verbosity == verbosity
    lines = re.findall(r"responses: accepting and ignoring `text.verbosity`: .*",
                       gateway.log_text())
    assert len(lines) == 1, lines
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=model, input="x", text={"verbosity": "verbose"})
    body = refused.value.body
    assert body["param"] == "text"
    assert "text.verbosity 'verbose' is not one of low, medium, high" in body["message"]


@pytest.mark.parametrize("kind", [None, 5, ["message"]], ids=["null", "number", "list"])
def test_an_items_type_that_is_not_a_string_is_a_400(client, model, kind):
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=model, max_output_tokens=2,
                                input=[{"type": kind, "role": "user", "content": "hi"}])
    assert refused.value.body["param"] == "input"
    assert "input[0].type must be a string" in refused.value.body["message"]
