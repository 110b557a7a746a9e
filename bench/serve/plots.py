"""PNG plots of benchmark results (matplotlib, no display needed)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

LATENCIES = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"),
             ("e2el_ms", "E2E latency"))


def _values(results, key):
    """Every request's value of `key` (ITL: every gap) pooled over the given runs."""
    out = []
    for result in results:
        for r in result["requests"]:
            if not r["success"]:
                continue
            if key == "itl_ms":
                out.extend(r["itl_ms"])
            elif r[key] is not None:
                out.append(r[key])
    return np.sort(np.asarray(out, dtype=np.float64))


def plot_runs(runs_by_label, path, title=""):
    """CDFs of TTFT, TPOT, ITL and E2E latency, one line per label (its runs pooled)."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (key, name) in zip(axes.flat, LATENCIES):
        for label, results in runs_by_label.items():
            values = _values(results, key)
            if len(values):
                ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post",
                        label=f"{label} (median {np.median(values):.0f} ms)")
        ax.set_title(name)
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of requests" if key != "itl_ms" else "fraction of gaps")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(points_by_label, path, title=""):
    """Throughput and latency against concurrency. points_by_label: label ->
    [(concurrency, metrics dict)] sorted by concurrency."""
    panels = (("output_throughput", "output tokens/s"), ("request_throughput", "requests/s"),
              ("ttft_ms", "median TTFT (ms)"), ("tpot_ms", "median TPOT (ms)"))
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (key, name) in zip(axes.flat, panels):
        for label, points in points_by_label.items():
            xs = [c for c, _ in points]
            ys = [m[key]["median"] if isinstance(m[key], dict) else m[key] for _, m in points]
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (closed loop)")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
