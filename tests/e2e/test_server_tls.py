"""tokenmill-server's gRPC port with TLS (--tls-cert, --tls-key), mutual TLS (--tls-client-ca)
and an API key (--api-key), driven by grpcio, tokenmill-health and tokenmill-gateway
(--backend-tls-*, --backend-api-key) with certificates from a CA this test makes with openssl:
the right credentials are served, a wrong or missing one is refused (UNAUTHENTICATED for the
key, no handshake for TLS) and touches nothing."""

import os
import subprocess
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway_harness import Gateway, backend_address, model_name
from pki_harness import make_pki
from process_harness import EXIT_TIMEOUT_S, RPC_TIMEOUT_S
from server_harness import BIN_DIR, DEFAULT_MODEL, SERVER_BIN, Server, pb2, pb2_grpc

API_KEY = "tm-test-key-1b2c3d"
PROBE = BIN_DIR / "tokenmill-health"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def read(path):
    return path.read_bytes()


def secure_channel(server, pki, client=None):
    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(pki / "ca.crt"),
        private_key=read(pki / f"{client}.key") if client else None,
        certificate_chain=read(pki / f"{client}.crt") if client else None)
    return grpc.secure_channel(f"127.0.0.1:{server.port}", credentials)


def with_key(key):
    return [("authorization", f"Bearer {key}")]


def untouched(samples):
    """What a served call changes in the server's metrics."""
    return {name: value for name, value in samples.items()
            if name.startswith(("tokenmill:prompt_tokens_total", "tokenmill:request_success_total",
                                "tokenmill:prefix_cache_queries_total",
                                "tokenmill:e2e_request_latency_seconds_count"))}


def tls_args(pki):
    return ["--tls-cert", pki / "server.crt", "--tls-key", pki / "server.key"]


@pytest.fixture(scope="module")
def tls_server(pki):
    with Server(*tls_args(pki), env={"TOKENMILL_API_KEY": API_KEY}) as server:
        yield server


def test_tls_with_the_key_is_served(tls_server, pki):
    assert tls_server.wait_for_log(r"\(gRPC\) over TLS, API key required")
    with secure_channel(tls_server, pki) as channel:
        stub = pb2_grpc.InferenceStub(channel)
        info = stub.GetModelInfo(pb2.GetModelInfoRequest(), metadata=with_key(API_KEY),
                                 timeout=RPC_TIMEOUT_S)
        assert info.vocab_size > 0
        responses = list(stub.Generate(pb2.GenerateRequest(text="Hello", max_tokens=3),
                                       metadata=with_key(API_KEY), timeout=RPC_TIMEOUT_S))
        assert sum(len(r.token_ids) for r in responses) == 3


@pytest.mark.parametrize("metadata", [[], with_key("wrong"), [("authorization", API_KEY)],
                                      [("authorization", f"Basic {API_KEY}")]])
def test_a_missing_or_wrong_key_is_unauthenticated_and_touches_nothing(tls_server, pki,
                                                                         metadata):
    before = untouched(tls_server.metrics())
    with secure_channel(tls_server, pki) as channel:
        stub = pb2_grpc.InferenceStub(channel)
        calls = [
            lambda: stub.GetModelInfo(pb2.GetModelInfoRequest(), metadata=metadata,
                                      timeout=RPC_TIMEOUT_S),
            lambda: stub.Tokenize(pb2.TokenizeRequest(text="Hello"), metadata=metadata,
                                  timeout=RPC_TIMEOUT_S),
            lambda: stub.Detokenize(pb2.DetokenizeRequest(token_ids=[1]), metadata=metadata,
                                    timeout=RPC_TIMEOUT_S),
            lambda: list(stub.Generate(pb2.GenerateRequest(text="Hello", max_tokens=3),
                                       metadata=metadata, timeout=RPC_TIMEOUT_S)),
        ]
        for call in calls:
            with pytest.raises(grpc.RpcError) as error:
                call()
            assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "authorization: Bearer" in error.value.details()
    assert untouched(tls_server.metrics()) == before
    assert API_KEY not in tls_server.log_text()


