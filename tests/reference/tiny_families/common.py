"""What the tiny family writers share: a GGUFWriter with a fixed seed, the keys every family
has, a vocabulary of no tokens (tokenizer.ggml.model "no_vocab" plus <arch>.vocab_size, which
llama.cpp loads without a tokenizer) and random tensors scaled so that activations stay near
unit size and the logits spread over several units (a near-tie is then rare, and a wrong op
shows up far above rounding)."""
import hashlib

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

VOCAB = 128
CONTEXT = 256
# Prompts of token ids (no tokenizer), long enough to cross the small sliding windows and
# RoPE contexts the families set; each golden continues them greedily for CONTINUATION tokens.
PROMPTS = [
    [int(t) for t in np.random.default_rng(11).integers(1, VOCAB, 40)],
    [int(t) for t in np.random.default_rng(12).integers(1, VOCAB, 24)],
]
CONTINUATION = 24


class TinyWriter:
    """A GGUF of `arch` at `path` whose random tensors come from a generator seeded `seed`.
    Matrices are `matrix_type`, vectors f32. F32 by default: the families' arithmetic is then
    compared with little rounding in between (llama.cpp quantizes a quantized matrix's input
    activations, where a last-bit difference before may flip an int8 and move a logit by 0.1);
    the weight types have goldens of their own (make_requantized_golden.py)."""

    def __init__(self, path, arch, seed, matrix_type=T.F32, vocabulary_from=None):
        """vocabulary_from: a GGUF whose tokenizer.* keys the file takes (a real vocabulary,
        for the server, which tokenizes), else no vocabulary of VOCAB tokens."""
        self.w = gguf.GGUFWriter(path, arch)
        self.rng = np.random.default_rng(seed)
        self.matrix_type = matrix_type
        self.vocab = VOCAB
        if vocabulary_from is None:
            self.w.add_tokenizer_model("no_vocab")
            self.w.add_vocab_size(VOCAB)
        else:
            self.vocab = copy_vocabulary(vocabulary_from, self.w)

    def hparams(self, *, n_layer, n_embd, n_ff, n_head, n_kv, head_dim=None,
                rms_eps=1e-6, rope_base=10000.0, context_length=CONTEXT):
        self.w.add_block_count(n_layer)
        self.w.add_embedding_length(n_embd)
        self.w.add_feed_forward_length(n_ff)
        self.w.add_head_count(n_head)
        self.w.add_head_count_kv(n_kv)
        self.w.add_context_length(context_length)
        self.w.add_layer_norm_rms_eps(rms_eps)
        self.w.add_rope_freq_base(rope_base)
        if head_dim is not None:
            self.w.add_key_length(head_dim)
            self.w.add_value_length(head_dim)

    def matrix(self, name, rows, cols, gain=1.0, matrix_type=None):
        """rows outputs by cols inputs, entries of variance gain² / cols."""
        data = (self.rng.standard_normal((rows, cols)) * gain / np.sqrt(cols)).astype(np.float32)
        t = self.matrix_type if matrix_type is None else matrix_type
        if t == T.F32:
            self.w.add_tensor(name, data)
        else:
            self.w.add_tensor(name, gguf.quants.quantize(data, t), raw_dtype=t)

    def vector(self, name, n, around=1.0, spread=0.1):
        self.w.add_tensor(name, (around + spread * self.rng.standard_normal(n)).astype(np.float32))

    def attention(self, p, n_embd, n_head, n_kv, head_dim):
        """Layer prefix p's attn_norm and Q, K, V projections (scores of a few units)."""
        self.vector(p + "attn_norm.weight", n_embd)
        self.matrix(p + "attn_q.weight", n_head * head_dim, n_embd, gain=2.0)
        self.matrix(p + "attn_k.weight", n_kv * head_dim, n_embd, gain=2.0)
        self.matrix(p + "attn_v.weight", n_kv * head_dim, n_embd)

    def attention_output(self, p, n_embd, q_dim):
        self.matrix(p + "attn_output.weight", n_embd, q_dim)

    def feed_forward(self, p, n_embd, n_ff):
        """ffn_norm and the gate, up and down projections."""
        self.vector(p + "ffn_norm.weight", n_embd)
        self.matrix(p + "ffn_gate.weight", n_ff, n_embd)
        self.matrix(p + "ffn_up.weight", n_ff, n_embd)
        self.matrix(p + "ffn_down.weight", n_embd, n_ff)

    def expert_keys(self, n_expert, n_used, n_ff_exp=None, n_ff_shexp=None):
        self.w.add_expert_count(n_expert)
        self.w.add_expert_used_count(n_used)
        if n_ff_exp is not None:
            self.w.add_expert_feed_forward_length(n_ff_exp)
        if n_ff_shexp is not None:
            self.w.add_expert_shared_feed_forward_length(n_ff_shexp)

    def experts(self, p, n_embd, n_ff_exp, n_expert, router_gain=4.0, tied_pairs=False):
        """ffn_norm, the router ffn_gate_inp (logits of a few units, so routing is decided
        far above rounding) and the experts' ffn_{gate,up,down}_exps. tied_pairs: experts 2i
        and 2i + 1 share their router row, so every token's choice ends on a tie (ggml's
        argsort decides it) while the tied experts' weights differ."""
        self.vector(p + "ffn_norm.weight", n_embd)
        router = (self.rng.standard_normal((n_expert, n_embd)) * router_gain /
                  np.sqrt(n_embd)).astype(np.float32)
        if tied_pairs:
            router[1::2] = router[0::2]
        self.w.add_tensor(p + "ffn_gate_inp.weight", router)
        for name, rows, cols in [("ffn_gate_exps", n_ff_exp, n_embd),
                                 ("ffn_up_exps", n_ff_exp, n_embd),
                                 ("ffn_down_exps", n_embd, n_ff_exp)]:
            data = (self.rng.standard_normal((n_expert, rows, cols)) /
                    np.sqrt(cols)).astype(np.float32)
            t = self.matrix_type
            if t == T.F32:
                self.w.add_tensor(p + name + ".weight", data)
            else:
                self.w.add_tensor(p + name + ".weight", gguf.quants.quantize(data, t),
                                  raw_dtype=t)

    def shared_expert(self, p, n_embd, n_ff_shexp):
        """qwen2moe's shared expert and its gate (one row of n_embd, stored 1-D)."""
        self.w.add_tensor(p + "ffn_gate_inp_shexp.weight",
                          (self.rng.standard_normal(n_embd) * 2.0 / np.sqrt(n_embd))
                          .astype(np.float32))
        self.matrix(p + "ffn_gate_shexp.weight", n_ff_shexp, n_embd)
        self.matrix(p + "ffn_up_shexp.weight", n_ff_shexp, n_embd)
        self.matrix(p + "ffn_down_shexp.weight", n_embd, n_ff_shexp)

    def head_norms(self, p, head_dim, around=2.0):
        """Per-head RMS norms of Q and K (qwen3, gemma3); around 2: scores of a few units."""
        self.vector(p + "attn_q_norm.weight", head_dim, around=around)
        self.vector(p + "attn_k_norm.weight", head_dim, around=around)

    def pooling(self, pooling_type):
        """<arch>.pooling_type (llama.cpp's enum: 0 none, 1 mean, 2 cls, 3 last, 4 rank): how an
        embedding model pools its hidden states. Written only when a caller asks (the goldens'
        files have none)."""
        self.w.add_pooling_type(gguf.PoolingType(pooling_type))

    def embedding(self, n_embd, gain=1.0):
        """token_embd.weight: rows of norm ~gain (scale by √n_embd for unit entries)."""
        self.matrix("token_embd.weight", self.vocab, n_embd, gain=gain)

    def close(self):
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()


def copy_vocabulary(source, writer):
    """Writes the tokenizer.* keys of the GGUF `source` into `writer`; returns the number of
    tokens."""
    reader = gguf.GGUFReader(source)
    n_tokens = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
            n_tokens = max(n_tokens, len(value))
        elif field.types[0] == gguf.GGUFValueType.STRING:
            writer.add_string(key, value)
        elif field.types[0] == gguf.GGUFValueType.UINT32:
            writer.add_uint32(key, value)
        elif field.types[0] == gguf.GGUFValueType.INT32:
            writer.add_int32(key, value)
        elif field.types[0] == gguf.GGUFValueType.BOOL:
            writer.add_bool(key, value)
        else:
            raise ValueError(f"{source}: {key} has a type copy_vocabulary does not copy")
    return n_tokens


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
