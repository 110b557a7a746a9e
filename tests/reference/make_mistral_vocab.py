#!/usr/bin/env python3
"""Writes models/mistral-v3-vocab.gguf, a vocabulary-only GGUF of Mistral 7B v0.3's tokenizer.

Mistral's v3 SentencePiece model (mistral_instruct_tokenizer_240323.model.v3, shipped in the
mistral-common wheel: scripts/setup downloads it and passes its path) has [TOOL_CALLS] as a
control token, as the real models emit it; llama.cpp's vocabulary-only GGUFs have no such
vocabulary. The GGUF is written as llama.cpp's convert_hf_to_gguf.py writes a SentencePiece
vocabulary (tokens, scores, types from the model's own flags), then checked: llama.cpp
(llama-cpp-python, vocab_only) must tokenize sample text into sentencepiece's own ids.

Usage: .venv/bin/python tests/reference/make_mistral_vocab.py TOKENIZER.model.v3 OUT.gguf
"""
import sys

import gguf
import sentencepiece

SAMPLES = ["Hello, world!", " The weather in Paris is 21°C.", '{"city": "Oslo", "days": [1, 2]}']


def token_type(sp, i):
    if sp.is_unknown(i):
        return gguf.TokenType.UNKNOWN
    if sp.is_control(i):
        return gguf.TokenType.CONTROL
    if sp.is_unused(i):
        return gguf.TokenType.UNUSED
    if sp.is_byte(i):
        return gguf.TokenType.BYTE
    return gguf.TokenType.NORMAL


def main(model_path, out_path):
    sp = sentencepiece.SentencePieceProcessor(model_file=model_path)
    n = sp.vocab_size()
    writer = gguf.GGUFWriter(out_path, "llama")
    writer.add_name("Mistral v3 tokenizer (vocabulary only)")
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([sp.id_to_piece(i).encode("utf-8") for i in range(n)])
    writer.add_token_scores([sp.get_score(i) for i in range(n)])
    writer.add_token_types([token_type(sp, i) for i in range(n)])
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_unk_token_id(sp.unk_id())
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    import llama_cpp  # the check: llama.cpp reads the file as sentencepiece tokenizes
    llama = llama_cpp.Llama(model_path=out_path, vocab_only=True, verbose=False)
    for text in SAMPLES:
        got = llama.tokenize(text.encode(), add_bos=False, special=False)
        want = sp.encode(text)
        if got != want:
            sys.exit(f"{out_path}: llama.cpp tokenizes {text!r} as {got}, sentencepiece as {want}")
    if llama.tokenize(b"[TOOL_CALLS]", add_bos=False, special=True) != [5]:
        sys.exit(f"{out_path}: [TOOL_CALLS] is not the control token 5")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
