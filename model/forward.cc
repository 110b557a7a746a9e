#include "model/forward.h"

#include <cmath>
#include <string>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dequantize.h"

namespace tokenmill {
namespace {

void Grow(std::vector<float>& buffer, int64_t n) {
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
}

}  // namespace

ForwardPass::ForwardPass(const Model& model, CpuContext ctx, KernelMode mode)
    : model_(model), ctx_(ctx), mode_(mode) {}

void ForwardPass::ForTokens(int64_t n_tokens,
                            const std::function<void(int64_t, int64_t)>& fn) {
  // Below this a barrier costs more than the row ops it would share (a one-token decode
  // step's RmsNorm is 576 floats).
  constexpr int64_t kTokensPerChunk = 4;
  if (mode_ == KernelMode::kReference) {
    fn(0, n_tokens);
  } else {
    ParallelFor(ctx_.pool, n_tokens, kTokensPerChunk, fn);
  }
}

void ForwardPass::MatmulOp(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  if (mode_ == KernelMode::kReference) {
    MatmulReference(w, x, n_tokens, y);
  } else {
    Matmul(ctx_, w, x, n_tokens, y);
  }
}

void ForwardPass::MatmulOps(
    std::initializer_list<std::pair<const WeightMatrix*, float*>> outputs, const float* x,
    int64_t n_tokens) {
  if (mode_ == KernelMode::kReference) {
    for (const auto& [w, y] : outputs) MatmulReference(*w, x, n_tokens, y);
    return;
  }
  std::vector<const WeightMatrix*> ws;
  std::vector<float*> ys;
  for (const auto& [w, y] : outputs) {
    ws.push_back(w);
    ys.push_back(y);
  }
  MatmulMany(ctx_, ws, x, n_tokens, ys);
}

Status ForwardPass::Run(const ForwardInput& in, const KvCacheView& kv, std::span<float> logits) {
  const ModelConfig& c = model_.config();
  // The reference kernels dequantize rows as the file lays them out; the fast ones read the
  // model's CPU copy (Q4_1 and Q8_0 regrouped 16 rows at a time).
  const ModelWeights& w =
      mode_ == KernelMode::kReference ? model_.weights() : model_.cpu_weights();
  const int64_t n = static_cast<int64_t>(in.token_ids.size());
  TM_RETURN_IF_ERROR(ValidateForwardInput(c, in, kv, logits.size()));
  if (!KvTypeOnCpu(kv.type)) {
    return InvalidArgumentError("the CPU forward pass cannot read " +
                                std::string(KvTypeName(kv.type)) + " KV: use f16, f32 or int8");
  }
  const int64_t n_logits = static_cast<int64_t>(in.logit_rows.size());
  const int64_t d = c.n_embd;
  Grow(x_, n * d);
  Grow(h_, n * d);
  Grow(q_, n * c.q_dim());
  Grow(k_, n * c.kv_dim());
  Grow(v_, n * c.kv_dim());
  Grow(attn_, n * c.q_dim());
  Grow(proj_, n * d);
  Grow(gate_, n * c.n_ff);
  Grow(up_, n * c.n_ff);
  Grow(final_, n_logits * d);

  for (int64_t t = 0; t < n; ++t) {
    DequantizeReference(w.token_embd.type,
                        w.token_embd.data + in.token_ids[t] * w.token_embd.row_bytes,
                        std::span<float>(x_.data() + t * d, static_cast<size_t>(d)));
  }
  const RopeParams rope{c.rope_style, c.head_dim, c.n_rot, c.rope_freq_base,
                        c.rope_position_scale, w.rope_freqs};
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  auto tap = [&](const char* name, int layer, std::vector<float>& data, int64_t rows,
                 int64_t row_size) {
    if (tap_) tap_(name, layer, data.data(), rows, row_size);
  };
  // Row ops over token ranges [b, e) (on the pool when the step has many tokens). Without a
  // tap several of them share one parallel region; a tap may overwrite what it is shown, so
  // then each op waits for the tap before it.
  const bool fuse = !tap_;
  const std::span<const int32_t> positions = in.batch.positions;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& l = w.layers[layer];
    // Fused, every layer after the first finds its attn_norm already in h_ (see l_out).
    if (!fuse || layer == 0) {
      ForTokens(n, [&](int64_t b, int64_t e) {
        RmsNorm(x_.data() + b * d, l.attn_norm, c.rms_eps, e - b, h_.data() + b * d);
      });
    }
    tap("attn_norm", layer, h_, n, d);
    MatmulOps({{&l.q, q_.data()}, {&l.k, k_.data()}, {&l.v, v_.data()}}, h_.data(), n);
    if (c.qkv_bias) {
      AddBias(q_.data(), l.q_bias, n);
      AddBias(k_.data(), l.k_bias, n);
      AddBias(v_.data(), l.v_bias, n);
    }
    tap("Qraw", layer, q_, n, c.q_dim());
    tap("Kraw", layer, k_, n, c.kv_dim());
    const KvCacheView kv_layer = kv.Layer(layer);
    const KvBlockTable& blocks = in.batch.block_tables[KvGroupOfLayer(c, layer)];
    const std::span<const int64_t> slots = blocks.slot_mapping;
    auto store_kv = [&](int64_t b, int64_t e) {
      StoreKv(kv_layer, slots.subspan(b, e - b), k_.data() + b * c.kv_dim(),
              v_.data() + b * c.kv_dim());
    };
    ForTokens(n, [&](int64_t b, int64_t e) {
      ApplyRope(rope, positions.subspan(b, e - b), c.n_heads, q_.data() + b * c.q_dim());
      ApplyRope(rope, positions.subspan(b, e - b), c.n_kv_heads, k_.data() + b * c.kv_dim());
      if (fuse) store_kv(b, e);
    });
    tap("Qcur", layer, q_, n, c.q_dim());
    tap("Kcur", layer, k_, n, c.kv_dim());
    tap("Vcur", layer, v_, n, c.kv_dim());
    if (!fuse) ForTokens(n, store_kv);
    if (mode_ == KernelMode::kReference) {
      PagedAttentionReference(kv_layer, in.batch, blocks, q_.data(), c.n_heads, scale,
                              attn_.data());
    } else {
      PagedAttention(ctx_, kv_layer, in.batch, blocks, q_.data(), c.n_heads, scale,
                     attn_.data());
    }
    tap("kqv_out", layer, attn_, n, c.q_dim());
    MatmulOp(l.o, attn_.data(), n, proj_.data());
    tap("attn_out", layer, proj_, n, d);
    auto ffn_norm = [&](int64_t b, int64_t e) {
      RmsNorm(x_.data() + b * d, l.ffn_norm, c.rms_eps, e - b, h_.data() + b * d);
    };
    ForTokens(n, [&](int64_t b, int64_t e) {
      AddInPlace(x_.data() + b * d, proj_.data() + b * d, (e - b) * d);
      if (fuse) ffn_norm(b, e);
    });
    tap("ffn_inp", layer, x_, n, d);
    if (!fuse) ForTokens(n, ffn_norm);
    tap("ffn_norm", layer, h_, n, d);
    MatmulOps({{&l.gate, gate_.data()}, {&l.up, up_.data()}}, h_.data(), n);
    tap("ffn_gate", layer, gate_, n, c.n_ff);
    tap("ffn_up", layer, up_, n, c.n_ff);
    SwiGlu(gate_.data(), up_.data(), n, c.n_ff, gate_.data());
    tap("ffn_swiglu", layer, gate_, n, c.n_ff);
    MatmulOp(l.down, gate_.data(), n, proj_.data());
    tap("ffn_out", layer, proj_, n, d);
    const bool norm_next = fuse && layer + 1 < c.n_layers;
    ForTokens(n, [&](int64_t b, int64_t e) {
      AddInPlace(x_.data() + b * d, proj_.data() + b * d, (e - b) * d);
      if (norm_next) {
        RmsNorm(x_.data() + b * d, w.layers[layer + 1].attn_norm, c.rms_eps, e - b,
                h_.data() + b * d);
      }
    });
    tap("l_out", layer, x_, n, d);
  }
  for (int64_t i = 0; i < n_logits; ++i) {
    RmsNorm(x_.data() + in.logit_rows[i] * d, w.output_norm, c.rms_eps, 1, final_.data() + i * d);
  }
  tap("result_norm", -1, final_, n_logits, d);
  MatmulOp(w.output, final_.data(), n_logits, logits.data());
  return OkStatus();
}

}  // namespace tokenmill
