"""A real binary run as a child process, its stderr log collected line by line, so a test can
wait for a log line and read the whole log; shared by server_harness.py and gateway_harness.py."""

import os
import re
import signal
import subprocess
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

# Every wait in these tests is bounded by one of these.
START_TIMEOUT_S = 60
RPC_TIMEOUT_S = 120
EXIT_TIMEOUT_S = 60


class LoggedProcess:
    def __init__(self, args, env=None):
        self.args = args
        self.lines = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace",
                                     env={**os.environ, **(env or {})})
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self):
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def log_text(self):
        with self._cond:
            return "\n".join(self.lines)

    def wait_for_log(self, pattern, timeout=START_TIMEOUT_S):
        """The first match of `pattern` in the log, waiting for it to appear."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    m = regex.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no log line matches {pattern!r}; log:\n" +
                                         "\n".join(self.lines))
                self._cond.wait(min(left, 0.5))

    def stop(self):
        """SIGTERM, then SIGKILL if it has not exited within EXIT_TIMEOUT_S."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=10)

    def close(self):
        self.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def metric_samples(text, ignore_labels=()):
    """{sample name with its labels (sorted, minus ignore_labels): value} of a Prometheus text."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if k not in ignore_labels}
            key = s.name + ("" if not labels else
                            "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}")
            samples[key] = s.value
    return samples
