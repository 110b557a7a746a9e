#include "model/arch/cpu_blocks.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dequantize.h"
#include "model/lora.h"

namespace tokenmill {
namespace {

std::vector<RopeParams> LayerRopes(const ModelConfig& c, std::span<const float> rope_freqs) {
  std::vector<RopeParams> ropes;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    ropes.push_back(LayerRope(c, layer, rope_freqs));
  }
  return ropes;
}

}  // namespace

void CpuForwardBlocks::Grow(std::vector<float>& buffer, int64_t n) {
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
}

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

void CpuForwardBlocks::MatmulOp(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                                std::span<const int32_t> token_of_row) {
  if (mode_ == KernelMode::kReference) {
    MatmulReference(w, x, n_tokens, y);
  } else {
    Matmul(ctx_, w, x, n_tokens, y);
  }
  ApplyLora(w, x, n_tokens, y, token_of_row);
}

void CpuForwardBlocks::ApplyLora(const WeightMatrix& w, const float* x, int64_t n_rows, float* y,
                                 std::span<const int32_t> token_of_row) {
  // Only the adaptable matrices (model/lora.h) are looked at by row: theirs are token rows.
  if (std::none_of(in_->seq_loras.begin(), in_->seq_loras.end(),
                   [&](const LoraAdapter* a) { return a != nullptr && a->Find(w) != nullptr; })) {
    return;
  }
  const std::span<const int32_t> cu = in_->batch.cu_seqlens;
  const auto adapter_of_row = [&](int64_t row) {
    const int32_t token = token_of_row.empty() ? static_cast<int32_t>(row) : token_of_row[row];
    const auto seq = std::upper_bound(cu.begin(), cu.end(), token) - cu.begin() - 1;
    return in_->seq_loras[static_cast<size_t>(seq)];
  };
  // The rows of each adapter together (Punica's grouping), cut into tasks of at least a few
  // rows (a prefill's into one per thread, so that each reads the adapter's pair once); each
  // task runs its adapter's two low-rank products single-threaded and the tasks share the pool:
  // one barrier per matrix whatever the number of adapters (a barrier per product made LoRA
  // steps cost twice the base model's on SmolLM2). A row's update does not depend on its task.
  constexpr int64_t kMinRowsPerTask = 4;
  constexpr int64_t kMaxRowsPerCall = 8;  // AddLowRank's rows at once (their pointers here)
  const int64_t threads = ctx_.pool != nullptr ? ctx_.pool->num_threads() : 1;
  lora_rows_.clear();
  int64_t max_rank = 0;
  for (int64_t row = 0; row < n_rows; ++row) {
    const LoraAdapter* adapter = adapter_of_row(row);
    const LoraPair* pair = adapter != nullptr ? adapter->Find(w) : nullptr;
    if (pair == nullptr) continue;
    lora_rows_.emplace_back(pair, row);
    max_rank = std::max(max_rank, pair->rank);
  }
  std::stable_sort(lora_rows_.begin(), lora_rows_.end(),
                   [](const auto& l, const auto& r) { return l.first < r.first; });
  lora_tasks_.clear();  // [first, end) of lora_rows_
  for (size_t group = 0; group < lora_rows_.size();) {
    size_t end = group;
    while (end < lora_rows_.size() && lora_rows_[end].first == lora_rows_[group].first) ++end;
    const auto rows = static_cast<int64_t>(end - group);
    const int64_t per_task = std::max(kMinRowsPerTask, (rows + threads - 1) / threads);
    for (size_t first = group; first < end; first += static_cast<size_t>(per_task)) {
      lora_tasks_.emplace_back(first, std::min(end, first + static_cast<size_t>(per_task)));
    }
    group = end;
  }
  const int64_t n = static_cast<int64_t>(lora_rows_.size());
  lora_in_.resize(static_cast<size_t>(n * w.cols));
  lora_mid_.resize(static_cast<size_t>(n * max_rank));
  const CpuContext serial{.kernels = ctx_.kernels, .pool = nullptr};
  const auto run_tasks = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const auto [first, last] = lora_tasks_[static_cast<size_t>(t)];
      const LoraPair& pair = *lora_rows_[first].first;
      const int64_t count = static_cast<int64_t>(last - first);
      float* mid = lora_mid_.data() + first * max_rank;
      // A prefill's rows are consecutive: A·x reads them where they are.
      const int64_t row0 = lora_rows_[first].second;
      const bool consecutive = lora_rows_[last - 1].second == row0 + count - 1;
      const float* in = x + row0 * w.cols;
      if (!consecutive) {
        float* gathered = lora_in_.data() + first * w.cols;
        for (int64_t i = 0; i < count; ++i) {
          const int64_t row = lora_rows_[first + i].second;
          std::copy(x + row * w.cols, x + (row + 1) * w.cols, gathered + i * w.cols);
        }
        in = gathered;
      }
      Matmul(serial, pair.a, in, count, mid);
      // y += scale · B·mid, with B transposed (each row's sum in a fixed order: batching
      // changes nothing).
      for (int64_t i = 0; i < count * pair.rank; ++i) mid[i] *= pair.scale;
      float* y_rows[kMaxRowsPerCall];
      for (int64_t i = 0; i < count; i += kMaxRowsPerCall) {
        const int64_t rows = std::min(kMaxRowsPerCall, count - i);
        for (int64_t k = 0; k < rows; ++k) y_rows[k] = y + lora_rows_[first + i + k].second * w.rows;
        if (pair.b_transposed.empty()) {
          AddLowRank(serial, mid + i * pair.rank, rows, pair.rank, pair.b_transposed_f16.data(),
                     w.rows, y_rows);
        } else {
          AddLowRank(serial, mid + i * pair.rank, rows, pair.rank, pair.b_transposed.data(),
                     w.rows, y_rows);
        }
      }
    }
  };
  const auto tasks = static_cast<int64_t>(lora_tasks_.size());
  if (mode_ == KernelMode::kReference) {
    run_tasks(0, tasks);
  } else {
    ParallelFor(ctx_.pool, tasks, 1, run_tasks);
  }
}

