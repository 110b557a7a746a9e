"""deepseek2 (DeepSeek-V2/V3's Multi-head Latent Attention), laid out as the current converter
writes it (convert_hf_to_gguf.py DeepseekV2Model): kv_b_proj split per head into attn_k_b
(numpy (n_head, kv_lora_rank, qk_nope): its K rows transposed) and attn_v_b (numpy (n_head,
v_head, kv_lora_rank)), head_count_kv 1, key_length kv_lora_rank + qk_rope and value_length
kv_lora_rank (the MQA over the latent cache), key_length_mla qk_nope + qk_rope and
value_length_mla v_head (the heads before absorption), rope.dimension_count qk_rope. llama.cpp
then runs the absorbed form: q_nope through attn_k_b into the latent space, one K row per token
shared by the heads (kv_lora_rank normed latent values, then qk_rope roped ones; the KV cache
holds only that row, in f16, and V is its first kv_lora_rank values), each head's attention
output through attn_v_b.

Here: 3 layers (not 26 or 27, which llama.cpp takes for V2-Lite and then does not read
q_lora_rank), n_embd 64, 4 heads, a query LoRA of rank 48 (attn_q_a, attn_q_a_norm, attn_q_b),
kv_lora_rank 40, qk_nope 28, qk_rope 16, v_head 20; RoPE NORM (adjacent pairs) on the qk_rope
part with YaRN factor 4 past an original context of 64 (at base 10000 and llama.cpp's betas 32
and 1 the ramp spans pairs 0..3 of 8: pair 0 unscaled, 1 and 2 mixed, 3..7 interpolated) and the
converter's yarn_log_multiplier 0.1 * mscale_all_dim (0.707, DeepSeek-V2's), so that kq_scale =
mscale^2 / sqrt(qk_nope + qk_rope) with mscale = 1 + 0.0707 * ln 4 (cos/sin themselves
unscaled); layer 0 dense (leading_dense_block_count 1, SwiGLU 96), layers 1 and 2 with 24
experts of 24 in 4 groups of 6, sigmoid gating, exp_probs_b (e_score_correction) added for the
selection only, the 2 groups of the largest top-2 sums kept, their top 3 experts, weights
renormalized and times 2.5, and 2 shared experts (one SwiGLU 2 * 24 wide). Untied output.

Gains: embeddings of ~2 an entry (gain 16) and attn_output at 0.5, so that the attention (the
f16 roundings of its K row, Q and probabilities) is a smaller share of the residual: llama.cpp's
logits move by ~5e-4 when token_embd moves by 1e-7 relative (3e-3 with unit embeddings), yet
dropping YaRN's mscale from kq_scale moves them by units. The seed gives routing margins of
1.4e-3 (experts) and 1.5e-3 (groups) or more on the goldens' tokens."""
import numpy as np
from gguf import ExpertGatingFuncType, RopeScalingType

from .common import TinyWriter

ARCH = "deepseek2"
N_EMBD, N_HEAD, N_LAYER = 64, 4, 3
Q_LORA, KV_LORA = 48, 40
QK_NOPE, QK_ROPE, V_HEAD = 28, 16, 20
N_FF = 96                                  # the leading dense layer
N_DENSE_LEAD = 1
N_EXPERT, N_USED, N_FF_EXP, N_SHARED = 24, 3, 24, 2
N_GROUP, N_GROUP_USED = 4, 2
WEIGHTS_SCALE = 2.5
YARN_FACTOR, YARN_ORIG_CTX, MSCALE_ALL_DIM = 4.0, 64, 0.707


def write(path, vocabulary_from=None):
    """vocabulary_from: as TinyWriter's (the e2e tests' server tokenizes)."""
    write_variant(path, seed=77, q_lora=Q_LORA, fused=False, yarn=True, v3_routing=True,
                  vocabulary_from=vocabulary_from)


def write_variant(path, *, seed, q_lora, fused, yarn, v3_routing, vocabulary_from=None):
    """A deepseek2 file of these widths: the query LoRA of rank q_lora (0: a plain attn_q),
    attn_kv_b whole and the heads' widths in the keys (fused, the older layout) or the MLA
    layout, YaRN or none, and V3's routing (this module's experts, groups, sigmoid with the
    selection bias, renormalized and scaled) or V2's (16 experts top-4, 1 shared, softmax, the
    weights as they are)."""
    w = TinyWriter(path, ARCH, seed=seed, vocabulary_from=vocabulary_from)
    # head_count_kv 1: MLA absorbed is MQA (the converter sets num_key_value_heads 1); the
    # older converters stated the heads.
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD,
              n_kv=N_HEAD if fused else 1, rope_base=10000.0)
    w.w.add_leading_dense_block_count(N_DENSE_LEAD)
    w.w.add_q_lora_rank(q_lora)
    if fused:
        fused_keys(w)
    else:
        mla_keys(w)
    if yarn:
        yarn_keys(w)
    if v3_routing:
        n_expert, n_used, n_shared = N_EXPERT, N_USED, N_SHARED
        w.expert_keys(n_expert, n_used, n_ff_exp=N_FF_EXP)
        v3_expert_keys(w)
        routing = dict(router_gain=2.0, bias_spread=0.3)
    else:
        n_expert, n_used, n_shared = 16, 4, 1
        w.expert_keys(n_expert, n_used, n_ff_exp=N_FF_EXP)
        w.w.add_expert_shared_count(n_shared)
        w.w.add_expert_weights_scale(1.0)
        routing = dict(router_gain=3.0)

    w.embedding(N_EMBD, gain=16.0)
    w.vector("output_norm.weight", N_EMBD)
    w.matrix("output.weight", w.vocab, N_EMBD, gain=4.0)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        attention(w, p, q_lora=q_lora, fused=fused)
        if i < N_DENSE_LEAD:
            w.feed_forward(p, N_EMBD, N_FF)
        else:
            moe(w, p, N_EMBD, n_expert, N_FF_EXP, n_shared, **routing)
    w.close()


