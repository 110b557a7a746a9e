"""Serving metrics as `vllm bench serve` defines them (vllm/benchmarks/serve.py,
calculate_metrics), computed from per-request traces. numpy only, so tests need nothing else.

Per request (times in seconds, from the request's send time):
  TTFT   first chunk carrying a choice (its text may be empty)
  ITL    gaps between successive such chunks (all requests' gaps pooled)
  E2EL   the last such chunk
  TPOT   (E2EL - TTFT) / (output tokens - 1), for requests with more than one output token;
         0 for the others, but only in the goodput check (as vLLM does)
Per run, over the benchmark's wall time D (first send to last completion):
  request throughput = completed / D, output tok/s = output tokens / D,
  total tok/s = (prompt + output tokens) / D,
  goodput = completed requests meeting every given SLO (TTFT, TPOT, E2EL, in ms) / D.
Failed requests count in none of these but are reported.
"""
from dataclasses import dataclass, field

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass
class RequestTrace:
    """One request as the client saw it. Times are time.perf_counter() seconds."""
    send_time: float
    chunk_times: list = field(default_factory=list)  # chunks that carried a choice
    prompt_tokens: int = 0
    output_tokens: int = 0
    max_tokens: int = 0  # asked for: fewer output tokens means the server stopped early
    success: bool = False
    error: str = ""
    tag: str = ""  # workload role, e.g. "decoder" or "long" in the long-prompt workload

    @property
    def ttft(self):
        return self.chunk_times[0] - self.send_time

    @property
    def latency(self):
        return self.chunk_times[-1] - self.send_time

    @property
    def itls(self):
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])]

    @property
    def tpot(self):
        """None when the request produced at most one token."""
        if self.output_tokens <= 1:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


def distribution_ms(seconds):
    """mean, median, std, p50/p90/p99 and max of a list of seconds, in milliseconds.
    An empty list gives zeros, as vLLM reports it."""
    values = np.asarray(seconds if len(seconds) else [0.0], dtype=np.float64) * 1000.0
    out = {"mean": float(np.mean(values)), "median": float(np.median(values)),
           "std": float(np.std(values)), "max": float(np.max(values))}
    for p in PERCENTILES:
        out[f"p{p}"] = float(np.percentile(values, p))
    return out


def meets_slos(trace, slos_ms):
    """Whether a completed request meets every SLO in {"ttft"|"tpot"|"e2el": ms}."""
    measured = {"ttft": trace.ttft, "tpot": trace.tpot or 0.0, "e2el": trace.latency}
    return all(measured[name] * 1000.0 <= limit for name, limit in slos_ms.items())


def summarize(traces, duration_s, slos_ms=None):
    """The run's metrics (a JSON-ready dict) from its request traces and wall time."""
    if duration_s <= 0:
        raise ValueError("the benchmark's duration must be positive")
    slos_ms = slos_ms or {}
    unknown = set(slos_ms) - {"ttft", "tpot", "e2el"}
    if unknown:
        raise ValueError(f"unknown SLO metrics {sorted(unknown)}: use ttft, tpot, e2el")
    done = [t for t in traces if t.success and t.chunk_times]
    input_tokens = sum(t.prompt_tokens for t in done)
    output_tokens = sum(t.output_tokens for t in done)
    good = sum(1 for t in done if meets_slos(t, slos_ms)) if slos_ms else None
    return {
        "duration_s": duration_s,
        "completed": len(done),
        "failed": len(traces) - len(done),
        # Completed with fewer tokens than asked: EOS not ignored, or the server cut them short.
        "short_outputs": sum(1 for t in done if t.output_tokens < t.max_tokens),
        "errors": sorted({t.error for t in traces if not t.success and t.error})[:5],
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": len(done) / duration_s,
        "output_throughput": output_tokens / duration_s,
        "total_token_throughput": (input_tokens + output_tokens) / duration_s,
        "slos_ms": slos_ms,
        "request_goodput": None if good is None else good / duration_s,
        "ttft_ms": distribution_ms([t.ttft for t in done]),
        "tpot_ms": distribution_ms([t.tpot for t in done if t.tpot is not None]),
        "itl_ms": distribution_ms([gap for t in done for gap in t.itls]),
        "e2el_ms": distribution_ms([t.latency for t in done]),
    }


def itls_within(traces, start, end, tag=None):
    """Gaps between successive chunks of the (tagged) requests that end in [start, end):
    how long decoding streams stalled while, e.g., a long prompt was being prefilled."""
    gaps = []
    for t in traces:
        if tag is not None and t.tag != tag:
            continue
        for a, b in zip(t.chunk_times, t.chunk_times[1:]):
            if start <= b < end:
                gaps.append(b - a)
    return gaps
