#!/usr/bin/env python3
"""Writes models/tekken-240911-vocab.gguf, a vocabulary-only GGUF of Mistral's Tekken tokenizer.

Tekken (Mistral Nemo, Ministral 3: tiktoken-style byte-level BPE, 131 072 tokens of which 1000
are special) has no vocabulary-only GGUF in llama.cpp's models/. The mistral-common wheel ships
tekken_240911.json (scripts/setup downloads it and passes a folder holding it as tekken.json, the
name MistralVocab looks for); this script writes it as llama.cpp's converter does
(conversion/base.py's _set_vocab_mistral): gguf-py's
MistralVocab gives the tokens, scores (int32), types and merges, pre `tekken`, add_bos True,
add_eos False. Then a check: llama.cpp (llama-cpp-python, vocab_only) must tokenize sample text
into mistral-common's own ids.

Needs mistral-common importable (scripts/setup installs it into a temporary folder on
PYTHONPATH) next to the venv's gguf and llama-cpp-python.

Usage: .venv/bin/python tests/reference/make_tekken_vocab.py DIR_WITH_TEKKEN_JSON OUT.gguf
"""
import sys
from pathlib import Path

import gguf
from gguf.vocab import MistralTokenizerType, MistralVocab

SAMPLES = ["Hello, world!", " The weather in Paris is 21°C.", "東京タワー 🫠 naïve", "a" * 1000]


def main(tokenizer_dir, out_path):
    vocab = MistralVocab(Path(tokenizer_dir))
    if vocab.tokenizer_type != MistralTokenizerType.tekken:
        sys.exit(f"{tokenizer_dir}: {vocab.tokenizer_type} is not a Tekken tokenizer")
    tokens, scores, types = [], [], []
    for text, score, toktype in vocab.all_tokens():
        tokens.append(text)
        scores.append(score)
        types.append(toktype)
    writer = gguf.GGUFWriter(out_path, "llama")
    writer.add_name("Tekken 240911 tokenizer (vocabulary only)")
    writer.add_tokenizer_model(vocab.gguf_tokenizer_model)
    writer.add_tokenizer_pre("tekken")
    writer.add_token_merges(vocab.extract_vocab_merges_from_model())
    writer.add_bos_token_id(vocab.bos_id)
    writer.add_eos_token_id(vocab.eos_id)
    writer.add_unk_token_id(vocab.unk_id)
    writer.add_pad_token_id(vocab.pad_id)
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_vocab_size(vocab.vocab_size)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    import llama_cpp  # the check: llama.cpp reads the file as mistral-common tokenizes
    llama = llama_cpp.Llama(model_path=out_path, vocab_only=True, verbose=False)
    for text in SAMPLES:
        got = llama.tokenize(text.encode(), add_bos=False, special=False)
        want = vocab.tokenizer.encode(text, bos=False, eos=False)
        if got != want:
            sys.exit(f"{out_path}: llama.cpp tokenizes {text!r} as {got}, mistral-common as {want}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
