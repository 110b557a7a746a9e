#!/usr/bin/env python3
"""xgrammar's side of bench/grammar (issue 24), replaying what tokenmill_grammar_bench wrote:
compile time of each corpus schema's GBNF (one thread, no cache) and the time of one
fill_next_token_bitmask per step along the same token walks (median, p99). The GBNF is
tokenmill's converters' output, so both engines compile the same grammar. Python's call
overhead (about a microsecond) is inside xgrammar's mask times. Times are CPU time of this
process (xgrammar runs one thread here), like tokenmill_grammar_bench's.
  build/bin/tokenmill_grammar_bench --trace /tmp/grammar_trace.json
  .venv/bin/python bench/grammar/xgrammar_bench.py /tmp/grammar_trace.json
"""
import json
import pathlib
import statistics
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "reference"))
from xgrammar_support import load_vocabulary, load_xgrammar_core  # noqa: E402


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def main():
    trace = json.loads(pathlib.Path(sys.argv[1]).read_text())
    core = load_xgrammar_core()
    vocab, _ = load_vocabulary(str(REPO / trace["model"]))
    info = core.TokenizerInfo(vocab, 0, len(vocab), trace["eos"], False)
    compiler = core.GrammarCompiler(info, 1, False, -1)
    print(f"{'schema':24} {'xgrammar compile ms':>20} {'tokenmill ms':>13}")
    for entry in trace["compile"]:
        start = time.process_time()
        compiler.compile_grammar_from_strings(entry["gbnf"], "root")
        ms = 1e3 * (time.process_time() - start)
        print(f"{entry['name']:24} {ms:20.1f} {entry['ms']:13.1f}")
    compiled = compiler.compile_grammar_from_strings(trace["gbnf"], "root")
    mask = np.zeros((1, (len(vocab) + 31) // 32), dtype=np.int32)
    micros = []
    for walk in trace["walks"]:
        matcher = core.GrammarMatcher(compiled, None, False, -1, None)
        for token in walk:
            start = time.process_time_ns()
            matcher.fill_next_token_bitmask(mask, 0, False)
            micros.append((time.process_time_ns() - start) / 1e3)
            if not matcher.accept_token(token, False):
                sys.exit("xgrammar refused a token of tokenmill's walk")
    print(f"\nfill_next_token_bitmask, {len(trace['walks'])} walks, {len(micros)} masks: "
          f"median {statistics.median(micros):.1f} us, p99 {percentile(micros, 0.99):.1f} us, "
          f"max {max(micros):.1f} us")


if __name__ == "__main__":
    main()
