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
from .deepseek2 import write_variant

ARCH = "deepseek2"
# tokenmill splits attn_kv_b at load and runs the latent cache (the f16 rounding falls on the
# latent and the roped key), where llama.cpp decompresses it into full heads (the rounding
# falls on each head's K and V): measured 2.5e-3 at most; on the split layout (deepseek2.py)
# the two compute alike and meet the common bound.
LOGIT_BOUND = 5e-3


def write(path):
    write_variant(path, seed=81, q_lora=0, fused=True, yarn=False, v3_routing=False)
