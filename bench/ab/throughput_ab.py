#!/usr/bin/env python3
"""Before/after throughput of two builds of the engine, in interleaved pairs.

Runs tokenmill_throughput of build A and build B alternately (A B, then B A, ...: drift of the
machine's speed falls on both alike) for --pairs pairs, each run one round over the
concurrencies, and reports per concurrency the mean ratio B/A of decode tokens per CPU second
(and of wall-clock decode tokens/s) with its 95% confidence interval over the pairs. For
changes that must not change speed (refactors): the interval should lie within +-3%.

  bench/ab/throughput_ab.py --a /tmp/base/bin --b build/bin \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --pairs 10 --concurrency 1,16
"""
import argparse
import json
import math
import statistics
import subprocess
import sys

# Two-sided 95% quantiles of Student's t by degrees of freedom (1-30), then the normal's.
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def run(bin_dir, args):
    cmd = [f"{bin_dir}/tokenmill_throughput", "--model", args.model, "--concurrency",
           args.concurrency, "--repeats", "1", "--prompt-tokens", str(args.prompt_tokens),
           "--max-tokens", str(args.max_tokens), "--threads", str(args.threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {r["concurrency"]: r for r in map(json.loads, filter(str.strip, out.splitlines()))}


def interval(ratios):
    mean = statistics.mean(ratios)
    if len(ratios) < 2:
        return mean, float("nan")
    t = T95[len(ratios) - 2] if len(ratios) - 1 <= len(T95) else 1.96
    return mean, t * statistics.stdev(ratios) / math.sqrt(len(ratios))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="bin folder of the base build")
    p.add_argument("--b", required=True, help="bin folder of the build under test")
    p.add_argument("--model", required=True)
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--concurrency", default="1,16")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()

    ratios = {}  # (concurrency, metric) -> B/A per pair
    for i in range(args.pairs):
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        results = {side: run(getattr(args, side), args) for side in order}
        for c in results["a"]:
            for metric in ("decode_tokens_per_cpu_second", "decode_tokens_per_second"):
                ratio = results["b"][c][metric] / results["a"][c][metric]
                ratios.setdefault((c, metric), []).append(ratio)
        print(f"pair {i + 1}/{args.pairs} ({order[0]} first): " + ", ".join(
            f"c={c} {results['b'][c]['decode_tokens_per_cpu_second'] / results['a'][c]['decode_tokens_per_cpu_second']:.3f}"
            for c in results["a"]), file=sys.stderr)

    print(f"{'concurrency':>11} {'metric':>30} {'B/A mean':>9} {'95% CI':>16}")
    for (c, metric), r in sorted(ratios.items()):
        mean, half = interval(r)
        print(f"{c:>11} {metric:>30} {mean:>9.4f} [{mean - half:.4f}, {mean + half:.4f}]")


if __name__ == "__main__":
    main()
