#!/usr/bin/env python3
"""Writes the tokenizer golden files tests/data/tokenizer/<model>.json.

For every string of a fixed corpus (ASCII, accents, CJK, emoji, code, whitespace runs, digits,
special-token text, the empty string, ...) it records llama.cpp's token ids, through
llama-cpp-python (`Llama(model_path=..., vocab_only=True).tokenize(text, add_bos=True,
special=...)`), for both settings of special-token parsing. tests/text/tokenizer/golden_test.cc
checks that our tokenizer produces exactly these ids.

It also tokenizes the corpus with Hugging Face `tokenizers`, built from the same GGUF by
`transformers`' own GGUF conversion code, and records every string where the two disagree under
"hf_disagreements"; golden_test.cc says which side is right and why.

transformers (5.x) cannot load a GGUF without torch: `AutoTokenizer.from_pretrained(...,
gguf_file=...)` imports transformers.integrations.gguf.reader, which imports torch, and torch is
not installed here (the PyPI wheel pulls gigabytes of CUDA libraries). So when torch is missing,
this script reads the tokenizer metadata with the `gguf` package exactly as transformers'
`get_gguf_tokenizer` does and hands it to transformers' `convert_gguf_tokenizer`, the same code
AutoTokenizer runs.

It also writes tests/data/tokenizer/ggml-vocab-<name>.json, llama.cpp's ids alone, for the
vocabulary-only GGUFs of the model families (VOCABULARIES; scripts/setup extracts them). For
WordPiece (BERT) it adds llama-cpp-python's detokenized text (decode(encode(s)) is s normalized,
not s), ill-formed UTF-8 inputs, and wordpiece_codepoints.json: every code point, as "a" + it +
"a", tokenized by llama.cpp, hashed by blocks.

Usage (from the repository root, with the reference requirements installed):
  .venv/bin/pip install -r tests/reference/requirements.txt
  .venv/bin/python tests/reference/make_tokenizer_golden.py [--llama-cpp-only] [MODEL.gguf...]
With model names, only their goldens are written (not the vocabulary or pre-tokenizer files);
a vocabulary's name (ggml-vocab-bert-bge.gguf) writes that vocabulary's golden alone.
"""
import json
import os
import random
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS_DIR = os.environ.get("TOKENMILL_MODELS_DIR", os.path.join(REPO, "models"))
OUT_DIR = os.path.join(REPO, "tests", "data", "tokenizer")
MODELS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "stories260K.gguf", "gemma-3-270m-q4_k_m.gguf"]

# ---------------------------------------------------------------------------------------------
# The corpus: hand-written cases first, then deterministic random mixes of fragments.

ASCII = [
    "Hello world", "Hello, world!", "hello world", "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.", "a", "A", "I", "ab", "abc", "x y z",
    "Once upon a time, there was a little girl named Lily.",
    "She liked to play outside in the park with her friends.", "What's up?", "I'm fine, thanks.",
    "you're they've we'll she'd it's don't", "YOU'RE THEY'VE WE'LL SHE'D IT'S DON'T",
    "You'Re They'Ve We'Ll", "'s 't 're 've 'm 'll 'd", "'''", "rock 'n' roll", "o'clock",
    "Tom's dog's bone", "e-mail", "state-of-the-art", "well...", "Wait -- what?", "(parentheses)",
    "[brackets] {braces} <angles>", "semi;colon:colon", "quote \"double\" 'single'", "back`tick`",
    "a+b=c", "50% off!", "#hashtag @mention", "user@example.com",
    "https://example.com/path?q=1&r=2#frag", "C:\\Windows\\System32", "/usr/local/bin/tokenmill",
    "~/.bashrc", "!!!???", "...", "---", "___", "***", "^_^", ":-)", "<3", "$100.00", "|pipe|",
    "a|b", "x^2", "a<b>c", "=>", "->", "::", "&&", "||", "supercalifragilisticexpialidocious",
    "antidisestablishmentarianism", "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababababababababab",
    "zzzzzzzz zzzzzzzz", "The The The The", "the\tthe", "MiXeD CaSe", "camelCaseIdentifier",
    "snake_case_identifier", "SCREAMING_SNAKE", "kebab-case-name", "ALLCAPS",
]

