"""The OpenAI API through tokenmill-gateway, driven by the official `openai` package against a
real tokenmill-server: the gateway must not change what the server generates (compared with a
direct gRPC Generate), streams must add up to the whole, usage must be right."""
import concurrent.futures
import time

import pytest

from gateway_harness import backend_address, model_name
from server_harness import generate, pb2

SYSTEM = ("You are a helpful assistant for the tokenmill project. Answer briefly and "
          "precisely, in plain English, without lists or code unless asked for them.")


def grpc_chat(*messages):
    return pb2.Chat(messages=[pb2.ChatMessage(role=r, content=c) for r, c in messages])


def test_models_lists_the_servers_model(server, client, model):
    info = server.stub.GetModelInfo(pb2.GetModelInfoRequest())
    models = client.models.list().data
    assert [m.id for m in models] == [info.name] == [model]
    assert client.models.retrieve(model).id == model


def test_completion_equals_direct_grpc_generate(server, client, model):
    prompt = "The capital of France is"
    ids, text, responses = generate(server.stub, pb2.GenerateRequest(text=prompt, max_tokens=12))
    out = client.completions.create(model=model, prompt=prompt, max_tokens=12)
    assert out.object == "text_completion"
    assert out.choices[0].text == text
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == len(ids) == 12
    assert out.usage.prompt_tokens == responses[-1].usage.prompt_tokens
    assert out.usage.total_tokens == out.usage.prompt_tokens + 12


def test_completion_of_token_ids_equals_text_prompt(server, client, model):
    tokens = server.stub.Tokenize(pb2.TokenizeRequest(text="Once upon a time")).token_ids
    by_text = client.completions.create(model=model, prompt="Once upon a time", max_tokens=6)
    by_ids = client.completions.create(model=model, prompt=list(tokens), max_tokens=6)
    assert by_ids.choices[0].text == by_text.choices[0].text


def test_completion_with_several_prompts(server, client, model):
    prompts = ["One, two, three,", "The sky is"]
    out = client.completions.create(model=model, prompt=prompts, max_tokens=5)
    assert [c.index for c in out.choices] == [0, 1]
    for prompt, choice in zip(prompts, out.choices):
        assert choice.text == generate(server.stub, pb2.GenerateRequest(text=prompt,
                                                                        max_tokens=5))[1]
    assert out.usage.completion_tokens == 10


def test_chat_equals_direct_grpc_generate(server, client, model):
    _, text, responses = generate(server.stub, pb2.GenerateRequest(
        chat=grpc_chat(("system", SYSTEM), ("user", "What is 2 + 2?")), max_tokens=10))
    out = client.chat.completions.create(
        model=model, max_tokens=10,
        messages=[{"role": "system", "content": SYSTEM},
                  {"role": "user", "content": [{"type": "text", "text": "What is "},
                                               {"type": "text", "text": "2 + 2?"}]}])
    assert out.object == "chat.completion"
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content == text
    assert out.usage.prompt_tokens == responses[-1].usage.prompt_tokens
    assert out.usage.completion_tokens == responses[-1].usage.completion_tokens


def test_chat_without_max_tokens_runs_to_the_end(client, model):
    out = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi!"}])
    # Not cut at the server's default of 16 tokens: the model ends its turn (llama.cpp's greedy
    # answer is "Hello! How can I assist you today?" then <|im_end|>, top-2 logit gap >= 0.7
    # at every step, so a rounding difference does not make it run on).
    assert out.choices[0].finish_reason == "stop"
    assert out.usage.completion_tokens >= 1