void CpuForwardBlocks::MatmulOps(
    std::initializer_list<std::pair<const WeightMatrix*, float*>> outputs, const float* x,
    int64_t n_tokens) {
  if (mode_ == KernelMode::kReference) {
    for (const auto& [w, y] : outputs) {
      MatmulReference(*w, x, n_tokens, y);
      ApplyLora(*w, x, n_tokens, y, {});
    }
    return;
  }
  std::vector<const WeightMatrix*> ws;
  std::vector<float*> ys;
  for (const auto& [w, y] : outputs) {
    ws.push_back(w);
    ys.push_back(y);
  }
  MatmulMany(ctx_, ws, x, n_tokens, ys);
  for (size_t i = 0; i < ws.size(); ++i) ApplyLora(*ws[i], x, n_tokens, ys[i], {});
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
      .sinks = sinks,
      .causal = !c_.encoder};
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
                       GeluTanhGlu(ctx_, g + b * size, u + b * size, (e - b) * size,
                                   out + b * size);
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

void CpuForwardBlocks::PerLayerTerm(const float* in, const WeightMatrix& gate,
                                    const WeightMatrix& proj) {
  const int64_t width = gate.rows;
  const int64_t row = int64_t{c_.n_layers} * width;
  MatmulOp(gate, in, n_, per_layer_gate_.data());
  ForTokens([&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* g = per_layer_gate_.data() + t * width;
      const float* input = per_layer_.data() + t * row + int64_t{layer_} * width;
      GeluTanh(g, width, g);
      for (int64_t i = 0; i < width; ++i) g[i] *= input[i];
    }
  });
  MatmulOp(proj, per_layer_gate_.data(), n_, proj_.data());
}

void CpuForwardBlocks::PerLayerEmbedding(const WeightMatrix& gate, const WeightMatrix& proj) {
  PerLayerTerm(x_.data(), gate, proj);
  Tap("per_layer_embd", layer_, proj_, n_, c_.n_embd);
}

