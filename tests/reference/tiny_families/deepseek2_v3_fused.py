"""deepseek2 in DeepSeek-V3's shape (deepseek2.py's query LoRA, YaRN and routing: sigmoid
gating with exp_probs_b, groups, renormalized and scaled weights, 2 shared experts) in the
older layout, attn_kv_b whole and the heads' widths in key_length and value_length (see
deepseek2_fused_kv.py), which tokenmill splits at load into the latent cache."""
from .deepseek2 import Q_LORA, write_variant

ARCH = "deepseek2"
# As deepseek2_fused_kv.py: llama.cpp rounds each head's K and V to f16, tokenmill the latent.
LOGIT_BOUND = 5e-3


def write(path):
    write_variant(path, seed=85, q_lora=Q_LORA, fused=True, yarn=True, v3_routing=True)
