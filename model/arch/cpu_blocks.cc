#include "model/arch/cpu_blocks.h"

#include <cmath>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dequantize.h"

namespace tokenmill {
namespace {

void Grow(std::vector<float>& buffer, int64_t n) {
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
}

std::vector<RopeParams> LayerRopes(const ModelConfig& c, std::span<const float> rope_freqs) {
  std::vector<RopeParams> ropes;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    ropes.push_back(LayerRope(c, layer, rope_freqs));
  }
  return ropes;
}

}  // namespace

CpuForwardBlocks::CpuForwardBlocks(const ModelConfig& config,
                                   std::span<const float> rope_freqs, CpuContext ctx,
                                   KernelMode mode)
    : c_(config),
      layer_rope_(LayerRopes(config, rope_freqs)),
      ctx_(ctx),
      mode_(mode),
      ones_(static_cast<size_t>(config.head_dim), 1.0f) {}

void CpuForwardBlocks::BeginLayer(int layer) {
  layer_ = layer;
  shape_ = c_.Shape(layer);
}

void CpuForwardBlocks::BeginStep(const ForwardInput& input, const KvCacheView& kv,
                                 std::span<float> logits) {
  in_ = &input;
  kv_ = &kv;
  logits_ = logits;
  n_ = static_cast<int64_t>(input.token_ids.size());
  BeginLayer(0);
  h_norm_ = nullptr;
  const int64_t d = c_.n_embd;
  Grow(x_, n_ * d);
  Grow(h_, n_ * d);
  Grow(q_, n_ * c_.q_dim());
  Grow(k_, n_ * c_.kv_dim());
  Grow(v_, n_ * c_.kv_dim());
  Grow(attn_, n_ * c_.q_dim());
  Grow(proj_, n_ * d);
  Grow(gate_, n_ * c_.n_ff);
  Grow(up_, n_ * c_.n_ff);
  Grow(final_, static_cast<int64_t>(input.logit_rows.size()) * d);
  const ExpertConfig& e = c_.experts;
  if (e.n_expert > 0) {
    const int64_t pairs = n_ * e.n_used;
    Grow(moe_logits_, n_ * e.n_expert);
    Grow(moe_weights_, pairs);
    Grow(moe_x_, pairs * d);
    Grow(moe_gate_, pairs * e.n_ff_exp);
    Grow(moe_up_, pairs * e.n_ff_exp);
    Grow(moe_down_, pairs * d);
    if (static_cast<int64_t>(moe_experts_.size()) < pairs) {
      moe_experts_.resize(static_cast<size_t>(pairs));
      moe_row_.resize(static_cast<size_t>(pairs));
    }
    Grow(gate_, n_ * e.n_ff_shexp);
    Grow(up_, n_ * e.n_ff_shexp);
    Grow(shared_gate_, n_);
    Grow(shared_out_, n_ * d);
  }
}

void CpuForwardBlocks::ForTokens(const std::function<void(int64_t, int64_t)>& fn) {
  // Below this a barrier costs more than the row ops it would share (a one-token decode
  // step's RmsNorm is 576 floats).
  constexpr int64_t kTokensPerChunk = 4;
  if (mode_ == KernelMode::kReference) {
    fn(0, n_);
  } else {
    ParallelFor(ctx_.pool, n_, kTokensPerChunk, fn);
  }
}

void CpuForwardBlocks::MatmulOp(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  if (mode_ == KernelMode::kReference) {
    MatmulReference(w, x, n_tokens, y);
  } else {
    Matmul(ctx_, w, x, n_tokens, y);
  }
}

