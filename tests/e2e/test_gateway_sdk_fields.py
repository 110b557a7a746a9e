"""The chat completions fields that OpenAI's SDK and agent frameworks send, through the official
`openai` package against the real tokenmill-gateway and tokenmill-server: those that cannot apply
here are accepted, change nothing and are logged once; reasoning_effort reaches the chat
template; continue_final_message continues the assistant's text; prompt_cache_key routes; audio
is refused; a prompt past the context is OpenAI's context_length_exceeded; the n limit reads the
same from the gateway and the server; /tokenize takes tools as vLLM's does."""
import json
import re
from pathlib import Path

import grpc
import openai
import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import Server, generate, pb2

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
IGNORED = {"service_tier": "auto", "store": False, "metadata": {"run": "7"},
           "safety_identifier": "user-42", "verbosity": "low", "modalities": ["text"]}


def ask(client, model, **kwargs):
    args = {"model": model, "messages": QUESTION, "max_tokens": 8, "temperature": 0}
    args.update(kwargs)
    return client.chat.completions.create(**args)


def test_fields_that_cannot_apply_change_nothing_and_are_logged_once(gateway, client, model):
    plain = ask(client, model)
    for _ in range(2):
        out = ask(client, model, **IGNORED)
        assert out.choices[0].message.content == plain.choices[0].message.content
        assert out.usage.prompt_tokens == plain.usage.prompt_tokens
    log = gateway.log_text()
    for field in IGNORED:
        lines = re.findall(rf"chat completions: accepting and ignoring `{field}`: .*", log)
        assert len(lines) == 1, (field, lines)


@pytest.mark.parametrize("fields,param,words", [
    ({"modalities": ["text", "audio"]}, "modalities", "only text is served"),
    ({"verbosity": "verbose"}, "verbosity", "not one of low, medium, high"),
    ({"reasoning_effort": "maximal"}, "reasoning_effort", "not one of low, medium, high"),
    ({"service_tier": "priority"}, "service_tier", "not one of auto, default"),
    ({"metadata": {"run": 7}}, "metadata", "metadata.run must be a string"),
], ids=["audio", "verbosity", "reasoning_effort", "service_tier", "metadata"])
def test_what_would_change_the_answer_or_is_malformed_is_a_400(client, model, fields, param,
                                                               words):
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, model, extra_body=fields)
    body = error.value.body
    assert body["param"] == param and words in body["message"], body


def test_prompt_cache_key_sends_different_prompts_to_one_backend():
    with Server() as a, Server() as b, Gateway(backend_address(a), backend_address(b)) as g:
        client = g.client()
        model = model_name(g)
        for i in range(16):
            ask(client, model, max_tokens=1, prompt_cache_key="session-1",
                messages=[{"role": "system", "content": f"You are cache key test {i}."},
                          {"role": "user", "content": "Hi"}])
        m = g.metrics()
        counts = [m[f"tokenmill_gateway:backend_requests_total{{backend={backend_address(s)}}}"]
                  for s in (a, b)]
        # Without the key, 16 different system prompts spread over both (test_gateway_routing).
        assert sorted(counts) == [0, 16], counts


def test_continue_final_message_continues_the_assistants_text(gateway, client, model):
    start = "The capital of France is"
    messages = QUESTION + [{"role": "assistant", "content": start}]
    out = ask(client, model, messages=messages,
              extra_body={"continue_final_message": True, "add_generation_prompt": False})
    # The prompt ends inside the assistant's message, as /tokenize renders it...
    rendered = gateway.http.post("/tokenize", json={
        "model": model, "messages": messages, "continue_final_message": True,
        "add_generation_prompt": False}).json()
    assert rendered["prompt"].endswith(start), rendered["prompt"]
    assert out.usage.prompt_tokens == rendered["count"]
    # ...and the answer is what the model writes after that text: a plain completion of it.
    completion = client.completions.create(model=model, prompt=rendered["tokens"], max_tokens=8,
                                           temperature=0)
    assert out.choices[0].message.content == completion.choices[0].text
    # vLLM's rule: not both.
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, model, messages=messages,
            extra_body={"continue_final_message": True, "add_generation_prompt": True})
    assert error.value.body["param"] == "continue_final_message"
    # Only the assistant's message can be continued (the server's check, named for the client).
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, model, extra_body={"continue_final_message": True})
    assert error.value.body["param"] == "continue_final_message"
    assert "must be the assistant's" in error.value.body["message"]