ACCENTS = [
    "café", "naïve", "résumé", "Ångström", "façade", "jalapeño", "São Paulo", "Zürich", "Kraków",
    "Ærøskøbing", "Straße", "ÉCOLE", "crème brûlée", "piñata", "coöperate", "Dvořák", "Łódź",
    "İstanbul", "e\u0301", "cafe\u0301", "n\u0303", "a\u0300\u0301\u0302", "Ω ≈ ç √ ∫", "Größe",
    "el niño", "ı", "Привет, мир!", "Здравствуйте", "Γειά σου Κόσμε", "αβγδε", "שלום עולם",
    "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới", "Tiếng Việt có dấu",
    "ქართული", "Հայերեն", "ᚠᚢᚦᚨᚱᚲ", "Ελληνικά και English", "ǅungla", "ﬁnance", "ﬀ", "Ⅻ", "①②③",
    "½ ¾ ⅓", "²³",
]

CJK = [
    "你好，世界", "中文分词测试", "我爱北京天安门", "こんにちは世界", "カタカナとひらがな", "日本語のテキスト",
    "안녕하세요 세계", "한국어 텍스트입니다", "漢字", "東京都", "朝鮮民主主義人民共和國", "你好world",
    "Hello你好", "中文，标点。符号！", "「引用」", "全角　スペース", "ｆｕｌｌｗｉｄｔｈ", "１２３４５",
    "一二三四五六七八九十", "天地玄黄宇宙洪荒", "𠀀𠀁𠀂", "𪚥", "ㄅㄆㄇ", "ᄀᄁᄂ",
]

EMOJI = [
    "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇫🇷", "❤️", "✨ sparkle ✨", "I ❤ NY",
    "🤖 robots", "emoji😀in😃text", "🔥🔥🔥", "🎉 Party!", "☕", "⚡️", "🧑‍💻", "🫠", "🦄🌈",
    "👋 Hello", "✅ done", "❌ failed", "→ ← ↑ ↓", "★☆", "♠♥♦♣", "™ © ®", "€ £ ¥ ₹ ₿",
]

CODE = [
    "def f(x):\n    return x * 2\n", "int main() {\n  return 0;\n}\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}", "#include <vector>\n#include <string>",
    "std::vector<std::string> names;", "if x == 1 and y != 2:\n        pass",
    "console.log(`value: ${value}`);", "SELECT * FROM users WHERE id = 42;",
    "{\"key\": \"value\", \"n\": [1, 2, 3]}", "<div class=\"main\"><p>Hi</p></div>",
    "x = [i**2 for i in range(10)]", "lambda a, b: a + b", "fn main() { println!(\"hi\"); }",
    "#!/bin/bash\necho $HOME && ls -la", "    indented = True", "\tTabbed\tline",
    "a = b // c; d %= e", "0x1F 0b1010 0o777 1e-9 3.14f", "// comment\n/* block */",
    "print('hello')  # comment", "git commit -m \"fix: bug\"",
    "<|im_start|>user\nWrite code<|im_end|>\n<|im_start|>assistant\n"
    "```python\nprint(1)\n```<|im_end|>",
    "---\ntitle: YAML\nitems:\n  - a\n  - b\n", "| col1 | col2 |\n|------|------|\n| 1 | 2 |",
    "$$\\frac{a}{b} = \\sum_{i=0}^{n} x_i$$",
]

WHITESPACE = [
    "", " ", "  ", "   ", "    ", "        ", " " * 33, "\t", "\t\t", "\n", "\n\n", "\n\n\n",
    "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \n ", "  \n  ", "\t\n\t", " a", "  a", "   a", "a ",
    "a  ", "a   ", " a ", "  a  ", "a b", "a  b", "a   b", "a    b", "a\tb", "a\nb", "a\n\nb",
    "a \n b", "a\r\nb", "hello  world", "hello   world  ", "   leading", "trailing   ",
    "\n\nparagraph\n\n", "line1\nline2\nline3", "a\u00a0b", "a\u3000b", "a\u2028b", "a\u2029b",
    "a\u0085b", "a\u2003b", "a\u200bb", "\u00a0\u00a0", "\u3000", "a\x0bb", "a\x0cb", " \t \n \r ",
    "word\n    indented", "end.\n", "x" + " " * 20 + "y", "\n" * 10, "\t" * 8 + "deep", " ! ",
    "  !!  ", " 1", "  1", "1 ", " 12 34 ",
]

