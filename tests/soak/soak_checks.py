"""The soak test's checks (tests/soak/soak.py): RSS sampling, waiting for idle, and the promises
a run must keep once the load stops (no KV block in use, the engine's idle check ran and
passed, the gateway holds nothing, both processes are the ones started and healthy, RSS bounded
after the warm-up), each returned as a list of problems."""

import threading
import time

from load_mix import pb2

def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class RssSampler(threading.Thread):
    def __init__(self, pids, period):
        super().__init__(daemon=True)
        self.pids, self.period = pids, period
        self.samples = []  # (seconds since start, {name: MiB})
        self._done = threading.Event()
        self._t0 = time.monotonic()

    def sample(self):
        self.samples.append((time.monotonic() - self._t0,
                             {name: rss_mib(pid) for name, pid in self.pids.items()}))

    def run(self):
        while not self._done.wait(self.period):
            self.sample()

    def stop(self):
        self._done.set()
        self.join()
        self.sample()


def wait_idle(server, timeout=120):
    """Server metrics once no request runs or waits and the engine's idle check has run."""
    deadline = time.monotonic() + timeout
    while True:
        m = server.metrics()
        if m["tokenmill:num_requests_running"] == 0 and \
                m["tokenmill:num_requests_waiting"] == 0:
            time.sleep(0.5)  # one more step: the idle check runs after the last one
            return server.metrics()
        if time.monotonic() > deadline:
            return m
        time.sleep(0.2)


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def idle_state(idle, gateway_metrics):
    """The report's view of the server's metrics at idle and the gateway's."""
    gw = gateway_metrics
    return {
        "kv_blocks_in_use": idle["tokenmill:kv_cache_blocks_in_use"],
        "engine_idle_checks": idle["tokenmill:engine_idle_checks_total"],
        "engine_idle_check_failures": idle["tokenmill:engine_idle_check_failures_total"],
        "preemptions": idle["tokenmill:num_preemptions_total"],
        "gateway_buffered_responses": gw["tokenmill_gateway:buffered_responses"],
        "gateway_max_request_buffered": gw["tokenmill_gateway:max_request_buffered_responses"],
        "gateway_open_backend_calls": sum(v for k, v in gw.items()
                                          if k.startswith("tokenmill_gateway:backend_in_f")),
    }


def idle_problems(idle, state, idle_checks_before):
    """What is wrong at idle: `idle` the server's metrics, `state` idle_state()'s."""
    problems = []
    if idle["tokenmill:num_requests_running"] or idle["tokenmill:num_requests_waiting"]:
        problems.append("requests still running or waiting 2 minutes after the load")
    if state["kv_blocks_in_use"] != 0:
        problems.append(f"{state['kv_blocks_in_use']} KV blocks in use at idle")
    if state["engine_idle_checks"] <= idle_checks_before:
        problems.append("the engine's idle check did not run after the load")
    if state["engine_idle_check_failures"] != 0:
        problems.append("the engine's idle check failed (see the server log)")
    if state["gateway_buffered_responses"] != 0 or state["gateway_open_backend_calls"] != 0:
        problems.append("the gateway holds responses or backend calls at idle")
    return problems


def process_problems(server, gateway, pids):
    """Either process gone, replaced or not answering."""
    problems = []
    for name, proc in (("server", server.proc), ("gateway", gateway.proc)):
        if proc.poll() is not None or proc.pid != pids[name]:
            problems.append(f"the {name} exited ({proc.returncode})")
    try:
        server.stub.Tokenize(pb2.TokenizeRequest(text="still here"), timeout=10)
        if gateway.http.get("/health").status_code != 200:
            problems.append("the gateway is not healthy at the end")
    except Exception as e:  # noqa: BLE001
        problems.append(f"not healthy at the end: {e}")
    return problems


def rss_growth(samples, names, warm_from_s, max_growth_mib):
    """({name: start, after_warmup, peak, end, growth_after_warmup}, problems) of RssSampler
    samples; growth counts from the first sample at or after `warm_from_s`."""
    warm = [s for t, s in samples if t >= warm_from_s] or [samples[-1][1]]
    rss, problems = {}, []
    for name in names:
        series = [s[name] for _, s in samples]
        growth = series[-1] - warm[0][name]
        rss[name] = {"start": round(series[0], 1), "after_warmup": round(warm[0][name], 1),
                     "peak": round(max(series), 1), "end": round(series[-1], 1),
                     "growth_after_warmup": round(growth, 1)}
        if growth > max_growth_mib:
            problems.append(f"{name} RSS grew {growth:.1f} MiB after the warm-up "
                            f"(limit {max_growth_mib})")
    return rss, problems


def outcome_counts(stats):
    """The report's requests, by_outcome, by_kind and latencies of a load_mix.Stats."""
    by_outcome, by_kind = {}, {}
    for (kind, outcome), count in sorted(stats.outcomes.items()):
        by_outcome[outcome] = by_outcome.get(outcome, 0) + count
        by_kind.setdefault(kind, {})[outcome] = count
    all_latencies = [x for v in stats.latencies.values() for x in v]
    return {
        "requests": sum(by_outcome.values()), "by_outcome": by_outcome, "by_kind": by_kind,
        "latency_s": {kind: {"p50": round(percentile(v, 0.5), 3),
                             "p99": round(percentile(v, 0.99), 3), "count": len(v)}
                      for kind, v in sorted(stats.latencies.items())},
        "latency_all_finished_s": {"p50": round(percentile(all_latencies, 0.5) or 0, 3),
                                   "p99": round(percentile(all_latencies, 0.99) or 0, 3)},
    }
