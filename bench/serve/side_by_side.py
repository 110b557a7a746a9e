"""tokenmill (tokenmill-server + tokenmill-gateway) against llama.cpp's OpenAI server
(llama_cpp.server from llama-cpp-python, or with --llama-server llama.cpp's own llama-server,
its flags in --llama-server-args) on the same GGUF and thread count, through the same
benchmark client (benchmark.py), runs interleaved: in each repeat every scenario runs on both
engines back to back, the order alternating, with that repeat's seed for both. Reports the
median of each metric over the repeats and the median of the per-repeat ratios
tokenmill / llama.cpp, as JSON, a Markdown table and PNG plots.

  .venv/bin/python bench/serve/side_by_side.py --threads 2 --repeats 2 --out-dir /tmp/serve

llama_cpp.server serves one request at a time (it queues the others: --interrupt_requests
False), so from concurrency 2 on the comparison is continuous batching against a queue;
llama-server batches its --parallel slots and keeps a prompt cache in RAM (--cache-ram).

  .venv/bin/python bench/serve/side_by_side.py --llama-server LLAMA_CPP_BUILD/bin/llama-server \
      --scenarios shared-prefix-1k --repeats 3
"""
import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark  # noqa: E402
import plots  # noqa: E402
import workloads  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ("tokenmill", "llama.cpp")

# name -> benchmark arguments; sized for a 2-core machine.
SCENARIOS = {
    "c1": dict(workload="random", num_prompts=8, input_len=128, output_len=32, concurrency=1),
    "c4": dict(workload="random", num_prompts=16, input_len=128, output_len=32, concurrency=4),
    "c8": dict(workload="random", num_prompts=16, input_len=128, output_len=32, concurrency=8),
    "c16": dict(workload="random", num_prompts=32, input_len=128, output_len=32,
                concurrency=16),
    "poisson": dict(workload="random", num_prompts=16, input_len=128, output_len=32,
                    request_rate=1.0),
    "shared-prefix": dict(workload="shared-prefix", num_prompts=16, prefix_len=512,
                          input_len=32, output_len=32, concurrency=4),
    # Issue 36's: 8 users behind one 1024-token system prompt, each with its own question.
    "shared-prefix-1k": dict(workload="shared-prefix", num_prompts=32, prefix_len=1024,
                             input_len=32, output_len=32, concurrency=8),
    "long-prompt": dict(workload="long-prompt", concurrency=3, input_len=64, output_len=96,
                        long_input_len=1024, long_output_len=8, long_after_tokens=8),
}
SWEEP = ("c1", "c4", "c8")
# (JSON path in the metrics, table header, higher is better)
TABLE = (("output_throughput", "output tok/s", True),
         ("request_throughput", "req/s", True),
         ("request_goodput", "goodput req/s", True),
         ("ttft_ms.median", "TTFT median ms", False),
         ("tpot_ms.median", "TPOT median ms", False),
         ("itl_ms.p99", "ITL p99 ms", False),
         ("e2el_ms.median", "E2E median ms", False))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer 200 within {timeout} s")


def start(args, log_dir):
    """Starts both engines; returns ({engine: base url}, [processes])."""
    procs = []

    def spawn(name, cmd):
        log = open(log_dir / f"{name}.log", "w")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        return procs[-1]

    bin_dir = Path(args.build) / "bin"
    grpc_port, http_port, llama_port = free_port(), free_port(), free_port()
    spawn("tokenmill-server", [str(bin_dir / "tokenmill-server"), "--model", args.model,
                               "--threads", str(args.threads), "--port", str(grpc_port),
                               "--metrics-port", "-1", *args.tokenmill_server_args.split()])
    gateway = spawn("tokenmill-gateway", [str(bin_dir / "tokenmill-gateway"), "--backend",
                                          f"127.0.0.1:{grpc_port}", "--port", str(http_port)])
    if args.llama_server:
        llama = spawn("llama-server", [
            args.llama_server, "--model", args.model, "--threads", str(args.threads),
            "--threads-batch", str(args.threads), *args.llama_server_args.split(),
            "--host", "127.0.0.1", "--port", str(llama_port)])
    else:
        llama = spawn("llama_cpp.server", [
            sys.executable, "-m", "llama_cpp.server", "--model", args.model,
            "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
            "--n_ctx", "4096", "--interrupt_requests", "False", "--host", "127.0.0.1",
            "--port", str(llama_port)])
    urls = {"tokenmill": f"http://127.0.0.1:{http_port}",
            "llama.cpp": f"http://127.0.0.1:{llama_port}"}
    wait_http(urls["tokenmill"] + "/health", gateway)
    wait_http(urls["llama.cpp"] + "/v1/models", llama)
    return urls, procs


