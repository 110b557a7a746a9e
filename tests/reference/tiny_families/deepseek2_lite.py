"""deepseek2 in DeepSeek-V2-Lite's shape, laid out as the current converter writes it
(attn_k_b and attn_v_b split, the MLA keys): a plain attn_q (q_lora_rank 0), YaRN with
V2-Lite's mscale_all_dim, and V2's routing: no expert_gating_func (softmax), no groups, no
exp_probs_b, no renormalization, expert_weights_scale 1; 1 dense layer, then 16 experts top-4
and 1 shared. The MLA widths of deepseek2.py; the older attn_kv_b layout of this shape is
deepseek2_fused_kv.py."""
from .deepseek2 import write_variant

ARCH = "deepseek2"


def write(path):
    write_variant(path, seed=83, q_lora=0, fused=False, yarn=True, v3_routing=False)
