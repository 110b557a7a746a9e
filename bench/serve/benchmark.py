"""Serving benchmark over the OpenAI completions API: drives tokenmill-gateway,
llama_cpp.server or vLLM alike and reports vLLM's serving metrics (metrics.py).

Arrivals: closed loop (--concurrency N: N clients, each sends its next request when the last
one finished) or Poisson (--request-rate R requests/s, optionally capped by
--max-concurrency). Workloads (workloads.py): random prompts, a shared system prompt
(prefix caching), or a long prompt that arrives while short ones decode (chunked prefill).
Greedy, fixed seeds, fixed output lengths (EOS ignored).

  .venv/bin/python bench/serve/benchmark.py --base-url http://127.0.0.1:8000 \
      --tokenizer models/SmolLM2-135M-Instruct.Q4_1.gguf --workload random \
      --num-prompts 32 --input-len 128 --output-len 32 --concurrency 4 \
      --goodput ttft:2000 tpot:200 --result-json out.json --plot out.png
"""
import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

import aiohttp
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client import completion_body, stream_completion  # noqa: E402
from metrics import itls_within, distribution_ms, summarize  # noqa: E402
import workloads  # noqa: E402

TIMEOUT = aiohttp.ClientTimeout(total=3600, sock_read=600)


async def served_model(session, base_url):
    async with session.get(f"{base_url}/v1/models") as response:
        response.raise_for_status()
        return (await response.json())["data"][0]["id"]


async def closed_loop(send, specs, concurrency):
    pending = iter(specs)
    traces = []

    async def client():
        for spec in pending:  # one iterator shared by all clients
            traces.append(await send(spec))

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return traces


async def poisson(send, specs, rate, max_concurrency, seed):
    rng = random.Random(seed)
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def limited(spec):
        if limit is None:
            return await send(spec)
        async with limit:
            return await send(spec)

    tasks = []
    for spec in specs:
        tasks.append(asyncio.create_task(limited(spec)))
        await asyncio.sleep(rng.expovariate(rate))
    return list(await asyncio.gather(*tasks))


async def long_prompt_arrival(send, decoders, long, after_tokens):
    """Starts every decoder, sends the long prompt once each has streamed after_tokens
    tokens (or finished), waits for all."""
    decoding = asyncio.Event()
    progress = {}

    def on_chunk(trace):
        progress[id(trace)] = len(trace.chunk_times)
        if sum(1 for n in progress.values() if n >= after_tokens) == len(decoders):
            decoding.set()

    tasks = [asyncio.create_task(send(spec, on_chunk)) for spec in decoders]
    waiter = asyncio.create_task(decoding.wait())
    await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    long_trace = await send(long)
    return list(await asyncio.gather(*tasks)) + [long_trace]


def long_prompt_report(traces):
    """The long prompt's TTFT, and the decoders' ITL while it was prefilled vs otherwise."""
    long = next(t for t in traces if t.tag == "long")
    if not long.success:
        return {"error": long.error}
    start, end = long.send_time, long.chunk_times[0]
    inside = itls_within(traces, start, end, tag="decoder")
    outside = (itls_within(traces, float("-inf"), start, tag="decoder") +
               itls_within(traces, end, float("inf"), tag="decoder"))
    return {"long_ttft_ms": (end - start) * 1000.0,
            "long_prompt_tokens": long.prompt_tokens,
            "decoder_itl_during_long_prefill_ms": distribution_ms(inside),
            "decoder_itl_otherwise_ms": distribution_ms(outside),
            "decoder_chunks_during_long_prefill": len(inside)}


def build_workload(args, factory):
    if args.workload == "random":
        return workloads.random_workload(factory, args.num_prompts, args.input_len,
                                         args.output_len, args.seed)
    if args.workload == "shared-prefix":
        return workloads.shared_prefix_workload(factory, args.num_prompts, args.prefix_len,
                                                args.input_len, args.output_len, args.seed)
    return workloads.long_prompt_workload(factory, args.concurrency, args.input_len,
                                          args.output_len, args.long_input_len,
                                          args.long_output_len, args.seed)


