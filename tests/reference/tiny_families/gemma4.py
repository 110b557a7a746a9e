"""gemma4, dense (no MoE), laid out as Gemma 4 E2B/E4B are: 12 layers, 3 sliding (window 8) to
1 full (the per-layer bool array sliding_window_pattern), full layers of head size 64 with
RoPE base 1e6 and proportional RoPE (rope_freqs.weight: 8 of the 32 pairs rotate, factor 1;
the rest factor 1e30, i.e. still), sliding ones of head size 32 rotating whole at base 10 000;
the last 4 layers (3 sliding, 1 full) store no KV and attend over layer 6's (sliding) and layer
7's (full), have no attn_k/attn_v/attn_k_norm and a double-wide MLP (feed_forward_length per
layer); per-layer embeddings of 8 per layer; layer_output_scale on every layer; final logits
soft-capped at 30; tied output (no output.weight, as E2B/E4B). Layer 3 (full, not shared) has no
attn_v: V is its K projection (the larger Gemma 4s' attention_k_eq_v, which llama.cpp allows on
any layer). Hard-coded in llama.cpp, not in the file: attention scale 1 (no 1/sqrt(head)), V
RMS-normed without weight, GELU-tanh MLPs, embeddings times sqrt(n_embd), per-layer token
embeddings times sqrt(8), the per-layer projection times 1/sqrt(n_embd), their sum times
1/sqrt(2); RoPE NEOX, the sliding layers' frequency scale 1."""
import numpy as np

from .common import TinyWriter

ARCH = "gemma4"
N_EMBD, N_HEAD, N_KV, N_LAYER = 64, 4, 2, 12
HEAD_FULL, HEAD_SWA = 64, 32
N_FF = 128                      # 2 * N_FF in the shared layers (use_double_wide_mlp)
N_SHARED = 4                    # layers 8..11 reuse layer 6's (sliding) and 7's (full) KV
N_EMBD_PER_LAYER = 8
WINDOW = 8
PARTIAL_ROTARY_FULL = 0.25
NO_V = {3}                      # layers whose V is their K projection (no attn_v)
SLIDING = [i % 4 != 3 for i in range(N_LAYER)]   # full at 3, 7, 11


def write(path):
    w = TinyWriter(path, ARCH, seed=65)
    first_shared = N_LAYER - N_SHARED
    n_ff = [N_FF if i < first_shared else 2 * N_FF for i in range(N_LAYER)]
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=n_ff, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_FULL, rope_base=1000000.0)
    w.w.add_key_length_swa(HEAD_SWA)
    w.w.add_value_length_swa(HEAD_SWA)
    # As convert_hf_to_gguf.py writes them: the full layers rotate "all" their head (the
    # proportional part is in rope_freqs), the sliding ones head * partial_rotary_factor (1).
    w.w.add_rope_dimension_count(HEAD_FULL)
    w.w.add_rope_dimension_count_swa(HEAD_SWA)
    w.w.add_rope_freq_base_swa(10000.0)
    w.w.add_sliding_window(WINDOW)
    w.w.add_sliding_window_pattern(SLIDING)
    w.w.add_shared_kv_layers(N_SHARED)
    w.w.add_embedding_length_per_layer_input(N_EMBD_PER_LAYER)
    w.w.add_final_logit_softcapping(30.0)

    # Unit entries once scaled by sqrt(n_embd); tied, with output_norm ~6: logits of std ~6.
    w.embedding(N_EMBD, gain=1.0)
    # Entries of ~1/sqrt(8): unit-sized once llama.cpp scales them by sqrt(8).
    w.matrix("per_layer_token_embd.weight", w.vocab, N_EMBD_PER_LAYER * N_LAYER,
             gain=np.sqrt(N_LAYER))
    w.matrix("per_layer_model_proj.weight", N_EMBD_PER_LAYER * N_LAYER, N_EMBD)
    w.vector("per_layer_proj_norm.weight", N_EMBD_PER_LAYER)
    n_rot_pairs = int(HEAD_FULL * PARTIAL_ROTARY_FULL / 2)
    w.w.add_tensor("rope_freqs.weight", np.array(
        [1.0] * n_rot_pairs + [1e30] * (HEAD_FULL // 2 - n_rot_pairs), dtype=np.float32))
    w.vector("output_norm.weight", N_EMBD, around=6.0, spread=0.6)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        head = HEAD_SWA if SLIDING[i] else HEAD_FULL
        has_kv = i < first_shared
        w.vector(p + "attn_norm.weight", N_EMBD)
        w.matrix(p + "attn_q.weight", N_HEAD * head, N_EMBD)
        if has_kv:
            w.matrix(p + "attn_k.weight", N_KV * head, N_EMBD)
            if i not in NO_V:
                w.matrix(p + "attn_v.weight", N_KV * head, N_EMBD)
        # Q and K come out of their norms with entries ~0.4 and no 1/sqrt(head) follows:
        # scores of std ~1 (sharper ones make llama.cpp's own logits move by ~0.1 when an
        # input moves by an f32 rounding: its f16 roundings of Q, K, V and the softmax flip).
        w.vector(p + "attn_q_norm.weight", head, around=0.4)
        if has_kv:
            w.vector(p + "attn_k_norm.weight", head, around=0.4)
        w.matrix(p + "attn_output.weight", N_EMBD, N_HEAD * head)
        w.vector(p + "post_attention_norm.weight", N_EMBD)
        w.feed_forward(p, N_EMBD, n_ff[i])
        w.vector(p + "post_ffw_norm.weight", N_EMBD)
        w.matrix(p + "inp_gate.weight", N_EMBD_PER_LAYER, N_EMBD, gain=0.5)
        w.matrix(p + "proj.weight", N_EMBD, N_EMBD_PER_LAYER)
        w.vector(p + "post_norm.weight", N_EMBD)
        # Near 1: the whole residual is scaled, and a shrinking one (0.8 a layer) left the
        # normed sublayers' outputs to dominate it, llama.cpp's logits then 10x as sensitive.
        w.vector(p + "layer_output_scale.weight", 1, around=1.0, spread=0.1)
    w.close()
