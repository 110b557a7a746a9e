"""deepseek2 in DeepSeek-V2-Lite's shape, laid out as the current converter writes it
(attn_k_b and attn_v_b split, the MLA keys): a plain attn_q (q_lora_rank 0), YaRN with
V2-Lite's mscale_all_dim, and V2's routing: no expert_gating_func (softmax), no groups, no
exp_probs_b, no renormalization, expert_weights_scale 1; 1 dense layer, then 16 experts top-4
and 1 shared. The MLA widths of deepseek2.py; the older attn_kv_b layout of this shape is
deepseek2_fused_kv.py."""
from .common import TinyWriter
from .deepseek2 import N_EMBD, N_FF, N_HEAD, N_LAYER, attention, mla_keys, moe, yarn_keys

ARCH = "deepseek2"
N_DENSE_LEAD = 1
N_EXPERT, N_USED, N_FF_EXP, N_SHARED = 16, 4, 24, 1


def write(path):
    w = TinyWriter(path, ARCH, seed=83)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=1,
              rope_base=10000.0)
    w.w.add_leading_dense_block_count(N_DENSE_LEAD)
    w.w.add_q_lora_rank(0)
    mla_keys(w)
    yarn_keys(w)
    w.expert_keys(N_EXPERT, N_USED, n_ff_exp=N_FF_EXP)
    w.w.add_expert_shared_count(N_SHARED)
    w.w.add_expert_weights_scale(1.0)

    w.embedding(N_EMBD, gain=16.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", w.vocab, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        attention(w, p, q_lora=0, fused=False)
        if i < N_DENSE_LEAD:
            w.feed_forward(p, N_EMBD, N_FF)
        else:
            moe(w, p, N_EMBD, N_EXPERT, N_FF_EXP, N_SHARED, router_gain=3.0)
    w.close()
