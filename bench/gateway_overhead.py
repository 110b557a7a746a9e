"""What tokenmill-gateway adds to a request: the same requests sent straight to
tokenmill-server over gRPC and through the gateway (official `openai` client), interleaved.

  1. latency of a 1-token completion, one request at a time (median and p90);
  2. streamed tokens/s and time to first token with --concurrency streams of --tokens each.

Starts its own server and gateway on free ports (tests/e2e harnesses).

  .venv/bin/python bench/gateway_overhead.py --threads 2 --rounds 3
"""
import argparse
import concurrent.futures
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from gateway_harness import Gateway, backend_address, model_name  # noqa: E402
from server_harness import Server, pb2  # noqa: E402

PROMPT = "Write a long story about a lighthouse keeper and a storm."


def timed_streams(start_stream, concurrency):
    """(tokens/s over all streams, median time to first token) of `concurrency` streams."""
    def one(_):
        t0 = time.perf_counter()
        first = None
        tokens = 0
        for n in start_stream():
            if first is None:
                first = time.perf_counter() - t0
            tokens += n
        return tokens, first

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(concurrency)))
    wall = time.perf_counter() - t0
    return sum(r[0] for r in results) / wall, statistics.median(r[1] for r in results)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=50, help="1-token requests per round")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()

    with Server("--threads", args.threads) as server, Gateway(backend_address(server)) as gw:
        client = gw.client()
        model = model_name(gw)

        def grpc_one():
            list(server.stub.Generate(pb2.GenerateRequest(text=PROMPT, max_tokens=1)))

        def http_one():
            client.completions.create(model=model, prompt=PROMPT, max_tokens=1)

        def grpc_stream():
            request = pb2.GenerateRequest(text=PROMPT, max_tokens=args.tokens, ignore_eos=True)
            return (len(r.token_ids) for r in server.stub.Generate(request))

        def http_stream():
            stream = client.completions.create(model=model, prompt=PROMPT, stream=True,
                                               max_tokens=args.tokens,
                                               stream_options={"include_usage": True},
                                               extra_body={"ignore_eos": True})
            # A chunk's text may hold several tokens (or none yet): text chunks mark the first
            # token's arrival, the usage chunk gives the exact count.
            for c in stream:
                if c.usage is not None:
                    yield c.usage.completion_tokens
                elif c.choices and c.choices[0].text:
                    yield 0

        grpc_one(), http_one()  # warm up
        latency = {"grpc": [], "gateway": []}
        streams = {"grpc": [], "gateway": []}
        for _ in range(args.rounds):
            for name, one in (("grpc", grpc_one), ("gateway", http_one)):
                for _ in range(args.requests):
                    t0 = time.perf_counter()
                    one()
                    latency[name].append(time.perf_counter() - t0)
            for name, start in (("grpc", grpc_stream), ("gateway", http_stream)):
                streams[name].append(timed_streams(start, args.concurrency))

        print(f"threads={args.threads} rounds={args.rounds} requests/round={args.requests} "
              f"concurrency={args.concurrency} tokens={args.tokens}")
        for name in ("grpc", "gateway"):
            ms = sorted(x * 1000 for x in latency[name])
            rates = [s[0] for s in streams[name]]
            ttfts = [s[1] * 1000 for s in streams[name]]
            print(f"{name:8s} 1-token latency median {statistics.median(ms):6.1f} ms  "
                  f"p90 {ms[int(0.9 * (len(ms) - 1))]:6.1f} ms | {args.concurrency} streams: "
                  f"{statistics.median(rates):6.1f} tok/s, TTFT median "
                  f"{statistics.median(ttfts):6.1f} ms")


if __name__ == "__main__":
    main()
