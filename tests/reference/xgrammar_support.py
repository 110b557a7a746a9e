"""What make_grammar_golden.py and bench/grammar/xgrammar_bench.py share: xgrammar's native
bindings, loaded without its package __init__ (which imports torch and transformers; the native
matcher only needs numpy arrays), and the default model's vocabulary as tokenmill's engine sees
it. Install xgrammar without dependencies:
  .venv/bin/pip install --no-deps -r tests/reference/requirements-xgrammar.txt
"""
import importlib.util
import sys
import types

import gguf


def load_xgrammar_core():
    """xgrammar's native bindings (its matcher, compiler and tokenizer info)."""
    spec = importlib.util.find_spec("xgrammar")
    if spec is None:
        sys.exit("xgrammar is not installed: see tests/reference/xgrammar_support.py")
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


