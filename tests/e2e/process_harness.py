"""A real binary run as a child process, its stderr log collected line by line, so a test can
wait for a log line and read the whole log; shared by server_harness.py and gateway_harness.py.
Stopping it fails the test when the process crashed, did not exit when told to, or left
a sanitizer report (in its log, or in a *SAN_OPTIONS log_path file as scripts/sanitize sets)."""

import contextlib
import os
import re
import signal
import subprocess
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

# A line of an AddressSanitizer, LeakSanitizer, UndefinedBehaviorSanitizer or ThreadSanitizer
# report; every report ends with a SUMMARY line.
SANITIZER_REPORT = re.compile(r"(ERROR|WARNING): \w*Sanitizer|SUMMARY: \w*Sanitizer|"
                              r": runtime error: ")

# Every wait in these tests is bounded by one of these.
START_TIMEOUT_S = 60
RPC_TIMEOUT_S = 120
EXIT_TIMEOUT_S = 60


class LoggedProcess:
    def __init__(self, args, env=None, descriptor_limit=None, launcher=()):
        self.args = args
        # prlimit sets RLIMIT_NOFILE and execs the program (same pid). Not a preexec_fn: the
        # forked child of this threaded process (grpcio's threads) may die before its exec.
        # `launcher`: more such programs (e.g. setpriv, prlimit --fsize) to run it through.
        launcher = list(launcher) + (
            ["prlimit", f"--nofile={descriptor_limit}:{descriptor_limit}", "--"]
            if descriptor_limit else [])
        self.lines = []
        self.expected_signals = set()
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(launcher + args, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace",
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

    @contextlib.contextmanager
    def starting(self):
        """Around a subclass's start-up waits: a start that fails (a wait timed out, the
        process exited) kills the process, as no test gets an object it could stop."""
        try:
            yield
        except BaseException:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            raise

    def wait_for_metrics(self, predicate, timeout=30):
        """Polls the subclass's metrics() until predicate(samples) holds; returns the samples."""
        deadline = time.monotonic() + timeout
        while True:
            samples = self.metrics()
            if predicate(samples):
                return samples
            if time.monotonic() > deadline:
                raise AssertionError(f"metrics never matched; last: {samples}")
            time.sleep(0.05)

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

    def send_signal(self, sig):
        """A signal the test means to send, so exiting by it is no crash."""
        self.expected_signals.add(sig)
        self.proc.send_signal(sig)

    def stop(self):
        """SIGTERM, then SIGKILL if it has not exited within EXIT_TIMEOUT_S. Raises when the
        process crashed (killed by a signal nobody sent), outlived the SIGTERM or left a
        sanitizer report. Its exit code is the test's to check: it may be exiting on its own."""
        problem = None
        if self.proc.poll() is None:
            self.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                problem = f"still running {EXIT_TIMEOUT_S} s after SIGTERM"
        self._reader.join(timeout=10)
        code = self.proc.returncode
        if problem is None and code < 0 and -code not in self.expected_signals:
            problem = f"killed by signal {-code}"
        report = self.sanitizer_report()
        if report:
            problem = "left a sanitizer report"
        if problem:
            raise AssertionError(f"{os.path.basename(self.args[0])} (pid {self.proc.pid}) "
                                 f"{problem}; log:\n{self.log_text()}\n{report}")

    def sanitizer_report(self):
        """The sanitizer reports of this process: report lines of its log and the files that a
        log_path in ASAN_OPTIONS, UBSAN_OPTIONS or TSAN_OPTIONS names for its pid."""
        with self._cond:
            found = any(SANITIZER_REPORT.search(line) for line in self.lines)
        texts = ["(report lines in the log above)"] if found else []
        for path in sorted(sanitizer_log_paths()):
            name = f"{path}.{self.proc.pid}"
            if os.path.exists(name):
                with open(name, errors="replace") as f:
                    texts.append(f"{name}:\n{f.read()}")
        return "\n".join(texts)

    def close(self):
        self.stop()

    def sanitized(self):
        """Whether the binary runs under ASan or TSan, whose allocators keep freed memory."""
        with open(f"/proc/{self.proc.pid}/maps") as maps:
            return any(lib in maps.read() for lib in ("libasan", "libtsan"))

    def status_mib(self, field):
        """A memory field of /proc/<pid>/status ("VmRSS", "VmHWM", "VmData"), in MiB."""
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        raise AssertionError(f"no {field} in /proc/{self.proc.pid}/status")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def sanitizer_log_paths():
    """Every log_path=... of the sanitizers' option variables (colon-separated key=value)."""
    paths = set()
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS"):
        for option in os.environ.get(var, "").split(":"):
            key, _, value = option.partition("=")
            if key == "log_path" and value not in ("", "stderr", "stdout"):
                paths.add(value)
    return paths


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
