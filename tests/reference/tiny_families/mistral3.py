"""mistral3 (Ministral 3): llama's layer with YaRN (factor 4 past an original context of 16)
whose beta_fast 0.5 and beta_slow 0.125 move its ramp to pairs 2..6 (llama.cpp's defaults 32
and 1 put it at 0..2), a yarn_log_multiplier of 0.5 (cos/sin times mscale(4, 1) /
mscale(4, 0.5), not the 1 of no multiplier), and Llama 4's attention temperature of 0.5: the
queries of positions 16-31, 32-47 and 48-63 times 1.35, 1.55 and 1.69, so every prompt crosses
two or three of its steps. head_dim 32 with 4 heads over n_embd 64, GQA 2, Q/K/V and
attention-output biases (llama.cpp takes them where the file has them), untied output. Turning
off the temperature, the betas or the multiplier each moves llama.cpp's logits by more than 0.1
(docs/model-families.md)."""
from gguf import RopeScalingType

from .common import VOCAB, TinyWriter

ARCH = "mistral3"
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF, N_LAYER = 64, 4, 2, 32, 128, 2
TEMPERATURE, BETA_FAST, BETA_SLOW, LOG_MUL = 0.5, 0.5, 0.125, 0.5


def write(path, temperature=TEMPERATURE, beta_fast=BETA_FAST, beta_slow=BETA_SLOW,
          log_mul=LOG_MUL, original_context=16, rope_dim=None, n_expert=None, extra=()):
    """None leaves a key out; rope_dim sets
    rope.dimension_count, n_expert expert_count (and expert_used_count 1), `extra` adds
    tensors by name (vectors of n_ff or n_embd): test_mistral3_load_errors.py's bad files."""
    w = TinyWriter(path, ARCH, seed=61)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=N_FF, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM, rope_base=10000.0)
    w.w.add_rope_scaling_type(RopeScalingType.YARN)
    w.w.add_rope_scaling_factor(4.0)
    if original_context is not None:
        w.w.add_rope_scaling_orig_ctx_len(original_context)
    for value, add in [(beta_fast, w.w.add_rope_scaling_yarn_beta_fast),
                       (beta_slow, w.w.add_rope_scaling_yarn_beta_slow),
                       (log_mul, w.w.add_rope_scaling_yarn_log_mul),
                       (temperature, w.w.add_attn_temperature_scale),
                       (rope_dim, w.w.add_rope_dimension_count)]:
        if value is not None:
            add(value)
    if n_expert is not None:
        w.expert_keys(n_expert, 1)
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
        w.feed_forward(p, N_EMBD, N_FF)
        for name in extra:
            if name.startswith(p):
                w.vector(name, N_EMBD if "down" in name else N_FF, around=0.0)
    w.close()
