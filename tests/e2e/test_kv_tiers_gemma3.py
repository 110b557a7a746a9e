"""The KV disk tier (--kv-cache-dir) on Gemma 3 270M, whose sliding-window layers keep a KV pool
of their own: a restarted server's disk hit gives the tokens it computed, and the same files
serve a server that keeps every layer in one pool. Apart from test_kv_tiers.py so that the
sanitizer stage can leave this real model's runs out (the tiny gemma3 there drives the same
code)."""
from server_harness import MODELS_DIR, Server

from test_kv_tiers import BLOCK, ON_DISK, run, stop

GEMMA = MODELS_DIR / "gemma-3-270m-q4_k_m.gguf"


def gemma_server(directory, *extra):
    # The sliding-window layers' pool takes 38 MiB first (a window of 512 and a prefill chunk).
    return Server("--kv-cache-dir", directory, "--kv-cache-memory", "64MiB", *extra, model=GEMMA)


def test_gemma3_sliding_window_pool_restarts_warm_and_shares_files_with_one_pool(tmp_path):
    """Gemma 3's sliding-window layers in a pool of their own: a block's file holds its bytes
    in both pools, so a restarted server's disk hit gives the tokens it computed; the same
    files serve a server that keeps every layer in one pool (--no-sliding-window-kv), whose
    bytes are the same."""
    directory = tmp_path / "kv"
    server = gemma_server(directory)
    expected, cached = run(server)
    assert cached == 0
    stop(server)
    for layout in ((), ("--no-sliding-window-kv",)):
        with gemma_server(directory, *layout) as server:
            ids, cached = run(server)
            assert ids == expected, layout
            assert cached >= ON_DISK * BLOCK, layout
