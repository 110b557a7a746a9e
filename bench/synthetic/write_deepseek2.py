"""Writes a deepseek2 GGUF of DeepSeek-V2-Lite's widths with random Q8_0 weights and a few
layers (the 27 of the real model take ~16 GB in Q8_0): multi-head latent attention (n_embd
2048, 16 heads, a plain attn_q, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128), YaRN
x40 as V2-Lite's, a leading dense layer (SwiGLU 10944), then 64 experts of 1408, top-6, 2
shared, softmax gating. Speed does not depend on the weights' values: each Q8_0 block is 32
random int8 with a random f16 scale small enough that activations stay finite. The vocabulary
(and its token count) is that of --vocab-from, so that servers tokenize.

  .venv/bin/python bench/synthetic/write_deepseek2.py --out /tmp/ds2-lite-4l.gguf --layers 4 \\
      --vocab-from models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import os
import sys

import gguf
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "reference"))
from tiny_families.common import copy_vocabulary  # noqa: E402

N_EMBD, N_HEAD, KV_LORA, QK_NOPE, QK_ROPE, V_HEAD = 2048, 16, 512, 128, 64, 128
N_FF, N_EXPERT, N_USED, N_FF_EXP, N_SHARED = 10944, 64, 6, 1408, 2


def q8_0(rng, rows, cols, scale):
    """rows x cols random Q8_0 blocks (an f16 scale, then 32 int8) as the bytes gguf writes."""
    blocks = rows * cols // 32
    d = (rng.uniform(0.5, 1.0, blocks) * scale).astype(np.float16).view(np.uint8)
    q = rng.integers(-127, 128, (blocks, 32), dtype=np.int8).view(np.uint8)
    return np.concatenate([d.reshape(blocks, 2), q], axis=1).reshape(rows, cols // 32 * 34)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab-from", required=True)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    w = gguf.GGUFWriter(args.out, "deepseek2")
    n_vocab = copy_vocabulary(args.vocab_from, w)
    w.add_block_count(args.layers)
    w.add_context_length(4096)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_leading_dense_block_count(1)
    w.add_q_lora_rank(0)
    w.add_kv_lora_rank(KV_LORA)
    w.add_key_length(KV_LORA + QK_ROPE)
    w.add_value_length(KV_LORA)
    w.add_key_length_mla(QK_NOPE + QK_ROPE)
    w.add_value_length_mla(V_HEAD)
    w.add_rope_dimension_count(QK_ROPE)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(40.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_rope_scaling_yarn_log_mul(0.0707)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_USED)
    w.add_expert_feed_forward_length(N_FF_EXP)
    w.add_expert_shared_count(N_SHARED)
    w.add_expert_weights_scale(1.0)

    def matrix(name, rows, cols, experts=None):
        # Entries of about 1 / sqrt(cols): Q8_0's scale times ~64 on average.
        scale = 1.0 / (64.0 * np.sqrt(cols))
        if experts is None:
            w.add_tensor(name, q8_0(rng, rows, cols, scale),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            data = np.stack([q8_0(rng, rows, cols, scale) for _ in range(experts)])
            w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def vector(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    matrix("token_embd.weight", n_vocab, N_EMBD)
    vector("output_norm.weight", N_EMBD)
    matrix("output.weight", n_vocab, N_EMBD)
    for i in range(args.layers):
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", N_EMBD)
        matrix(p + "attn_q.weight", N_HEAD * (QK_NOPE + QK_ROPE), N_EMBD)
        matrix(p + "attn_kv_a_mqa.weight", KV_LORA + QK_ROPE, N_EMBD)
        vector(p + "attn_kv_a_norm.weight", KV_LORA)
        matrix(p + "attn_k_b.weight", KV_LORA, QK_NOPE, experts=N_HEAD)
        matrix(p + "attn_v_b.weight", V_HEAD, KV_LORA, experts=N_HEAD)
        matrix(p + "attn_output.weight", N_EMBD, N_HEAD * V_HEAD)
        vector(p + "ffn_norm.weight", N_EMBD)
        if i == 0:
            matrix(p + "ffn_gate.weight", N_FF, N_EMBD)
            matrix(p + "ffn_up.weight", N_FF, N_EMBD)
            matrix(p + "ffn_down.weight", N_EMBD, N_FF)
            continue
        w.add_tensor(p + "ffn_gate_inp.weight",  # the router in f32, as the converter keeps it
                     (rng.standard_normal((N_EXPERT, N_EMBD)) / np.sqrt(N_EMBD)).astype(np.float32))
        matrix(p + "ffn_gate_exps.weight", N_FF_EXP, N_EMBD, experts=N_EXPERT)
        matrix(p + "ffn_up_exps.weight", N_FF_EXP, N_EMBD, experts=N_EXPERT)
        matrix(p + "ffn_down_exps.weight", N_EMBD, N_FF_EXP, experts=N_EXPERT)
        matrix(p + "ffn_gate_shexp.weight", N_FF_EXP * N_SHARED, N_EMBD)
        matrix(p + "ffn_up_shexp.weight", N_FF_EXP * N_SHARED, N_EMBD)
        matrix(p + "ffn_down_shexp.weight", N_EMBD, N_FF_EXP * N_SHARED)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: {args.layers} layers, vocabulary of {n_vocab}")


if __name__ == "__main__":
    main()
