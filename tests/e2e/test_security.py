"""Security defaults of both binaries (issue 12): loopback unless told otherwise, limits on
what one request may ask for, no model path taken from a request, and no prompt text or API
key in the logs at the default (info) level."""
import grpc
import pytest

from gateway_harness import Gateway, backend_address, model_name
from server_harness import TINY_MODEL, Server, generate, pb2

SECRET_PROMPT = "my card is 4111-1111-1111-1111 zebra-quartz-7781"
SECRET_KEY = "tm-key-Xq81-never-logged"


@pytest.fixture(scope="module")
def server():
    with Server(log_level="info") as s:
        yield s


@pytest.fixture(scope="module")
def gateway(server):
    with Gateway(backend_address(server), log_level="info",
                 env={"TOKENMILL_GATEWAY_API_KEY": SECRET_KEY}) as g:
        yield g


def listening_addresses(port):
    """Local addresses of the sockets listening on `port`, from /proc/net/tcp and tcp6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                local, state = line.split()[1], line.split()[3]
                address, local_port = local.split(":")
                if state == "0A" and int(local_port, 16) == port:  # 0A: LISTEN
                    found.append(address)
    return found


def test_both_binaries_listen_on_loopback_only_by_default(server, gateway):
    # Neither harness passes --host: these are the binaries' defaults.
    assert "--host" not in server.args and "--host" not in gateway.args
    assert server.wait_for_log(r"listening on 127\.0\.0\.1:\d+ \(gRPC\)")
    assert gateway.wait_for_log(r"listening on http://127\.0\.0\.1:\d+ ")
    # 127.0.0.1 as /proc/net/tcp writes it, also as an IPv4-mapped IPv6 address (gRPC's
    # sockets); 0.0.0.0 or :: would be all zeros.
    loopback = {"0100007F", "0000000000000000FFFF00000100007F"}
    for port in (server.port, server.metrics_port, gateway.port):
        addresses = listening_addresses(port)
        assert addresses and set(addresses) <= loopback, (port, addresses)


def test_metrics_host_opens_only_the_metrics_port():
    """--metrics-host 0.0.0.0 (deploy/kubernetes/): Prometheus reaches the metrics, gRPC stays
    on loopback."""
    with Server("--metrics-host", "0.0.0.0", wait_ready=False) as s:
        assert s.wait_for_log(r"metrics on http://0\.0\.0\.0:\d+/metrics")
        loopback = {"0100007F", "0000000000000000FFFF00000100007F"}
        assert set(listening_addresses(s.port)) <= loopback
        assert set(listening_addresses(s.metrics_port)) == {"00000000"}


def test_no_request_names_a_model_file_to_load(server, gateway):
    # gRPC: no field of any request message can carry a path or file name; GenerateRequest's
    # `model` only picks among the names the server loaded at startup (a LoRA adapter's).
    def names(descriptor, seen):
        if descriptor.full_name in seen:
            return []
        seen.add(descriptor.full_name)
        out = []
        for field in descriptor.fields:
            out.append(field.name)
            if field.message_type is not None:
                out += names(field.message_type, seen)
        return out

    for message in (pb2.GenerateRequest, pb2.TokenizeRequest, pb2.DetokenizeRequest,
                    pb2.GetModelInfoRequest, pb2.EmbedRequest, pb2.RerankRequest):
        fields = [f for f in names(message.DESCRIPTOR, set()) if f != "model"]
        assert not [f for f in fields if "model" in f or "path" in f or "file" in f], fields
    for name in (str(TINY_MODEL), "../models/" + TINY_MODEL.name):
        with pytest.raises(grpc.RpcError) as e:
            list(server.stub.Generate(pb2.GenerateRequest(text="Hi", max_tokens=1, model=name),
                                      metadata=[("authorization", f"Bearer {SECRET_KEY}")]))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # HTTP: a model named by path is an unknown model, and the file is never opened.
    for name in (str(TINY_MODEL), "../models/" + TINY_MODEL.name, "file://" + str(TINY_MODEL)):
        response = gateway.http.post(
            "/v1/completions", json={"model": name, "prompt": "Hi", "max_tokens": 1},
            headers={"authorization": f"Bearer {SECRET_KEY}"})
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "model_not_found"
    with open(f"/proc/{server.proc.pid}/maps") as maps:
        assert TINY_MODEL.name not in maps.read()


def test_limits_on_prompts_and_body_size_by_default(gateway):
    auth = {"authorization": f"Bearer {SECRET_KEY}"}
    model = model_name_with_key(gateway)
    response = gateway.http.post("/v1/completions", headers=auth,
                                 json={"model": model, "prompt": ["Hi"] * 65, "max_tokens": 1})
    assert response.status_code == 400
    assert "at most 64 prompts per request" in response.json()["error"]["message"]
    response = gateway.http.post("/v1/completions", headers=auth,
                                 json={"model": model, "n": 129, "prompt": "Hi"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "n"
    # The default --max-body-size is 8 MiB.
    body = b'{"prompt": "' + b"a" * (8 * 1024 * 1024) + b'"}'
    response = gateway.http.post("/v1/completions", headers={**auth,
                                 "content-type": "application/json"}, content=body)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def model_name_with_key(gateway):
    return gateway.client(api_key=SECRET_KEY).models.list().data[0].id


def test_no_prompt_text_or_api_key_in_the_logs_at_info_level(server, gateway):
    client = gateway.client(api_key=SECRET_KEY)
    model = model_name_with_key(gateway)
    out = client.completions.create(model=model, prompt=SECRET_PROMPT, max_tokens=2)
    assert out.usage.completion_tokens == 2
    chat = client.chat.completions.create(
        model=model, max_tokens=2, messages=[{"role": "user", "content": SECRET_PROMPT}])
    assert chat.usage.completion_tokens == 2
    # Refused requests too: a bad parameter, a wrong key, a bad gRPC request.
    bad = gateway.http.post("/v1/completions", json={"model": model, "prompt": SECRET_PROMPT,
                                                     "max_tokens": 0},
                            headers={"authorization": f"Bearer {SECRET_KEY}"})
    assert bad.status_code == 400
    wrong_key = gateway.http.post("/v1/completions", json={"prompt": SECRET_PROMPT},
                                  headers={"authorization": f"Bearer {SECRET_KEY}x"})
    assert wrong_key.status_code == 401
    ids, _, _ = generate(server.stub, pb2.GenerateRequest(text=SECRET_PROMPT, max_tokens=2))
    assert len(ids) == 2
    with pytest.raises(Exception):
        generate(server.stub, pb2.GenerateRequest(text=SECRET_PROMPT, max_tokens=0))
    logs = server.log_text() + "\n" + gateway.log_text()
    assert "listening on" in logs  # the logs were read
    for secret in ("zebra-quartz", "4111-1111", SECRET_KEY, "Xq81"):
        assert secret not in logs, secret


def test_grpc_limits_on_message_size_and_prompt_tokens(server):
    # gRPC's default 4 MiB receive limit stands in front of the tokenizer.
    with pytest.raises(grpc.RpcError) as error:
        generate(server.stub, pb2.GenerateRequest(text="word " * (1 << 20), max_tokens=1))
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Under it, a prompt longer than the context is refused after tokenizing, not run.
    with pytest.raises(grpc.RpcError) as error:
        generate(server.stub, pb2.GenerateRequest(text="word " * (1 << 18), max_tokens=1))
    assert error.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert "this server's limit is 8192 tokens" in error.value.details()
