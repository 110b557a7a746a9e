"""Tool calls and reasoning end to end: the official `openai` client (chat tools, streamed
tool-call deltas, its stream helper) and the `openai-agents` SDK running an agent loop, through
tokenmill-gateway and tokenmill-server on the default model, and grpcio on the server.

SmolLM2 does not call tools on its own, so tool_choice "required" (or a named function) makes
it: the server's grammar forces each family's real markup, which the family's parser then reads
out of the generated tokens, split wherever the tokenizer split them. Each family runs with its
own chat template from tests/data/chat_templates. Arguments are checked by `jsonschema`
against the tool's parameters; the markup itself by detokenizing the generated token ids."""
import asyncio
import json
import re
from pathlib import Path

import jsonschema
import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import Server, generate, pb2

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 24},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a time zone.",
        "parameters": {"type": "object",
                       "properties": {"zone": {"type": "string", "maxLength": 24}},
                       "required": ["zone"]},
    },
}
TOOLS = [WEATHER, TIME]
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTION = [{"role": "system", "content": "You are a helpful assistant with tools."},
            {"role": "user", "content": "What's the weather in Paris right now?"}]
MAX_TOKENS = 120

# family: (chat template, --tool-call-parser (None: auto, from the template), the markup the
# grammar forces into the generated tokens, the ids the family's templates want).
FAMILIES = {
    "hermes": ("hermes_tools.jinja", "hermes", "<tool_call>\n{\"name\": ", r"call_[A-Za-z0-9]{24}"),
    "qwen2.5": ("qwen2.5.jinja", None, "<tool_call>\n{\"name\": ", r"call_[A-Za-z0-9]{24}"),
    "llama3.1": ("llama3.1_tools.jinja", None, "\"parameters\": {", r"call_[A-Za-z0-9]{24}"),
    "mistral": ("mistral_tools.jinja", None, "[TOOL_CALLS][{\"name\": ", r"[A-Za-z0-9]{9}"),
    "json": (None, "json", "{\"name\": ", r"call_[A-Za-z0-9]{24}"),
    # gpt-oss's template on SmolLM2's vocabulary, which spells harmony's markers in text tokens
    # (so the parser meets them split); the harmony parsers come from the template.
    "gpt-oss": ("gpt_oss.jinja", None, "<|channel|>commentary to=functions.get_weather "
                "<|constrain|>json<|message|>{", r"call_[A-Za-z0-9]{24}"),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    name = request.param
    template, parser, _, _ = FAMILIES[name]
    args = []
    if template:
        args += ["--chat-template", TEMPLATES / template]
    if parser:
        args += ["--tool-call-parser", parser]
    with Server(*args) as server, Gateway(backend_address(server)) as gateway:
        yield name, server, gateway


def check_call(name, call):
    """A parsed call: a known function, JSON arguments that validate, the family's id."""
    assert call.type == "function"
    assert re.fullmatch(FAMILIES[name][3], call.id), call.id
    assert call.function.name in PARAMETERS
    jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])


def create(gateway, **kwargs):
    args = {"model": model_name(gateway), "messages": QUESTION, "tools": TOOLS,
            "tool_choice": "required", "temperature": 0, "max_tokens": MAX_TOKENS}
    args.update(kwargs)
    return gateway.client().chat.completions.create(**args)


def test_forced_call_is_parsed_into_tool_calls(family):
    name, _, gateway = family
    choice = create(gateway).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None  # no markup leaks into the content
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        check_call(name, call)


def test_grpc_carries_the_parsed_calls_and_the_raw_tokens(family):
    name, server, _ = family
    chat = pb2.Chat(messages=[pb2.ChatMessage(role=m["role"], content=m["content"])
                              for m in QUESTION],
                    tools_json=json.dumps(TOOLS),
                    tool_choice=pb2.ToolChoice(function_name="get_weather"))
    request = pb2.GenerateRequest(chat=chat, max_tokens=MAX_TOKENS)
    ids, text, responses = generate(server.stub, request)
    assert text == ""
    assert responses[-1].finish_reason == pb2.FINISH_REASON_TOOL_CALLS
    raw = server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=ids)).text
    assert FAMILIES[name][2] in raw, raw  # the family's own markup was generated
    deltas = [d for r in responses for d in r.tool_calls]
    assert [d.index for d in deltas if d.id] == [0]  # a named function: one call
    assert deltas[0].name == "get_weather"
    arguments = "".join(d.arguments for d in deltas)
    jsonschema.validate(json.loads(arguments), PARAMETERS["get_weather"])
    assert json.dumps(json.loads(arguments)) in raw.replace("\"parameters\"", "\"arguments\"")