def test_health_needs_no_key(tls_server, pki):
    """The probes' service stays open (tokenmill-health sends no key)."""
    with secure_channel(tls_server, pki) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        status = stub.Check(health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT_S).status
        assert status == health_pb2.HealthCheckResponse.SERVING


def probe(server, *args):
    return subprocess.run([str(PROBE), f"127.0.0.1:{server.port}", *map(str, args)],
                          capture_output=True, text=True, timeout=EXIT_TIMEOUT_S)


def test_tokenmill_health_probes_over_tls(tls_server, pki):
    served = probe(tls_server, "--tls-ca", pki / "ca.crt")
    assert (served.returncode, served.stdout) == (0, "SERVING\n")
    assert probe(tls_server).returncode == 1  # plaintext to a TLS port
    assert probe(tls_server, "--tls-ca", pki / "other-ca.crt").returncode == 1
    named = probe(tls_server, "--tls-ca", pki / "ca.crt", "--tls-server-name", "localhost")
    assert named.returncode == 0
    wrong_name = probe(tls_server, "--tls-ca", pki / "ca.crt", "--tls-server-name", "example.org")
    assert wrong_name.returncode == 1
    half = probe(tls_server, "--tls-ca", pki / "ca.crt", "--tls-cert", pki / "client.crt")
    assert half.returncode != 0 and "--tls-key" in half.stderr


def test_plaintext_and_unknown_ca_clients_get_no_connection(tls_server, pki):
    with grpc.insecure_channel(f"127.0.0.1:{tls_server.port}") as channel:
        with pytest.raises(grpc.RpcError) as error:
            pb2_grpc.InferenceStub(channel).GetModelInfo(
                pb2.GetModelInfoRequest(), metadata=with_key(API_KEY), timeout=10)
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    other = grpc.ssl_channel_credentials(root_certificates=read(pki / "other-ca.crt"))
    with grpc.secure_channel(f"127.0.0.1:{tls_server.port}", other) as channel:
        with pytest.raises(grpc.RpcError) as error:
            pb2_grpc.InferenceStub(channel).GetModelInfo(
                pb2.GetModelInfoRequest(), metadata=with_key(API_KEY), timeout=10)
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_needs_a_client_certificate_from_the_ca(pki):
    with Server(*tls_args(pki), "--tls-client-ca", pki / "ca.crt") as server:
        assert server.wait_for_log(r"\(gRPC\) over mutual TLS;")
        with secure_channel(server, pki, client="client") as channel:
            info = pb2_grpc.InferenceStub(channel).GetModelInfo(pb2.GetModelInfoRequest(),
                                                                timeout=RPC_TIMEOUT_S)
            assert info.vocab_size > 0
        mutual = probe(server, "--tls-ca", pki / "ca.crt", "--tls-cert", pki / "client.crt",
                       "--tls-key", pki / "client.key")
        assert mutual.returncode == 0, mutual.stdout
        assert probe(server, "--tls-ca", pki / "ca.crt").returncode == 1
        for client in (None, "stranger"):
            with secure_channel(server, pki, client=client) as channel:
                with pytest.raises(grpc.RpcError) as error:
                    pb2_grpc.InferenceStub(channel).GetModelInfo(pb2.GetModelInfoRequest(),
                                                                 timeout=10)
                assert error.value.code() == grpc.StatusCode.UNAVAILABLE, client


def test_the_key_alone_works_in_plaintext():
    with Server("--api-key", API_KEY) as server:
        with pytest.raises(grpc.RpcError) as error:
            server.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=RPC_TIMEOUT_S)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        responses = list(server.stub.Generate(pb2.GenerateRequest(text="Hi", max_tokens=2),
                                              metadata=with_key(API_KEY),
                                              timeout=RPC_TIMEOUT_S))
        assert sum(len(r.token_ids) for r in responses) == 2


