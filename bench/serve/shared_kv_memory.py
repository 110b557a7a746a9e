"""Resident memory of a server whose models share one KV limit (--kv-cache-memory on the CPU):
two names of one file (--model a=PATH --model b=PATH), each first sent 4 prompts at once (a
step's worth of tokens: its step buffers at full size), then model a's cache filled with new prompts, 4 at a
time, until its pool holds the whole limit, then model b sent new prompts 16 at a time, each
generating 64 tokens, which its pool cannot hold without a's blocks. Prints, after each phase, the server's VmRSS and each
model's tokenmill:kv_cache_memory_bytes: b's pool grows only as a gives blocks back, and their
pages leave the process (with a pool of the limit for each model, b's phase would add its
pool's growth again).

  .venv/bin/python bench/serve/shared_kv_memory.py --kv-cache-memory 256MiB
"""
import argparse
import random
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from server_harness import DEFAULT_MODEL, Server, pb2  # noqa: E402

MiB = 1 << 20


def held(server):
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {s.labels["model_name"]: s.value / MiB
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "tokenmill:kv_cache_memory_bytes"}


def fill(server, model, prompts, tokens, seed, streams, max_tokens=1):
    """`prompts` new prompts of `tokens` random ids, `max_tokens` output tokens each,
    `streams` at a time."""
    rng = random.Random(seed)

    def one(_):
        ids = [1] + [rng.randrange(100, 40000) for _ in range(tokens - 1)]
        for _ in server.stub.Generate(pb2.GenerateRequest(
                token_ids=pb2.TokenIds(ids=ids), max_tokens=max_tokens, ignore_eos=True,
                model=model), timeout=600):
            pass

    with ThreadPoolExecutor(max_workers=streams) as pool:
        list(pool.map(one, range(prompts)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--kv-cache-memory", default="256MiB")
    parser.add_argument("--prompts", type=int, default=32, help="each phase's")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    args = parser.parse_args()
    path = Path(args.model).resolve()
    with Server("--model", f"b={path}", "--kv-cache-memory", args.kv_cache_memory,
                model=f"a={path}") as server:
        # (model, streams, output tokens): b's 16 requests at once, each holding its blocks
        # for 64 steps, need more blocks than b has.
        phases = (("a", 4, 1), ("b", 16, 64))
        for model, _, _ in phases:  # loads b; each engine's step buffers at full size
            fill(server, model, 4, args.prompt_tokens, seed=0, streams=4)
        rows = [("both warmed up", server.status_mib("VmRSS"), held(server))]
        for phase, (model, streams, max_tokens) in enumerate(phases):
            fill(server, model, args.prompts, args.prompt_tokens, seed=phase + 1,
                 streams=streams, max_tokens=max_tokens)
            rows.append((f"{args.prompts} prompts of {model}, {streams} at a time, "
                         f"{max_tokens} tokens out", server.status_mib("VmRSS"), held(server)))
    print(f"--kv-cache-memory {args.kv_cache_memory}, prompts of {args.prompt_tokens} tokens, "
          f"{path.name}")
    print("| after | VmRSS MiB | a's KV MiB | b's KV MiB |")
    print("|---|---|---|---|")
    for name, rss, kv in rows:
        print(f"| {name} | {rss:.0f} | {kv.get('a', 0):.1f} | {kv.get('b', 0):.1f} |")


if __name__ == "__main__":
    main()
