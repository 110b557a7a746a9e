"""The disk tier below the KV pool (--kv-cache-dir, issue 40) through the real server: a prefix
evicted by other traffic comes back from disk as a cache hit with the same greedy tokens; a
server stopped with SIGTERM and started again on the directory finds it, one with another KV
type or model ignores it; every block file truncated, bit-flipped or swapped with another's,
between runs or under a running server, is refused (counted, deleted) and the answer stays
the same; a read-only or full directory turns the tier off with a warning and every request
still succeeds; the files are 0600 in 0700 directories; a tenant's purge deletes its blocks
only; a host-memory tier (--kv-cache-host-size) serves an evicted prefix at once; the tiers'
changes reach KV event subscribers with medium "CPU" or "DISK"; and models whose
sliding-window layers keep a pool of their own (a tiny gemma3 whose window the prompts cross;
Gemma 3 270M in test_kv_tiers_gemma3.py) get both pools' blocks back."""
import os
import shutil
import signal
import stat
import tempfile
import time
import urllib.request
from pathlib import Path

import sys

import msgspec
import numpy as np
import pytest
import zmq

from server_harness import MODELS_DIR, REPO, Server, pb2

sys.path.insert(0, str(REPO / "tests" / "reference"))
from tiny_families import gemma3  # noqa: E402

BLOCK = 16
# ~300 tokens: 19 full blocks of SmolLM2's KV (23,040 bytes a token at f16). Small, so that the
# file's dozen servers stay quick under ASan.
PROMPT = " ".join(f"Item {i}: the ledger of harbour {i % 7} lists {i * 3} crates of tea."
                  for i in range(15))
OTHERS = [" ".join(f"Note {i}-{k}: a different story about mountain {i} and river {k}."
                   for i in range(17)) for k in range(4)]
# A pool of ~640 tokens: the four other prompts push PROMPT's blocks out of it.
POOL = ("--kv-cache-memory", "14MiB")
# PROMPT's blocks a disk hit must bring back, at least (the last token is always computed).
ON_DISK = 15
MAX_TOKENS = 12
API_KEY = "kv-tier-test-key"


def tier_server(directory, *extra, **kwargs):
    return Server("--kv-cache-dir", directory, *POOL, *extra, **kwargs)


def run(server, prompt=PROMPT, metadata=None):
    """(token ids, cached prompt tokens) of one greedy request."""
    request = pb2.GenerateRequest(text=prompt, max_tokens=MAX_TOKENS, ignore_eos=True)
    responses = list(server.stub.Generate(request, metadata=metadata, timeout=120))
    ids = [t for r in responses for t in r.token_ids]
    return ids, responses[-1].usage.cached_prompt_tokens


def evict(server):
    for other in OTHERS:
        run(server, other)


def metric(server, name, **labels):
    samples = server.metrics()
    key = name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"
                  if labels else "")
    return samples[key]


def block_files(directory):
    return sorted(Path(directory).rglob("*.kvb"))


def wait_for_files(directory, count, timeout=30):
    deadline = time.monotonic() + timeout
    while len(block_files(directory)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} block files in {directory}"
        time.sleep(0.05)


def settled_files(server, directory, at_least):
    """The block files once every write queued so far has landed: as many files as the server
    counts writes, unchanged over 300 ms."""
    deadline = time.monotonic() + 30
    previous = None
    while True:
        assert time.monotonic() < deadline, f"the writes to {directory} did not settle"
        files = set(block_files(directory))
        written = metric(server, "tokenmill:kv_tier_writes_total", tier="disk")
        if len(files) >= at_least and len(files) == written and files == previous:
            return files
        previous = files
        time.sleep(0.3)


def stop(server):
    server.signal(signal.SIGTERM)
    assert server.wait_exit() == 0
    server.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """PROMPT's greedy tokens computed without any tier, and a directory that a server stopped
    with SIGTERM left PROMPT's blocks in."""
    directory = tmp_path_factory.mktemp("populated")
    with Server(*POOL) as plain:
        expected, cached = run(plain)
        assert cached == 0
    server = tier_server(directory)
    ids, _ = run(server)
    assert ids == expected
    stop(server)
    assert len(block_files(directory)) >= ON_DISK
    return expected, directory


