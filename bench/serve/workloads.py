"""Benchmark workloads: prompts of exact token lengths, built from a seed.

Prompts are text (every OpenAI-compatible server takes text), made of vocabulary tokens that
are one space-led lowercase word each (" river"), so a prompt of n such words is n tokens
for the model's own tokenizer; each prompt is checked with that tokenizer (llama.cpp's, read
from the same GGUF the servers load).
"""
import random
import re
from dataclasses import dataclass

WORD_PIECE = re.compile(r"^ [a-z]{3,12}$")


@dataclass
class RequestSpec:
    prompt: str
    prompt_tokens: int  # as the model's tokenizer counts them (BOS included when it adds one)
    max_tokens: int
    tag: str = ""


class PromptFactory:
    """Builds prompts of exact token lengths from a GGUF's vocabulary."""

    def __init__(self, gguf_path):
        from llama_cpp import Llama  # only the vocabulary is loaded
        self._llm = Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)
        words = []
        for token in range(self._llm.n_vocab()):
            piece = self._llm.detokenize([token]).decode("utf-8", errors="replace")
            if WORD_PIECE.match(piece):
                words.append(piece)
        if len(words) < 100:
            raise ValueError(f"{gguf_path}: too few word tokens ({len(words)}) to build prompts")
        self._words = words
        self.bos_tokens = self._count("")  # 1 when the tokenizer adds a BOS, else 0

    def _count(self, text):
        return len(self._llm.tokenize(text.encode(), add_bos=True, special=False))

    def words(self, rng, n):
        """n random word tokens as text, checked to tokenize to exactly n tokens."""
        for _ in range(100):
            text = "".join(rng.choices(self._words, k=n))
            if self._count(text) - self.bos_tokens == n:
                return text
            # else two words merged into one token: rare, retried with other words
        raise RuntimeError(f"no {n}-token prompt after 100 tries: the vocabulary merges words")


def random_workload(factory, num_prompts, input_len, output_len, seed, role="random"):
    """num_prompts independent prompts of input_len tokens (BOS included when added).
    Each role draws from its own stream, so no prompt of one workload is a prefix of
    another's (a server's prefix cache would serve it)."""
    rng = random.Random(f"{role}:{seed}")
    n = input_len - factory.bos_tokens
    return [RequestSpec(factory.words(rng, n), input_len, output_len)
            for _ in range(num_prompts)]


def shared_prefix_workload(factory, num_prompts, prefix_len, suffix_len, output_len, seed):
    """Prompts that start with one shared 'system prompt' of prefix_len tokens (BOS
    included), each followed by its own suffix_len tokens: a prefix cache serves the shared
    part of every prompt after the first."""
    rng = random.Random(f"shared-prefix:{seed}")
    prefix = factory.words(rng, prefix_len - factory.bos_tokens)
    return [RequestSpec(prefix + factory.words(rng, suffix_len), prefix_len + suffix_len,
                        output_len, tag="shared")
            for _ in range(num_prompts)]


def long_prompt_workload(factory, num_decoders, input_len, output_len, long_input_len,
                         long_output_len, seed):
    """num_decoders short prompts that decode output_len tokens each, plus one long prompt
    (tag "long") that the benchmark sends once they all decode: with chunked prefill their
    streams keep flowing while it is prefilled."""
    specs = random_workload(factory, num_decoders, input_len, output_len, seed, "decoder")
    for s in specs:
        s.tag = "decoder"
    rng = random.Random(f"long:{seed}")
    long = RequestSpec(factory.words(rng, long_input_len - factory.bos_tokens),
                       long_input_len, long_output_len, tag="long")
    return specs, long
