#!/usr/bin/env python3
"""Writes models/llama31-vocab.gguf, a vocabulary-only GGUF of Llama 3.1's tokenizer.

Llama 3.1+ models emit <|python_tag|> (the control token 128010) before a built-in tool call;
llama.cpp's ggml-vocab-llama-bpe.gguf is Llama 3.0's, where 128010 is a reserved token. Meta's
llama-models wheel ships llama3/tokenizer.model (tiktoken: base64 token bytes and a rank a line)
and llama3/tokenizer.py, whose list names the 256 special tokens after the base ones (scripts/setup
downloads the wheel and passes both paths). Llama 3.1's base tokens are Llama 3.0's: this script
asserts that the ranks, in GPT-2's byte-to-unicode form, equal ggml-vocab-llama-bpe.gguf's tokens
one for one and takes that file's merges (the same BPE), so that only the special tokens' names,
parsed from tokenizer.py, are new. The file is written as llama.cpp's convert_hf_to_gguf.py writes
Llama 3.1 (gpt2 model, llama-bpe pre, specials as control tokens, bos <|begin_of_text|>, eos
<|eot_id|>, add_bos; no eot/eom keys: gguf-py's SpecialVocab finds none in Llama 3.1's tokenizer
files, and llama.cpp finds <|eot_id|> and <|eom_id|> by their text). Then checks: llama.cpp
(llama-cpp-python, vocab_only) must tokenize sample text, special tokens included, into tiktoken's
own ids, and end generation at <|end_of_text|>, <|eom_id|> and <|eot_id|>.

Needs tiktoken importable (scripts/setup installs it into a temporary folder on PYTHONPATH) next
to the venv's gguf and llama-cpp-python.

Usage: .venv/bin/python tests/reference/make_llama31_vocab.py TOKENIZER.model TOKENIZER.py \
    LLAMA_BPE.gguf OUT.gguf
"""
import ast
import base64
import sys

import gguf
import tiktoken

N_BASE = 128000
N_SPECIAL = 256
SAMPLES = [
    "Hello, world!", " The weather in Paris is 21°C.", "東京タワー 🫠 naïve", "a" * 1000,
    "I'm sure THEY'LL say 1234567 ok\n\n\t  x  ", '{"city": "Oslo", "days": [1, 2]}',
]
SPECIAL_SAMPLES = [
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>',
    "<|begin_of_text|><|start_header_id|>assistant<|end_header_id|>\n\nHi<|eot_id|>",
    "<|python_tag|>brave_search.call(query=\"x\")",
]
END_OF_GENERATION = ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]


def byte_to_unicode():
    """GPT-2's map from bytes to printable characters (the form of a gpt2 GGUF's tokens)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def read_ranks(model_path):
    """tokenizer.model's ranks, as llama_models.tokenizer_utils.load_bpe_file reads them."""
    ranks = {}
    with open(model_path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def read_tokenizer_py(path):
    """The Tokenizer class's pat_str and special token names, in order, from tokenizer.py.

    The names are the list literal assigned to special_tokens in __init__, then the reserved
    names its comprehension makes (evaluated with the class's num_reserved_special_tokens), as
    the class itself builds them; nothing else of the module runs.
    """
    module = ast.parse(open(path, encoding="utf-8").read())
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "Tokenizer")
    class_values = {}
    for node in cls.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            class_values[node.targets[0].id] = node.value
    pat_str = ast.literal_eval(class_values["pat_str"])
    num_reserved = ast.literal_eval(class_values["num_reserved_special_tokens"])
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assigned = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            assigned.setdefault(node.targets[0].id, node.value)
    named = ast.literal_eval(assigned["special_tokens"])
    comprehension = ast.Expression(assigned["reserved_tokens"])

    class Self:
        num_reserved_special_tokens = num_reserved

    reserved = eval(compile(comprehension, path, "eval"),
                    {"__builtins__": {"range": range, "len": len}},
                    {"self": Self, "special_tokens": named})
    return pat_str, named + reserved


def main(model_path, tokenizer_py, llama_bpe_path, out_path):
    ranks = read_ranks(model_path)
    pat_str, specials = read_tokenizer_py(tokenizer_py)
    if sorted(ranks.values()) != list(range(N_BASE)) or len(specials) != N_SPECIAL:
        sys.exit(f"{model_path}: {len(ranks)} ranks and {len(specials)} specials, "
                 f"not {N_BASE} and {N_SPECIAL}")
    chars = byte_to_unicode()
    base = [None] * N_BASE
    for piece, rank in ranks.items():
        base[rank] = "".join(chars[b] for b in piece)

    llama_bpe = gguf.GGUFReader(llama_bpe_path)
    bpe_tokens = llama_bpe.fields["tokenizer.ggml.tokens"].contents()
    mismatch = next((i for i in range(N_BASE) if base[i] != bpe_tokens[i]), None)
    if len(bpe_tokens) != N_BASE + N_SPECIAL or mismatch is not None:
        sys.exit(f"{llama_bpe_path}: its base tokens are not {model_path}'s "
                 f"(first difference: {mismatch})")
    merges = llama_bpe.fields["tokenizer.ggml.merges"].contents()

    special_ids = {name: N_BASE + i for i, name in enumerate(specials)}
    writer = gguf.GGUFWriter(out_path, "llama")
    writer.add_name("Llama 3.1 tokenizer (vocabulary only)")
    writer.add_vocab_size(N_BASE + N_SPECIAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(base + specials)
    writer.add_token_types([gguf.TokenType.NORMAL] * N_BASE +
                           [gguf.TokenType.CONTROL] * N_SPECIAL)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(special_ids["<|begin_of_text|>"])
    writer.add_eos_token_id(special_ids["<|eot_id|>"])
    writer.add_add_bos_token(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    # The checks: llama.cpp reads the file as tiktoken, with tokenizer.py's pattern, tokenizes.
    import llama_cpp
    reference = tiktoken.Encoding(name="llama3", pat_str=pat_str, mergeable_ranks=ranks,
                                  special_tokens=special_ids)
    llama = llama_cpp.Llama(model_path=out_path, vocab_only=True, verbose=False)
    for text, special in [(t, False) for t in SAMPLES] + [(t, True) for t in SPECIAL_SAMPLES]:
        got = llama.tokenize(text.encode(), add_bos=False, special=special)
        want = reference.encode(text, allowed_special="all" if special else set())
        if got != want:
            sys.exit(f"{out_path}: llama.cpp tokenizes {text!r} as {got}, tiktoken as {want}")
    if llama.tokenize(b"<|python_tag|>", add_bos=False, special=True) != [128010]:
        sys.exit(f"{out_path}: <|python_tag|> is not the control token 128010")
    vocab = llama_cpp.llama_model_get_vocab(llama._model.model)
    eog = [i for i in range(N_BASE, N_BASE + N_SPECIAL) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    if eog != [special_ids[name] for name in END_OF_GENERATION]:
        sys.exit(f"{out_path}: llama.cpp ends generation at {eog}, not at {END_OF_GENERATION}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