def test_streamed_deltas_assemble_to_the_same_calls(family):
    name, _, gateway = family
    whole = create(gateway).choices[0].message.tool_calls
    chunks = list(create(gateway, stream=True))
    calls = {}
    finish = None
    for chunk in chunks:
        delta = chunk.choices[0].delta
        assert not delta.content, delta  # only the role's empty content, never markup
        finish = chunk.choices[0].finish_reason or finish
        for d in delta.tool_calls or []:
            if d.index not in calls:
                # A call's first delta: its index, id, type and name.
                assert d.id and d.type == "function" and d.function.name, d
                calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
            else:
                assert d.id is None and d.function.name is None, d
            calls[d.index]["arguments"] += d.function.arguments or ""
    assert finish == "tool_calls"
    assert sorted(calls) == list(range(len(whole)))
    # The argument fragments came as the tokens did, not in one piece.
    assert sum(1 for c in chunks for d in c.choices[0].delta.tool_calls or []) > 2 * len(whole)
    for index, call in enumerate(whole):
        assert calls[index]["name"] == call.function.name
        assert json.loads(calls[index]["arguments"]) == json.loads(call.function.arguments)
        assert re.fullmatch(FAMILIES[name][3], calls[index]["id"])


def test_the_sdks_stream_helper_assembles_the_calls(family):
    name, _, gateway = family
    with gateway.client().chat.completions.stream(
            model=model_name(gateway), messages=QUESTION, tools=TOOLS, tool_choice="required",
            temperature=0, max_tokens=MAX_TOKENS) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_completion()
    assert "tool_calls.function.arguments.delta" in events
    assert "tool_calls.function.arguments.done" in events
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    for call in choice.message.tool_calls:
        check_call(name, call)


def test_named_function_and_parallel_tool_calls_false(family):
    name, _, gateway = family
    named = create(gateway, tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = named.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"]
    check_call(name, calls[0])
    single = create(gateway, parallel_tool_calls=False)
    assert len(single.choices[0].message.tool_calls) == 1


def test_tool_results_go_back_to_the_model(family):
    name, _, gateway = family
    call = create(gateway, tool_choice={"type": "function",
                                        "function": {"name": "get_weather"}}).choices[0]
    call = call.message.tool_calls[0]
    messages = QUESTION + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name,
                                      "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "name": "get_weather",
         "content": "18 degrees and sunny"}]
    answer = create(gateway, messages=messages, tool_choice="none", max_tokens=8).choices[0]
    assert answer.finish_reason in ("stop", "length")
    assert answer.message.tool_calls is None
    prompt = gateway.http.post("/tokenize", json={"model": model_name(gateway),
                                                  "messages": messages}).json()["prompt"]
    assert "18 degrees and sunny" in prompt
    if name != "mistral":  # vLLM's Mistral example template prints content, not the calls
        assert "get_weather" in prompt.split("What's the weather in Paris right now?")[1]


def test_auto_without_a_call_is_content(family):
    _, server, _ = family
    # SmolLM2 answers in words (or not at all): all of it is content, nothing held back or
    # lost (had it started a call in its family's markup, it would parse).
    chat = pb2.Chat(messages=[pb2.ChatMessage(role=m["role"], content=m["content"])
                              for m in QUESTION], tools_json=json.dumps(TOOLS))
    ids, text, responses = generate(server.stub, pb2.GenerateRequest(chat=chat, max_tokens=24))
    assert not [d for r in responses for d in r.tool_calls]
    assert responses[-1].finish_reason in (pb2.FINISH_REASON_STOP, pb2.FINISH_REASON_LENGTH)
    assert text == server.stub.Detokenize(pb2.DetokenizeRequest(token_ids=ids)).text


@pytest.fixture(scope="module")
def hermes():
    with Server("--chat-template", TEMPLATES / "hermes_tools.jinja") as server, \
            Gateway(backend_address(server)) as gateway:
        yield gateway


def test_parallel_tool_calls_false_ends_the_turn_after_the_first_call(hermes):
    # tool_choice auto: a choice grammar makes SmolLM2 write two Hermes calls. Without
    # parallel calls the server stops the generation once the first call is complete.
    two_calls = "".join(
        "<tool_call>\n" + json.dumps({"name": n, "arguments": a}) + "\n</tool_call>\n"
        for n, a in (("get_weather", {"city": "Paris", "unit": "celsius"}),
                     ("get_time", {"zone": "Europe/Paris"})))
    def run(parallel, **kwargs):
        return create(hermes, tool_choice="auto", parallel_tool_calls=parallel,
                      extra_body={"structured_outputs": {"choice": [two_calls]}}, **kwargs)
    both = run(True)
    assert [c.function.name for c in both.choices[0].message.tool_calls] == \
        ["get_weather", "get_time"]
    first = run(False)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]
    check_call("hermes", choice.message.tool_calls[0])
    # Ended, not generated and dropped: fewer tokens than the second call alone needs.
    second_call_tokens = len(hermes.http.post("/tokenize", json={
        "model": model_name(hermes), "prompt": two_calls.split("</tool_call>\n", 1)[1],
        "add_special_tokens": False}).json()["tokens"])
    assert first.usage.completion_tokens + second_call_tokens <= both.usage.completion_tokens
    chunks = list(run(False, stream=True))
    deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert {d.index for d in deltas} == {0}
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == \
        ["tool_calls"]