def lookup(metrics, path):
    value = metrics
    for part in path.split("."):
        value = value[part]
    return value


def summarize_scenario(runs):
    """runs: {engine: [result per repeat]} -> {engine: {metric: median}, "ratio": {...}}."""
    out = {"ratio": {}}
    for engine in ENGINES:
        out[engine] = {}
        for path, _, _ in TABLE:
            values = [lookup(r["metrics"], path) for r in runs[engine]]
            values = [v for v in values if v is not None]
            out[engine][path] = statistics.median(values) if values else None
    for path, _, _ in TABLE:
        ratios = [lookup(a["metrics"], path) / lookup(b["metrics"], path)
                  for a, b in zip(runs["tokenmill"], runs["llama.cpp"])
                  if lookup(a["metrics"], path) is not None and lookup(b["metrics"], path)]
        out["ratio"][path] = statistics.median(ratios) if ratios else None
    for engine in ENGINES:
        if "long_prompt" in runs[engine][0]:
            out[engine]["long_prompt"] = [r["long_prompt"] for r in runs[engine]]
    return out


def markdown(summary):
    head = "| scenario | engine | " + " | ".join(h for _, h, _ in TABLE) + " |"
    lines = [head, "|" + "---|" * (len(TABLE) + 2)]

    def cell(v, ratio=False):
        if v is None:
            return "-"
        return f"{v:.2f}x" if ratio else (f"{v:.2f}" if v < 100 else f"{v:.0f}")

    for name, s in summary.items():
        for engine in ENGINES:
            lines.append(f"| {name} | {engine} | " +
                         " | ".join(cell(s[engine][p]) for p, _, _ in TABLE) + " |")
        lines.append(f"| {name} | **ratio** | " +
                     " | ".join(cell(s["ratio"][p], True) for p, _, _ in TABLE) + " |")
    lines.append("")
    lines.append("ratio: median over the repeats of tokenmill / llama.cpp (above 1 is better for "
                 "the rates, below 1 for the latencies; - where llama.cpp's value is 0).")
    long = summary.get("long-prompt")
    if long:
        lines += ["", "| long-prompt | long prompt TTFT ms | decoder ITL during its prefill: "
                  "median / max ms | decoder ITL otherwise: median / p99 ms |", "|---|---|---|---|"]
        for engine in ENGINES:
            reports = [r for r in long[engine].get("long_prompt", []) if "long_ttft_ms" in r]
            if not reports:
                continue
            med = statistics.median

            def during(k):
                return med(r["decoder_itl_during_long_prefill_ms"][k] for r in reports)

            def otherwise(k):
                return med(r["decoder_itl_otherwise_ms"][k] for r in reports)

            lines.append(f"| {engine} | {med(r['long_ttft_ms'] for r in reports):.0f} | "
                         f"{during('median'):.0f} / {during('max'):.0f} | "
                         f"{otherwise('median'):.0f} / {otherwise('p99'):.0f} |")
    return "\n".join(lines) + "\n"


