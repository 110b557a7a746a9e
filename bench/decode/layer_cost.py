"""Decode cost per layer: tokenmill against llama.cpp's own llama-batched-bench, on two GGUFs that
differ only in their number of layers (bench/synthetic/write_deepseek2.py --layers 4 and 6, say),
at 1 and 16 streams. The difference of the two files' decode step times over the difference
of their layers is what one more layer costs a step; the rest (embedding, output matrix,
sampling, the engine's step) is what a step costs whatever the depth, so a real model of L
layers decodes a step in about fixed + L x per-layer.

Each engine decodes --decode greedy tokens after a --prompt-token random prompt per stream:
tokenmill through bench/throughput (tokenmill_throughput, n requests at once), llama.cpp through
llama-batched-bench (-npp, -ntg, -npl; the flags are printed). Runs alternate engines and files
--runs times; the fastest run of each is taken (on a shared machine a run is only ever slowed
down), every run printed, with the load average before and after.

  .venv/bin/python bench/decode/layer_cost.py --models /tmp/ds2-4l.gguf /tmp/ds2-6l.gguf \\
      --layers 4 6 --llama-batched-bench LLAMA_CPP_BUILD/bin/llama-batched-bench
"""
import argparse
import json
import os
import subprocess

from batched_decode import tokenmill_decode

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def tokenmill_step_ms(build, model, streams, prompt, decode, threads):
    rate = tokenmill_decode(build, model, streams, prompt, decode, threads)
    return 1000.0 * streams / rate


def llama_cpp_args(model, streams, prompt, decode, threads):
    return ["-m", model, "-c", str(max(2048, streams * (prompt + decode) + 64)), "-b", "2048",
            "-ub", "512", "-fa", "on", "-t", str(threads), "-npp", str(prompt),
            "-ntg", str(decode), "-npl", str(streams), "--output-format", "jsonl"]


def llama_cpp_step_ms(binary, model, streams, prompt, decode, threads):
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(binary))
    out = subprocess.run([binary, *llama_cpp_args(model, streams, prompt, decode, threads)],
                         check=True, capture_output=True, text=True, env=env)
    row = json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])
    return 1000.0 * streams / row["speed_tg"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs=2, required=True)
    ap.add_argument("--layers", nargs=2, type=int, required=True)
    ap.add_argument("--llama-batched-bench", required=True)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--streams", default="1,16")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()}; llama-batched-bench "
          f"{' '.join(llama_cpp_args('MODEL', 16, args.prompt, args.decode, args.threads))}")
    engines = {
        "tokenmill": lambda m, n: tokenmill_step_ms(args.build, m, n, args.prompt, args.decode,
                                                    args.threads),
        "llama.cpp": lambda m, n: llama_cpp_step_ms(args.llama_batched_bench, m, n, args.prompt,
                                                    args.decode, args.threads)}
    for streams in map(int, args.streams.split(",")):
        steps = {(e, m): [] for e in engines for m in args.models}
        for run in range(args.runs):
            order = list(engines) if run % 2 == 0 else list(reversed(engines))
            for engine in order:
                for model in args.models:
                    steps[(engine, model)].append(engines[engine](model, streams))
        for engine in engines:
            # The fastest run of each: on a shared machine a run is only ever slowed down.
            small, large = (min(steps[(engine, m)]) for m in args.models)
            per_layer = (large - small) / (args.layers[1] - args.layers[0])
            fixed = small - per_layer * args.layers[0]
            runs = "; ".join(f"{os.path.basename(m)}: " +
                             ", ".join(f"{s:.1f}" for s in steps[(engine, m)])
                             for m in args.models)
            print(f"{streams} streams {engine}: step {small:.1f} ms ({args.layers[0]} layers), "
                  f"{large:.1f} ms ({args.layers[1]}); per layer {per_layer:.2f} ms, fixed "
                  f"{fixed:.1f} ms; {streams * 1000.0 / small:.1f} / "
                  f"{streams * 1000.0 / large:.1f} tok/s [runs, ms: {runs}]", flush=True)
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
