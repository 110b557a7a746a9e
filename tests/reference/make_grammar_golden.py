#!/usr/bin/env python3
"""Writes tests/data/grammar/golden_masks.json + golden_masks.bin.gz: xgrammar's token masks,
step by step, for every grammar of tests/data/grammar/corpus.json on the default model's
vocabulary. grammar/'s golden_mask_test.cc compares tokenmill's masks with them.

xgrammar is given the same grammar text tokenmill compiles: for JSON Schema, regex, choice and
json_object the GBNF that tokenmill's converters emit (build/bin/tokenmill_grammar_gbnf), so
xgrammar's own converter choices do not become the spec. Per grammar it walks the valid and
invalid strings of the corpus (split into tokens by longest match), and random walks that
sample uniformly among the tokens xgrammar allows, recording the mask before every token.

xgrammar is loaded as tests/reference/xgrammar_support.py says (installed without its
dependencies: .venv/bin/pip install --no-deps -r tests/reference/requirements-xgrammar.txt).

  make_grammar_golden.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
                         [--tool build/bin/tokenmill_grammar_gbnf]
"""
import argparse
import gzip
import json
import pathlib
import random
import subprocess
import sys

import numpy as np

from xgrammar_support import load_vocabulary, load_xgrammar_core

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "grammar"
RANDOM_WALKS = 2
WALK_STEPS = 24
SEED = 24


def fnv1a64(chunks):
    h = 0xCBF29CE484222325
    for chunk in chunks:
        for b in chunk:
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def vocabulary_hash(vocab):
    """FNV-1a over each token's length (4 bytes, little endian) and bytes."""
    return fnv1a64(len(t).to_bytes(4, "little") + t for t in vocab)


def longest_match_tokens(text, by_bytes, max_len):
    out, i = [], 0
    while i < len(text):
        for length in range(min(max_len, len(text) - i), 0, -1):
            token = by_bytes.get(text[i:i + length])
            if token is not None:
                out.append(token)
                i += length
                break
        else:
            sys.exit(f"no token for {text[i:]!r}")
    return out


class MaskTable:
    """Distinct masks, each once (most steps of a grammar repeat a few masks)."""

    def __init__(self):
        self.index = {}
        self.blobs = []

    def add(self, mask):
        blob = mask.astype("<u4").tobytes()
        if blob not in self.index:
            self.index[blob] = len(self.blobs)
            self.blobs.append(blob)
        return self.index[blob]


def walk(core, compiled, vocab_size, words, tokens, table, rng=None):
    """Steps through tokens (or, with rng, WALK_STEPS sampled ones): the masks before each."""
    matcher = core.GrammarMatcher(compiled, None, False, -1, None)
    mask = np.zeros((1, words), dtype=np.int32)
    steps, accepted = [], []
    rejected_at = -1
    sequence = list(tokens) if rng is None else [None] * WALK_STEPS
    for k, token in enumerate(sequence):
        if matcher.is_terminated():
            break
        matcher.fill_next_token_bitmask(mask, 0, False)
        bits = mask[0].view(np.uint32).copy()
        # Bits past the vocabulary are padding, not tokens.
        if vocab_size % 32:
            bits[-1] &= np.uint32((1 << (vocab_size % 32)) - 1)
        steps.append(table.add(bits))
        if rng is not None:
            allowed = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little"))
            token = int(rng.choice(list(allowed)))
        if not matcher.accept_token(token, False):
            rejected_at = k
            break
        accepted.append(token)
    final = -1
    if rejected_at < 0 and not matcher.is_terminated():
        matcher.fill_next_token_bitmask(mask, 0, False)
        bits = mask[0].view(np.uint32).copy()
        if vocab_size % 32:
            bits[-1] &= np.uint32((1 << (vocab_size % 32)) - 1)
        final = table.add(bits)
    return {"tokens": accepted + ([token] if rejected_at >= 0 else []), "masks": steps,
            "final_mask": final, "rejected_at": rejected_at,
            "terminated": bool(matcher.is_terminated())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--tool", default=str(REPO / "build" / "bin" / "tokenmill_grammar_gbnf"))
    args = parser.parse_args()

    core = load_xgrammar_core()
    vocab, eos = load_vocabulary(args.model)
    by_bytes = {}
    for i, t in enumerate(vocab):
        if t and t not in by_bytes:
            by_bytes[t] = i
    max_len = max(len(t) for t in vocab)
    words = (len(vocab) + 31) // 32
    info = core.TokenizerInfo(vocab, 0, len(vocab), eos, False)
    compiler = core.GrammarCompiler(info, 1, False, -1)
    corpus = json.loads((DATA / "corpus.json").read_text())
    table = MaskTable()
    rng = random.Random(SEED)
    cases = []
    for case in corpus:
        gbnf = subprocess.run([args.tool, case["kind"]], input=case["text"].encode(),
                              check=True, capture_output=True).stdout.decode()
        compiled = compiler.compile_grammar_from_strings(gbnf, "root")
        sequences = []
        for label in ("valid", "invalid"):
            for text in case[label]:
                tokens = longest_match_tokens(text.encode(), by_bytes, max_len)
                result = walk(core, compiled, len(vocab), words, tokens, table)
                can_end = result["rejected_at"] < 0 and result["final_mask"] >= 0 and bool(
                    (np.frombuffer(table.blobs[result["final_mask"]], "<u4")[eos[0] // 32]
                     >> (eos[0] % 32)) & 1)
                if (label == "valid") != can_end:
                    sys.exit(f"{case['name']}: xgrammar disagrees that {text!r} is {label}")
                sequences.append(dict(result, text=text))
        for _ in range(RANDOM_WALKS):
            sequences.append(walk(core, compiled, len(vocab), words, [], table,
                                  np.random.default_rng(rng.randrange(1 << 30))))
        cases.append({"name": case["name"], "kind": case["kind"], "gbnf": gbnf,
                      "sequences": sequences})
        print(f"{case['name']}: {len(sequences)} sequences, {len(table.blobs)} masks so far")

    golden = {"model": pathlib.Path(args.model).name, "vocab_size": len(vocab),
              "vocab_hash": f"{vocabulary_hash(vocab):016x}", "eos": eos,
              "mask_words": words, "cases": cases}
    (DATA / "golden_masks.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
    with gzip.GzipFile(DATA / "golden_masks.bin.gz", "wb", mtime=0) as out:
        out.write(b"".join(table.blobs))
    print(f"{len(cases)} grammars, {len(table.blobs)} distinct masks")


if __name__ == "__main__":
    main()