@pytest.fixture(scope="module")
def harmony():
    """gpt-oss's template, which writes "Reasoning: <effort>" into its system message."""
    with Server("--chat-template", TEMPLATES / "gpt_oss.jinja") as server, \
            Gateway(backend_address(server)) as gateway:
        yield server, gateway


def test_reasoning_effort_is_the_templates_variable(harmony):
    server, gateway = harmony
    client = gateway.client()
    model = model_name(gateway)

    def rendered(kwargs):
        return gateway.http.post("/tokenize", json={
            "model": model, "messages": QUESTION, "chat_template_kwargs": kwargs}).json()["prompt"]

    def direct(effort):
        """The server's own answer with the template variable set over gRPC."""
        chat = pb2.Chat(messages=[pb2.ChatMessage(role="user", content=QUESTION[0]["content"])],
                        template_kwargs_json=json.dumps({"reasoning_effort": effort}))
        _, _, responses = generate(server.stub, pb2.GenerateRequest(
            chat=chat, max_tokens=8, logprobs=True))
        return ([lp.chosen.logprob for r in responses for lp in r.logprobs],
                "".join(r.text for r in responses), "".join(r.reasoning_text for r in responses))

    def via_openai(**kwargs):
        message = ask(client, model, logprobs=True, **kwargs).choices[0]
        return ([t.logprob for t in message.logprobs.content], message.message.content or "",
                (message.message.model_extra or {}).get("reasoning_content") or "")

    assert "Reasoning: high" in rendered({"reasoning_effort": "high"})
    assert "Reasoning: medium" in rendered({})  # the template's default
    low, high = direct("low"), direct("high")
    assert low[0] != high[0]  # the prompts differ, so do the first token's odds
    def same(a, b):
        return a[1:] == b[1:] and a[0] == pytest.approx(b[0], abs=1e-5)

    assert same(via_openai(reasoning_effort="low"), low)
    assert same(via_openai(reasoning_effort="high"), high)
    # An explicit chat_template_kwargs value wins, as in vLLM.
    assert same(via_openai(reasoning_effort="high",
                           extra_body={"chat_template_kwargs": {"reasoning_effort": "low"}}), low)


def test_prompt_past_the_context_is_context_length_exceeded(client, model):
    long_text = "word " * 9000
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, model, messages=[{"role": "user", "content": long_text}])
    assert error.value.body["code"] == "context_length_exceeded"
    assert "this server's limit is 8192 tokens" in error.value.body["message"]
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(model=model, prompt=long_text, max_tokens=1)
    assert error.value.body["code"] == "context_length_exceeded"
    # The prompt fits, max_tokens does not: the same code, as OpenAI's.
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, model, max_tokens=100000)
    assert error.value.body["code"] == "context_length_exceeded"
    assert "lower max_tokens" in error.value.body["message"]
    # Other refusals carry no such code.
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, model, temperature=-1)
    assert error.value.body["code"] is None


def test_n_limit_reads_the_same_from_gateway_and_server(server, client, model):
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, model, n=17)
    with pytest.raises(grpc.RpcError) as refused:
        generate(server.stub, pb2.GenerateRequest(text="Hi", n=17))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.body["message"] == refused.value.details()
    assert error.value.body["param"] == "n"