void CpuForwardBlocks::MatmulOps(
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

void CpuForwardBlocks::Tap(const char* name, int layer, std::vector<float>& data, int64_t rows,
                        int64_t row_size) {
  if (tap_) tap_(name, layer, data.data(), rows, row_size);
}

void CpuForwardBlocks::Embed(const WeightMatrix& token_embd, float scale) {
  const int64_t d = c_.n_embd;
  for (int64_t t = 0; t < n_; ++t) {
    const uint8_t* row = token_embd.data + in_->token_ids[t] * token_embd.row_bytes;
    DequantizeReference(token_embd.type, row,
                        std::span<float>(x_.data() + t * d, static_cast<size_t>(d)));
  }
  if (scale == 1.0f) return;
  for (int64_t i = 0; i < n_ * d; ++i) x_[i] *= scale;
  Tap("inp_scaled", -1, x_, n_, d);
}

void CpuForwardBlocks::Norm(std::span<const float> weight, const char* name) {
  const int64_t d = c_.n_embd;
  if (h_norm_ != weight.data()) {
    ForTokens([&](int64_t b, int64_t e) {
      RmsNorm(x_.data() + b * d, weight, c_.rms_eps, e - b, h_.data() + b * d);
    });
  }
  h_norm_ = nullptr;
  Tap(name, layer_, h_, n_, d);
}

void CpuForwardBlocks::PerLayerInputs(const PerLayerEmbeddings& w) {
  const int64_t d = c_.n_embd;
  const int64_t row = int64_t{c_.n_layers} * w.width;
  Grow(per_layer_, n_ * row);
  Grow(per_layer_gate_, n_ * w.width);
  Grow(gate_, n_ * row);
  // In llama.cpp's order and float constants (project_per_layer_inputs).
  const float embd_scale = std::sqrt(static_cast<float>(w.width));
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float mix_scale = 1.0f / std::sqrt(2.0f);
  MatmulOp(w.model_proj, x_.data(), n_, gate_.data());
  ForTokens([&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* proj = gate_.data() + t * row;
      float* out = per_layer_.data() + t * row;
      DequantizeReference(w.token_embd.type,
                          w.token_embd.data + in_->token_ids[t] * w.token_embd.row_bytes,
                          std::span<float>(out, static_cast<size_t>(row)));
      for (int64_t i = 0; i < row; ++i) proj[i] *= proj_scale;
      RmsNorm(proj, w.proj_norm, c_.rms_eps, c_.n_layers, proj);
      for (int64_t i = 0; i < row; ++i) out[i] = (proj[i] + out[i] * embd_scale) * mix_scale;
    }
  });
  Tap("inp_per_layer", -1, per_layer_, n_, row);
}

void CpuForwardBlocks::ProjectQkv(const WeightMatrix& wq, const WeightMatrix& wk,
                               const WeightMatrix& wv) {
  MatmulOps({{&wq, q_.data()}, {&wk, k_.data()}, {&wv, v_.data()}}, h_.data(), n_);
}

void CpuForwardBlocks::ProjectQ(const WeightMatrix& wq) { MatmulOp(wq, h_.data(), n_, q_.data()); }

void CpuForwardBlocks::AddQkvBias(std::span<const float> q_bias, std::span<const float> k_bias,
                               std::span<const float> v_bias) {
  AddBias(q_.data(), q_bias, n_);
  AddBias(k_.data(), k_bias, n_);
  AddBias(v_.data(), v_bias, n_);
}

void CpuForwardBlocks::HeadNorms(std::span<const float> q_norm, std::span<const float> k_norm) {
  ForTokens([&](int64_t b, int64_t e) {
    RmsNorm(q_.data() + b * q_dim(), q_norm, c_.rms_eps, (e - b) * c_.n_heads,
            q_.data() + b * q_dim());
    if (k_norm.empty()) return;
    RmsNorm(k_.data() + b * kv_dim(), k_norm, c_.rms_eps, (e - b) * shape_.n_kv_heads,
            k_.data() + b * kv_dim());
  });
  Tap("Qcur_normed", layer_, q_, n_, q_dim());
  if (!k_norm.empty()) Tap("Kcur_normed", layer_, k_, n_, kv_dim());
}

void CpuForwardBlocks::ValueNorm() {
  const std::span<const float> ones(ones_.data(), static_cast<size_t>(shape_.head_dim));
  ForTokens([&](int64_t b, int64_t e) {
    RmsNorm(v_.data() + b * kv_dim(), ones, c_.rms_eps, (e - b) * shape_.n_kv_heads,
            v_.data() + b * kv_dim());
  });
  Tap("Vcur_normed", layer_, v_, n_, kv_dim());
}