def copy_of(directory, tmp_path):
    target = tmp_path / "kv"
    shutil.copytree(directory, target)
    return target


@pytest.mark.parametrize("tier", ["disk", "host"])
def test_an_evicted_prefix_comes_back_from_the_tier(reference, tmp_path, tier):
    """The blocks other prompts pushed out of the pool come back from disk, or from host memory
    (--kv-cache-host-size alone), with the same tokens."""
    expected, _ = reference
    flags = (("--kv-cache-dir", tmp_path / "kv") if tier == "disk" else
             ("--kv-cache-host-size", "64MiB"))
    with Server(*POOL, *flags) as server:
        first, cached = run(server)
        assert first == expected and cached == 0
        evict(server)
        again, cached = run(server)
        assert again == expected
        assert cached >= ON_DISK * BLOCK
        # The pool may still hold a block or two at the head.
        assert metric(server, "tokenmill:kv_tier_loads_total", tier=tier) * BLOCK >= cached - BLOCK
        other = "host" if tier == "disk" else "disk"
        assert f"tokenmill:kv_tier_loads_total{{tier={other}}}" not in server.metrics()
        if tier == "disk":
            assert metric(server, "tokenmill:kv_tier_rejects_total", reason="corrupt") == 0
        else:
            assert metric(server, "tokenmill:kv_tier_capacity_blocks", tier="host") >= 150


def test_a_restarted_server_finds_its_prefixes_and_another_kv_type_does_not(reference, tmp_path):
    expected, populated = reference
    directory = copy_of(populated, tmp_path)
    with tier_server(directory) as server:
        ids, cached = run(server)
        assert ids == expected
        assert cached >= ON_DISK * BLOCK
    with tier_server(directory, "--kv-cache-dtype", "int8") as server:
        _, cached = run(server)
        assert cached == 0
        assert metric(server, "tokenmill:kv_tier_other_bytes", tier="disk") > 0
    with tier_server(directory, model=MODELS_DIR / "stories260K.gguf") as server:
        assert metric(server, "tokenmill:kv_tier_blocks", tier="disk") == 0


def truncate(path):
    os.truncate(path, path.stat().st_size // 2)


def flip_bit(path):
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x04]))


def swap_all(files):
    """Each file takes the next one's bytes (a rotation): every name holds another block."""
    contents = [f.read_bytes() for f in files]
    for f, content in zip(files, contents[1:] + contents[:1]):
        f.write_bytes(content)


@pytest.mark.parametrize("fault,reason", [("truncate", "truncated"), ("flip", "corrupt"),
                                          ("swap", "mismatch")])
def test_damaged_files_between_runs_are_refused_and_the_answer_stands(reference, tmp_path,
                                                                        fault, reason):
    expected, populated = reference
    directory = copy_of(populated, tmp_path)
    files = block_files(directory)
    if fault == "swap":
        swap_all(files)
    else:
        for f in files:
            truncate(f) if fault == "truncate" else flip_bit(f)
    with tier_server(directory) as server:
        ids, cached = run(server)
        assert ids == expected
        assert cached == 0
        assert metric(server, "tokenmill:kv_tier_rejects_total", reason=reason) >= 1
        assert server.proc.poll() is None
        # The refused file is gone; the blocks computed again are written anew.
        ids, _ = run(server)
        assert ids == expected


def test_damaged_files_under_a_running_server(reference, tmp_path):
    expected, populated = reference
    directory = copy_of(populated, tmp_path)
    with tier_server(directory) as server:
        evict(server)  # nothing of PROMPT in the pool
        for f in block_files(directory):
            flip_bit(f)
        ids, cached = run(server)
        assert ids == expected and cached == 0
        assert metric(server, "tokenmill:kv_tier_rejects_total", reason="corrupt") >= 1


def sanitizer_logs_to_stderr():
    """A server run as another user may not write the sanitizer log directory: its reports go to
    stderr, which the harness reads."""
    env = {}
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
        if var in os.environ:
            options = [o for o in os.environ[var].split(":") if not o.startswith("log_path=")]
            env[var] = ":".join(options + ["log_path=stderr"])
    return env


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