DIGITS = [
    "0", "1", "12", "123", "1234", "12345", "123456", "1234567890", "3.14159", "2.718281828",
    "1,234,567", "1.234.567,89", "-42", "+1", "1e10", "10^6", "2024-01-15", "12:34:56",
    "+1 (555) 123-4567", "3/4", "100%", "v1.2.3", "0.0.0.0", "192.168.1.1", "007", "00000",
    "99 bottles", "4th", "21st century", "Room 101", "abc123def", "123abc", "a1b2c3", "x86_64",
    "H2O", "1st 2nd 3rd", "٣٤٥", "१२३", "๑๒๓", "1" * 40, "3 + 4 = 7", "12.5kg", "$1,000,000",
    "1/2/3/4", "#1", "№5",
]

SPECIAL = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<s> hello",
    "hello </s>", "<s>hello</s>", "<|im_start|>user\nHi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n", "text<|endoftext|>more",
    "<|im_start|><|im_end|>", "<|im_start|> <|im_end|>", "<|im_start", "im_start|>",
    "<|im_start|im_end|>", "<<|im_start|>>", "<|endoftext|><|endoftext|>", "a<s>b</s>c", "<s><s>",
    "< s >", "<|im_end|>\n<|im_start|>assistant\n", "<repo_name>tokenmill<file_sep>main.cc",
    "<jupyter_code>print(1)", "<empty_output>", "<gh_stars>100", "<unk><unk>", "  <s>  ",
    "\n<|im_end|>\n", "<0x41>", "<0xFF>", "x</s>y", "<|im_start|>user\n你好😀<|im_end|>",
    "<filename>a.py\n<issue_start>bug",
]

FRAGMENTS = (ASCII[:40] + ACCENTS[:30] + CJK[:15] + EMOJI[:20] + DIGITS[:25] + SPECIAL[:20]
             + ["\n", " ", "  ", "\t", "\r\n", "   ", ", ", ". ", "!", "?", "'s", "'ll"])


def build_corpus():
    fixed = ASCII + ACCENTS + CJK + EMOJI + CODE + WHITESPACE + DIGITS + SPECIAL
    rng = random.Random(20261130)
    mixes = []
    while len(fixed) + len(mixes) < 600:
        parts = rng.sample(FRAGMENTS, rng.randint(2, 5))
        joiner = rng.choice(["", " ", "  ", "\n", "\t"])
        mixes.append(joiner.join(parts))
    # Longer texts: a paragraph made of many fragments, and runs that stress the merge loop.
    mixes.append(" ".join(rng.choice(FRAGMENTS) for _ in range(200)))
    mixes.append("a" * 1000)
    mixes.append(" " * 500 + "x")
    mixes.append("😀" * 64)
    mixes.append("\n".join(CODE))
    corpus = []
    for text in fixed + mixes:
        if text not in corpus:
            corpus.append(text)
    return corpus


# ---------------------------------------------------------------------------------------------
# Hugging Face, through transformers' GGUF conversion.

def hf_tokenizer(model_path):
    """(backend tokenizers.Tokenizer, add_bos, bos_id, how it was loaded)."""
    try:
        import torch  # noqa: F401
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(os.path.dirname(model_path),
                                            gguf_file=os.path.basename(model_path))
        add_bos = bool(getattr(tok, "add_bos_token", False))
        return tok.backend_tokenizer, add_bos, tok.bos_token_id, "AutoTokenizer"
    except ImportError:
        pass
    # No torch: the metadata read of transformers' get_gguf_tokenizer, done with the gguf package.
    import gguf
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)

    reader = gguf.GGUFReader(model_path)
    metadata = {name: field.contents() for name, field in reader.fields.items()}
    architecture = metadata["general.architecture"]
    tokenizer_dict = {name: metadata[f"tokenizer.{key}"]
                      for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
                      if f"tokenizer.{key}" in metadata}
    add_bos = metadata.get("tokenizer.ggml.add_bos_token",
                           tokenizer_dict.get("tokenizer_type") == "llama")
    backend, _ = convert_gguf_tokenizer(architecture, tokenizer_dict)
    return backend, bool(add_bos), metadata.get("tokenizer.ggml.bos_token_id"), \
        "convert_gguf_tokenizer (no torch, so not AutoTokenizer)"


