"""Peak RSS growth (VmHWM) of tokenmill-gateway per request body: a fresh gateway for each
body of docs/bad-inputs.md's "Memory a body may cost", in front of one tokenmill-server on
the default model. Not a test (test_gateway_bad_inputs.py asserts the bound); run as
  TOKENMILL_BIN_DIR=build/bin .venv/bin/python tests/e2e/gateway_body_memory.py"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gateway_harness import Gateway, backend_address, model_name  # noqa: E402
from server_harness import Server  # noqa: E402
from test_gateway_bad_inputs import BODY_LIMIT, distinct_keys, filled, post_raw  # noqa: E402


def bodies(model):
    """(name, path, body)"""
    m = '{"model": "%s", ' % model
    text = m + '"prompt": "'
    yield "one string (413)", "/v1/completions", text + "a" * (BODY_LIMIT - len(text) - 2) + '"}'
    yield "prompt [0,0,...]", "/v1/completions", filled(m + '"prompt": [', "0", "]}")
    yield "stop [[],[],...]", "/v1/completions", filled(m + '"prompt": "Hi", "stop": [', "[]", "]}")
    yield 'messages ["",...]', "/v1/chat/completions", filled(m + '"messages": [', '""', "]}")
    yield 'logit_bias {"0":0,...}', "/v1/completions", distinct_keys(
        m + '"prompt": "Hi", "logit_bias": {', "}}")
    yield "frobnicate [[0 x 64],...]", "/v1/completions", filled(
        m + '"prompt": "Hi", "frobnicate": [', "[" + ",".join(["0"] * 64) + "]", "]}")
    # Quadratic before the bounded parser: 2.8 million of them took about 25 minutes.
    yield "frobnicate [{} x 200000]", "/v1/completions", (
        m + '"prompt": "Hi", "frobnicate": [' + ",".join(["{}"] * 200000) + "]}")
    if "--quadratic" in sys.argv:
        yield "frobnicate [{},{},...]", "/v1/completions", filled(
            m + '"prompt": "Hi", "frobnicate": [', "{}", "]}")
        yield 'frobnicate [{"":0},...]', "/v1/completions", filled(
            m + '"prompt": "Hi", "frobnicate": [', '{"":0}', "]}")
    bias = {str(i): -1 for i in range(49152)}
    yield "logit_bias, whole vocabulary", "/v1/completions", json.dumps(
        {"model": model, "prompt": "Hi", "max_tokens": 1, "logit_bias": bias})
    prompts = [[(p * 8192 + i) % 49152 for i in range(8192)] for p in range(64)]
    yield "64 prompts of 8192 ids", "/v1/completions", json.dumps(
        {"model": model, "prompt": prompts, "max_tokens": 1})


def main():
    with Server() as server:
        with Gateway(backend_address(server)) as probe:
            model = model_name(probe)
        for name, path, body in bodies(model):
            with Gateway(backend_address(server), log_level="info") as gateway:
                before = gateway.status_mib("VmHWM")
                start = time.monotonic()
                response = post_raw(gateway, path, body)
                seconds = time.monotonic() - start
                growth = gateway.status_mib("VmHWM") - before
                print(f"{name:30s} {len(body):8d} B -> {response.status_code} "
                      f"+{growth:6.1f} MiB {seconds:6.2f} s  {response.text[:70]}", flush=True)


if __name__ == "__main__":
    main()
