"""bench/serve/metrics.py on a synthetic trace whose metrics are worked out by hand here,
following the definitions of `vllm bench serve` (vllm/benchmarks/serve.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "serve"))
from metrics import RequestTrace, distribution_ms, itls_within, summarize  # noqa: E402


def trace(send, chunks, prompt, output, max_tokens=None, success=True, tag=""):
    return RequestTrace(send_time=send, chunk_times=list(chunks), prompt_tokens=prompt,
                        output_tokens=output, max_tokens=max_tokens or output,
                        success=success, tag=tag)


# Request A: sent at 0, chunks at 0.5, 0.6, 0.8, 1.0 -> TTFT 0.5, ITL 0.1 0.2 0.2, E2EL 1.0,
#            4 tokens -> TPOT (1.0 - 0.5) / 3 = 1/6.
# Request B: sent at 1.0, chunks at 1.2, 1.5 -> TTFT 0.2, ITL 0.3, E2EL 0.5; the usage says
#            3 tokens (two in one chunk), so TPOT (0.5 - 0.2) / 2 = 0.15, not 0.3.
# Request C: sent at 2.0, one chunk at 3.0, 1 token -> TTFT 1.0, E2EL 1.0, no TPOT.
# Request D: failed.
def synthetic():
    return [
        trace(0.0, [0.5, 0.6, 0.8, 1.0], prompt=10, output=4),
        trace(1.0, [1.2, 1.5], prompt=20, output=3, max_tokens=5),
        trace(2.0, [3.0], prompt=30, output=1),
        RequestTrace(send_time=2.5, prompt_tokens=40, max_tokens=4, error="HTTP 500: boom"),
    ]


def test_counts_and_throughputs():
    m = summarize(synthetic(), duration_s=4.0)
    assert m["completed"] == 3
    assert m["failed"] == 1
    assert m["errors"] == ["HTTP 500: boom"]
    assert m["short_outputs"] == 1  # B: 3 of 5 tokens
    assert m["total_input_tokens"] == 60  # the failed request's prompt does not count
    assert m["total_output_tokens"] == 8
    assert m["request_throughput"] == pytest.approx(3 / 4)
    assert m["output_throughput"] == pytest.approx(8 / 4)
    assert m["total_token_throughput"] == pytest.approx(68 / 4)
    assert m["request_goodput"] is None  # no SLOs given


def test_latency_distributions():
    m = summarize(synthetic(), duration_s=4.0)
    ttft = m["ttft_ms"]
    assert ttft["mean"] == pytest.approx((500 + 200 + 1000) / 3)
    assert ttft["median"] == pytest.approx(500)
    assert ttft["max"] == pytest.approx(1000)
    # numpy's linear percentile over the sorted [200, 500, 1000]: p99 at rank 1.98.
    assert ttft["p99"] == pytest.approx(500 + 0.98 * 500)
    tpot = m["tpot_ms"]  # C has none
    assert tpot["mean"] == pytest.approx((1000 / 6 + 150) / 2)
    assert tpot["median"] == pytest.approx((1000 / 6 + 150) / 2)
    itl = m["itl_ms"]  # A's three gaps and B's one, pooled
    assert itl["mean"] == pytest.approx((100 + 200 + 200 + 300) / 4)
    assert itl["median"] == pytest.approx(200)
    assert itl["max"] == pytest.approx(300)
    e2el = m["e2el_ms"]
    assert e2el["mean"] == pytest.approx((1000 + 500 + 1000) / 3)
    assert e2el["median"] == pytest.approx(1000)
    assert e2el["std"] == pytest.approx(((2 * (1000 - 2500 / 3) ** 2 + (500 - 2500 / 3) ** 2) / 3)
                                        ** 0.5)


def test_goodput_needs_every_slo():
    # TTFT <= 600 ms: A and B. TPOT <= 160 ms: B, and C (one token counts as TPOT 0).
    assert summarize(synthetic(), 4.0, {"ttft": 600})["request_goodput"] == pytest.approx(2 / 4)
    assert summarize(synthetic(), 4.0, {"tpot": 160})["request_goodput"] == pytest.approx(2 / 4)
    both = summarize(synthetic(), 4.0, {"ttft": 600, "tpot": 160})
    assert both["request_goodput"] == pytest.approx(1 / 4)  # B only
    assert summarize(synthetic(), 4.0, {"e2el": 999})["request_goodput"] == pytest.approx(1 / 4)
    # An SLO equal to the value is met (vLLM: slo >= value).
    assert summarize(synthetic(), 4.0, {"ttft": 200})["request_goodput"] == pytest.approx(1 / 4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="tpot"):
        summarize(synthetic(), 4.0, {"latency": 1})
    with pytest.raises(ValueError, match="positive"):
        summarize(synthetic(), 0.0)


def test_empty_distribution_is_zero():
    assert distribution_ms([]) == {"mean": 0.0, "median": 0.0, "std": 0.0, "max": 0.0,
                                   "p50": 0.0, "p90": 0.0, "p99": 0.0}


def test_itls_within_a_window():
    traces = [trace(0.0, [0.1, 0.2, 0.9, 1.0], 1, 4, tag="decoder"),
              trace(0.0, [0.3, 0.8], 1, 2, tag="long")]
    # Gaps ending in [0.2, 0.9): only 0.1 -> 0.2 (0.9 is excluded).
    assert itls_within(traces, 0.2, 0.9, tag="decoder") == pytest.approx([0.1])
    assert itls_within(traces, 0.2, 0.95, tag="decoder") == pytest.approx([0.1, 0.7])
    assert itls_within(traces, 0.0, 1.0) == pytest.approx([0.1, 0.7, 0.5])