def third_reference(model_path, backend):
    """A third tokenizer to settle disagreements between llama.cpp and HF: (description, encode)
    where encode(text) gives ids without BOS for special=False.

    SentencePiece vocabularies: the sentencepiece library itself, with a model proto built from
    the GGUF (pieces, scores, types) and the normalizer llama2.c's tokenizers were trained with
    (identity, add_dummy_prefix, no whitespace squeezing, byte fallback).
    Byte-level BPE with pre "smollm": HF's converted tokenizer with the pre-tokenizer of SmolLM2's
    own tokenizer.json, Digits(individual_digits) then ByteLevel; the GGUF conversion drops it."""
    import gguf
    reader = gguf.GGUFReader(model_path)
    md = {name: field.contents() for name, field in reader.fields.items()}
    if md.get("tokenizer.ggml.add_space_prefix", True) is False:
        # Gemma: no dummy prefix, and user-defined tokens for whitespace runs and markup that
        # its own tokenizer.model matches before the pieces; a proto rebuilt from the GGUF has
        # neither, so it cannot settle anything here (llama.cpp's ids are the golden).
        return "none: the GGUF's SentencePiece settings (no dummy prefix, user-defined " \
               "whitespace tokens) are not rebuilt", None
    if md["tokenizer.ggml.model"] == "llama":
        import sentencepiece
        from sentencepiece import sentencepiece_model_pb2 as pb
        proto = pb.ModelProto()
        proto.trainer_spec.model_type = pb.TrainerSpec.BPE
        proto.trainer_spec.byte_fallback = True
        proto.trainer_spec.unk_id, proto.trainer_spec.bos_id = 0, 1
        proto.trainer_spec.eos_id, proto.trainer_spec.pad_id = 2, -1
        proto.normalizer_spec.name = "identity"
        proto.normalizer_spec.add_dummy_prefix = True
        proto.normalizer_spec.remove_extra_whitespaces = False
        proto.normalizer_spec.escape_whitespaces = True
        for text, score, token_type in zip(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.scores"],
                                           md["tokenizer.ggml.token_type"]):
            piece = proto.pieces.add()
            piece.piece, piece.score, piece.type = text, score, token_type
        sp = sentencepiece.SentencePieceProcessor(model_proto=proto.SerializeToString())
        name = f"sentencepiece {sentencepiece.__version__} (model proto built from the GGUF)"
        return name, sp.encode
    if md.get("tokenizer.ggml.pre") == "smollm":
        import copy
        from tokenizers import pre_tokenizers
        fixed = copy.deepcopy(backend)
        fixed.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        fixed.encode_special_tokens = True
        return ("HF tokenizers with SmolLM2's pre-tokenizer "
                "(Digits(individual_digits) + ByteLevel)",
                lambda text: fixed.encode(text, add_special_tokens=False).ids)
    return None, None


def hf_encode(backend, add_bos, bos_id, text, special):
    # Special-token text is matched as special tokens unless encode_special_tokens is set.
    backend.encode_special_tokens = not special
    ids = backend.encode(text, add_special_tokens=False).ids
    return ([bos_id] if add_bos else []) + ids


# ---------------------------------------------------------------------------------------------
# Pre-tokenizer splits for vocabularies the two models do not cover (Llama 3, Qwen2, GPT-2),
# from the `regex` module running the expressions of the original tokenizer.json files.

PRE_TOKENIZER_REGEXES = {
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "gpt-2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
}


def regex_split(pattern, text):
    """Matches and the text between them, as Hugging Face's Split(behavior="isolated")."""
    import regex
    pieces, end = [], 0
    for match in regex.finditer(pattern, text):
        if match.start() > end:
            pieces.append(text[end:match.start()])
        pieces.append(match.group())
        end = match.end()
    if end < len(text):
        pieces.append(text[end:])
    return pieces


