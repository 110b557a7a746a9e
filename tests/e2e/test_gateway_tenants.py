"""Tenants in tokenmill-gateway, as two tenants and an attacker would meet them through the
official `openai` client: keys from --api-key-file name tenants (re-read on SIGHUP), a stored
response is its tenant's only (the attacker, even knowing its id, can neither read, list,
continue nor delete it), response ids are not guessable, a priority ahead of the default needs
a key marked `priority`, per-tenant limits answer 429, and every backend call names the
tenant (x-tokenmill-tenant) with the backend key, never the client's key: checked on a
recording gRPC backend, since what the server does with the tenant is the server's part."""
import re
import signal
import subprocess
import threading
import time
from concurrent import futures

import grpc
import httpx2 as httpx
import openai
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gateway_harness import GATEWAY_BIN, Gateway, backend_address
from process_harness import START_TIMEOUT_S
from server_harness import Server, pb2, pb2_grpc

BACKEND_KEY = "backend-secret-0123456789"
KEY_A = "sk-team-a-0123456789abcdef"
KEY_B = "sk-team-b-0123456789abcdef"
KEY_ATTACKER = "sk-attacker-0123456789abcd"
KEYS = (f"# two tenants and a stranger\n{KEY_A} team-a\n"
        f"{KEY_B} team-b priority max-concurrent=2  # its own limit\n{KEY_ATTACKER} mallory\n")


def write_keys(path, text):
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    return write_keys(tmp_path_factory.mktemp("keys") / "keys.txt", KEYS)


@pytest.fixture(scope="module")
def server():
    # The server takes calls with the gateway's backend key only.
    with Server("--api-key", BACKEND_KEY) as s:
        yield s


@pytest.fixture(scope="module")
def gateway(server, key_file):
    with Gateway(backend_address(server),
                 extra_args=["--api-key-file", key_file, "--backend-api-key", BACKEND_KEY]) as g:
        yield g


@pytest.fixture(scope="module")
def model(gateway):
    return gateway.client(KEY_A).models.list().data[0].id


def sighup_and_wait(gateway, pattern):
    """Sends SIGHUP and waits for the one more log line matching `pattern` it causes."""
    regex = re.compile(pattern)
    before = sum(1 for line in gateway.log_text().splitlines() if regex.search(line))
    gateway.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + START_TIMEOUT_S
    while sum(1 for line in gateway.log_text().splitlines() if regex.search(line)) == before:
        assert time.monotonic() < deadline, "no reload logged:\n" + gateway.log_text()
        time.sleep(0.05)


def test_each_key_is_its_tenant_and_others_are_refused(gateway, model):
    for key in (KEY_A, KEY_B, KEY_ATTACKER):
        out = gateway.client(key).chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        assert out.choices[0].message.content is not None
    for key in ("sk-not-a-key-0123456789", KEY_A + "x", KEY_A[:-1], BACKEND_KEY):
        with pytest.raises(openai.AuthenticationError):
            gateway.client(key).models.list()


def test_the_attacker_cannot_read_continue_or_delete_a_response_of_team_a(gateway, model):
    team_a, attacker = gateway.client(KEY_A), gateway.client(KEY_ATTACKER)
    secret = team_a.responses.create(model=model, input="My PIN is 4711. Say OK.",
                                     max_output_tokens=4)
    assert team_a.responses.retrieve(secret.id).id == secret.id

    def refusals(client, response_id):
        """What each way in answers for `response_id`: status and error body."""
        out = []
        for call in (lambda: client.responses.retrieve(response_id),
                     lambda: client.responses.input_items.list(response_id),
                     lambda: client.responses.create(model=model, input="What is my PIN?",
                                                     previous_response_id=response_id,
                                                     max_output_tokens=4),
                     lambda: client.responses.delete(response_id)):
            with pytest.raises(openai.APIStatusError) as refused:
                call()
            body = refused.value.response.json()
            out.append((refused.value.status_code,
                        body["error"]["message"].replace(response_id, "ID"),
                        body["error"]["code"], body["error"]["param"]))
        return out

    seen_by_attacker = refusals(attacker, secret.id)
    # The same answers as for an id that was never stored: nothing tells the attacker it exists.
    never_stored = "resp-" + "0" * 32
    assert seen_by_attacker == refusals(attacker, never_stored)
    assert [status for status, *_ in seen_by_attacker] == [404, 404, 404, 404]
    # Team b, a tenant with a key of its own, sees no more.
    assert refusals(gateway.client(KEY_B), secret.id) == seen_by_attacker
    # Still team a's, whole.
    assert team_a.responses.retrieve(secret.id).output_text == secret.output_text
    assert team_a.responses.input_items.list(secret.id).data
    follow_up = team_a.responses.create(model=model, input="And again?",
                                        previous_response_id=secret.id, max_output_tokens=2)
    assert follow_up.usage.input_tokens > secret.usage.input_tokens
    assert team_a.responses.delete(secret.id) is None
    with pytest.raises(openai.NotFoundError):
        team_a.responses.retrieve(secret.id)


