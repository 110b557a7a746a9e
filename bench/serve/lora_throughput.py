"""Serving throughput with LoRA adapters against the base model, under steady load: one server
with --lora adapters (rank 16 on every layer's attention and feed-forward matrices, written by
tests/reference/make_lora_adapter.py), N concurrent gRPC streams of new random prompts back to
back for a fixed time, either all on the base model or spread evenly over the adapters (every
step then mixes them). The two loads run in alternation (ABAB...) on the same warm server;
prints each run's output tokens/s and the median ratio adapters/base.

  .venv/bin/python bench/serve/lora_throughput.py --pairs 4 --seconds 20
  .venv/bin/python bench/serve/lora_throughput.py --model models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
      --lora-weights q8_0
"""
import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "tests" / "reference"))
sys.path.insert(0, str(REPO / "bench" / "serve"))
from kv_tier_throughput import load  # noqa: E402
from make_lora_adapter import write_adapter  # noqa: E402
from server_harness import DEFAULT_MODEL, Server  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--prompt-words", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--lora-weights", default="f32", choices=["f32", "q8_0"],
                        help="the server's --lora-weights")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokenmill-lora-bench-", dir=REPO / "build") as tmp:
        flags = []
        for i in range(args.adapters):
            path = Path(tmp) / f"adapter{i}.gguf"
            n = write_adapter(args.model, str(path), rank=args.rank, alpha=2 * args.rank, seed=i)
            flags += ["--lora", f"a{i}={path}"]
        print(f"{args.adapters} adapters of rank {args.rank} on {n} matrices each", flush=True)
        base = [""] * args.streams
        mixed = [f"a{i % args.adapters}" for i in range(args.streams)]
        ratios = []
        with Server(*flags, "--lora-weights", args.lora_weights, model=args.model,
                    log_level="info") as server:
            n, words, tokens = args.streams, args.prompt_words, args.max_tokens
            # Each run's prompts its own (seeds apart): a run whose prompts an earlier one cached
            # would count prefix-cache hits as speed.
            load(server, n, 5, words, tokens, 10_000, base)  # warm up
            for pair in range(args.pairs):
                b = load(server, n, args.seconds, words, tokens, 2 * pair, base)
                m = load(server, n, args.seconds, words, tokens, 2 * pair + 1, mixed)
                ratios.append(m / b)
                print(f"pair {pair}: base {b:.1f} tok/s, {args.adapters} adapters {m:.1f} tok/s, "
                      f"ratio {m / b:.3f}", flush=True)
        print(f"median ratio adapters/base: {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
