"""gpt-oss: attention with Q/K/V and output biases and a learned sink logit per query head
(around the scores' size, so the sinks take a visible share of each softmax), NeoX RoPE with
YaRN (factor 4 past an original context of 16), head_dim * n_head != n_embd, a sliding window
of 8 on the even layers (llama.cpp's default period 2), and a mixture of 16 experts, top-4,
whose router and experts have biases, whose top-4 logits are softmaxed, and whose gate and up
rows are large enough that the clamped SwiGLU's limit of 7 bites. The experts are MXFP4 (the
released files' type; the gguf package quantizes them), everything else F32."""
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T, RopeScalingType

from .common import VOCAB, TinyWriter

ARCH = "gpt-oss"
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_LAYER = 64, 4, 2, 32, 4
N_EXPERT, N_USED, N_FF_EXP = 16, 4, 64
WINDOW = 8


def experts(w, p):
    """The router with its bias and the MXFP4 experts with their f32 biases; gate and up of
    gain 3 (entries past ±7 for the clamp), down of gain 1."""
    w.w.add_tensor(p + "ffn_gate_inp.weight",
                   (w.rng.standard_normal((N_EXPERT, N_EMBD)) * 4.0 / np.sqrt(N_EMBD))
                   .astype(np.float32))
    w.vector(p + "ffn_gate_inp.bias", N_EXPERT, around=0.0, spread=1.0)
    for name, rows, cols, gain in [("ffn_gate_exps", N_FF_EXP, N_EMBD, 3.0),
                                   ("ffn_up_exps", N_FF_EXP, N_EMBD, 3.0),
                                   ("ffn_down_exps", N_EMBD, N_FF_EXP, 1.0)]:
        data = (w.rng.standard_normal((N_EXPERT, rows, cols)) * gain / np.sqrt(cols)) \
            .astype(np.float32)
        w.w.add_tensor(p + name + ".weight", gguf.quants.quantize(data, T.MXFP4),
                       raw_dtype=T.MXFP4)
        w.w.add_tensor(p + name + ".bias",
                       (0.5 * w.rng.standard_normal((N_EXPERT, rows))).astype(np.float32))


def write(path, skip=(), n_sinks=N_HEAD):
    """skip: tensors and keys (as "sliding_window") to leave out, and n_sinks the sinks'
    length, for test_gpt_oss_load_errors.py's bad files."""
    w = TinyWriter(path, ARCH, seed=51)
    add_tensor = w.w.add_tensor
    w.w.add_tensor = lambda name, *a, **k: None if name in skip else add_tensor(name, *a, **k)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF_EXP, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM, rope_base=150000.0)
    w.expert_keys(N_EXPERT, N_USED,
                  n_ff_exp=None if "expert_feed_forward_length" in skip else N_FF_EXP)
    if "sliding_window" not in skip:
        w.w.add_sliding_window(WINDOW)
    w.w.add_rope_scaling_type(RopeScalingType.YARN)
    w.w.add_rope_scaling_factor(4.0)
    w.w.add_rope_scaling_orig_ctx_len(16)
    w.embedding(N_EMBD, gain=8.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", VOCAB, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.attention(p, N_EMBD, N_HEAD, N_KV, HEAD_DIM)
        w.vector(p + "attn_q.bias", N_HEAD * HEAD_DIM, around=0.0, spread=0.5)
        w.vector(p + "attn_k.bias", N_KV * HEAD_DIM, around=0.0, spread=0.5)
        w.vector(p + "attn_v.bias", N_KV * HEAD_DIM, around=0.0, spread=0.5)
        w.attention_output(p, N_EMBD, N_HEAD * HEAD_DIM)
        w.vector(p + "attn_output.bias", N_EMBD, around=0.0, spread=0.5)
        w.vector(p + "attn_sinks.weight", n_sinks, around=1.0, spread=1.0)
        w.vector(p + "post_attention_norm.weight", N_EMBD)
        experts(w, p)
    w.close()
