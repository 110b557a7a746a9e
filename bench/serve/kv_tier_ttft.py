"""Time to first token of a long shared prefix served three ways by one tokenmill-server with
--kv-cache-dir: computed (cold), found in the KV pool (a pool hit), and loaded back from the
disk tier after other traffic evicted it from the pool, with the block files dropped from the
page cache first (posix_fadvise DONTNEED), against the issue's bound
    disk TTFT <= pool TTFT + 1.5 x bytes loaded / disk read bandwidth,
the bandwidth measured on the same directory in the same run (a file written, dropped from the
page cache, read back), interleaved with the rounds. Each round checks the disk hit's tokens
against the cold computation's. Prints one line per round and the medians.

  .venv/bin/python bench/serve/kv_tier_ttft.py --words 3000 --rounds 5
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
    args = parser.parse_args()
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix="tokenmill-kv-bench-", dir=REPO / "build") as tmp:
        kv_dir = Path(tmp) / "kv"
        with Server("--kv-cache-dir", kv_dir, "--kv-cache-memory", args.kv_cache_memory,
                    "--threads", args.threads, "--max-num-batched-tokens", 2048,
                    log_level="info") as server:
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
                before = server.metrics()
                loads_before = before['tokenmill:kv_tier_load_bytes_total{tier=disk}']
                seconds_before = before['tokenmill:kv_tier_load_seconds_total{tier=disk}']
                time.sleep(0.5)  # the writer thread drains its queue
                drop_from_page_cache(sorted(kv_dir.rglob("*.kvb")))
                disk, ids, disk_cached = ttft(server, prefix + question)
                assert ids == expected, "a disk hit changed the tokens"
                after = server.metrics()
                loaded = after['tokenmill:kv_tier_load_bytes_total{tier=disk}'] - loads_before
                load_seconds = (after['tokenmill:kv_tier_load_seconds_total{tier=disk}'] -
                                seconds_before)
                bound = pool + 1.5 * loaded / bandwidth
                rows.append((cold, pool, disk, bound, loaded, bandwidth, disk_cached))
                print(f"round {round_}: prompt cached {pool_cached} (pool) / {disk_cached} (disk) "
                      f"tokens; TTFT cold {cold * 1e3:.0f} ms, pool hit {pool * 1e3:.0f} ms, "
                      f"disk hit {disk * 1e3:.0f} ms, of which loading {load_seconds * 1e3:.0f} ms "
                      f"(bound {bound * 1e3:.0f} ms: "
                      f"{loaded / 1e6:.1f} MB at {bandwidth / 1e6:.0f} MB/s)", flush=True)
            median = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
            print(f"median: cold {median(0) * 1e3:.0f} ms, pool {median(1) * 1e3:.0f} ms, "
                  f"disk {median(2) * 1e3:.0f} ms, bound {median(3) * 1e3:.0f} ms; "
                  f"disk - pool = {(median(2) - median(1)) * 1e3:.0f} ms for "
                  f"{median(4) / 1e6:.1f} MB, {(median(2) - median(1)) / (median(4) / median(5)):.2f}"
                  f" x the read time at the measured bandwidth")


if __name__ == "__main__":
    main()
