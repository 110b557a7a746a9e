"""tokenmill-health, the container HEALTHCHECK (docker/), against the real tokenmill-server:
its verdict must be what grpcio-health-checking's client gets from the same server."""
import os
import socket
import subprocess
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from server_harness import BIN_DIR, Server

PROBE = BIN_DIR / "tokenmill-health"
SERVICE = "tokenmill.v1.Inference"


def probe(port, *args):
    out = subprocess.run([str(PROBE), f"127.0.0.1:{port}", *args], capture_output=True,
                         text=True, timeout=60)
    return out.returncode, out.stdout.strip()


def reference_health(server, service=""):
    """grpcio's answer: the status name, or the error code's name."""
    stub = health_pb2_grpc.HealthStub(server.channel)
    try:
        status = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
        return health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    except grpc.RpcError as e:
        return e.code().name


def test_serving_server_passes():
    with Server(metrics=False) as server:
        for args, service in (((), ""), (("--service", SERVICE), SERVICE)):
            assert reference_health(server, service) == "SERVING"
            assert probe(server.port, *args) == (0, "SERVING")


def test_unknown_service_fails():
    with Server(metrics=False) as server:
        assert reference_health(server, "no.such.Service") == "NOT_FOUND"
        code, out = probe(server.port, "--service", "no.such.Service")
        assert code == 1
        assert out.startswith(f"error {grpc.StatusCode.NOT_FOUND.value[0]} ")


def test_loading_server_fails(tmp_path):
    # Opening a FIFO blocks until a writer comes: the server listens, its model "loading".
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    server = Server(model=fifo, wait_ready=False, metrics=False)
    try:
        assert reference_health(server) == "NOT_SERVING"
        assert probe(server.port) == (1, "NOT_SERVING")
    finally:
        os.close(os.open(fifo, os.O_WRONLY))  # lets the server fail its load and exit
        server.close()


def test_nothing_listening_fails_within_the_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        start = time.monotonic()
        code, out = probe(port, "--timeout", "2")
        assert time.monotonic() - start < 20
    assert code == 1
    assert out.startswith(f"error {grpc.StatusCode.UNAVAILABLE.value[0]} ")
