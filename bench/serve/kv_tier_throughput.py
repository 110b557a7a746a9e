"""Serving throughput with the disk tier on (--kv-cache-dir: every prefix block written through
as it is cached; with --host-size the host tier too) against off, under steady load: N concurrent gRPC streams, each sending
requests of new random prompts (so every full block is new and goes to disk) back to back for
a fixed time. The two servers run in alternation (ABAB...), one at a time, on the same
machine; prints each run's output tokens/s and the median ratio on/off.

  .venv/bin/python bench/serve/kv_tier_throughput.py --pairs 5 --seconds 20
  .venv/bin/python bench/serve/kv_tier_throughput.py --pairs 4 --seconds 15 --host-size 1GiB
"""
import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from server_harness import Server, pb2  # noqa: E402

WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone cloud "
         "harbour ledger mountain valley orchard lantern").split()


def load(server, streams, seconds, prompt_words, max_tokens, seed, models=None):
    """Output tokens per second of `streams` closed-loop clients over `seconds`; client i asks
    for models[i] when given (a LoRA adapter's name, bench/serve/lora_throughput.py)."""
    deadline = time.monotonic() + seconds
    counts = [0] * streams

    def client(i):
        rng = random.Random(seed * 1000 + i)
        while time.monotonic() < deadline:
            text = " ".join(rng.choice(WORDS) for _ in range(prompt_words))
            for response in server.stub.Generate(pb2.GenerateRequest(
                    text=text, max_tokens=max_tokens, ignore_eos=True,
                    model=models[i] if models else ""), timeout=600):
                counts[i] += len(response.token_ids)

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--prompt-words", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--host-size", default=None,
                        help="--kv-cache-host-size for the server with the tiers on")
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory(prefix="tokenmill-kv-bench-", dir=REPO / "build") as tmp:
        configs = {"off": [], "on": ["--kv-cache-dir", Path(tmp) / "kv"]}
        if args.host_size:
            configs["on"] += ["--kv-cache-host-size", args.host_size]
        for pair in range(args.pairs):
            rates = {}
            for name in (("off", "on") if pair % 2 == 0 else ("on", "off")):
                with Server(*configs[name], "--kv-cache-memory", "512MiB",
                            log_level="info") as server:
                    rates[name] = load(server, args.streams, args.seconds, args.prompt_words,
                                       args.max_tokens, seed=pair)
                    written = server.metrics().get("tokenmill:kv_tier_writes_total{tier=disk}")
                print(f"pair {pair} {name}: {rates[name]:.1f} output tok/s"
                      + (f", {written:.0f} blocks written" if written is not None else ""),
                      flush=True)
            ratios.append(rates["on"] / rates["off"])
    print(f"on/off ratio per pair: {', '.join(f'{r:.3f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