def yarn_keys(w):
    """YaRN x4 past 64 tokens with DeepSeek-V2's mscale_all_dim."""
    w.w.add_rope_scaling_type(RopeScalingType.YARN)
    w.w.add_rope_scaling_factor(YARN_FACTOR)
    w.w.add_rope_scaling_orig_ctx_len(YARN_ORIG_CTX)
    # As the converter writes DeepSeek's rope_scaling; llama.cpp's deepseek2 reads neither beta
    # (its defaults are these) but takes the multiplier (and divides it by 0.1 again).
    w.w.add_rope_scaling_yarn_beta_fast(32.0)
    w.w.add_rope_scaling_yarn_beta_slow(1.0)
    w.w.add_rope_scaling_yarn_log_mul(0.1 * MSCALE_ALL_DIM)


def v3_expert_keys(w):
    """DeepSeek-V3's routing: shared experts, groups, sigmoid, renormalized and scaled."""
    w.w.add_expert_shared_count(N_SHARED)
    w.w.add_expert_group_count(N_GROUP)
    w.w.add_expert_group_used_count(N_GROUP_USED)
    w.w.add_expert_weights_scale(WEIGHTS_SCALE)
    w.w.add_expert_weights_norm(True)
    w.w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)


def mla_keys(w):
    """The MLA widths as the current converter states them (the MQA over the latent in
    key_length and value_length, the heads in the _mla keys)."""
    w.w.add_kv_lora_rank(KV_LORA)
    w.w.add_key_length(KV_LORA + QK_ROPE)
    w.w.add_value_length(KV_LORA)
    w.w.add_key_length_mla(QK_NOPE + QK_ROPE)
    w.w.add_value_length_mla(V_HEAD)
    w.w.add_rope_dimension_count(QK_ROPE)


def fused_keys(w):
    """The MLA widths as the older converters stated them (the heads')."""
    w.w.add_kv_lora_rank(KV_LORA)
    w.w.add_key_length(QK_NOPE + QK_ROPE)
    w.w.add_value_length(V_HEAD)
    w.w.add_rope_dimension_count(QK_ROPE)


def attention(w, p, q_lora, fused):
    """A layer's attn_norm and attention: the query's LoRA of rank q_lora (0: a plain attn_q),
    kv_b split into attn_k_b and attn_v_b or whole (fused: attn_kv_b), attn_output."""
    w.vector(p + "attn_norm.weight", N_EMBD)
    if q_lora:
        w.matrix(p + "attn_q_a.weight", q_lora, N_EMBD)
        w.vector(p + "attn_q_a_norm.weight", q_lora)
        w.matrix(p + "attn_q_b.weight", N_HEAD * (QK_NOPE + QK_ROPE), q_lora, gain=0.8)
    else:
        w.matrix(p + "attn_q.weight", N_HEAD * (QK_NOPE + QK_ROPE), N_EMBD, gain=0.8)
    w.matrix(p + "attn_kv_a_mqa.weight", KV_LORA + QK_ROPE, N_EMBD)
    w.vector(p + "attn_kv_a_norm.weight", KV_LORA)
    k_b, v_b = kv_b(w, N_HEAD, KV_LORA, QK_NOPE, V_HEAD)
    if fused:
        w.w.add_tensor(p + "attn_kv_b.weight",
                       np.concatenate([k_b, v_b], axis=1).reshape(-1, KV_LORA))
    else:
        w.w.add_tensor(p + "attn_k_b.weight", np.ascontiguousarray(k_b.transpose(0, 2, 1)))
        w.w.add_tensor(p + "attn_v_b.weight", np.ascontiguousarray(v_b))
    w.matrix(p + "attn_output.weight", N_EMBD, N_HEAD * V_HEAD, gain=0.5)


def kv_b(w, n_head, kv_lora, qk_nope, v_head):
    """kv_b_proj per head: qk_nope K rows then v_head V rows over the kv_lora latent, entries of
    variance 1 / kv_lora (K and V of unit entries from the normed latent); returns them apart,
    numpy (n_head, qk_nope, kv_lora) and (n_head, v_head, kv_lora)."""
    kv = (w.rng.standard_normal((n_head, qk_nope + v_head, kv_lora)) /
          np.sqrt(kv_lora)).astype(np.float32)
    return kv[:, :qk_nope, :], kv[:, qk_nope:, :]


def moe(w, p, n_embd, n_expert, n_ff_exp, n_shared, router_gain, bias_spread=None):
    """ffn_norm, the router, exp_probs_b (bias_spread not None), the routed experts and the
    shared ones (n_ff_exp * expert_shared_count wide, no gate of their own)."""
    w.experts(p, n_embd, n_ff_exp, n_expert, router_gain=router_gain)
    if bias_spread is not None:
        w.vector(p + "exp_probs_b.bias", n_expert, around=0.0, spread=bias_spread)
    w.matrix(p + "ffn_gate_shexp.weight", n_ff_exp * n_shared, n_embd)
    w.matrix(p + "ffn_up_shexp.weight", n_ff_exp * n_shared, n_embd)
    w.matrix(p + "ffn_down_shexp.weight", n_embd, n_ff_exp * n_shared)
