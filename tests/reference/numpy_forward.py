"""A small, readable NumPy forward pass of a llama-family GGUF model (llama, qwen2).

Reads the GGUF with the `gguf` package and dequantizes every weight to float32, then runs
the textbook transformer in float32 with float activations. It is the independent
reference that tokenmill's logits are compared against (see make_logits_golden.py).
With bf16_products=True every weight product rounds both operands to bfloat16 first (the
weights once, the activations at each product), as the CUDA pass's cuBLAS path does
(make_bf16_logits_golden.py).
"""
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def to_bf16(a):
    """a rounded to the nearest bfloat16 (ties to even), kept as float32."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).reshape(np.shape(a))


def _field(reader, key, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


class NumpyModel:
    def __init__(self, path, bf16_products=False):
        reader = GGUFReader(path)
        arch = _field(reader, "general.architecture")
        if arch not in ("llama", "qwen2"):
            raise ValueError(f"unsupported architecture {arch}")
        self.arch = arch
        self.n_layer = _field(reader, f"{arch}.block_count")
        self.n_embd = _field(reader, f"{arch}.embedding_length")
        self.n_head = _field(reader, f"{arch}.attention.head_count")
        self.n_head_kv = _field(reader, f"{arch}.attention.head_count_kv", self.n_head)
        self.head_dim = _field(reader, f"{arch}.attention.key_length", self.n_embd // self.n_head)
        self.n_rot = _field(reader, f"{arch}.rope.dimension_count", self.head_dim)
        self.eps = _field(reader, f"{arch}.attention.layer_norm_rms_epsilon")
        self.rope_base = _field(reader, f"{arch}.rope.freq_base", 10000.0)
        self.neox = arch == "qwen2"
        self.w = {}
        for t in reader.tensors:
            self.w[t.name] = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
                [int(d) for d in reversed(t.shape)])
        self.output = self.w.get("output.weight", self.w["token_embd.weight"])
        self.bf16_products = bf16_products
        if bf16_products:  # the embedding is looked up, not multiplied: it stays exact
            self.w = {k: to_bf16(v) if v.ndim == 2 and k != "token_embd.weight" else v
                      for k, v in self.w.items()}
            self.output = to_bf16(self.output)
        self.rope_freqs = self.w.get("rope_freqs.weight")

    def _product(self, x, name):
        """x @ W.T for the weight `name`."""
        if self.bf16_products:
            x = to_bf16(x)
        return x @ self.w[name].T

    def _rms_norm(self, x, weight):
        return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)) * weight

    def _rope(self, x, positions):
        # x: (n_tokens, n_heads, head_dim). llama GGUFs rotate adjacent pairs (their Q/K rows
        # were permuted at conversion); qwen2 rotates halves (NeoX).
        half = self.n_rot // 2
        inv_freq = self.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / self.n_rot)
        if self.rope_freqs is not None:
            inv_freq = inv_freq / self.rope_freqs.astype(np.float64)
        angles = positions[:, None].astype(np.float64) * inv_freq[None, :]
        cos = np.cos(angles).astype(np.float32)[:, None, :]
        sin = np.sin(angles).astype(np.float32)[:, None, :]
        out = x.copy()
        if self.neox:
            a, b = x[..., :half], x[..., half:self.n_rot]
            out[..., :half] = a * cos - b * sin
            out[..., half:self.n_rot] = a * sin + b * cos
        else:
            a, b = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]
            out[..., 0:self.n_rot:2] = a * cos - b * sin
            out[..., 1:self.n_rot:2] = a * sin + b * cos
        return out

    def forward(self, tokens):
        """Logits (n_tokens, vocab) of one sequence starting at position 0."""
        tokens = np.asarray(tokens)
        n = len(tokens)
        positions = np.arange(n)
        x = self.w["token_embd.weight"][tokens]
        group = self.n_head // self.n_head_kv
        mask = np.triu(np.full((n, n), -np.inf, dtype=np.float32), k=1)
        for i in range(self.n_layer):
            p = f"blk.{i}."
            h = self._rms_norm(x, self.w[p + "attn_norm.weight"])
            q = self._product(h, p + "attn_q.weight")
            k = self._product(h, p + "attn_k.weight")
            v = self._product(h, p + "attn_v.weight")
            if p + "attn_q.bias" in self.w:
                q += self.w[p + "attn_q.bias"]
                k += self.w[p + "attn_k.bias"]
                v += self.w[p + "attn_v.bias"]
            q = self._rope(q.reshape(n, self.n_head, self.head_dim), positions)
            k = self._rope(k.reshape(n, self.n_head_kv, self.head_dim), positions)
            v = v.reshape(n, self.n_head_kv, self.head_dim)
            attn = np.empty((n, self.n_head, self.head_dim), dtype=np.float32)
            for hd in range(self.n_head):
                kv = hd // group
                scores = (q[:, hd, :] @ k[:, kv, :].T) / np.float32(np.sqrt(self.head_dim)) + mask
                scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
                scores /= scores.sum(axis=-1, keepdims=True)
                attn[:, hd, :] = scores @ v[:, kv, :]
            x = x + self._product(attn.reshape(n, -1), p + "attn_output.weight")
            h = self._rms_norm(x, self.w[p + "ffn_norm.weight"])
            gate = self._product(h, p + "ffn_gate.weight")
            up = self._product(h, p + "ffn_up.weight")
            x = x + self._product((gate / (1.0 + np.exp(-gate))) * up, p + "ffn_down.weight")
        x = self._rms_norm(x, self.w["output_norm.weight"])
        if self.bf16_products:
            x = to_bf16(x)
        return (x @ self.output.T).astype(np.float32)