def give_to(directory, uid, mode_dirs, mode_files):
    for path in [directory, *directory.rglob("*")]:
        os.chown(path, uid, uid)
        path.chmod(mode_dirs if path.is_dir() else mode_files)


def test_a_read_only_directory_at_start_means_no_tier(reference):
    expected, populated = reference
    parent = Path(tempfile.mkdtemp(prefix="tokenmill-kv-ro-"))
    try:
        shutil.copytree(populated, parent / "kv")
        give_to(parent, 0, 0o755, 0o644)  # readable by all, writable by root alone
        with tier_server(parent / "kv", launcher=NOBODY, env=sanitizer_logs_to_stderr()) \
                as server:
            server.wait_for_log(r"KV disk tier off: .* cannot be used \(Permission denied\)")
            assert metric(server, "tokenmill:kv_tier_enabled", tier="disk") == 0
            ids, cached = run(server)
            assert ids == expected and cached == 0
    finally:
        shutil.rmtree(parent)


def test_a_directory_made_read_only_under_a_running_server(reference):
    expected, _ = reference
    parent = Path(tempfile.mkdtemp(prefix="tokenmill-kv-ro-"))
    try:
        parent.chmod(0o755)
        (parent / "kv").mkdir()
        give_to(parent / "kv", 65534, 0o700, 0o600)
        with tier_server(parent / "kv", launcher=NOBODY, env=sanitizer_logs_to_stderr()) \
                as server:
            assert run(server) == (expected, 0)
            wait_for_files(parent / "kv", ON_DISK)
            give_to(parent / "kv", 0, 0o755, 0o644)  # nobody may read it, no longer write
            run(server, OTHERS[0])
            server.wait_for_log(r"KV disk tier: cannot write .*Permission denied.*no more writes")
            assert metric(server, "tokenmill:kv_tier_write_failures_total", tier="disk") >= 1
            evict(server)
            ids, cached = run(server)  # the blocks written before still load
            assert ids == expected and cached >= ON_DISK * BLOCK
            assert server.proc.poll() is None
    finally:
        shutil.rmtree(parent)


def test_a_full_disk_turns_writes_off_and_requests_still_succeed(reference, tmp_path):
    expected, _ = reference
    # RLIMIT_FSIZE: any write past 64 KiB fails with EFBIG, as a full disk fails with ENOSPC.
    with tier_server(tmp_path / "kv", launcher=["prlimit", "--fsize=65536", "--"]) as server:
        ids, cached = run(server)
        assert ids == expected and cached == 0
        server.wait_for_log(r"KV disk tier: cannot write .*File too large.*writes paused")
        assert metric(server, "tokenmill:kv_tier_write_failures_total", tier="disk") >= 1
        for other in OTHERS[:2]:
            run(server, other)
        assert run(server)[0] == expected
    assert not list((tmp_path / "kv").rglob("*.tmp*")), "no temporary file is left behind"