void CpuForwardBlocks::Attention(QueryScale scale, std::span<const float> sinks) {
  const float query_scale = scale.factor;
  const bool stores = c_.StoresKv(layer_);
  Tap("Qraw", layer_, q_, n_, q_dim());
  if (stores) Tap("Kraw", layer_, k_, n_, kv_dim());
  const RopeParams& rope = layer_rope_[static_cast<size_t>(layer_)];
  const AttentionVariant variant{
      .softcap = c_.attn_softcap,
      .sliding_window = c_.IsSlidingLayer(layer_) ? c_.sliding_window : 0,
      .sinks = sinks};
  const std::span<const int32_t> positions = in_->batch.positions;
  const KvCacheView kv_layer = kv_->Layer(layer_);
  const KvBlockTable& blocks = in_->batch.block_tables[KvGroupOfLayer(c_, layer_)];
  const std::span<const int64_t> slots = blocks.slot_mapping;
  auto store_kv = [&](int64_t b, int64_t e) {
    if (!stores) return;
    StoreKv(kv_layer, slots.subspan(b, e - b), k_.data() + b * kv_dim(),
            v_.data() + b * kv_dim());
  };
  ForTokens([&](int64_t b, int64_t e) {
    ApplyRope(rope, positions.subspan(b, e - b), c_.n_heads, q_.data() + b * q_dim());
    if (query_scale > 0.0f) {
      for (int64_t i = b * q_dim(); i < e * q_dim(); ++i) q_[i] *= query_scale;
    }
    if (c_.attn_temp_scale != 0.0f) {
      for (int64_t t = b; t < e; ++t) {
        const float temperature = AttentionTemperature(c_, positions[t]);
        float* q = q_.data() + t * q_dim();
        for (int i = 0; i < q_dim(); ++i) q[i] *= temperature;
      }
    }
    if (!stores) return;
    ApplyRope(rope, positions.subspan(b, e - b), shape_.n_kv_heads, k_.data() + b * kv_dim());
    if (fuse()) store_kv(b, e);
  });
  Tap("Qcur", layer_, q_, n_, q_dim());
  if (stores) {
    Tap("Kcur", layer_, k_, n_, kv_dim());
    Tap("Vcur", layer_, v_, n_, kv_dim());
  }
  if (!fuse()) ForTokens(store_kv);
  const float score_scale =
      query_scale > 0.0f ? 1.0f : 1.0f / std::sqrt(static_cast<float>(shape_.head_dim));
  if (mode_ == KernelMode::kReference) {
    PagedAttentionReference(kv_layer, in_->batch, blocks, q_.data(), c_.n_heads, score_scale,
                            attn_.data(), variant);
  } else {
    PagedAttention(ctx_, kv_layer, in_->batch, blocks, q_.data(), c_.n_heads, score_scale,
                   attn_.data(), variant);
  }
  Tap("kqv_out", layer_, attn_, n_, q_dim());
}

void CpuForwardBlocks::AttentionOutput(const WeightMatrix& wo, std::span<const float> bias) {
  MatmulOp(wo, attn_.data(), n_, proj_.data());
  if (!bias.empty()) AddBias(proj_.data(), bias, n_);
  Tap("attn_out", layer_, proj_, n_, c_.n_embd);
}

void CpuForwardBlocks::PostNorm(std::span<const float> weight, const char* name) {
  const int64_t d = c_.n_embd;
  ForTokens([&](int64_t b, int64_t e) {
    RmsNorm(proj_.data() + b * d, weight, c_.rms_eps, e - b, proj_.data() + b * d);
  });
  Tap(name, layer_, proj_, n_, d);
}