def test_tokenize_takes_tools_as_vllm_does(gateway, model):
    tool = {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    with Server("--chat-template", TEMPLATES / "hermes_tools.jinja") as server, \
            Gateway(backend_address(server)) as hermes:
        body = {"model": model_name(hermes), "messages": QUESTION, "tools": [tool]}
        with_tools = hermes.http.post("/tokenize", json=body)
        assert with_tools.status_code == 200, with_tools.text
        prompt = with_tools.json()["prompt"]
        # The template printed the tool, its keys in the client's order.
        assert json.dumps(tool["function"])[:-1] in prompt or '"name": "get_weather"' in prompt
        without = hermes.http.post("/tokenize", json={**body, "tools": None}).json()
        assert with_tools.json()["count"] > without["count"]
        # The count is the prompt chat completions runs.
        out = hermes.client().chat.completions.create(
            model=body["model"], messages=QUESTION, tools=[tool], max_tokens=1)
        assert out.usage.prompt_tokens == with_tools.json()["count"]
    refused = gateway.http.post("/tokenize", json={"model": model, "prompt": "Hi",
                                                   "tools": [tool]})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "tools"


def test_anthropic_tool_use_ids_round_trip_through_mistrals_template():
    """Mistral's template accepts only its own nine-letter call ids: a toolu_ id sent back
    with the tool's result must reach it as those nine letters again."""
    import anthropic
    tool = {"name": "get_weather", "description": "The weather in a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}
    with Server("--chat-template", TEMPLATES / "mistral_tools.jinja") as server, \
            Gateway(backend_address(server)) as gateway:
        claude = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0)
        model = model_name(gateway)
        first = claude.messages.create(model=model, max_tokens=60, messages=QUESTION,
                                       tools=[tool], tool_choice={"type": "any"})
        use = next(b for b in first.content if b.type == "tool_use")
        assert re.fullmatch(r"toolu_[A-Za-z0-9]{9}", use.id), use.id
        answer = claude.messages.create(
            model=model, max_tokens=4, tools=[tool],
            messages=QUESTION + [{"role": "assistant", "content": first.content},
                                 {"role": "user", "content": [{"type": "tool_result",
                                                               "tool_use_id": use.id,
                                                               "content": "sunny"}]}])
        assert answer.usage.output_tokens >= 1


def test_prediction_feeds_the_drafter_and_leaves_the_output_alone():
    """OpenAI's Predicted Outputs: under --spec ngram the prediction's tokens are draft
    material, so an answer that follows it is verified several tokens a step."""
    accepted = "tokenmill:spec_decode_num_accepted_tokens_total"
    story = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
    with Server("--spec", "ngram", "--spec-tokens", "4") as server, \
            Gateway(backend_address(server)) as gateway:
        client = gateway.client()
        model = model_name(gateway)
        text = ask(client, model, messages=story, max_tokens=64).choices[0].message.content
        before = server.metrics()[accepted]
        plain = ask(client, model, messages=story, max_tokens=64)
        middle = server.metrics()[accepted]
        predicted = ask(client, model, messages=story, max_tokens=64,
                        prediction={"type": "content", "content": text})
        after = server.metrics()[accepted]
        assert plain.choices[0].message.content == text
        assert predicted.choices[0].message.content == text
        # Prompt lookup alone finds little in a free answer; the prediction holds all of it.
        assert after - middle >= 32 > middle - before, (middle - before, after - middle)
        # Text parts, as OpenAI's SDK may send them, are the same prediction.
        parts = ask(client, model, messages=story, max_tokens=64, prediction={
            "type": "content", "content": [{"type": "text", "text": text}]})
        assert parts.choices[0].message.content == text
        assert server.metrics()[accepted] - after >= 32


def test_malformed_prediction_is_a_400(client, model):
    for prediction in ({"type": "text", "content": "x"}, {"type": "content"},
                       {"type": "content", "content": 5}, "x"):
        with pytest.raises(openai.BadRequestError) as error:
            ask(client, model, extra_body={"prediction": prediction})
        assert error.value.body["param"] == "prediction"
        assert "prediction must be {\"type\": \"content\"" in error.value.body["message"]
