"""Starts the real tokenmill-gateway in front of real tokenmill-servers (server_harness.py)
and talks to it with the official `openai` package and plain HTTP (httpx)."""

import json
import os
import time

import httpx2 as httpx
import openai

from process_harness import RPC_TIMEOUT_S, START_TIMEOUT_S, LoggedProcess, metric_samples
from server_harness import BIN_DIR

GATEWAY_BIN = BIN_DIR / "tokenmill-gateway"
# Health probes go out this often and time out after as long (at least 0.2 s). The sanitizer
# stage raises it: a probe of a ThreadSanitizer server on a busy machine can take longer.
HEALTH_INTERVAL_S = os.environ.get("TOKENMILL_E2E_HEALTH_INTERVAL", "0.2")


class Gateway(LoggedProcess):
    """One tokenmill-gateway process on a free port in front of `backends` (host:port). Over
    HTTPS (--tls-cert in extra_args), the clients verify the gateway with `tls` (an
    ssl.SSLContext, which may hold a client certificate). The harness's own client (`http`:
    health, metrics) keeps its connection open between calls unless keep_alive is False, as a
    suite that counts the gateway's descriptors needs: the gateway closes a connection idle for
    120 s, at a moment of its choosing."""

    def __init__(self, *backends, extra_args=(), env=None, wait_ready=True, log_level="debug",
                 tls=None, keep_alive=True):
        self.args = [str(GATEWAY_BIN), "--port", "0", "--health-interval", HEALTH_INTERVAL_S,
                     "--log-level", log_level, *[a for b in backends for a in ("--backend", b)],
                     *map(str, extra_args)]
        super().__init__(self.args, env)
        with self.starting():
            listening = self.wait_for_log(r"listening on (https?)://[^ ]*:(\d+) ")
            self.port = int(listening.group(2))
            self.url = f"{listening.group(1)}://127.0.0.1:{self.port}"
            self.tls = {"verify": tls} if tls else {}
            limits = httpx.Limits() if keep_alive else httpx.Limits(max_keepalive_connections=0)
            self.http = httpx.Client(base_url=self.url, timeout=RPC_TIMEOUT_S, limits=limits,
                                     **self.tls)
            if wait_ready:
                self.wait_ready()

    def wait_ready(self, timeout=START_TIMEOUT_S):
        """Until /health says a backend is ready."""
        deadline = time.monotonic() + timeout
        while self.http.get("/health").status_code != 200:
            if time.monotonic() > deadline:
                raise AssertionError("gateway never became healthy; log:\n" + self.log_text())
            time.sleep(0.05)

    def client(self, api_key="unused", **kwargs):
        """The official OpenAI client on this gateway; no retries, so statuses stay visible."""
        if self.tls:
            kwargs.setdefault("http_client", openai.DefaultHttpxClient(**self.tls))
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0,
                             timeout=RPC_TIMEOUT_S, **kwargs)

    def metrics(self):
        """{sample name with labels: value} of the gateway's /metrics."""
        response = self.http.get("/metrics")
        assert response.status_code == 200
        return metric_samples(response.text)

    def close(self):
        self.http.close()
        self.stop()


def backend_address(server):
    return f"127.0.0.1:{server.port}"


def model_name(gateway):
    return gateway.client().models.list().data[0].id


def recording_async_client(gateway, bodies):
    """An openai.AsyncOpenAI on the gateway that appends each request's JSON body to `bodies`:
    what an agent framework sent, turn by turn."""
    import httpx  # the openai package's own (this module's httpx is httpx2)

    async def keep_body(request):
        bodies.append(json.loads(request.content))

    http = httpx.AsyncClient(event_hooks={"request": [keep_body]})
    return openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0,
                              http_client=http)