void CpuForwardBlocks::GatedFeedForward(
    const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down,
    const char* activation_name,
    const std::function<void(const float*, const float*, int64_t, int64_t, float*)>&
        activation) {
  MatmulOps({{&gate, gate_.data()}, {&up, up_.data()}}, h_.data(), n_);
  Tap("ffn_gate", layer_, gate_, n_, shape_.n_ff);
  Tap("ffn_up", layer_, up_, n_, shape_.n_ff);
  activation(gate_.data(), up_.data(), n_, shape_.n_ff, gate_.data());
  Tap(activation_name, layer_, gate_, n_, shape_.n_ff);
  MatmulOp(down, gate_.data(), n_, proj_.data());
  Tap("ffn_out", layer_, proj_, n_, c_.n_embd);
}

void CpuForwardBlocks::SwiGluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                                      const WeightMatrix& down) {
  GatedFeedForward(gate, up, down, "ffn_swiglu",
                   [&](const float* g, const float* u, int64_t rows, int64_t size, float* out) {
                     SwiGlu(ctx_, g, u, rows, size, out);
                   });
}

void CpuForwardBlocks::GeluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                                    const WeightMatrix& down) {
  // The rows are the step's tokens, which ForTokens spreads.
  GatedFeedForward(gate, up, down, "ffn_geglu",
                   [&](const float* g, const float* u, int64_t, int64_t size, float* out) {
                     ForTokens([&](int64_t b, int64_t e) {
                       GeluTanhGlu(g + b * size, u + b * size, (e - b) * size, out + b * size);
                     });
                   });
}

void CpuForwardBlocks::AddResidual(const char* name, std::span<const float> next_norm) {
  const int64_t d = c_.n_embd;
  const bool norm_next = fuse() && !next_norm.empty();
  ForTokens([&](int64_t b, int64_t e) {
    AddInPlace(x_.data() + b * d, proj_.data() + b * d, (e - b) * d);
    if (norm_next) RmsNorm(x_.data() + b * d, next_norm, c_.rms_eps, e - b, h_.data() + b * d);
  });
  h_norm_ = norm_next ? next_norm.data() : nullptr;
  Tap(name, layer_, x_, n_, d);
}

void CpuForwardBlocks::PerLayerEmbedding(const WeightMatrix& gate, const WeightMatrix& proj) {
  const int64_t width = gate.rows;
  const int64_t row = int64_t{c_.n_layers} * width;
  MatmulOp(gate, x_.data(), n_, per_layer_gate_.data());
  ForTokens([&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* g = per_layer_gate_.data() + t * width;
      const float* input = per_layer_.data() + t * row + int64_t{layer_} * width;
      GeluTanh(g, width, g);
      for (int64_t i = 0; i < width; ++i) g[i] *= input[i];
    }
  });
  MatmulOp(proj, per_layer_gate_.data(), n_, proj_.data());
  Tap("per_layer_embd", layer_, proj_, n_, c_.n_embd);
}

void CpuForwardBlocks::ScaleResidual(std::span<const float> scale) {
  const float s = scale[0];
  for (int64_t i = 0; i < n_ * c_.n_embd; ++i) x_[i] *= s;
  Tap("out_scaled", layer_, x_, n_, c_.n_embd);
}

void CpuForwardBlocks::Logits(std::span<const float> output_norm, const WeightMatrix& output) {
  const int64_t d = c_.n_embd;
  const int64_t n_logits = static_cast<int64_t>(in_->logit_rows.size());
  for (int64_t i = 0; i < n_logits; ++i) {
    RmsNorm(x_.data() + in_->logit_rows[i] * d, output_norm, c_.rms_eps, 1,
            final_.data() + i * d);
  }
  Tap("result_norm", -1, final_, n_logits, d);
  MatmulOp(output, final_.data(), n_logits, logits_.data());
  if (c_.final_softcap > 0.0f) {
    const float inverse = 1.0f / c_.final_softcap;
    for (float& logit : logits_.first(static_cast<size_t>(n_logits * c_.n_vocab))) {
      logit = std::tanh(logit * inverse) * c_.final_softcap;
    }
  }
}

}  // namespace tokenmill
