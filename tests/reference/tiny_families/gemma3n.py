"""gemma3n (the text model of Gemma 3n E2B/E4B), laid out as they are: AltUp with 4 streams
(stream 0 active), LAuReL of rank 64, per-layer embeddings of 256 per layer, sliding-window
layers (window 8) with full ones at 4, 9, 14, 19 and 21 (the per-layer bool array
sliding_window_pattern), activation sparsity (gaussian top-k, 95th percentile) in the gate of
the first 10 layers, and the last 2 of its 22 layers storing no KV: layer 20 (sliding) attends
over layer 18's, layer 21 (full) over layer 19's. Tied output, final soft-cap 30.

llama.cpp (src/models/gemma3n.cpp, llama-hparams.h) reads none of that AltUp/LAuReL/sparsity/
sharing layout from the file: 4 streams, active stream 0, LAuReL rank 64, 256 per-layer
embeddings per layer, sparsity in layers 0..9 with multiplier icdf(0.95) = 1.6448533535..., the
first 20 layers storing KV (later sliding layers reading layer 18's, full ones layer 19's), the
soft-cap 30 are all hard-coded; so the file keeps to those widths and needs at least 21 layers
(layer 18 sliding and 19 full) for any sharing, 22 for both kinds. It still carries the keys
convert_hf_to_gguf.py writes (altup.active_idx, altup.num_inputs,
embedding_length_per_layer_input, attention.shared_kv_layers, activation_sparsity_scale with
icdf(0.95) for the sparse layers and icdf(0) = -inf for the others, final_logit_softcapping)
with the values llama.cpp assumes. Every layer has attn_k/attn_v (llama.cpp requires them; the
sharing layers' go unused). Hard-coded too: attention scale 1 (no 1/sqrt(head)), V RMS-normed
without weight, GELU-tanh, embeddings times sqrt(n_embd), the router's input times 1/n_embd,
per-layer token embeddings times sqrt(256), the per-layer projection times 1/sqrt(n_embd), their
sum times 1/sqrt(2), RoPE NEOX (its bases from the file: rope.freq_base 1e6 on full layers,
rope.freq_base_swa 10 000 on sliding ones). Widths all differ (n_embd 96, q 128, kv 64, ffn 160, LAuReL 64, per-layer 256) so
that a transposed square matrix cannot go unnoticed."""
import numpy as np

from .common import TinyWriter

ARCH = "gemma3n"
N_EMBD, N_HEAD, N_KV, HEAD_DIM, N_FF, N_LAYER = 96, 4, 2, 32, 160, 22
# Hard-coded in llama.cpp (llama-hparams.h, models.h, gemma3n.cpp): the file must agree.
N_ALTUP, ALTUP_ACTIVE, LAUREL_RANK, N_EMBD_PER_LAYER = 4, 0, 64, 256
N_LAYER_KV = 20                 # layers 20, 21 store no KV
N_LAYER_SPARSE = 10             # gaussian top-k in layers 0..9
SPARSITY_STD_MUL = 1.6448533535003662   # torch Normal(0, 1).icdf(0.95), as converted
WINDOW = 8
SLIDING = [i not in (4, 9, 14, 19, 21) for i in range(N_LAYER)]

# Gains. The router's input is RMS-normed and divided by n_embd: modalities of ~0.16 (up to 0.5),
# predict coefficients of ~0.03 (up to 0.16), correct ones 1 +- 0.1; the 3 added streams then grow
# from ~1.3 to ~6 (stream 0 stays ~1.2). Larger AltUp gains (router 48, coefficients 0.5) made the
# added streams grow to ~1e4 and llama.cpp's logits move by 1 to 5 when token_embd moves by 1e-7.
ROUTER_GAIN = 16.0
PREDICT_GAIN = 0.2
CORRECT_GAIN = 0.2
# The normed sublayer outputs small beside the stream (their weights 0.35, 0.2, 0.35): the sparse
# FFN's output is made of the ~8 of 160 gate entries just above the cutoff, and at weight 1 its
# post-norm (with laurel's and attention's) made llama.cpp's logits move by ~0.1 for a 1e-7
# relative move of token_embd; at these, 0.013 to 0.016 (gemma4's file: 0.04 to 0.06). attn_norm
# 0.4: laurel_out adds the attn_norm output to the stream, which at weight 1 kept the token's own
# embedding dominant (llama.cpp's argmax the input token at ~75% of positions, continuations one
# token repeated); at 0.4 the continuations vary.
ATTN_NORM, POST_ATTN_NORM, POST_FFW_NORM, LAUREL_NORM = 0.4, 0.35, 0.2, 0.35


