"""Serving throughput of two models in one server against one model alone, under steady load:
N concurrent greedy gRPC streams (ignore_eos, a fixed max_tokens) of new random prompts back to
back for a fixed time, either (one) all on a model served alone, or (two) split evenly over two
names of the same file in one server (--model a=PATH --model b=PATH: two engines, one loop
each). The two servers run in alternation (ABAB...), one at a time, each warmed up first;
prints each run's output tokens/s and the median ratio two/one.

  .venv/bin/python bench/serve/multi_model_throughput.py --pairs 3 --seconds 20
  .venv/bin/python bench/serve/multi_model_throughput.py --device cuda --streams 32
"""
import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "bench" / "serve"))
from kv_tier_throughput import load  # noqa: E402
from server_harness import DEFAULT_MODEL, Server  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--prompt-words", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0,
                        help="--threads of the server (0: all cores, for each engine)")
    args = parser.parse_args()
    path = Path(args.model).resolve()
    common = ["--device", args.device, "--threads", args.threads]
    # (the first --model, more flags, each stream's model field)
    configs = {
        "one": (path, common, [""] * args.streams),
        "two": (f"a={path}", ["--model", f"b={path}", *common],
                [("a", "b")[i % 2] for i in range(args.streams)]),
    }
    n, words, tokens = args.streams, args.prompt_words, args.max_tokens
    ratios = []
    for pair in range(args.pairs):
        rates = {}
        for name in (("one", "two") if pair % 2 == 0 else ("two", "one")):
            model, flags, models = configs[name]
            with Server(*flags, model=model, log_level="info") as server:
                load(server, n, 5, words, tokens, 1000 + pair, models)  # warm up (loads b)
                rates[name] = load(server, n, args.seconds, words, tokens, pair, models)
            print(f"pair {pair} {name}: {rates[name]:.1f} output tok/s", flush=True)
        ratios.append(rates["two"] / rates["one"])
    print(f"{n} streams of {tokens} tokens on {path.name} ({args.device}): two models / one "
          f"per pair {', '.join(f'{r:.3f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