def test_streamed_completion_adds_up_to_the_whole(client, model):
    whole = client.completions.create(model=model, prompt="Water boils at", max_tokens=10)
    chunks = list(client.completions.create(model=model, prompt="Water boils at", max_tokens=10,
                                            stream=True,
                                            stream_options={"include_usage": True}))
    text_chunks = [c for c in chunks if c.choices]
    assert len(text_chunks) >= 2
    assert "".join(c.choices[0].text for c in text_chunks) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in text_chunks][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in text_chunks[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_streamed_chat_adds_up_to_the_whole(client, model):
    messages = [{"role": "user", "content": "Name a color."}]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=8,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == \
        whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage chunk
    assert len({c.id for c in chunks}) == 1 and chunks[0].object == "chat.completion.chunk"


def test_repeated_system_prompt_is_served_from_the_cache(client, model):
    # Unique from its first token, so nothing of it is cached before the first request.
    system = f"Session {time.time_ns()}. " + SYSTEM
    first = client.chat.completions.create(
        model=model, max_tokens=2,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hi"}])
    second = client.chat.completions.create(
        model=model, max_tokens=2,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Hello"}])
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    # The system prompt spans whole 16-token blocks that the second request finds cached.
    assert second.usage.prompt_tokens_details.cached_tokens >= 32
    assert second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens


def test_stop_string_ends_the_text_before_it(client, model):
    free = client.completions.create(model=model, prompt="1, 2, 3, 4, 5,", max_tokens=12)
    text = free.choices[0].text
    stop = text.strip().split(",")[1].strip()  # a later number in the sequence
    assert stop and stop in text
    out = client.completions.create(model=model, prompt="1, 2, 3, 4, 5,", max_tokens=12,
                                    stop=[stop, "never-appears"])
    assert out.choices[0].text == text[:text.index(stop)]
    assert out.choices[0].finish_reason == "stop"


def test_n_sequences(server, client, model):
    out = client.completions.create(model=model, prompt="The best fruit is", max_tokens=6, n=3)
    assert sorted(c.index for c in out.choices) == [0, 1, 2]
    assert out.usage.completion_tokens == 18  # summed over the sequences
    single = client.completions.create(model=model, prompt="The best fruit is", max_tokens=6)
    # Greedy: every sequence is the single one.
    assert {c.text for c in out.choices} == {single.choices[0].text}
    chat = client.chat.completions.create(model=model, n=2, max_tokens=4, stream=True,
                                          stream_options={"include_usage": True},
                                          messages=[{"role": "user", "content": "Hi"}])
    chunks = list(chat)
    assert {c.choices[0].index for c in chunks if c.choices} == {0, 1}
    assert chunks[-1].usage.completion_tokens == 8


def test_sampling_parameters_reach_the_server(server, client, model):
    kwargs = dict(model=model, prompt="My favourite animal is", max_tokens=8, temperature=1.0,
                  top_p=0.95, seed=1234)
    first = client.completions.create(**kwargs)
    again = client.completions.create(**kwargs)
    assert first.choices[0].text == again.choices[0].text  # same seed, same text
    greedy = client.completions.create(model=model, prompt="My favourite animal is",
                                       max_tokens=8, temperature=0)
    assert greedy.choices[0].text == generate(server.stub, pb2.GenerateRequest(
        text="My favourite animal is", max_tokens=8))[1]


def test_logprobs(server, client, model):
    out = client.completions.create(model=model, prompt="The capital of France is",
                                    max_tokens=5, logprobs=3)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert "".join(lp.tokens) == out.choices[0].text
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0 and len(top) <= 3
        # Greedy: the chosen token is the most likely one.
        assert max(top.values()) == pytest.approx(logprob, abs=1e-5)
        assert token in top

    chat = client.chat.completions.create(model=model, max_tokens=4, logprobs=True,
                                          top_logprobs=2,
                                          messages=[{"role": "user", "content": "Hi"}])
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-5)
        assert bytes(entry.bytes) == entry.token.encode()


def test_tokenize_and_detokenize_match_the_server(server, gateway):
    text = "Hello world, this is tokenmill."
    expected = list(server.stub.Tokenize(pb2.TokenizeRequest(text=text)).token_ids)
    out = gateway.http.post("/tokenize", json={"prompt": text}).json()
    assert out["tokens"] == expected and out["count"] == len(expected)
    # vLLM's request ({"model", "tokens"} -> {"prompt"}) and llama-server's ({"tokens"} ->
    # {"content"}) both work.
    back = gateway.http.post("/detokenize",
                             json={"model": model_name(gateway), "tokens": expected}).json()
    assert back["prompt"] == text
    back = gateway.http.post("/detokenize", json={"tokens": expected}).json()
    assert back["content"] == text
    chat = gateway.http.post("/tokenize", json={
        "messages": [{"role": "user", "content": "Hi"}]}).json()
    grpc_chat_ids = server.stub.Tokenize(pb2.TokenizeRequest(
        chat=grpc_chat(("user", "Hi")))).token_ids
    assert chat["tokens"] == list(grpc_chat_ids)


def test_sixty_four_concurrent_streams_complete(server, client, model):
    prompts = [f"Tell me about the number {i}." for i in range(4)]
    expected = {p: client.chat.completions.create(
        model=model, max_tokens=8, messages=[{"role": "user", "content": p}]
    ).choices[0].message.content for p in prompts}

    def stream(i):
        p = prompts[i % len(prompts)]
        chunks = list(client.chat.completions.create(
            model=model, max_tokens=8, stream=True, messages=[{"role": "user", "content": p}]))
        return p, "".join(c.choices[0].delta.content or "" for c in chunks), \
            chunks[-1].choices[0].finish_reason

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(stream, range(64)))
    assert len(results) == 64
    for prompt, text, finish in results:
        assert finish in ("stop", "length")
        assert text == expected[prompt]  # batching does not change greedy output


def test_client_disconnect_frees_the_request_upstream(server, gateway, model):
    body = {"model": model, "prompt": "Count forever:", "max_tokens": 4000, "ignore_eos": True,
            "stream": True}
    with gateway.http.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        got = 0
        for line in lines:
            if line.startswith("data: "):
                got += 1
                if got == 3:
                    break
        server.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 1)
    # Leaving the block closed the connection mid-stream: the server aborts the request.
    samples = server.wait_for_metrics(
        lambda m: m["tokenmill:num_requests_running"] == 0 and
        m["tokenmill:request_success_total{finished_reason=abort}"] >= 1)
    assert samples["tokenmill:kv_cache_blocks_in_use"] == 0
    assert gateway.metrics()["tokenmill_gateway:backend_in_flight{backend=" +
                             backend_address(server) + "}"] == 0


def test_gateway_metrics_count_requests(gateway, client, model):
    counted = "tokenmill_gateway:requests_total{route=/v1/completions,status=200}"
    before = gateway.metrics().get(counted, 0)
    client.completions.create(model=model, prompt="Hi", max_tokens=1)
    # A request is counted once its response is written, which the client may see first.
    after = gateway.wait_for_metrics(lambda m: m.get(counted, 0) >= before + 1, timeout=5)
    assert after[counted] == before + 1
    assert after["tokenmill_gateway:request_duration_seconds_count{route=/v1/completions}"] >= 1
    assert after["tokenmill_gateway:backend_healthy{backend=" +
                 f"{gateway.args[gateway.args.index('--backend') + 1]}}}"] == 1


def test_gateway_metrics_count_each_api_under_its_own_route(gateway, model):
    # The route table labels every route: the Responses and Messages APIs are not "other".
    requests = {
        "/v1/responses": {"model": model, "input": "Hi", "max_output_tokens": 1},
        "/v1/messages": {"model": model, "max_tokens": 1,
                         "messages": [{"role": "user", "content": "Hi"}]},
        "/v1/messages/count_tokens": {"model": model,
                                      "messages": [{"role": "user", "content": "Hi"}]},
    }
    counted = {route: f"tokenmill_gateway:requests_total{{route={route},status=200}}"
               for route in requests}
    before = gateway.metrics()
    for route, body in requests.items():
        assert gateway.http.post(route, json=body).status_code == 200, route
    after = gateway.wait_for_metrics(
        lambda m: all(m.get(c, 0) >= before.get(c, 0) + 1 for c in counted.values()), timeout=5)
    for route, name in counted.items():
        assert after[name] == before.get(name, 0) + 1, route
        assert after[f"tokenmill_gateway:request_duration_seconds_count{{route={route}}}"] >= 1
    other = "tokenmill_gateway:requests_total{route=other,status=200}"
    assert after.get(other, 0) == before.get(other, 0)


def test_keep_alive_serves_many_requests_on_one_connection(gateway, model):
    # httpx keeps one connection open; the server log would show one accept per request
    # otherwise. Here: ten answers in a row on the same client.
    for _ in range(10):
        r = gateway.http.post("/v1/completions", json={"model": model, "prompt": "Hi",
                                                       "max_tokens": 1})
        assert r.status_code == 200 and r.headers.get("connection", "keep-alive") != "close"


def test_client_disconnect_while_waiting_for_a_whole_response(server, gateway, model):
    import json
    import socket
    aborted = server.metrics()["tokenmill:request_success_total{finished_reason=abort}"]
    body = json.dumps({"model": model, "prompt": "Count forever:", "max_tokens": 4000,
                       "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", gateway.port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        server.wait_for_metrics(lambda m: m["tokenmill:num_requests_running"] == 1)
    # Closed before any answer: the gateway sees the socket close and cancels upstream.
    server.wait_for_metrics(
        lambda m: m["tokenmill:num_requests_running"] == 0 and
        m["tokenmill:request_success_total{finished_reason=abort}"] == aborted + 1)