def scenario_args(name, repeat, args):
    parser = argparse.ArgumentParser()
    benchmark.add_arguments(parser)
    ns = parser.parse_args(["--tokenizer", args.model, "--no-progress"] if args.quiet
                           else ["--tokenizer", args.model])
    for key, value in SCENARIOS[name].items():
        setattr(ns, key, value)
    if args.num_prompts and "num_prompts" in SCENARIOS[name]:
        ns.num_prompts = args.num_prompts
    # New prompts for every scenario and repeat: no prefix-cache hits across runs.
    ns.seed = args.seed + 1000 * repeat + list(SCENARIOS).index(name)
    ns.goodput = args.goodput
    ns.label = name
    return ns


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenarios", nargs="*", default=list(SCENARIOS),
                        choices=list(SCENARIOS))
    parser.add_argument("--num-prompts", type=int, default=0,
                        help="requests per scenario, instead of each scenario's own count")
    parser.add_argument("--goodput", nargs="*", default=["ttft:3000", "tpot:250"])
    parser.add_argument("--tokenmill-server-args", default="--max-num-batched-tokens 256",
                        help="extra tokenmill-server flags (the default chunks long prefills)")
    parser.add_argument("--llama-server", default="",
                        help="llama.cpp's llama-server binary, instead of llama_cpp.server")
    parser.add_argument("--llama-server-args",
                        default="-c 16384 -np 8 -b 2048 -ub 512 -fa on --cache-ram 8192",
                        help="llama-server's flags besides model, threads, host and port")
    parser.add_argument("--out-dir", default="/tmp/tokenmill-serve-bench")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    factory = workloads.PromptFactory(args.model)
    from llama_cpp import Llama
    eos_id = Llama(model_path=args.model, vocab_only=True, verbose=False).token_eos()
    # llama-server reads ignore_eos from the body; llama_cpp.server needs a logit bias.
    ignore_eos = {"tokenmill": "param",
                  "llama.cpp": "param" if args.llama_server else f"logit-bias:{eos_id}"}
    urls, procs = start(args, out)
    runs = {name: {e: [] for e in ENGINES} for name in args.scenarios}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    loads = [os.getloadavg()[0]]
    try:
        for repeat in range(args.repeats):
            for i, name in enumerate(args.scenarios):
                order = ENGINES if (repeat + i) % 2 == 0 else ENGINES[::-1]
                for engine in order:
                    ns = scenario_args(name, repeat, args)
                    ns.base_url, ns.ignore_eos = urls[engine], ignore_eos[engine]
                    ns.label = f"{engine} {name}"
                    result = asyncio.run(benchmark.run(ns, factory))
                    result["repeat"] = repeat
                    runs[name][engine].append(result)
                    loads.append(os.getloadavg()[0])
                    m = result["metrics"]
                    print(f"repeat {repeat} {name:13} {engine:9} out {m['output_throughput']:7.1f}"
                          f" tok/s  TTFT med {m['ttft_ms']['median']:8.0f} ms  TPOT med "
                          f"{m['tpot_ms']['median']:6.0f} ms  failed {m['failed']}"
                          f"  short {m['short_outputs']}", flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)

    summary = {name: summarize_scenario(runs[name]) for name in args.scenarios}
    meta = {"started": started, "model": args.model, "threads": args.threads,
            "repeats": args.repeats, "goodput_slos": args.goodput,
            "num_prompts_override": args.num_prompts,
            "tokenmill_server_args": args.tokenmill_server_args,
            "llama_cpp": (f"{args.llama_server} {args.llama_server_args}" if args.llama_server
                          else "llama_cpp.server"),
            "load_average_1min": {"min": min(loads), "max": max(loads)},
            "scenarios": {n: SCENARIOS[n] for n in args.scenarios}}
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    (out / "summary.json").write_text(json.dumps({"meta": meta, "summary": summary}, indent=1))
    (out / "summary.md").write_text(markdown(summary))
    for name in args.scenarios:
        plots.plot_runs({e: runs[name][e] for e in ENGINES}, out / f"{name}.png",
                        title=f"{name}: {SCENARIOS[name]}")
    sweep = [n for n in SWEEP if n in args.scenarios]
    if len(sweep) > 1:
        points = {e: [(SCENARIOS[n]["concurrency"],
                       {p: summary[n][e][p] for p in ("output_throughput", "request_throughput")}
                       | {"ttft_ms": summary[n][e]["ttft_ms.median"],
                          "tpot_ms": summary[n][e]["tpot_ms.median"]}) for n in sweep]
                  for e in ENGINES}
        plots.plot_sweep(points, out / "sweep.png", title="closed loop, 128 in / 32 out")
    print(markdown(summary))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