def test_openai_agents_runs_an_agent_loop_to_the_end(hermes):
    agents = pytest.importorskip("agents")
    import openai

    agents.set_tracing_disabled(True)
    seen = []

    @agents.function_tool
    def get_weather(city: str, unit: str) -> str:
        """The current weather in a city.

        Args:
            city: The city.
            unit: celsius or fahrenheit.
        """
        seen.append((city, unit))
        return f"18 degrees {unit} and sunny in {city}"

    def make_agent():
        # A client per run: each run has its own event loop, which the client binds to.
        client = openai.AsyncOpenAI(base_url=f"{hermes.url}/v1", api_key="unused",
                                    max_retries=0)
        model = agents.OpenAIChatCompletionsModel(model=model_name(hermes), openai_client=client)
        # The first turn must call the tool; the SDK then resets tool_choice (its default
        # reset_tool_choice), so the model answers in words and the loop ends.
        settings = agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=60)
        return agents.Agent(name="weather", instructions="Answer with the weather tool.",
                            tools=[get_weather], model=model, model_settings=settings)

    async def run_streamed():
        # Over streamed chat completions: the SDK assembles the tool-call deltas itself.
        run = agents.Runner.run_streamed(make_agent(), "What's the weather in Paris?",
                                         max_turns=4)
        async for _ in run.stream_events():
            pass
        return run

    for streamed in (False, True):
        seen.clear()
        if streamed:
            result = asyncio.run(run_streamed())
        else:
            result = agents.Runner.run_sync(make_agent(), "What's the weather in Paris?",
                                            max_turns=4)
        assert len(seen) >= 1, result.new_items
        kinds = [item.type for item in result.new_items]
        assert "tool_call_item" in kinds and "tool_call_output_item" in kinds
        assert kinds[-1] == "message_output_item"  # the loop ended with the model's answer
        assert isinstance(result.final_output, str)


@pytest.fixture(scope="module")
def thinking():
    with Server("--chat-template", TEMPLATES / "deepseek_v31.jinja") as server, \
            Gateway(backend_address(server)) as gateway:
        yield server, gateway


def test_reasoning_follows_chat_template_kwargs(thinking):
    server, gateway = thinking
    client = gateway.client()

    def ask(kwargs, stream=False):
        return client.chat.completions.create(
            model=model_name(gateway), messages=QUESTION[1:], max_tokens=12, temperature=0,
            stream=stream, extra_body={"chat_template_kwargs": kwargs})

    # thinking: the prompt opens <think>, so the output starts inside the reasoning (SmolLM2
    # never closes it in 12 tokens): all of it is reasoning, none of it content.
    on = ask({"thinking": True}).choices[0].message
    assert on.model_extra["reasoning_content"] and on.model_extra["reasoning"]
    assert on.content == ""
    raw = server.stub.Generate(pb2.GenerateRequest(
        chat=pb2.Chat(messages=[pb2.ChatMessage(role="user", content=QUESTION[1]["content"])],
                      template_kwargs_json='{"thinking": true}'), max_tokens=12))
    raw = list(raw)
    assert "".join(r.reasoning_text for r in raw) == on.model_extra["reasoning_content"]
    streamed = "".join(c.choices[0].delta.model_extra.get("reasoning_content") or ""
                       for c in ask({"thinking": True}, stream=True) if c.choices)
    assert streamed == on.model_extra["reasoning_content"]
    # Not thinking: the prompt closed it (</think>), the output is the content.
    off = ask({"thinking": False}).choices[0].message
    assert off.content and "reasoning_content" not in (off.model_extra or {})


BAD = [
    # (extra body fields, param, words of the message)
    ({"tools": {"a": 1}}, "tools", "tools must be a list"),
    ({"tools": [{"type": "retrieval"}]}, "tools", "tools[0].type must be \"function\""),
    ({"tools": [{"type": "function", "function": {"description": "x"}}]}, "tools",
     "function.name must be"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools",
     "function.name must be"),
    ({"tools": [WEATHER, WEATHER]}, "tools", "is given twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools",
     "parameters must be a JSON Schema object"),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": "x", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "frobnicate": 1}}}}}],
      "tool_choice": "required"}, "tools", "frobnicate"),
    ({"tools": TOOLS, "tool_choice": "maybe"}, "tool_choice", "tool_choice must be"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice", "not in tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice", "tool_choice must be"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
     "tool_choice", "give one of them"),
    ({"chat_template_kwargs": [1]}, "chat_template_kwargs", "must be an object"),
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs", "would replace"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages", "tool_call_id is required"),
    ({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]}, "messages",
     "only allowed in tool messages"),
    ({"messages": [{"role": "assistant", "tool_calls": {"id": "c"}}]}, "messages",
     "tool_calls must be a list"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}]},
     "messages", "is not a function call"),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]},
     "messages", "a JSON object as a string"),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]},
     "messages", "arguments must be a JSON object"),
    ({"messages": [{"role": "assistant", "content": "x", "reasoning_content": 5}]}, "messages",
     "reasoning_content must be a string"),
]


@pytest.mark.parametrize("extra,param,words", BAD, ids=[str(i) for i in range(len(BAD))])
def test_malformed_tool_requests_are_400s(hermes, extra, param, words):
    body = {"model": model_name(hermes), "messages": QUESTION, "max_tokens": 4}
    body.update(extra)
    response = hermes.http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error
    assert words in error["message"], error