def run_server(*args):
    return subprocess.run([str(SERVER_BIN), "--model", str(DEFAULT_MODEL), "--port", "0",
                           "--metrics-port", "-1", *map(str, args)], capture_output=True,
                          text=True, timeout=EXIT_TIMEOUT_S, stdin=subprocess.DEVNULL,
                          env=os.environ)


@pytest.mark.parametrize("args,message", [
    (lambda p: ["--tls-cert", p / "server.crt"], "needs both --tls-cert and --tls-key"),
    (lambda p: ["--tls-client-ca", p / "ca.crt"], "--tls-client-ca needs --tls-cert"),
    (lambda p: ["--tls-cert", p / "server.ext", "--tls-key", p / "server.key"],
     "--tls-cert"),
    (lambda p: ["--tls-cert", p / "server.crt", "--tls-key", p / "client.key"],
     "--tls-key is not the key of --tls-cert"),
])
def test_bad_tls_flags_fail_fast_with_a_message(pki, args, message):
    result = run_server(*args(pki))
    assert result.returncode != 0
    assert message in result.stderr


def test_gateway_reaches_a_tls_server_with_its_key(tls_server, pki):
    with Gateway(backend_address(tls_server), extra_args=[
            "--backend-tls-ca", pki / "ca.crt", "--backend-tls-server-name", "localhost"],
            env={"TOKENMILL_GATEWAY_BACKEND_API_KEY": API_KEY}) as gateway:
        client = gateway.client()
        completion = client.completions.create(model=model_name(gateway), prompt="Hello",
                                               max_tokens=3)
        assert completion.usage.completion_tokens == 3
        assert API_KEY not in gateway.log_text()


@pytest.mark.parametrize("extra_args,env", [
    (lambda p: [], {"TOKENMILL_GATEWAY_BACKEND_API_KEY": API_KEY}),  # plaintext to TLS
    (lambda p: ["--backend-tls-ca", p / "ca.crt"], {}),  # no key
    (lambda p: ["--backend-tls-ca", p / "ca.crt"], {"TOKENMILL_GATEWAY_BACKEND_API_KEY": "no"}),
    (lambda p: ["--backend-tls-ca", p / "other-ca.crt"],
     {"TOKENMILL_GATEWAY_BACKEND_API_KEY": API_KEY}),
])
def test_gateway_without_the_right_credentials_never_reaches_the_server(tls_server, pki,
                                                                         extra_args, env):
    with Gateway(backend_address(tls_server), extra_args=extra_args(pki), env=env,
                 wait_ready=False) as gateway:
        gateway.wait_for_log(r"listening on http://")
        time.sleep(1)  # several health rounds at the harness's interval
        assert gateway.http.get("/health").status_code == 503


def test_gateway_with_a_client_certificate_reaches_a_mutual_tls_server(pki):
    with Server(*tls_args(pki), "--tls-client-ca", pki / "ca.crt") as server:
        args = ["--backend-tls-ca", pki / "ca.crt", "--backend-tls-cert", pki / "client.crt",
                "--backend-tls-key", pki / "client.key"]
        with Gateway(backend_address(server), extra_args=args) as gateway:
            models = gateway.client().models.list()
            assert models.data


@pytest.mark.parametrize("args,message", [
    (lambda p: ["--backend-tls-cert", p / "client.crt"], "need --backend-tls-ca"),
    (lambda p: ["--backend-tls-ca", p / "ca.crt", "--backend-tls-cert", p / "client.crt"],
     "needs both --backend-tls-cert and --backend-tls-key"),
])
def test_bad_backend_tls_flags_fail_fast_with_a_message(pki, args, message):
    result = subprocess.run([str(BIN_DIR / "tokenmill-gateway"), "--backend", "127.0.0.1:1",
                             *map(str, args(pki))], capture_output=True, text=True,
                            timeout=EXIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    assert message in result.stderr