async def run(args, factory=None):
    """One benchmark run; returns the result dict (also what --result-json writes)."""
    factory = factory or workloads.PromptFactory(args.tokenizer)
    built = build_workload(args, factory)
    warmup = workloads.random_workload(factory, 1, 16, 4, args.seed, "warmup")[0]
    url = f"{args.base_url}/v1/completions"
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    # A connection a request: llama-server closes a kept-alive connection after a few
    # requests (cpp-httplib's keep-alive count), and a POST written into a closed one fails.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(timeout=TIMEOUT, headers=headers,
                                     connector=connector) as session:
        model = args.model or await served_model(session, args.base_url)
        warm = await stream_completion(session, url, completion_body(
            model, warmup, args.seed, args.ignore_eos), warmup)
        if not warm.success:
            raise SystemExit(f"warm-up request failed: {warm.error}")
        total = args.concurrency + 1 if args.workload == "long-prompt" else len(built)
        bar = tqdm(total=total, desc=args.label or args.workload, unit="req",
                   disable=args.no_progress, file=sys.stderr)

        async def send(spec, on_chunk=None):
            body = completion_body(model, spec, args.seed, args.ignore_eos)
            trace = await stream_completion(session, url, body, spec, on_chunk)
            bar.update(1)
            return trace

        start = time.perf_counter()
        if args.workload == "long-prompt":
            decoders, long = built
            traces = await long_prompt_arrival(send, decoders, long, args.long_after_tokens)
        elif args.request_rate:
            traces = await poisson(send, built, args.request_rate, args.max_concurrency,
                                   args.seed)
        else:
            traces = await closed_loop(send, built, args.concurrency)
        duration = time.perf_counter() - start
        bar.close()

    result = {
        "label": args.label, "base_url": args.base_url, "model": model,
        "workload": {k: getattr(args, k) for k in (
            "workload", "num_prompts", "input_len", "output_len", "prefix_len",
            "long_input_len", "long_output_len", "long_after_tokens", "seed", "ignore_eos")},
        "arrival": ({"request_rate": args.request_rate, "max_concurrency": args.max_concurrency}
                    if args.request_rate and args.workload != "long-prompt"
                    else {"concurrency": args.concurrency}),
        "metrics": summarize(traces, duration, parse_slos(args.goodput)),
        "requests": [{"tag": t.tag, "success": t.success, "error": t.error,
                      "prompt_tokens": t.prompt_tokens, "output_tokens": t.output_tokens,
                      "ttft_ms": t.ttft * 1000 if t.chunk_times else None,
                      "e2el_ms": t.latency * 1000 if t.chunk_times else None,
                      "tpot_ms": t.tpot * 1000 if t.success and t.tpot else None,
                      "itl_ms": [g * 1000 for g in t.itls]} for t in traces],
    }
    if args.workload == "long-prompt":
        result["long_prompt"] = long_prompt_report(traces)
    return result


def parse_slos(items):
    """["ttft:2000", "tpot:100"] -> {"ttft": 2000.0, "tpot": 100.0} (milliseconds)."""
    slos = {}
    for item in items or []:
        name, _, value = item.partition(":")
        if name not in ("ttft", "tpot", "e2el") or not value:
            raise SystemExit(f"--goodput {item}: use ttft:MS, tpot:MS or e2el:MS")
        slos[name] = float(value)
    return slos


def add_arguments(parser):
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    parser.add_argument("--tokenizer", required=True,
                        help="the GGUF the server runs: its vocabulary builds the prompts")
    parser.add_argument("--workload", choices=["random", "shared-prefix", "long-prompt"],
                        default="random")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=128,
                        help="prompt tokens (shared-prefix: each prompt's own suffix)")
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--prefix-len", type=int, default=512, help="shared-prefix: its tokens")
    parser.add_argument("--long-input-len", type=int, default=1024)
    parser.add_argument("--long-output-len", type=int, default=8)
    parser.add_argument("--long-after-tokens", type=int, default=8,
                        help="long-prompt: tokens each decoder streams before it is sent")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="closed-loop clients (long-prompt: the decoding requests)")
    parser.add_argument("--request-rate", type=float, default=0.0,
                        help="Poisson arrivals per second instead of a closed loop")
    parser.add_argument("--max-concurrency", type=int, default=0,
                        help="with --request-rate: requests in flight at most (0: no cap)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ignore-eos", default="param",
                        help="param (ignore_eos: true), logit-bias:EOS_ID, or off")
    parser.add_argument("--goodput", nargs="*", metavar="METRIC:MS",
                        help="SLOs for goodput, e.g. ttft:2000 tpot:200 e2el:10000")
    parser.add_argument("--label", default="")
    parser.add_argument("--api-key", default="", help="sent as 'Authorization: Bearer KEY'")
    parser.add_argument("--no-progress", action="store_true")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--result-json", help="write the result here")
    parser.add_argument("--plot", help="write the latency distributions here (PNG)")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    m = result["metrics"]
    print(json.dumps({k: m[k] for k in ("completed", "failed", "short_outputs",
                                        "request_throughput",
                                        "output_throughput", "request_goodput")}, indent=1))
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        d = m[name]
        print(f"{name:8} mean {d['mean']:9.1f}  median {d['median']:9.1f}  p99 {d['p99']:9.1f}")
    if "long_prompt" in result:
        print(json.dumps(result["long_prompt"], indent=1))
    if args.result_json:
        Path(args.result_json).write_text(json.dumps(result, indent=1))
    if args.plot:
        import plots
        plots.plot_runs({args.label or "run": [result]}, args.plot)


if __name__ == "__main__":
    main()