namespace {

// √Σx² of n values, as ggml_sqrt(ggml_sum_rows(ggml_sqr(x))): float squares summed in double.
float Magnitude(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  return std::sqrt(static_cast<float>(sum));
}

// y *= target / |y| as ggml_div(ggml_mul(y, target), |y|), over n values.
void RescaleTo(float target, float* y, int64_t n) {
  const float magnitude = Magnitude(y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * target / magnitude;
}

}  // namespace

void CpuForwardBlocks::SparseGeluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                                             const WeightMatrix& down, float std_multiplier) {
  GatedFeedForward(
      gate, up, down, "ffn_geglu",
      [&](const float* g, const float* u, int64_t, int64_t size, float* out) {
        ForTokens([&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) {
            // In ggml's ops and types (gaussian_topk): the mean and the sum of squares in
            // double, rounded to float; the deviation over n - 1.
            float* row = out + t * size;
            const float* gate_row = g + t * size;
            double sum = 0.0;
            for (int64_t i = 0; i < size; ++i) sum += static_cast<double>(gate_row[i]);
            const float mean = static_cast<float>(sum) / static_cast<float>(size);
            double squares = 0.0;
            for (int64_t i = 0; i < size; ++i) {
              const float deviation = gate_row[i] - mean;
              squares += static_cast<double>(deviation * deviation);
            }
            const float std = std::sqrt(static_cast<float>(squares) *
                                        (1.0f / static_cast<float>(size - 1)));
            const float cutoff = mean + std * std_multiplier;
            for (int64_t i = 0; i < size; ++i) {
              const float above = gate_row[i] - cutoff;
              row[i] = above > 0.0f ? above : 0.0f;
            }
            GeluTanhGlu(ctx_, row, u + t * size, size, row);
          }
        });
      });
}

void CpuForwardBlocks::AltUpStreams(std::span<const WeightMatrix> proj) {
  const int64_t d = c_.n_embd;
  n_streams_ = static_cast<int64_t>(proj.size()) + 1;
  Grow(streams_, n_streams_ * n_ * d);
  Grow(predictions_, n_streams_ * n_ * d);
  Grow(laurel_, n_ * d);
  Grow(modalities_, n_ * n_streams_);
  Grow(coefs_, n_ * n_streams_ * n_streams_);
  std::copy(x_.begin(), x_.begin() + n_ * d, streams_.begin());
  for (int64_t s = 1; s < n_streams_; ++s) {
    float* stream = Stream(streams_, s);
    MatmulOp(proj[static_cast<size_t>(s - 1)], x_.data(), n_, stream);
    ForTokens([&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) RescaleTo(Magnitude(x_.data() + t * d, d), stream + t * d, d);
    });
  }
  Tap("inp_stacked", -1, streams_, n_streams_ * n_, d);
}

void CpuForwardBlocks::AltUpModalities(const AltUpWeights& w, const float* in, float* out) {
  const int64_t d = c_.n_embd;
  const float scale = 1.0f / static_cast<float>(d);
  ForTokens([&](int64_t b, int64_t e) {
    RmsNorm(in + b * d, w.router_norm, c_.rms_eps, e - b, h_.data() + b * d);
    for (int64_t i = b * d; i < e * d; ++i) h_[i] *= scale;
  });
  MatmulOp(w.router, h_.data(), n_, out);
  for (int64_t i = 0; i < n_ * n_streams_; ++i) out[i] = std::tanh(out[i]);
}

void CpuForwardBlocks::AltUpPredict(const AltUpWeights& w) {
  const int64_t d = c_.n_embd, n = n_streams_;
  AltUpModalities(w, Stream(streams_, 0), modalities_.data());
  MatmulOp(w.predict_coef, modalities_.data(), n_, coefs_.data());
  // P_j = X_j + Σ_k c[j·n + k] X_k, the sum over k in float from 0 as ggml's mul_mat of the
  // permuted streams takes it (dot products of n < 32 values: its vec_dot's leftover loop).
  ForTokens([&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* c = coefs_.data() + t * n * n;
      for (int64_t j = 0; j < n; ++j) {
        float* prediction = Stream(predictions_, j) + t * d;
        const float* own = Stream(streams_, j) + t * d;
        for (int64_t i = 0; i < d; ++i) {
          float sum = 0.0f;
          for (int64_t k = 0; k < n; ++k) sum += Stream(streams_, k)[t * d + i] * c[j * n + k];
          prediction[i] = sum + own[i];
        }
      }
    }
  });
  std::copy(predictions_.begin(), predictions_.begin() + n_ * d, x_.begin());
  h_norm_ = nullptr;
  Tap("predictions", layer_, predictions_, n * n_, d);
}

void CpuForwardBlocks::Laurel(const LaurelWeights& w) {
  const int64_t d = c_.n_embd;
  Grow(per_layer_gate_, n_ * w.left.rows);
  MatmulOp(w.left, h_.data(), n_, per_layer_gate_.data());
  MatmulOp(w.right, per_layer_gate_.data(), n_, laurel_.data());
  ForTokens([&](int64_t b, int64_t e) {
    RmsNorm(laurel_.data() + b * d, w.post_norm, c_.rms_eps, e - b, laurel_.data() + b * d);
    AddInPlace(laurel_.data() + b * d, h_.data() + b * d, (e - b) * d);
  });
  Tap("laurel_out", layer_, laurel_, n_, d);
}

