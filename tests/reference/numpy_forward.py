"""A small, readable NumPy forward pass of a llama-family GGUF model (llama, qwen2).

Reads the GGUF with the `gguf` package and dequantizes every weight to float32, then runs
the textbook transformer in float32 with float activations. It is the independent
reference that tokenmill's logits are compared against (see make_logits_golden.py).
"""
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _field(reader, key, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


class NumpyModel:
    def __init__(self, path):
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
        self.rope_freqs = self.w.get("rope_freqs.weight")

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
            q = h @ self.w[p + "attn_q.weight"].T
            k = h @ self.w[p + "attn_k.weight"].T
            v = h @ self.w[p + "attn_v.weight"].T
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
            x = x + attn.reshape(n, -1) @ self.w[p + "attn_output.weight"].T
            h = self._rms_norm(x, self.w[p + "ffn_norm.weight"])
            gate = h @ self.w[p + "ffn_gate.weight"].T
            up = h @ self.w[p + "ffn_up.weight"].T
            x = x + ((gate / (1.0 + np.exp(-gate))) * up) @ self.w[p + "ffn_down.weight"].T
        x = self._rms_norm(x, self.w["output_norm.weight"])
        return (x @ self.output.T).astype(np.float32)
