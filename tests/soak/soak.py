#!/usr/bin/env python3
"""Soak and chaos test (issue 12), loopback only and bounded in time.

Starts tokenmill-server and tokenmill-gateway, takes (--capacity) or measures the sustainable
number of concurrent streams, then for --minutes drives about twice that many closed-loop
clients, each drawing its next request from a mix: gRPC streams, OpenAI-client streams and whole
completions through the gateway, n > 1, stop strings, clients that cancel or disconnect
mid-stream, short deadlines, and malformed gRPC and HTTP requests, among them the adversarial
suite's attacks (JSON nested past any stack, forged turns, smuggled framing).

It fails (exit status 1) when
  - a request ends in a way its kind does not allow (an unexpected status, a stream without its
    final response, a stop string in the text), or hangs past --request-timeout;
  - once idle, the server has KV blocks in use or its idle self-check failed
    (tokenmill:engine_idle_check_failures_total, run by the engine thread);
  - the gateway still holds buffered responses or open backend calls;
  - either process exited (restarted) or is not healthy at the end;
  - the RSS of either grew after the warm-up by more than --max-rss-growth-mib.
It prints a summary: requests by kind and outcome, p50/p99 latency, RSS start/peak/end.

  nice .venv/bin/python tests/soak/soak.py --minutes 10

The request kinds and the driver: load_mix.py; the checks at idle: soak_checks.py.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from load_mix import OK, Clients, Stats, drive, measure_capacity
from soak_checks import (RssSampler, idle_problems, idle_state, outcome_counts, process_problems,
                         rss_growth, wait_idle)

from gateway_harness import Gateway, backend_address  # noqa: E402 (on load_mix's path)
from server_harness import DEFAULT_MODEL, Server  # noqa: E402


def soak(args):
    server_args = ["--kv-cache-memory", args.kv_cache_memory, "--threads", str(args.threads),
                   *args.server_arg]
    with Server(*server_args, model=args.model, log_level="info") as server, \
            Gateway(backend_address(server), log_level="info") as gateway:
        model = gateway.client().models.list().data[0].id
        clients = Clients(server, gateway, model, args.max_tokens, args.request_timeout)
        pids = {"server": server.proc.pid, "gateway": gateway.proc.pid}
        report = {"model": Path(args.model).name, "minutes": args.minutes, "seed": args.seed,
                  "server_args": server_args, "max_tokens": args.max_tokens}
        if args.capacity:
            capacity, curve = args.capacity, None
        else:
            capacity, rate, curve = measure_capacity(clients, args.probe_seconds)
            report["capacity_req_per_s"] = round(rate, 2)
        workers = max(2, round(args.load_factor * capacity))
        report.update(capacity_streams=capacity, capacity_curve_tokens_per_s=curve,
                      clients=workers, load1_start=os.getloadavg()[0])
        print(f"soak: capacity {capacity} streams; {workers} clients for {args.minutes} min",
              flush=True)
        sampler = RssSampler(pids, args.rss_period)
        sampler.sample()
        sampler.start()
        stats = Stats()
        idle_checks_before = server.metrics()["tokenmill:engine_idle_checks_total"]
        started = time.monotonic()
        drive(clients, workers, args.minutes * 60, args.seed, stats)
        report["drive_seconds"] = round(time.monotonic() - started, 1)
        report["load1_end"] = os.getloadavg()[0]

        problems = list(stats.failures)
        idle = wait_idle(server)
        sampler.stop()
        report["idle"] = idle_state(idle, gateway.metrics())
        problems += idle_problems(idle, report["idle"], idle_checks_before)
        problems += process_problems(server, gateway, pids)
        report["rss_mib"], rss_problems = rss_growth(
            sampler.samples, pids, args.warmup_fraction * args.minutes * 60,
            args.max_rss_growth_mib)
        problems += rss_problems
        report["rss_samples"] = len(sampler.samples)
        report.update(outcome_counts(stats), problems=problems)
        if report["by_outcome"].get(OK, 0) == 0:
            problems.append("no request finished")
        if problems and args.log_dir:
            Path(args.log_dir).mkdir(parents=True, exist_ok=True)
            Path(args.log_dir, "server.log").write_text(server.log_text())
            Path(args.log_dir, "gateway.log").write_text(gateway.log_text())
        return report


def print_summary(report):
    print(f"\n== soak: {report['model']}, {report['clients']} clients "
          f"(capacity {report['capacity_streams']} streams), {report['drive_seconds']} s, "
          f"load {report['load1_start']:.1f} -> {report['load1_end']:.1f}")
    print(f"requests {report['requests']}: " +
          ", ".join(f"{k} {v}" for k, v in sorted(report["by_outcome"].items())))
    for kind, outcomes in report["by_kind"].items():
        lat = report["latency_s"].get(kind)
        lat_text = f"  p50 {lat['p50']:.3f} s p99 {lat['p99']:.3f} s" if lat else ""
        print(f"  {kind:20s} " + ", ".join(f"{k} {v}" for k, v in outcomes.items()) + lat_text)
    a = report["latency_all_finished_s"]
    print(f"finished requests: p50 {a['p50']:.3f} s, p99 {a['p99']:.3f} s")
    for name, r in report["rss_mib"].items():
        print(f"RSS {name}: start {r['start']} MiB, after warm-up {r['after_warmup']}, "
              f"peak {r['peak']}, end {r['end']} (growth {r['growth_after_warmup']})")
    print("idle: " + ", ".join(f"{k} {v}" for k, v in report["idle"].items()))
    print("PROBLEMS:\n  " + "\n  ".join(report["problems"]) if report["problems"] else "OK")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument("--capacity", type=int, default=0,
                   help="sustainable concurrent streams (0: measure them first)")
    p.add_argument("--probe-seconds", type=float, default=20,
                   help="seconds per level of the capacity measurement")
    p.add_argument("--load-factor", type=float, default=2.0, help="clients per capacity stream")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--kv-cache-memory", default="32MiB",
                   help="small, so that the load also preempts")
    p.add_argument("--threads", type=int, default=0, help="server forward-pass threads")
    p.add_argument("--server-arg", action="append", default=[],
                   help="one more tokenmill-server argument (repeat: --server-arg=--spec "
                        "--server-arg=ngram)")
    p.add_argument("--request-timeout", type=float, default=120,
                   help="a request with no end by then counts as hung")
    p.add_argument("--warmup-fraction", type=float, default=0.2,
                   help="RSS growth counts from this fraction of the run")
    p.add_argument("--max-rss-growth-mib", type=float, default=48)
    p.add_argument("--rss-period", type=float, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json-out", help="write the report here")
    p.add_argument("--log-dir", help="on failure, write both processes' logs here")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    report = soak(args)
    print_summary(report)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
