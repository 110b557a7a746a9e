#!/usr/bin/env python3
"""Writes tests/data/grammar/golden_masks.json + golden_masks.bin.gz: xgrammar's token masks,
step by step, for every grammar of tests/data/grammar/corpus.json on the default model's
vocabulary. grammar/'s golden_mask_test.cc compares tokenmill's masks with them.

xgrammar is given the same grammar text tokenmill compiles: for JSON Schema, regex, choice and
json_object the GBNF that tokenmill's converters emit (build/bin/tokenmill_grammar_gbnf), so
xgrammar's own converter choices do not become the spec. Per grammar it walks the valid and
invalid strings of the corpus (split into tokens by longest match), and random walks that
sample uniformly among the tokens xgrammar allows, recording the mask before every token.

xgrammar's Python package imports torch and transformers at the top of the package, but
its native matcher only needs numpy arrays (DLPack): the package's modules are loaded without
its __init__, and nothing else of torch is used. Install it without dependencies:
  .venv/bin/pip install --no-deps -r tests/reference/requirements-xgrammar.txt

  make_grammar_golden.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
                         [--tool build/bin/tokenmill_grammar_gbnf]
"""
import argparse
import gzip
import importlib.util
import json
import pathlib
import random
import subprocess
import sys
import types

import gguf
import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "grammar"
RANDOM_WALKS = 2
WALK_STEPS = 24
SEED = 24


def load_xgrammar_core():
    """xgrammar's native bindings (its matcher, compiler and tokenizer info)."""
    spec = importlib.util.find_spec("xgrammar")
    if spec is None:
        sys.exit("xgrammar is not installed: see this script's docstring")
    package = types.ModuleType("xgrammar")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["xgrammar"] = package
    from xgrammar import exception, load_binding  # noqa: F401  (register errors, load the lib)
    from xgrammar.base import _core
    return _core


def bytes_to_unicode():
    """GPT-2's byte <-> printable-character table of byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def load_vocabulary(model):
    """Token bytes (control tokens empty, as tokenmill's engine gives them) and EOS ids."""
    reader = gguf.GGUFReader(model)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    token_type = reader.fields["tokenizer.ggml.token_type"]
    if bytes(reader.fields["tokenizer.ggml.model"].parts[-1]).decode() != "gpt2":
        sys.exit("only byte-level BPE vocabularies are handled here")
    decode = bytes_to_unicode()
    vocab = []
    for i, t in zip(tokens.data, token_type.data):
        text = bytes(tokens.parts[i]).decode("utf-8")
        kind = int(token_type.parts[t][0])
        vocab.append(b"" if kind == gguf.TokenType.CONTROL else bytes(decode[c] for c in text))
    eos = int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
    return vocab, [eos]


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
