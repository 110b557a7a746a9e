"""The short soak of CI (tests/soak/soak.py for about 45 s on SmolLM2 with few tokens): every
request kind of the mix runs, every request ends as its kind allows (none hangs), and at idle no
KV block is in use, the engine's idle self-check passed, the gateway holds nothing, both
processes are the ones started and healthy, and their RSS stayed bounded after the warm-up."""
import os

import load_mix
import soak

# The sanitizer stage raises it: ASan's quarantine alone holds up to 256 MiB of freed memory
# (leaks are LeakSanitizer's to find there).
MAX_RSS_GROWTH_MIB = os.environ.get("TOKENMILL_SOAK_MAX_RSS_GROWTH_MIB", "64")


def test_short_soak_keeps_every_promise(tmp_path):
    args = soak.parse_args(["--minutes", "0.75", "--capacity", "3", "--max-tokens", "12",
                            "--request-timeout", "60", "--rss-period", "1",
                            "--max-rss-growth-mib", MAX_RSS_GROWTH_MIB,
                            "--log-dir", str(tmp_path)])
    report = soak.soak(args)
    soak.print_summary(report)
    assert report["problems"] == []
    assert set(report["by_kind"]) == set(load_mix.MIX)
    for outcome in ("finished", "client_abort", "rejected"):
        assert report["by_outcome"].get(outcome, 0) > 0, report["by_outcome"]
    assert report["idle"]["kv_blocks_in_use"] == 0
    assert report["idle"]["engine_idle_check_failures"] == 0