def write(path):
    w = TinyWriter(path, ARCH, seed=36)
    w.hparams(n_layer=N_LAYER, n_embd=N_EMBD, n_ff=[N_FF] * N_LAYER, n_head=N_HEAD, n_kv=N_KV,
              head_dim=HEAD_DIM, rope_base=1000000.0)
    w.w.add_rope_freq_base_swa(10000.0)
    w.w.add_sliding_window(WINDOW)
    w.w.add_sliding_window_pattern(SLIDING)
    w.w.add_final_logit_softcapping(30.0)
    w.w.add_altup_active_idx(ALTUP_ACTIVE)
    w.w.add_altup_num_inputs(N_ALTUP)
    w.w.add_embedding_length_per_layer_input(N_EMBD_PER_LAYER)
    w.w.add_shared_kv_layers(N_LAYER - N_LAYER_KV)
    w.w.add_activation_sparsity_scale(
        [SPARSITY_STD_MUL if i < N_LAYER_SPARSE else float("-inf") for i in range(N_LAYER)])

    # Rows of norm ~1: unit entries once llama.cpp scales them by sqrt(n_embd). Tied output.
    w.embedding(N_EMBD, gain=1.0)
    w.vector("output_norm.weight", N_EMBD, around=6.0, spread=0.6)
    # The 3 added streams (a projection of the embedding, rescaled to its magnitude) and their
    # projections back at the end (likewise rescaled to stream 0's).
    w.w.add_tensor("altup_proj.weight", (w.rng.standard_normal((N_ALTUP - 1, N_EMBD, N_EMBD)) /
                                         np.sqrt(N_EMBD)).astype(np.float32))
    w.w.add_tensor("altup_unembd_proj.weight", (w.rng.standard_normal(
        (N_ALTUP - 1, N_EMBD, N_EMBD)) / np.sqrt(N_EMBD)).astype(np.float32))
    # Entries of ~1/16: unit-sized once llama.cpp scales them by sqrt(256).
    w.matrix("per_layer_token_embd.weight", w.vocab, N_EMBD_PER_LAYER * N_LAYER,
             gain=np.sqrt(N_LAYER))
    w.matrix("per_layer_model_proj.weight", N_EMBD_PER_LAYER * N_LAYER, N_EMBD)
    w.vector("per_layer_proj_norm.weight", N_EMBD_PER_LAYER)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.vector(p + "altup_router_norm.weight", N_EMBD)
        w.matrix(p + "altup_router.weight", N_ALTUP, N_EMBD, gain=ROUTER_GAIN)
        w.matrix(p + "altup_predict_coef.weight", N_ALTUP * N_ALTUP, N_ALTUP, gain=PREDICT_GAIN)
        w.vector(p + "attn_norm.weight", N_EMBD, around=ATTN_NORM, spread=0.1 * ATTN_NORM)
        w.matrix(p + "laurel_l.weight", LAUREL_RANK, N_EMBD)
        w.matrix(p + "laurel_r.weight", N_EMBD, LAUREL_RANK)
        w.vector(p + "laurel_post_norm.weight", N_EMBD, around=LAUREL_NORM,
                 spread=0.1 * LAUREL_NORM)
        w.matrix(p + "attn_q.weight", N_HEAD * HEAD_DIM, N_EMBD)
        w.matrix(p + "attn_k.weight", N_KV * HEAD_DIM, N_EMBD)
        w.matrix(p + "attn_v.weight", N_KV * HEAD_DIM, N_EMBD)
        # Q and K come out of their norms with entries ~0.4 and no 1/sqrt(head) follows:
        # scores of std ~1 (sharper ones make llama.cpp's logits move with its f16 roundings).
        w.vector(p + "attn_q_norm.weight", HEAD_DIM, around=0.4)
        w.vector(p + "attn_k_norm.weight", HEAD_DIM, around=0.4)
        w.matrix(p + "attn_output.weight", N_EMBD, N_HEAD * HEAD_DIM)
        w.vector(p + "post_attention_norm.weight", N_EMBD, around=POST_ATTN_NORM,
                 spread=0.1 * POST_ATTN_NORM)
        w.feed_forward(p, N_EMBD, N_FF)
        w.vector(p + "post_ffw_norm.weight", N_EMBD, around=POST_FFW_NORM,
                 spread=0.1 * POST_FFW_NORM)
        w.matrix(p + "altup_correct_coef.weight", N_ALTUP, N_ALTUP, gain=CORRECT_GAIN)
        w.vector(p + "altup_correct_scale.weight", N_EMBD)
        w.matrix(p + "inp_gate.weight", N_EMBD_PER_LAYER, N_EMBD, gain=0.5)
        w.matrix(p + "proj.weight", N_EMBD, N_EMBD_PER_LAYER)
        w.vector(p + "post_norm.weight", N_EMBD)
    w.close()
