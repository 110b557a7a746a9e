"""Time to first token of a long shared prefix served three ways by one tokenmill-server with a
tier below its KV pool: computed (cold), found in the KV pool (a pool hit), and brought back
from the tier after other traffic evicted it from the pool.

With --tier disk (--kv-cache-dir), the block files are dropped from the page cache first
(posix_fadvise DONTNEED), against the issue's bound
    disk TTFT <= pool TTFT + 1.5 x bytes loaded / disk read bandwidth,
the bandwidth measured on the same directory in the same run (a file written, dropped from the
page cache, read back), interleaved with the rounds. With --tier host (--kv-cache-host-size),
the blocks come back from host memory. Each round checks the tier hit's tokens against the
cold computation's. Prints one line per round and the medians.

  .venv/bin/python bench/serve/kv_tier_ttft.py --words 3000 --rounds 5
  .venv/bin/python bench/serve/kv_tier_ttft.py --tier host --words 3000 --rounds 5
  .venv/bin/python bench/serve/kv_tier_ttft.py --words 700 --rounds 3 --kv-cache-memory 96MiB \
      --model models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
"""
import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from server_harness import Server, pb2  # noqa: E402

WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone cloud "
         "harbour ledger mountain valley orchard lantern").split()


def drop_from_page_cache(paths):
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_bandwidth(directory, megabytes=256):
    """Bytes per second reading a new file of the directory's file system, uncached."""
    path = Path(directory) / "bandwidth.probe"
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(megabytes):
            f.write(chunk)
    drop_from_page_cache([path])
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(4 << 20):
            pass
    seconds = time.perf_counter() - start
    path.unlink()
    return megabytes * (1 << 20) / seconds


def ttft(server, text, max_tokens=8):
    """(seconds to the first token, token ids, cached prompt tokens)."""
    start = time.perf_counter()
    first, ids, usage = None, [], None
    for response in server.stub.Generate(pb2.GenerateRequest(text=text, max_tokens=max_tokens,
                                                             ignore_eos=True), timeout=600):
        if response.token_ids and first is None:
            first = time.perf_counter() - start
        ids += response.token_ids
        if response.HasField("usage"):
            usage = response.usage
    return first, ids, usage.cached_prompt_tokens


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=3000, help="words of the shared prefix")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kv-cache-memory", default="160MiB",
                        help="the pool: room for the prefix and the traffic that evicts it")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--tier", choices=("disk", "host"), default="disk")
    parser.add_argument("--host-size", default="2GiB", help="--kv-cache-host-size for --tier host")
    parser.add_argument("--model", default=None, help="the GGUF to serve (default: the tests')")
    args = parser.parse_args()
    rng = random.Random(11)
    model = {"model": Path(args.model).resolve()} if args.model else {}
    with tempfile.TemporaryDirectory(prefix="tokenmill-kv-bench-", dir=REPO / "build") as tmp:
        kv_dir = Path(tmp) / "kv"
        tier = (("--kv-cache-dir", kv_dir) if args.tier == "disk" else
                ("--kv-cache-host-size", args.host_size))
        with Server(*tier, "--kv-cache-memory", args.kv_cache_memory,
                    "--threads", args.threads, "--max-num-batched-tokens", 2048,
                    log_level="info", **model) as server:
            rows = []
            for round_ in range(args.rounds):
                bandwidth = read_bandwidth(kv_dir.parent)
                prefix = words(rng, args.words)
                question = " " + words(rng, 12)
                cold, expected, cached = ttft(server, prefix + question)
                assert cached == 0
                pool, ids, pool_cached = ttft(server, prefix + question)
                assert ids == expected and pool_cached > 0
                # Other prefixes as long push this one out of the pool; their blocks go to disk.
                for _ in range(3):
                    ttft(server, words(rng, args.words), max_tokens=1)
                label = f"tier={args.tier}"
                before = server.metrics()
                loads_before = before[f"tokenmill:kv_tier_load_bytes_total{{{label}}}"]
                if args.tier == "disk":
                    time.sleep(0.5)  # the writer thread drains its queue
                    drop_from_page_cache(sorted(kv_dir.rglob("*.kvb")))
                hit, ids, hit_cached = ttft(server, prefix + question)
                assert ids == expected, f"a {args.tier} hit changed the tokens"
                after = server.metrics()
                loaded = after[f"tokenmill:kv_tier_load_bytes_total{{{label}}}"] - loads_before
                bound = pool + 1.5 * loaded / bandwidth
                rows.append((cold, pool, hit, bound, loaded, bandwidth, hit_cached))
                print(f"round {round_}: prompt cached {pool_cached} (pool) / {hit_cached} "
                      f"({args.tier}) tokens; TTFT cold {cold * 1e3:.0f} ms, pool hit "
                      f"{pool * 1e3:.0f} ms, {args.tier} hit {hit * 1e3:.0f} ms "
                      f"({loaded / 1e6:.1f} MB; disk bound {bound * 1e3:.0f} ms at "
                      f"{bandwidth / 1e6:.0f} MB/s)", flush=True)
            median = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
            print(f"median: cold {median(0) * 1e3:.0f} ms, pool {median(1) * 1e3:.0f} ms, "
                  f"{args.tier} {median(2) * 1e3:.0f} ms, disk bound {median(3) * 1e3:.0f} ms; "
                  f"{args.tier} - pool = {(median(2) - median(1)) * 1e3:.0f} ms for "
                  f"{median(4) / 1e6:.1f} MB, {(median(2) - median(1)) / (median(4) / median(5)):.2f}"
                  f" x the disk's read time at the measured bandwidth")


if __name__ == "__main__":
    main()
