"""Starts the real tokenmill-gateway in front of real tokenmill-servers (server_harness.py)
and talks to it with the official `openai` package and plain HTTP (httpx)."""

import os
import re
import signal
import subprocess
import threading
import time

import httpx2 as httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from server_harness import BIN_DIR, EXIT_TIMEOUT_S, RPC_TIMEOUT_S, START_TIMEOUT_S

GATEWAY_BIN = BIN_DIR / "tokenmill-gateway"


class Gateway:
    """One tokenmill-gateway process on a free port in front of `backends` (host:port)."""

    def __init__(self, *backends, extra_args=(), env=None, wait_ready=True, log_level="debug"):
        self.args = [str(GATEWAY_BIN), "--port", "0", "--health-interval", "0.2",
                     "--log-level", log_level, *[a for b in backends for a in ("--backend", b)],
                     *map(str, extra_args)]
        self.lines = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace",
                                     env={**os.environ, **(env or {})})
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        self.port = int(self.wait_for_log(r"listening on http://[^ ]*:(\d+) ").group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=RPC_TIMEOUT_S)
        if wait_ready:
            self.wait_ready()

    def _read_log(self):
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def log_text(self):
        with self._cond:
            return "\n".join(self.lines)

    def wait_for_log(self, pattern, timeout=START_TIMEOUT_S):
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    m = regex.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no log line matches {pattern!r}; log:\n" +
                                         "\n".join(self.lines))
                self._cond.wait(min(left, 0.5))

    def wait_ready(self, timeout=START_TIMEOUT_S):
        """Until /health says a backend is ready."""
        deadline = time.monotonic() + timeout
        while self.http.get("/health").status_code != 200:
            if time.monotonic() > deadline:
                raise AssertionError("gateway never became healthy; log:\n" + self.log_text())
            time.sleep(0.05)

    def client(self, api_key="unused", **kwargs):
        """The official OpenAI client on this gateway; no retries, so statuses stay visible."""
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0,
                             timeout=RPC_TIMEOUT_S, **kwargs)

    def metrics(self):
        """{sample name with labels: value} of the gateway's /metrics."""
        response = self.http.get("/metrics")
        assert response.status_code == 200
        samples = {}
        for family in text_string_to_metric_families(response.text):
            for s in family.samples:
                key = s.name + ("" if not s.labels else "{" + ",".join(
                    f"{k}={v}" for k, v in sorted(s.labels.items())) + "}")
                samples[key] = s.value
        return samples

    def close(self):
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def backend_address(server):
    return f"127.0.0.1:{server.port}"


def model_name(gateway):
    return gateway.client().models.list().data[0].id
