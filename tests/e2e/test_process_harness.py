"""LoggedProcess.stop() fails the test when its child crashed, outlived SIGTERM or left a
sanitizer report: what the sanitizer stage (scripts/sanitize) relies on to notice a server or
gateway that died or reported; a start that fails inside starting() kills its child. The
children are small Python programs."""
import os
import signal
import sys

import pytest

from process_harness import LoggedProcess

# Says it is ready, then waits for SIGTERM and exits with the code given as argv[1].
CHILD = """
import os, signal, sys, time
code = int(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(code))
print("ready", flush=True, file=sys.stderr)
exec(sys.argv[2])
while True:
    time.sleep(0.05)
"""


def child(exit_code=0, then="", env=None):
    process = LoggedProcess([sys.executable, "-c", CHILD, str(exit_code), then], env=env)
    process.wait_for_log("ready")
    return process


def test_clean_exit_on_sigterm_passes():
    child().stop()


def test_an_exit_code_is_the_tests_business():
    child(exit_code=3).stop()


def test_a_crash_before_stop_fails():
    process = child(then="os.kill(os.getpid(), signal.SIGSEGV)")
    process.proc.wait(timeout=10)
    with pytest.raises(AssertionError, match=f"killed by signal {int(signal.SIGSEGV)}"):
        process.stop()


def test_a_signal_the_test_sent_is_no_crash():
    process = child(then="signal.signal(signal.SIGINT, signal.SIG_DFL)")
    process.send_signal(signal.SIGINT)
    process.proc.wait(timeout=10)
    process.stop()


@pytest.mark.parametrize("line", [
    "==123==ERROR: AddressSanitizer: heap-use-after-free on address 0x602000000010",
    "==123==ERROR: LeakSanitizer: detected memory leaks",
    "engine/engine.cc:10:5: runtime error: signed integer overflow",
    "WARNING: ThreadSanitizer: data race (pid=123)",
])
def test_a_sanitizer_report_in_the_log_fails(line):
    process = child(then=f"print({line!r}, file=sys.stderr, flush=True)")
    process.wait_for_log("Sanitizer|runtime error")
    with pytest.raises(AssertionError, match="left a sanitizer report"):
        process.stop()


def test_a_report_in_the_log_path_file_fails(tmp_path, monkeypatch):
    prefix = tmp_path / "asan"
    monkeypatch.setenv("ASAN_OPTIONS", f"halt_on_error=1:log_path={prefix}")
    # What a sanitized binary does with log_path: the report goes to <prefix>.<pid>.
    process = child(then=f"open('{prefix}.' + str(os.getpid()), 'w').write('SUMMARY: x'); "
                         "print('written', file=sys.stderr, flush=True)")
    process.wait_for_log("written")  # else stop() may look before the file is there
    with pytest.raises(AssertionError, match="left a sanitizer report(.|\n)*SUMMARY: x"):
        process.stop()


def test_another_process_report_is_not_this_one(tmp_path, monkeypatch):
    prefix = tmp_path / "asan"
    monkeypatch.setenv("ASAN_OPTIONS", f"log_path={prefix}")
    (tmp_path / f"asan.{os.getpid()}").write_text("SUMMARY: someone else")
    child().stop()


def test_a_start_that_times_out_leaves_no_process():
    process = child()
    with pytest.raises(AssertionError, match="no log line matches"):
        with process.starting():
            process.wait_for_log("never printed", timeout=0.2)
    assert process.proc.poll() is not None