def test_files_are_private_and_a_tenant_purge_deletes_only_its_blocks(tmp_path):
    directory = tmp_path / "kv"
    auth = ("authorization", f"Bearer {API_KEY}")
    with tier_server(directory, "--api-key", API_KEY) as server:
        run(server, PROMPT, metadata=[auth, ("x-tokenmill-tenant", "acme")])
        acme_files = settled_files(server, directory, ON_DISK)
        run(server, OTHERS[0], metadata=[auth, ("x-tokenmill-tenant", "globex")])
        settled_files(server, directory, len(acme_files) + ON_DISK)
        for path in [p for p in directory.rglob("*") if p.is_dir()] + [directory]:
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        for path in block_files(directory):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path

        url = f"http://127.0.0.1:{server.metrics_port}/kv_cache/purge?tenant=acme"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=30)
        assert refused.value.code == 401
        request = urllib.request.Request(url, method="POST",
                                         headers={"Authorization": f"Bearer {API_KEY}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert msgspec.json.decode(response.read())["purged_blocks"] == len(acme_files)
        left = set(block_files(directory))
        assert not (left & acme_files)
        assert len(left) >= ON_DISK  # globex's
        assert metric(server, "tokenmill:kv_tier_purged_total", tier="disk") == len(acme_files)


def test_tier_changes_reach_kv_event_subscribers(tmp_path):
    context = zmq.Context()
    subscriber = context.socket(zmq.SUB)
    port = subscriber.bind_to_random_port("tcp://127.0.0.1")
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    try:
        with tier_server(tmp_path / "kv", "--kv-cache-host-size", "64MiB",
                         "--kv-events-endpoint", f"tcp://127.0.0.1:{port}") as server:
            # PUB drops batches until the subscription has reached it: each new question
            # stores new blocks, and its steps publish what the tier wrote meanwhile.
            mediums = []
            deadline = time.monotonic() + 60
            asked = 0
            while not {"DISK", "CPU", None} <= set(mediums):
                assert time.monotonic() < deadline, f"mediums {set(mediums)} after {asked}"
                run(server, f"Question {asked}: " + OTHERS[asked % len(OTHERS)])
                asked += 1
                while subscriber.poll(200):
                    _, _, payload = subscriber.recv_multipart()
                    _, events = msgspec.msgpack.decode(payload)
                    mediums += [e[6] for e in events if e[0] == "BlockStored"]
            assert "DISK" in mediums and "CPU" in mediums
            assert None in mediums  # the pool's own events carry none, as before
    finally:
        subscriber.close(linger=0)
        context.term()


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory):
    """The tiny random gemma3 (window 8 tokens; tests/reference/tiny_families) with stories260K's
    vocabulary, so that the server tokenizes."""
    path = tmp_path_factory.mktemp("gemma3") / "tiny-gemma3.gguf"
    gemma3.write(str(path), vocabulary_from=str(MODELS_DIR / "stories260K.gguf"))
    return path


# Blocks of 4 tokens, prefills in chunks of 12: group 1 lets go of blocks before the window
# while a prompt is computed, so its files' group-1 halves are written before that.
TINY_FLAGS = ("--block-size", "4", "--max-num-batched-tokens", "12", "--kv-cache-memory", "64KiB")
TINY_PROMPT = [int(t) for t in np.random.default_rng(40).integers(3, 512, 61)]
TINY_OTHERS = [[int(t) for t in np.random.default_rng(41 + k).integers(3, 512, 61)]
               for k in range(4)]


def run_ids(server, ids):
    request = pb2.GenerateRequest(token_ids=pb2.TokenIds(ids=ids), max_tokens=MAX_TOKENS,
                                  ignore_eos=True)
    responses = list(server.stub.Generate(request, timeout=120))
    return [t for r in responses for t in r.token_ids], responses[-1].usage.cached_prompt_tokens


def test_sliding_window_blocks_come_back_from_disk_after_eviction_and_restart(tiny_gemma3,
                                                                            tmp_path):
    """The tiny gemma3 with group 1 keeping only the window: an evicted prefix comes back from
    disk, both groups' blocks, with the tokens of a server without any tier; so after a
    restart."""
    with Server(*TINY_FLAGS, model=tiny_gemma3) as plain:
        expected, _ = run_ids(plain, TINY_PROMPT)
    directory = tmp_path / "kv"
    server = Server("--kv-cache-dir", directory, *TINY_FLAGS, model=tiny_gemma3)
    ids, cached = run_ids(server, TINY_PROMPT)
    assert ids == expected and cached == 0
    # Its 15 blocks on disk before the others evict them: a write still queued when the pool
    # evicts its block may be dropped (kv_tier_dropped_writes_total), as on a busy disk in CI.
    settled_files(server, directory, 15)
    for other in TINY_OTHERS:
        run_ids(server, other)
    ids, cached = run_ids(server, TINY_PROMPT)
    assert ids == expected
    assert cached >= 56  # 15 blocks looked up (the last token is computed), 1 may be recomputed
    assert metric(server, "tokenmill:kv_tier_loads_total", tier="disk") >= 1
    stop(server)
    with Server("--kv-cache-dir", directory, *TINY_FLAGS, model=tiny_gemma3) as server:
        ids, cached = run_ids(server, TINY_PROMPT)
        assert ids == expected
        assert cached >= 56
