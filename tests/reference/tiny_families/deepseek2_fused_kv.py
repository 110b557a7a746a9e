"""deepseek2 in the older layout (GGUFs converted before kv_b_proj was split, which llama.cpp
still loads): attn_kv_b whole (numpy (n_head * (qk_nope + v_head), kv_lora_rank): per head qk_nope
K rows then v_head V rows), no key_length_mla/value_length_mla (llama.cpp's is_mla() false),
key_length qk_nope + qk_rope, value_length v_head and head_count_kv = head_count: llama.cpp then
decompresses the latent to full heads and runs plain MHA, K = [k_nope of the head, the token's
one roped k_pe repeated over the heads], Q roped on its last qk_rope values of each head, and
caches K (n_head * (qk_nope + qk_rope)) and V (n_head * v_head) per token, both f16. With a plain
attn_q (no query LoRA, as DeepSeek-V2-Lite): q_lora_rank 0, which a file of other than 26 or 27
layers must state (llama.cpp requires the key there and loads attn_q when it is 0). No RoPE
scaling (kq_scale 1 / sqrt(qk_nope + qk_rope)), the rest as the V2 converters wrote it: no
expert_gating_func (llama.cpp's default for deepseek2 is then softmax), no groups, no
exp_probs_b, no expert_weights_norm, expert_weights_scale 1 (DeepSeek-V2-Lite's). 3 layers, 1
dense; 16 experts top-4 and 1 shared; the MLA widths of deepseek2.py."""
from .common import TinyWriter
from .deepseek2 import N_EMBD, N_FF, N_HEAD, N_LAYER, attention, fused_keys, moe

ARCH = "deepseek2"
# tokenmill splits attn_kv_b at load and runs the latent cache (the f16 rounding falls on the
# latent and the roped key), where llama.cpp decompresses it into full heads (the rounding
# falls on each head's K and V): measured 2.5e-3 at most; on the split layout (deepseek2.py)
# the two compute alike and meet the common bound.
LOGIT_BOUND = 5e-3
N_DENSE_LEAD = 1
N_EXPERT, N_USED, N_FF_EXP, N_SHARED = 16, 4, 24, 1


def write(path):
    w = TinyWriter(path, ARCH, seed=81)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_HEAD,
              rope_base=10000.0)
    w.w.add_leading_dense_block_count(N_DENSE_LEAD)
    w.w.add_q_lora_rank(0)
    fused_keys(w)
    w.expert_keys(N_EXPERT, N_USED, n_ff_exp=N_FF_EXP)
    w.w.add_expert_shared_count(N_SHARED)
    w.w.add_expert_weights_scale(1.0)

    w.embedding(N_EMBD, gain=16.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", w.vocab, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        attention(w, p, q_lora=0, fused=True)
        if i < N_DENSE_LEAD:
            w.feed_forward(p, N_EMBD, N_FF)
        else:
            moe(w, p, N_EMBD, N_EXPERT, N_FF_EXP, N_SHARED, router_gain=3.0)
    w.close()