def write_pre_tokenizer_splits(corpus):
    out = {name: [{"text": t, "pieces": regex_split(p, t)} for t in corpus]
           for name, p in PRE_TOKENIZER_REGEXES.items()}
    dest = os.path.join(OUT_DIR, "pre_tokenizer_splits.json")
    with open(dest, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True, indent=0)
        f.write("\n")
    print(f"pre-tokenizer splits for {sorted(out)} -> {dest}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# The SmolLM2 vocabulary under other pre-tokenizers: llama.cpp's ids for a copy of its GGUF
# metadata (no tensors) with tokenizer.ggml.pre replaced, so that every pre-tokenizer we
# support is checked end to end against llama.cpp, not only the model's own "smollm". o200k
# (gpt-4o, gpt-oss's; no o200k vocabulary is reachable here) on Llama 3's vocabulary instead,
# whose multi-digit and contraction tokens make it split differently from tekken; SmolLM2's
# single digits would not.

PRE_VARIANTS = {
    "pre_variants.json": (MODELS[0], ["gpt-2", "llama-bpe", "qwen2", "default", "tekken"]),
    "pre_variants_o200k.json": ("ggml-vocab-llama-bpe.gguf", ["gpt-4o"]),
    # DeepSeek-V3's and Kimi K2's splits (no vocabulary of theirs is reachable here) on Llama
    # 3's, whose CJK, kana and three-digit tokens show where they split.
    "pre_variants_deepseek_kimi.json": ("ggml-vocab-llama-bpe.gguf", ["deepseek-v3", "kimi-k2"]),
}

# What those two split apart and the corpus has little of: Han beside kana, hangul and Latin,
# the Han of CJK extensions and compatibility blocks (Kimi's own ranges, not \p{Han}),
# half-width kana, marks after letters, punctuation before ASCII words (DeepSeek's first
# alternative), case changes inside a word (one run for Kimi) and contractions after non-ASCII.
PRE_VARIANT_EXTRAS = {
    "pre_variants_deepseek_kimi.json": [
        "中文English混合テキスト", "日本語のカタカナとひらがな、漢字。", "ﾊﾝｶｸｶﾀｶﾅ", "〇々〆ヶ",
        "㐀㐁 䶵 鿿 豈更 𠀀𠀁 𪜀 𫝀 𫠠 𬺰 丽", "한국어와 中文", "HelloWorld camelCaseX", "ÀÉÎõü déjà-vu",
        "e\u0301\u0302x", "नमस्ते दुनिया", ".NET #include @user $HOME ~/x", "'s 'T 'Re café's",
        "naïve's Ünïcode'LL", "１２３４５６７ 1234567 ١٢٣٤٥", "a\u00a0\u00a0b", "x²³ ½¾ Ⅻ",
        "你好，世界！Hello, world!", " 中 文 ", "\n\n中文\n", "([{中}])", "——中文——", "🙂中🙂",
        "₿100 €5", "ab\u200bcd", "\u3000\u3000全角", "A\u0300\u0301B",
    ],
}


def write_vocab_copy(source_path, dest_path, pre):
    import gguf
    reader = gguf.GGUFReader(source_path)
    writer = gguf.GGUFWriter(dest_path, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = pre if name == "tokenizer.ggml.pre" else field.contents()
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, value, field.types[0], sub_type=field.types[-1])
        else:
            writer.add_key_value(name, value, field.types[0])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_pre_variants(corpus):
    for golden, (vocabulary, pres) in PRE_VARIANTS.items():
        write_pre_variant(corpus, golden, vocabulary, pres)


def write_pre_variant(corpus, golden, vocabulary, pres):
    import tempfile
    from llama_cpp import Llama
    source = os.path.join(MODELS_DIR, vocabulary)
    texts = corpus[:450] + PRE_VARIANT_EXTRAS.get(golden, [])
    variants = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pre in pres:
            path = os.path.join(tmp, "vocab.gguf")
            write_vocab_copy(source, path, pre)
            llm = Llama(model_path=path, vocab_only=True, verbose=False)
            variants[pre] = [
                {"text": t,
                 "ids": llm.tokenize(t.encode("utf-8"), add_bos=True, special=False),
                 "ids_special": llm.tokenize(t.encode("utf-8"), add_bos=True, special=True)}
                for t in texts]
            del llm
    dest = os.path.join(OUT_DIR, golden)
    with open(dest, "w", encoding="utf-8") as f:
        json.dump({"vocabulary": vocabulary, "variants": variants}, f, ensure_ascii=True, indent=0)
        f.write("\n")
    print(f"{vocabulary} vocabulary under pre {pres} -> {dest}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# The vocabularies of the model families tokenmill runs, from llama.cpp's own vocabulary-only
# GGUFs (its models/ggml-vocab-*.gguf, as the llama-cpp-python sdist vendors them; scripts/setup
# extracts them into models/), and Tekken's, which llama.cpp has none of, written by
# make_tekken_vocab.py through gguf-py's MistralVocab: llama.cpp's ids only, with no Hugging Face
# comparison.

VOCABULARIES = {
    "ggml-vocab-llama-bpe.gguf": "Llama 3.x (byte-level BPE, pre llama-bpe)",
    "ggml-vocab-qwen2.gguf": "Qwen2 and Qwen3 (byte-level BPE, pre qwen2)",
    "ggml-vocab-phi-3.gguf": "Phi-3 (SentencePiece, pre default)",
    "ggml-vocab-llama-spm.gguf": "Llama 2 and Mistral 7B v0.1 (SentencePiece)",
    "ggml-vocab-gpt-2.gguf": "GPT-2 (byte-level BPE, pre gpt-2)",
    "tekken-240911-vocab.gguf": "Tekken: Mistral Nemo, Ministral 3 (byte-level BPE, pre tekken)",
    "ggml-vocab-bert-bge.gguf": "BERT: BAAI bge-small-en (WordPiece, uncased)",
}

# WordPiece's own corners: control and format characters (dropped, not split), marks (stripped
# with the accents), ASCII symbols (split) and others (kept in the word), Unicode punctuation,
# CJK ideographs beside kana and Hangul (whose "NFD" keeps only the leading consonant), case
# mappings, long and unknown words, BERT's special-token text and the "▁" the converter marks
# word starts with.
WORDPIECE_EXTRAS = [
    "a\x1cb", "a\x1fb", "x\x00y", "a\x7fb", "a\x85b", "zero\u200bwidth", "\ufeffbom",
    "soft\u00adhyphen", "ab\ue000cd", "\u0301", "a\u0301", "\u0301abc", "e\u0302\u0304",
    "हिन्दी भाषा", "ภาษาไทย", "مَرْحَبًا", "a$b", "1+1=2", "x^y", "a|b~c", "`code`", "<tag>", "a©b", "5€",
    "20°C", "a→b", "brand™", "±1", "«quote»", "“smart” ‘quotes’", "a—b", "¿qué?", "¡hola!", "、。",
    "wait…", "中文字符", "漢字かな交じり文", "豈更", "한국어 문장", "ｶﾀｶﾅ", "ΣΊΣΥΦΟΣ", "İIıi",
    "ǅǄǆ", "ẞ straße", "ÀÉÎÕÜ", "Ꭰꭰ", "ᏸ", "Ⅻ ⅻ", "ﬁ ﬂ", "qzxjvk", "🦙🦙", "xyz🦙abc", "ununununun",
    "unaffable unbelievable", "pneumonoultramicroscopicsilicovolcanoconiosis" * 20,
    "x" * 2000 + "y", "1234567890" * 50, "a" * 5000, "[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]",
    "[cls]", "[CLS][SEP]", "hello [MASK] world", "[unused0]", "[SEP]x[CLS]", "▁", "▁hello", "a▁b",
    "##ing", "hello ##world", "a\u3000b", "\u00a0", "a\u2028b", "don't stop", "U.S.A.",
]

# Ill-formed UTF-8 (as hex, which JSON strings cannot hold): llama.cpp reads each bad byte as
# U+FFFD and drops it. Overlong forms, which llama.cpp decodes ("\xc1\x81" is "A") and
# tokenmill drops, and forms past U+10FFFF, which llama.cpp cannot encode again, are left out.
WORDPIECE_BYTES = ["ff", "616263ff646566", "e4bd", "80616263", "636166c3", "eda080",
                   "61c32862", "68656c6c6ff0288c28", "f09f", "fe7a", "c3a9ffc3a9"]

CODEPOINT_BLOCK = 1024


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in (i & 0xFFFFFFFF).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def codepoint_probe(block):
    """The probe text of a block: "a" + c + "a" for each code point c, joined by spaces."""
    start = block * CODEPOINT_BLOCK
    cps = [c for c in range(start, start + CODEPOINT_BLOCK) if not 0xD800 <= c < 0xE000]
    return " ".join("a" + chr(c) + "a" for c in cps)


def write_codepoint_golden(llm):
    hashes = [fnv1a64(llm.tokenize(codepoint_probe(b).encode("utf-8"), add_bos=False,
                                   special=False))
              for b in range(0x110000 // CODEPOINT_BLOCK)]
    out = {"model": "ggml-vocab-bert-bge.gguf",
           "probe": "per block of 1024 code points (surrogates left out): '\"a\" + c + \"a\"' "
                    "joined by spaces, tokenized without special tokens; FNV-1a 64 of the ids as "
                    "little-endian int32",
           "block_size": CODEPOINT_BLOCK, "hashes": hashes}
    dest = os.path.join(OUT_DIR, "wordpiece_codepoints.json")
    with open(dest, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=0)
        f.write("\n")
    print(f"{len(hashes)} code point blocks -> {dest}", file=sys.stderr)


def write_vocabulary_goldens(corpus, only=None):
    from llama_cpp import Llama
    import llama_cpp
    for vocab, what in VOCABULARIES.items():
        if only and vocab not in only:
            continue
        llm = Llama(model_path=os.path.join(MODELS_DIR, vocab), vocab_only=True, verbose=False)
        wordpiece = "bert" in vocab
        texts = corpus + [t for t in WORDPIECE_EXTRAS if t not in corpus] if wordpiece else corpus
        cases = [{"text": t,
                  "ids": llm.tokenize(t.encode("utf-8"), add_bos=True, special=False),
                  "ids_special": llm.tokenize(t.encode("utf-8"), add_bos=True, special=True)}
                 for t in texts]
        extra = {}
        if wordpiece:
            for case in cases:
                case["decoded"] = llm.detokenize(case["ids"]).decode("utf-8")
                case["decoded_special"] = llm.detokenize(case["ids_special"],
                                                         special=True).decode("utf-8")
            extra["byte_cases"] = [
                {"hex": h, "ids": llm.tokenize(bytes.fromhex(h), add_bos=True, special=False)}
                for h in WORDPIECE_BYTES]
            write_codepoint_golden(llm)
        del llm
        out = {
            "model": vocab,
            "vocabulary": what,
            "generator": f"llama-cpp-python {llama_cpp.__version__}: "
                         "Llama(vocab_only=True).tokenize("
                         "text.encode(), add_bos=True, special=False -> ids / True -> ids_special)",
            "cases": cases,
            **extra,
        }
        dest = os.path.join(OUT_DIR, vocab.removesuffix(".gguf") + ".json")
        with open(dest, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=True, indent=0)
            f.write("\n")
        print(f"{vocab}: {len(cases)} strings -> {dest}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------

def main():
    from llama_cpp import Llama
    import llama_cpp

    corpus = build_corpus()
    os.makedirs(OUT_DIR, exist_ok=True)
    models = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    vocabularies = [m for m in models if m in VOCABULARIES]
    if vocabularies:
        write_vocabulary_goldens(corpus, only=vocabularies)
        models = [m for m in models if m not in VOCABULARIES]
        if not models:
            return
    if not models:
        write_vocabulary_goldens(corpus)
        write_pre_variants(corpus)
        if "--llama-cpp-only" in sys.argv:  # needs llama-cpp-python alone, not transformers
            return
        write_pre_tokenizer_splits(corpus)
    for model in models or MODELS:
        path = os.path.join(MODELS_DIR, model)
        llm = Llama(model_path=path, vocab_only=True, verbose=False)
        backend, add_bos, bos_id, how = hf_tokenizer(path)
        third_name, third_encode = third_reference(path, backend)
        cases, disagreements = [], []
        for text in corpus:
            case = {"text": text}
            for special, key in [(False, "ids"), (True, "ids_special")]:
                ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
                case[key] = ids
                hf_ids = hf_encode(backend, add_bos, bos_id, text, special)
                if hf_ids != ids:
                    entry = {"text": text, "special": special, "llama_cpp": ids, "hf": hf_ids}
                    if third_encode is not None and not special:
                        entry["third"] = ([bos_id] if add_bos else []) + third_encode(text)
                    disagreements.append(entry)
            cases.append(case)
        out = {
            "model": model,
            "generator": f"llama-cpp-python {llama_cpp.__version__}: "
                         "Llama(vocab_only=True).tokenize("
                         "text.encode(), add_bos=True, special=False -> ids / True -> ids_special)",
            "hf": f"transformers + tokenizers via {how}",
            "third": third_name,
            "cases": cases,
            "hf_disagreements": disagreements,
        }
        dest = os.path.join(OUT_DIR, model.removesuffix(".gguf") + ".json")
        with open(dest, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=True, indent=0)
            f.write("\n")
        print(f"{model}: {len(cases)} strings, {len(disagreements)} HF disagreements -> {dest}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
