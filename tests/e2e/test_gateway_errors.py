"""Every error status of tokenmill-gateway, in OpenAI's error shape, as the official `openai`
package sees it: 400, 401, 404, 405, 413, 429 (with Retry-After) and 503."""
import concurrent.futures

import openai
import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import Server


def error_of(response):
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


BAD_PARAMS = [
    # (request fields, param named, words of the message)
    ({"max_tokens": 0}, "max_tokens", "max_tokens must be an integer in [1,"),
    ({"max_tokens": "ten"}, "max_tokens", "max_tokens must be an integer"),
    ({"temperature": "hot"}, "temperature", "temperature must be a number"),
    ({"n": 0}, "n", "n must be an integer in [1, 16]"),
    ({"n": 17}, "n", "n must be an integer in [1, 16]"),
    ({"stop": 5}, "stop", "stop must be a string or a list of strings"),
    ({"logit_bias": {"abc": 1}}, "logit_bias", "logit_bias key 'abc' is not a token id"),
    ({"logit_bias": {"5": 500}}, "logit_bias", "values must be numbers in [-100, 100]"),
    ({"presence_penalty": 3}, "presence_penalty", "presence_penalty must be in [-2, 2]"),
    ({"logprobs": 50}, "logprobs", "logprobs must be an integer in [0, 20]"),
    ({"suffix": "x"}, "suffix", "suffix is not supported"),
    ({"prompt_logprobs": 21}, "prompt_logprobs", "prompt_logprobs must be an integer in [0, 20]"),
    ({"best_of": 17}, "best_of", "best_of must be an integer in [1, 16]"),
    ({"best_of": 1, "n": 2}, "best_of", "best_of = 1 must be at least n = 2"),
    ({"best_of": 3, "stream": True}, "best_of", "best_of cannot be used with stream"),
    ({"frobnicate": 1}, "frobnicate", "Unrecognized request argument supplied: frobnicate"),
    ({"stream_options": {"include_usage": True}}, "stream_options",
     "stream_options is only allowed with stream: true"),
    ({"prompt": {"text": "x"}}, "prompt", "prompt must be a string"),
    # Refused by the server (the prompt plus max_tokens exceeds the context); its message
    # comes through.
    ({"max_tokens": 100000}, None, "exceeds this server's limit"),
    ({"prompt": [1, 49152]}, "prompt", "outside the vocabulary"),
    ({"prompt": [1, 49152], "echo": True}, "prompt", "outside the vocabulary"),
]


@pytest.mark.parametrize("fields,param,words", BAD_PARAMS,
                         ids=[str(list(f)[0]) + "-" + str(i) for i, (f, _, _) in
                              enumerate(BAD_PARAMS)])
def test_bad_completion_parameters_are_400_naming_them(gateway, model, fields, param, words):
    body = {"model": model, "prompt": "Hi", "max_tokens": 2, **fields}
    response = gateway.http.post("/v1/completions", json=body)
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert words in error["message"]


def test_bad_chat_parameters_are_400(gateway, model):
    cases = [
        ({"messages": []}, "messages", "messages must be a non-empty list"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages", "wizard"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
         "messages", "only parts {\"type\": \"text\""),
        ({"response_format": {"type": "json_schema"}}, "response_format",
         "response_format.json_schema must be an object"),
        ({"top_logprobs": 2}, "top_logprobs", "top_logprobs needs logprobs: true"),
        ({"tools": "nope"}, "tools", "tools must be a list"),
        ({"audio": {}}, "audio", "Unrecognized request argument supplied: audio"),
    ]
    for fields, param, words in cases:
        body = {"model": model, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 2, **fields}
        response = gateway.http.post("/v1/chat/completions", json=body)
        assert response.status_code == 400, (fields, response.text)
        error = error_of(response)
        assert error["param"] == param, fields
        assert words in error["message"], fields


def test_openai_client_sees_bad_request_with_its_param(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt="Hi", max_tokens=2,
                                  extra_body={"mirostat": 2})
    assert e.value.status_code == 400
    assert e.value.param == "mirostat"


