"""Starts the real tokenmill-server and talks to it with the Python grpcio client whose stubs
are generated from proto/tokenmill/v1/*.proto (grpcio-tools) at test time."""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import grpc
from grpc_tools import protoc

from process_harness import EXIT_TIMEOUT_S, RPC_TIMEOUT_S, LoggedProcess, metric_samples

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("TOKENMILL_BIN_DIR", REPO / "build" / "bin"))
MODELS_DIR = Path(os.environ.get("TOKENMILL_MODELS_DIR", REPO / "models"))
SERVER_BIN = BIN_DIR / "tokenmill-server"
CLI_BIN = BIN_DIR / "tokenmill"
# The tests' default model; scripts/serve's is SERVE_MODEL (test_default_model.py).
DEFAULT_MODEL = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVE_MODEL = MODELS_DIR / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
TINY_MODEL = MODELS_DIR / "stories260K.gguf"



def generate_stubs():
    """Compiles the proto into a temporary package; returns (inference_pb2, inference_pb2_grpc)."""
    out = tempfile.mkdtemp(prefix="tokenmill_stubs_")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    proto_root = REPO / "proto"
    args = ["protoc", f"-I{proto_root}", f"--python_out={out}", f"--grpc_python_out={out}",
            str(proto_root / "tokenmill" / "v1" / "inference.proto")]
    if protoc.main(args) != 0:
        raise RuntimeError("grpc_tools.protoc failed on inference.proto")
    sys.path.insert(0, out)
    from tokenmill.v1 import inference_pb2, inference_pb2_grpc  # noqa: E402
    return inference_pb2, inference_pb2_grpc


pb2, pb2_grpc = generate_stubs()


class Server(LoggedProcess):
    """One tokenmill-server process on free ports, its log collected from stderr."""

    def __init__(self, *extra_args, model=DEFAULT_MODEL, env=None, wait_ready=True,
                 metrics=True, port=0, log_level="debug", descriptor_limit=None, launcher=()):
        self.args = [str(SERVER_BIN), "--model", str(model), "--port", str(port),
                     "--metrics-port", "0" if metrics else "-1", "--log-level", log_level,
                     *map(str, extra_args)]
        super().__init__(self.args, env, descriptor_limit=descriptor_limit, launcher=launcher)
        with self.starting():
            self.port = int(self.wait_for_log(r"listening on [^ ]*:(\d+) \(gRPC\)").group(1))
            self.metrics_port = None
            if metrics:
                self.metrics_port = int(
                    self.wait_for_log(r"metrics on http://[^ ]*:(\d+)/").group(1))
            self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
            self.stub = pb2_grpc.InferenceStub(self.channel)
            if wait_ready:
                self.wait_for_log(r"serving .* on ")

    def metrics(self):
        """{sample name with labels: value} from /metrics, parsed by prometheus_client."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        return metric_samples(text, ignore_labels=("model_name",))

    def signal(self, sig=signal.SIGTERM):
        self.send_signal(sig)

    def wait_exit(self, timeout=EXIT_TIMEOUT_S):
        return self.proc.wait(timeout=timeout)

    def close(self):
        self.channel.close()
        self.stop()


def generate(stub, request, timeout=RPC_TIMEOUT_S):
    """Runs one Generate stream: (token ids, text, list of responses)."""
    responses = list(stub.Generate(request, timeout=timeout))
    ids = [t for r in responses for t in r.token_ids]
    return ids, "".join(r.text for r in responses), responses


def cli_generate(prompt, max_tokens, model=DEFAULT_MODEL):
    """`tokenmill generate --json`: the single-sequence reference the server must match."""
    out = subprocess.run([str(CLI_BIN), "generate", "--model", str(model), "--prompt", prompt,
                          "--max-tokens", str(max_tokens), "--json"],
                         capture_output=True, text=True, timeout=RPC_TIMEOUT_S, check=True)
    return json.loads(out.stdout)
