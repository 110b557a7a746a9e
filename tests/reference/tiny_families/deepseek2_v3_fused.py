"""deepseek2 in DeepSeek-V3's shape (deepseek2.py's query LoRA, YaRN and routing: sigmoid
gating with exp_probs_b, groups, renormalized and scaled weights, 2 shared experts) in the
older layout, attn_kv_b whole and the heads' widths in key_length and value_length (see
deepseek2_fused_kv.py), which tokenmill splits at load into the latent cache."""
from .common import TinyWriter
from .deepseek2 import (N_DENSE_LEAD, N_EMBD, N_EXPERT, N_FF, N_FF_EXP, N_HEAD, N_LAYER,
                        N_SHARED, N_USED, Q_LORA, attention, fused_keys, moe, v3_expert_keys,
                        yarn_keys)

ARCH = "deepseek2"
# As deepseek2_fused_kv.py: llama.cpp rounds each head's K and V to f16, tokenmill the latent.
LOGIT_BOUND = 5e-3


def write(path):
    w = TinyWriter(path, ARCH, seed=85)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_HEAD,
              rope_base=10000.0)
    w.w.add_leading_dense_block_count(N_DENSE_LEAD)
    w.w.add_q_lora_rank(Q_LORA)
    fused_keys(w)
    yarn_keys(w)
    w.expert_keys(N_EXPERT, N_USED, n_ff_exp=N_FF_EXP)
    v3_expert_keys(w)

    w.embedding(N_EMBD, gain=16.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", w.vocab, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        attention(w, p, q_lora=Q_LORA, fused=True)
        if i < N_DENSE_LEAD:
            w.feed_forward(p, N_EMBD, N_FF)
        else:
            moe(w, p, N_EMBD, N_EXPERT, N_FF_EXP, N_SHARED, router_gain=2.0, bias_spread=0.3)
    w.close()
