"""tokenmill-gateway over HTTPS (--tls-cert, --tls-key) and mutual TLS (--tls-client-ca), with
certificates from a CA this test makes with openssl, driven by the official openai client and
httpx: the right credentials are served (plain and streamed), a client that does not trust the
certificate, speaks plain HTTP or lacks a client certificate gets no answer and the gateway
keeps serving; bad flags fail fast naming the flag."""
import ssl
import subprocess

import httpx2 as httpx
import pytest

from gateway_harness import GATEWAY_BIN, Gateway, backend_address, model_name
from pki_harness import make_pki
from process_harness import EXIT_TIMEOUT_S, RPC_TIMEOUT_S


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def trusting(ca, client=None):
    """A client's TLS context: it trusts `ca` (a file) and presents `client` (a (cert, key)
    pair of files) when asked."""
    context = ssl.create_default_context(cafile=str(ca))
    if client:
        context.load_cert_chain(*map(str, client))
    return context


def https_args(pki):
    return ["--tls-cert", pki / "server.crt", "--tls-key", pki / "server.key"]


@pytest.fixture(scope="module")
def https_gateway(server, pki):
    with Gateway(backend_address(server), extra_args=https_args(pki),
                 tls=trusting(pki / "ca.crt")) as gateway:
        yield gateway


def test_https_serves_the_openai_client(https_gateway):
    assert https_gateway.url.startswith("https://")
    client = https_gateway.client()
    model = model_name(https_gateway)
    completion = client.completions.create(model=model, prompt="Hello", max_tokens=3)
    assert completion.usage.completion_tokens == 3
    chunks = list(client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, stream=True))
    assert chunks[-1].choices[0].finish_reason == "length"
    # Keep-alive: several requests on one TLS connection.
    for _ in range(3):
        assert https_gateway.http.get("/health").status_code == 200


def test_untrusted_or_plaintext_clients_get_no_answer_and_the_gateway_serves_on(https_gateway,
                                                                                 pki):
    with httpx.Client(verify=trusting(pki / "other-ca.crt"), timeout=RPC_TIMEOUT_S) as untrusting:
        with pytest.raises(httpx.ConnectError):
            untrusting.get(f"{https_gateway.url}/health")
    plain_url = https_gateway.url.replace("https://", "http://")
    with httpx.Client(timeout=RPC_TIMEOUT_S) as plain:
        with pytest.raises(httpx.TransportError):
            plain.get(f"{plain_url}/health")
    assert https_gateway.http.get("/health").status_code == 200


def test_mutual_tls_needs_a_client_certificate_from_the_ca(server, pki):
    with Gateway(backend_address(server),
                 extra_args=[*https_args(pki), "--tls-client-ca", pki / "ca.crt"],
                 tls=trusting(pki / "ca.crt", (pki / "client.crt", pki / "client.key"))) as gateway:
        assert gateway.client().models.list().data
        for cert in [None, (pki / "stranger.crt", pki / "stranger.key")]:
            with httpx.Client(verify=trusting(pki / "ca.crt", cert),
                              timeout=RPC_TIMEOUT_S) as client:
                # TLS 1.3 reports a refused client certificate on the first read.
                with pytest.raises((httpx.ConnectError, httpx.ReadError,
                                    httpx.RemoteProtocolError)):
                    client.get(f"{gateway.url}/health")
        assert gateway.http.get("/health").status_code == 200


@pytest.mark.parametrize("args,message", [
    (lambda p: ["--tls-cert", p / "server.crt"], "needs both --tls-cert and --tls-key"),
    (lambda p: ["--tls-client-ca", p / "ca.crt"], "needs both --tls-cert and --tls-key"),
    (lambda p: ["--tls-cert", p / "server.ext", "--tls-key", p / "server.key"],
     "--tls-cert"),
    (lambda p: ["--tls-cert", p / "server.crt", "--tls-key", p / "client.key"],
     "--tls-key"),
    (lambda p: [*https_args(p), "--tls-client-ca", p / "server.ext"], "--tls-client-ca"),
])
def test_bad_https_flags_fail_fast_with_a_message(pki, args, message):
    result = subprocess.run([str(GATEWAY_BIN), "--backend", "127.0.0.1:1", "--port", "0",
                             *map(str, args(pki))], capture_output=True, text=True,
                            timeout=EXIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    assert message in result.stderr + result.stdout