def test_response_ids_are_not_guessable_from_another(server):
    # Whatever the keys: here a gateway that needs none.
    with Gateway(backend_address(server), extra_args=["--backend-api-key", BACKEND_KEY]) as g:
        ids = response_ids(g.client(), g.client().models.list().data[0].id)
    for earlier, later in zip(ids, ids[1:]):
        assert later.startswith("resp-")
        random_part = later.split("-", 1)[1]
        assert re.fullmatch(r"[0-9a-f]{32}", random_part), later  # 128 bits
        # A counter's ids share all but their last digits; random ones share about 1 in 16.
        same = sum(a == b for a, b in zip(earlier.split("-", 1)[1], random_part))
        assert same < 16, (earlier, later)


def response_ids(client, model):
    return [client.responses.create(model=model, input="Hi", max_output_tokens=1,
                                    store=False).id for _ in range(3)]


def test_a_priority_ahead_of_the_default_needs_a_marked_key(gateway, model):
    ask = dict(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        gateway.client(KEY_A).chat.completions.create(**ask, extra_body={"priority": -1})
    assert refused.value.status_code == 403
    message = refused.value.response.json()["error"]["message"]
    assert "--api-key-file" in message and "'priority'" in message, message
    with pytest.raises(openai.PermissionDeniedError):
        gateway.client(KEY_ATTACKER).completions.create(model=model, prompt="Hi", max_tokens=2,
                                                        extra_body={"priority": -5})
    # The marked key passes it on; anyone may ask to run after the default.
    assert gateway.client(KEY_B).chat.completions.create(**ask, extra_body={"priority": -1})
    assert gateway.client(KEY_A).chat.completions.create(**ask, extra_body={"priority": 3})


def test_sighup_rereads_the_key_file_and_a_bad_one_keeps_the_keys(gateway, key_file, model):
    new_key = "sk-team-c-0123456789abcdef"
    with pytest.raises(openai.AuthenticationError):
        gateway.client(new_key).models.list()
    try:
        write_keys(key_file, KEYS + f"{new_key} team-c\n")
        sighup_and_wait(gateway, r"SIGHUP: re-read .*: 4 key\(s\)")
        assert gateway.client(new_key).models.list().data
        # A broken file: the log names its line, and every key of the last good one works.
        write_keys(key_file, KEYS + "broken-line\n")
        sighup_and_wait(gateway, r"SIGHUP: keeping the previous keys: .*line 5")
        assert gateway.client(new_key).models.list().data
        assert gateway.client(KEY_A).models.list().data
    finally:
        write_keys(key_file, KEYS)
        sighup_and_wait(gateway, r"SIGHUP: re-read .*: 3 key\(s\)")
    with pytest.raises(openai.AuthenticationError):
        gateway.client(new_key).models.list()


def test_a_malformed_key_file_stops_the_start_naming_the_line(server, tmp_path):
    bad = write_keys(tmp_path / "bad.txt", f"{KEY_A} team-a\n\n{KEY_B} team/b\n")
    done = subprocess.run([str(GATEWAY_BIN), "--port", "0", "--backend", backend_address(server),
                           "--api-key-file", str(bad), "--backend-api-key", BACKEND_KEY],
                          capture_output=True, text=True, timeout=START_TIMEOUT_S)
    assert done.returncode == 1
    assert "line 3" in done.stderr and "tenant name" in done.stderr, done.stderr


@pytest.fixture(scope="module")
def limited_gateway(server, key_file):
    with Gateway(backend_address(server),
                 extra_args=["--api-key-file", key_file, "--backend-api-key", BACKEND_KEY,
                             "--tenant-max-concurrent", "1",
                             "--tenant-tokens-per-minute", "600"]) as g:
        yield g


def test_a_tenant_over_its_requests_in_flight_gets_429_and_others_do_not(limited_gateway,
                                                                        model):
    # --tenant-max-concurrent 1; team b's line says max-concurrent=2.
    team_a, team_b = limited_gateway.client(KEY_A), limited_gateway.client(KEY_B)
    ask = dict(model=model, messages=[{"role": "user", "content": "Count to a thousand."}])
    # Held open: the stream's headers came, its tokens are not read.
    stream = team_a.chat.completions.create(**ask, max_tokens=300, stream=True,
                                            extra_body={"ignore_eos": True})
    try:
        with pytest.raises(openai.RateLimitError) as refused:
            team_a.chat.completions.create(**ask, max_tokens=1)
        message = refused.value.response.json()["error"]["message"]
        assert "--tenant-max-concurrent (1)" in message and "team-a" in message, message
        assert refused.value.response.headers["retry-after"] == "1"
        # Team b is not held back by team a, and its line in the key file allows it two.
        stream_b = team_b.chat.completions.create(**ask, max_tokens=300, stream=True,
                                                  extra_body={"ignore_eos": True})
        try:
            assert team_b.chat.completions.create(**ask, max_tokens=1).choices
        finally:
            stream_b.close()
    finally:
        stream.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:  # the closed stream frees its slot once the gateway sees it gone
        try:
            team_a.chat.completions.create(**ask, max_tokens=1)
            break
        except openai.RateLimitError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_a_tenant_over_its_tokens_a_minute_gets_429_with_retry_after(limited_gateway, model):
    attacker, team_b = limited_gateway.client(KEY_ATTACKER), limited_gateway.client(KEY_B)
    ask = dict(model=model, messages=[{"role": "user", "content": "Hi"}])
    # 600 a minute: max_tokens 500 is reserved, then the next 500 do not fit.
    attacker.chat.completions.create(**ask, max_tokens=500, extra_body={"ignore_eos": True})
    with pytest.raises(openai.RateLimitError) as refused:
        attacker.chat.completions.create(**ask, max_tokens=500)
    message = refused.value.response.json()["error"]["message"]
    assert "--tenant-tokens-per-minute is 600" in message, message
    assert int(refused.value.response.headers["retry-after"]) >= 1
    # Anthropic's route answers in its dialect.
    response = httpx.post(f"{limited_gateway.url}/v1/messages", timeout=60,
                          headers={"x-api-key": KEY_ATTACKER, "anthropic-version": "2023-06-01"},
                          json={"model": model, "max_tokens": 500,
                                "messages": [{"role": "user", "content": "Hi"}]})
    assert response.status_code == 429
    assert response.json()["error"]["type"] == "rate_limit_error"
    assert int(response.headers["retry-after"]) >= 1
    # Team b's bucket is its own (the test above used some of it).
    assert team_b.chat.completions.create(**ask, max_tokens=100).choices


class RecordingBackend(pb2_grpc.InferenceServicer):
    """A gRPC backend that answers like a tiny tokenmill-server and keeps every call's
    metadata, to see what the gateway sends."""

    def __init__(self):
        self.calls = []  # (method, {metadata key: value})
        self.lock = threading.Lock()

    def record(self, method, context):
        with self.lock:
            self.calls.append((method, dict(context.invocation_metadata())))

    def GetModelInfo(self, request, context):
        return pb2.ModelInfo(name="recorder", architecture="llama", context_length=256,
                             max_model_len=256, vocab_size=100, kv_block_size=16,
                             num_kv_blocks=16, has_chat_template=True)

    def Generate(self, request, context):
        self.record("Generate", context)
        yield pb2.GenerateResponse(request_id=request.request_id, token_ids=[5, 6], text="ok",
                                   finish_reason=pb2.FINISH_REASON_STOP,
                                   usage=pb2.Usage(prompt_tokens=3, completion_tokens=2))

    def Tokenize(self, request, context):
        self.record("Tokenize", context)
        return pb2.TokenizeResponse(token_ids=[1, 2, 3], prompt="p")

    def Detokenize(self, request, context):
        self.record("Detokenize", context)
        return pb2.DetokenizeResponse(text="t")


@pytest.fixture(scope="module")
def recorder():
    backend = RecordingBackend()
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb2_grpc.add_InferenceServicer_to_server(backend, grpc_server)
    health_servicer = health.HealthServicer()
    health_servicer.set("tokenmill.v1.Inference", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    backend.address = f"127.0.0.1:{port}"
    yield backend
    grpc_server.stop(0)


def test_every_backend_call_names_the_tenant_with_the_backend_key(recorder, key_file):
    with Gateway(recorder.address, extra_args=["--api-key-file", key_file,
                                               "--backend-api-key", BACKEND_KEY]) as gateway:
        team_a = gateway.client(KEY_A)
        team_a.chat.completions.create(model="recorder", max_tokens=2,
                                       messages=[{"role": "user", "content": "Hi"}])
        team_a.completions.create(model="recorder", prompt=["one", "two"], max_tokens=2)
        gateway.client(KEY_B).responses.create(model="recorder", input="Hi",
                                               max_output_tokens=2)
        headers = {"authorization": f"Bearer {KEY_ATTACKER}"}
        assert gateway.http.post("/tokenize", headers=headers,
                                 json={"model": "recorder", "prompt": "Hi"}).status_code == 200
        assert gateway.http.post("/detokenize", headers=headers,
                                 json={"model": "recorder", "tokens": [1]}).status_code == 200
    calls = [(method, metadata.get("x-tokenmill-tenant")) for method, metadata in recorder.calls]
    assert calls == [("Generate", "team-a"), ("Generate", "team-a"), ("Generate", "team-a"),
                     ("Generate", "team-b"), ("Tokenize", "mallory"), ("Detokenize", "mallory")]
    for _, metadata in recorder.calls:
        assert metadata["authorization"] == f"Bearer {BACKEND_KEY}"
        for value in metadata.values():  # the client's key never travels on
            for key in (KEY_A, KEY_B, KEY_ATTACKER):
                assert key not in str(value)