void CpuForwardBlocks::AddLaurel() {
  const float scale = 1.0f / std::sqrt(2.0f);
  for (int64_t i = 0; i < n_ * c_.n_embd; ++i) x_[i] = (x_[i] + laurel_[i]) * scale;
  h_norm_ = nullptr;
  Tap("attn_laurel", layer_, x_, n_, c_.n_embd);
}

void CpuForwardBlocks::AltUpCorrect(const AltUpWeights& w, const WeightMatrix& per_layer_gate,
                                    const WeightMatrix& per_layer_proj,
                                    std::span<const float> per_layer_post_norm) {
  const int64_t d = c_.n_embd, n = n_streams_;
  AltUpModalities(w, x_.data(), modalities_.data());
  MatmulOp(w.correct_coef, modalities_.data(), n_, coefs_.data());
  for (int64_t i = 0; i < n_ * n; ++i) coefs_[i] += 1.0f;
  // The corrected streams go where the streams were; C_0 * correct_scale into h.
  ForTokens([&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* active = Stream(predictions_, 0) + t * d;
      const float* output = x_.data() + t * d;
      for (int64_t s = 0; s < n; ++s) {
        const float coef = coefs_[t * n + s];
        const float* prediction = Stream(predictions_, s) + t * d;
        float* corrected = Stream(streams_, s) + t * d;
        for (int64_t i = 0; i < d; ++i) {
          corrected[i] = (output[i] - active[i]) * coef + prediction[i];
        }
      }
      const float* first = Stream(streams_, 0) + t * d;
      for (int64_t i = 0; i < d; ++i) {
        h_[t * d + i] = first[i] * w.correct_scale[static_cast<size_t>(i)];
      }
    }
  });
  Tap("corrected", layer_, streams_, n * n_, d);
  PerLayerTerm(h_.data(), per_layer_gate, per_layer_proj);
  ForTokens([&](int64_t b, int64_t e) {
    RmsNorm(proj_.data() + b * d, per_layer_post_norm, c_.rms_eps, e - b, proj_.data() + b * d);
    for (int64_t s = 1; s < n; ++s) {
      AddInPlace(Stream(streams_, s) + b * d, proj_.data() + b * d, (e - b) * d);
    }
  });
  h_norm_ = nullptr;
  Tap("first_prediction_out", layer_, proj_, n_, d);
}

void CpuForwardBlocks::AltUpMerge(std::span<const WeightMatrix> unembd) {
  const int64_t d = c_.n_embd, n = n_streams_;
  std::copy(streams_.begin(), streams_.begin() + n_ * d, x_.begin());
  for (int64_t s = 1; s < n; ++s) {
    float* stream = Stream(predictions_, s);  // free until the next step's AltUpPredict
    MatmulOp(unembd[static_cast<size_t>(s - 1)], Stream(streams_, s), n_, stream);
    ForTokens([&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        RescaleTo(Magnitude(Stream(streams_, 0) + t * d, d), stream + t * d, d);
      }
    });
    AddInPlace(x_.data(), stream, n_ * d);
  }
  const float scale = 1.0f / static_cast<float>(n);
  for (int64_t i = 0; i < n_ * d; ++i) x_[i] *= scale;
  h_norm_ = nullptr;
  Tap("unembd_merged", -1, x_, n_, d);
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
  for (size_t i = 0; i < in_->hidden_rows.size(); ++i) {
    const float* row = x_.data() + in_->hidden_rows[i] * d;
    float* out = in_->hidden_out.data() + static_cast<int64_t>(i) * d;
    if (output_norm.empty()) {  // an encoder's: x as it is
      std::copy(row, row + d, out);
    } else {
      RmsNorm(row, output_norm, c_.rms_eps, 1, out);
    }
  }
  if (n_logits == 0) return;
  MatmulOp(output, final_.data(), n_logits, logits_.data(), in_->logit_rows);
  if (c_.final_softcap > 0.0f) {
    const float inverse = 1.0f / c_.final_softcap;
    for (float& logit : logits_.first(static_cast<size_t>(n_logits * c_.n_vocab))) {
      logit = std::tanh(logit * inverse) * c_.final_softcap;
    }
  }
}

}  // namespace tokenmill