def test_bad_json_is_400(gateway):
    response = gateway.http.post("/v1/completions", content=b"{not json",
                                 headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert "not valid JSON" in error_of(response)["message"]
    response = gateway.http.post("/v1/chat/completions", json=[1, 2])
    assert response.status_code == 400


def test_unknown_model_and_route_are_404(gateway, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="no-such-model", prompt="Hi", max_tokens=1)
    assert e.value.code == "model_not_found" and e.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    response = gateway.http.post("/v1/no-such-route", json={"input": "x"})
    assert response.status_code == 404
    assert error_of(response)["code"] == "unknown_route"
    assert gateway.http.get("/nowhere").status_code == 404


def test_wrong_method_is_405(gateway):
    response = gateway.http.get("/v1/completions")
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"
    assert gateway.http.post("/v1/models").status_code == 405


def test_api_key_is_required_when_set(server):
    with Gateway(backend_address(server), env={"TOKENMILL_GATEWAY_API_KEY": "s3cret"}) as g:
        model = model_name_with_key(g, "s3cret")
        for key in ("wrong", "s3cre", "s3cret-and-more"):
            with pytest.raises(openai.AuthenticationError) as e:
                g.client(api_key=key).completions.create(model=model, prompt="Hi", max_tokens=1)
            assert e.value.status_code == 401
        response = g.http.post("/v1/completions", json={"model": model, "prompt": "Hi"})
        assert response.status_code == 401
        assert error_of(response)["type"] == "authentication_error"
        out = g.client(api_key="s3cret").completions.create(model=model, prompt="Hi",
                                                            max_tokens=1)
        assert out.usage.completion_tokens == 1
        # Health and metrics stay open for probes and scrapers.
        assert g.http.get("/health").status_code == 200
        assert g.http.get("/metrics").status_code == 200
        # The key never reaches the log.
        assert "s3cret" not in g.log_text()


def model_name_with_key(gateway, key):
    return gateway.client(api_key=key).models.list().data[0].id


def test_body_over_the_limit_is_413(server):
    with Gateway(backend_address(server), extra_args=["--max-body-size", "1KiB"]) as g:
        model = model_name(g)
        with pytest.raises(openai.APIStatusError) as e:
            g.client().completions.create(model=model, prompt="word " * 400, max_tokens=1)
        assert e.value.status_code == 413
        assert e.value.code == "request_too_large"
        # Just under the limit is fine.
        out = g.client().completions.create(model=model, prompt="word " * 100, max_tokens=1)
        assert out.usage.completion_tokens == 1


def test_full_server_queue_is_429_with_retry_after():
    with Server("--max-num-seqs", "1", "--max-queue", "1") as small:
        with Gateway(backend_address(small)) as g:
            model = model_name(g)
            body = {"model": model, "prompt": "Count:", "max_tokens": 64, "ignore_eos": True}

            def post(_):
                return g.http.post("/v1/completions", json=body)

            with concurrent.futures.ThreadPoolExecutor(6) as pool:
                responses = list(pool.map(post, range(6)))
            statuses = sorted(r.status_code for r in responses)
            assert 200 in statuses and 429 in statuses, statuses
            refused = next(r for r in responses if r.status_code == 429)
            assert refused.headers["retry-after"] == "1"
            error = error_of(refused)
            assert error["type"] == "rate_limit_error"
            with pytest.raises(openai.RateLimitError):
                # The openai client without retries sees the same.
                with concurrent.futures.ThreadPoolExecutor(6) as pool:
                    list(pool.map(lambda _: g.client().completions.create(
                        model=model, prompt="Count:", max_tokens=64,
                        extra_body={"ignore_eos": True}), range(6)))


def test_no_ready_backend_is_503():
    # Nothing listens on port 9 (discard): the backend never passes its health check.
    with Gateway("127.0.0.1:9", wait_ready=False) as g:
        assert g.http.get("/health").status_code == 503
        with pytest.raises(openai.InternalServerError) as e:
            g.client().completions.create(model="any", prompt="Hi", max_tokens=1)
        assert e.value.status_code == 503
        response = g.http.post("/v1/chat/completions",
                               json={"messages": [{"role": "user", "content": "Hi"}]})
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        assert error_of(response)["code"] == "no_backend"


def test_bad_flags_fail_at_start():
    import subprocess
    from gateway_harness import GATEWAY_BIN
    out = subprocess.run([str(GATEWAY_BIN), "--backend", "nocolon"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0 and "--backend 'nocolon' is not host:port" in out.stderr
    out = subprocess.run([str(GATEWAY_BIN), "--backend", "127.0.0.1:1", "--max-body-size",
                          "lots"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "--max-body-size" in out.stderr
