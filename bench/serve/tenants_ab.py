#!/usr/bin/env python3
"""What tenants cost a serving deployment: tokenmill-server + tokenmill-gateway of build A as
they ran before tenants (no keys), against build B with the keys of a shared deployment (the
gateway's --api-key-file naming two tenants, the server's --api-key; every request then looks
its key up, counts against its tenant's limits, names its tenant to the server and gets a
tenant-derived prefix-cache salt). Both stacks up at once, the benchmark client (benchmark.py)
on each in interleaved pairs (A B, then B A, ...), fresh prompts per pair; reports per scenario
the mean ratio B/A, with its 95% confidence interval, of output tokens/s and of the CPU time the
server and the gateway spent per output token (/proc: less moved by other jobs on the machine
than wall-clock rates). With --a and --b the same build, the ratio is what the keys cost alone.

  .venv/bin/python bench/serve/tenants_ab.py --a /tmp/before/bin --b build/bin --pairs 6
  .venv/bin/python bench/serve/tenants_ab.py --a /tmp/before/bin --scenario "shared-prefix c8" \
      --prompts-scale 4 --pairs 20
"""
import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark  # noqa: E402
import workloads  # noqa: E402
from side_by_side import free_port, wait_http  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BACKEND_KEY = "bench-backend-key-0123456789"
TENANT_KEYS = {"tenant-a": "sk-bench-tenant-a-0123456789", "tenant-b": "sk-bench-tenant-b-0123"}
SCENARIOS = {
    "random c16": {"workload": "random", "concurrency": 16, "num_prompts": 64,
                   "input_len": 128, "output_len": 32},
    "shared-prefix c8": {"workload": "shared-prefix", "concurrency": 8, "num_prompts": 32,
                         "input_len": 64, "output_len": 16, "prefix_len": 256},
}
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
       16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069,
       24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045}


def cpu_seconds(procs):
    """User + system CPU seconds of each process so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = []
    for p in procs:
        with open(f"/proc/{p.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        out.append((int(fields[11]) + int(fields[12])) / ticks)
    return out


def start_stack(bin_dir, model, threads, keyed, work, procs):
    work.mkdir()
    grpc_port, http_port = free_port(), free_port()
    server = [str(bin_dir / "tokenmill-server"), "--model", model, "--threads", str(threads),
              "--port", str(grpc_port), "--metrics-port", "-1"]
    gateway = [str(bin_dir / "tokenmill-gateway"), "--backend", f"127.0.0.1:{grpc_port}",
               "--port", str(http_port)]
    if keyed:
        keys = work / "keys.txt"
        keys.write_text("".join(f"{key} {tenant}\n" for tenant, key in TENANT_KEYS.items()))
        server += ["--api-key", BACKEND_KEY]
        gateway += ["--api-key-file", str(keys), "--backend-api-key", BACKEND_KEY]
    for role, cmd in (("server", server), ("gateway", gateway)):
        log = open(work / f"{role}.log", "w")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
    url = f"http://127.0.0.1:{http_port}"
    wait_http(url + "/health", procs[-1])
    return url, procs[-2:]


def scenario(name, pair, args, url, api_key):
    parser = argparse.ArgumentParser()
    benchmark.add_arguments(parser)
    ns = parser.parse_args(["--tokenizer", args.model, "--no-progress"])
    for key, value in SCENARIOS[name].items():
        setattr(ns, key, value)
    ns.num_prompts *= args.prompts_scale
    ns.seed = args.seed + 1000 * pair + list(SCENARIOS).index(name)
    ns.base_url, ns.api_key, ns.label = url, api_key, name
    return ns


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="bin dir of the build before tenants")
    parser.add_argument("--b", default=str(ROOT / "build/bin"), help="bin dir with tenants")
    parser.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", choices=list(SCENARIOS), action="append",
                        help="run only this scenario (repeatable; all by default)")
    parser.add_argument("--prompts-scale", type=int, default=1,
                        help="each run sends this many times the scenario's prompts (longer "
                             "runs, less pair-to-pair spread)")
    args = parser.parse_args()
    scenarios = args.scenario or list(SCENARIOS)
    factory = workloads.PromptFactory(args.model)
    procs = []
    measures = ("output tokens/s", "server CPU s per token", "gateway CPU s per token")
    ratios = {(name, m): [] for name in scenarios for m in measures}
    with tempfile.TemporaryDirectory(prefix="tenants_ab_") as work:
        try:
            stacks = {"a": start_stack(Path(args.a), args.model, args.threads, False,
                                       Path(work) / "a", procs),
                      "b": start_stack(Path(args.b), args.model, args.threads, True,
                                       Path(work) / "b", procs)}
            keys = {"a": "", "b": TENANT_KEYS["tenant-a"]}
            for pair in range(args.pairs):
                for i, name in enumerate(scenarios):
                    order = "ab" if (pair + i) % 2 == 0 else "ba"
                    out = {}
                    for build in order:
                        url, pair_procs = stacks[build]
                        cpu_before = cpu_seconds(pair_procs)
                        result = asyncio.run(benchmark.run(
                            scenario(name, pair, args, url, keys[build]), factory))
                        cpu = [after - before for before, after in
                               zip(cpu_before, cpu_seconds(pair_procs))]
                        m = result["metrics"]
                        assert m["failed"] == 0, m
                        tokens = m["total_output_tokens"]
                        out[build] = (m["output_throughput"], cpu[0] / tokens, cpu[1] / tokens)
                    for k, measure in enumerate(measures):
                        ratios[(name, measure)].append(out["b"][k] / out["a"][k])
                    print(f"pair {pair} {name:16} " + ", ".join(
                        f"{measure} B/A {ratios[(name, measure)][-1]:.3f}"
                        for measure in measures), flush=True)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=60)
    for (name, measure), values in ratios.items():
        mean = statistics.mean(values)
        half = (T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
                if len(values) > 1 else float("nan"))
        print(f"{name}: {measure} B/A {mean:.4f} [{mean - half:.3f}, {mean + half:.3f}] "
              f"over {len(values)} pairs")


if __name__ == "__main__":
    main()
