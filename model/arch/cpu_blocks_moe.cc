// CpuForwardBlocks' mixture-of-experts feed-forward (cpu_blocks.h), apart from the dense blocks.
#include <array>
#include <cmath>
#include <cstring>

#include "model/arch/cpu_blocks.h"

namespace tokenmill {
namespace {

// Adds to each row its expert's bias (biases: n_expert rows of row_size); rows are the
// grouped pairs, whose experts `groups` gives.
void AddExpertBias(float* rows, std::span<const float> biases, int64_t row_size,
                   const ExpertGroups& groups) {
  if (biases.empty()) return;
  for (size_t e = 0; e + 1 < groups.begin.size(); ++e) {
    const std::span<const float> bias = biases.subspan(e * row_size, row_size);
    AddBias(rows + groups.begin[e] * row_size, bias, groups.size(static_cast<int>(e)));
  }
}

}  // namespace

void CpuForwardBlocks::MatmulGroupsOp(std::span<const MatmulGroup> groups) {
  if (mode_ != KernelMode::kReference) {
    MatmulGroups(ctx_, groups);
    return;
  }
  for (const MatmulGroup& g : groups) {
    for (size_t i = 0; i < g.ws.size(); ++i) MatmulReference(*g.ws[i], g.x, g.n_tokens, g.ys[i]);
  }
}

void CpuForwardBlocks::MoeFeedForward(const MoeWeights& w) {
  ExpertsFeedForward(w, "ffn_moe_swiglu",
                     [&](const float* g, const float* u, int64_t rows, int64_t size, float* out) {
                       SwiGlu(ctx_, g, u, rows, size, out);
                     });
}

void CpuForwardBlocks::OaiMoeFeedForward(const MoeWeights& w) {
  // llama.cpp's constants for LLM_FFN_SWIGLU_OAI_MOE (build_moe_ffn), not read from the file.
  constexpr float kAlpha = 1.702f;
  constexpr float kLimit = 7.0f;
  ExpertsFeedForward(w, "ffn_moe_swiglu_oai",
                     [](const float* g, const float* u, int64_t rows, int64_t size, float* out) {
                       SwiGluOai(g, u, rows * size, kAlpha, kLimit, out);
                     });
}

void CpuForwardBlocks::ExpertsFeedForward(const MoeWeights& w, const char* activation_name,
                                       const Activation& activation) {
  const ExpertConfig& e = c_.experts;
  const int64_t d = c_.n_embd, k = e.n_used, ff = e.n_ff_exp, pairs = n_ * k;
  MatmulOp(w.router, h_.data(), n_, moe_logits_.data());
  if (!w.router_bias.empty()) AddBias(moe_logits_.data(), w.router_bias, n_);
  Tap("ffn_moe_logits", layer_, moe_logits_, n_, e.n_expert);
  ForTokens([&](int64_t b, int64_t end) {
    for (int64_t t = b; t < end; ++t) {
      RouteToken(e, std::span<float>(moe_logits_.data() + t * e.n_expert, e.n_expert),
                 std::span<int32_t>(moe_experts_.data() + t * k, k),
                 std::span<float>(moe_weights_.data() + t * k, k), w.selection_bias);
    }
  });
  Tap("ffn_moe_weights", layer_, moe_weights_, n_, k);
  moe_groups_.Build(std::span<const int32_t>(moe_experts_.data(), pairs), e.n_expert);
  // Row i of the grouped activations is pair order[i]'s token.
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t pair = moe_groups_.order[i];
    moe_row_[pair] = static_cast<int32_t>(i);
    std::memcpy(moe_x_.data() + i * d, h_.data() + pair / k * d, sizeof(float) * d);
  }
  // Gate and up of every routed expert and of the shared expert, then their down
  // projections: two parallel passes. The spans the groups hold point into these arrays,
  // sized up front so that they stay put.
  const bool shared = w.shared_gate.rows > 0;
  const int64_t shared_ff = e.n_ff_shexp;
  std::vector<std::array<const WeightMatrix*, 3>> ws;
  std::vector<std::array<float*, 3>> ys;
  ws.reserve(static_cast<size_t>(e.n_expert) + 1);
  ys.reserve(static_cast<size_t>(e.n_expert) + 1);
  std::vector<MatmulGroup> groups;
  auto add_group = [&](std::array<const WeightMatrix*, 3> m, std::array<float*, 3> y, size_t n,
                       const float* x, int64_t n_tokens) {
    ws.push_back(m);
    ys.push_back(y);
    groups.push_back(MatmulGroup{std::span<const WeightMatrix* const>(ws.back().data(), n), x,
                                 n_tokens, std::span<float* const>(ys.back().data(), n)});
  };
  for (int x = 0; x < e.n_expert; ++x) {
    const int64_t row = moe_groups_.begin[x];
    if (moe_groups_.size(x) == 0) continue;
    add_group({&w.gate[x], &w.up[x], nullptr},
              {moe_gate_.data() + row * ff, moe_up_.data() + row * ff, nullptr}, 2,
              moe_x_.data() + row * d, moe_groups_.size(x));
  }
  const bool shared_gated = shared && w.shared_gate_inp.rows > 0;
  if (shared) {
    add_group({&w.shared_gate, &w.shared_up, &w.shared_gate_inp},
              {gate_.data(), up_.data(), shared_gate_.data()}, shared_gated ? 3 : 2, h_.data(),
              n_);
  }
  MatmulGroupsOp(groups);
  AddExpertBias(moe_gate_.data(), w.gate_bias, ff, moe_groups_);
  AddExpertBias(moe_up_.data(), w.up_bias, ff, moe_groups_);
  activation(moe_gate_.data(), moe_up_.data(), pairs, ff, moe_gate_.data());
  Tap(activation_name, layer_, moe_gate_, pairs, ff);
  if (shared) SwiGlu(ctx_, gate_.data(), up_.data(), n_, shared_ff, gate_.data());
  groups.clear();
  ws.clear();
  ys.clear();
  for (int x = 0; x < e.n_expert; ++x) {
    const int64_t row = moe_groups_.begin[x];
    if (moe_groups_.size(x) == 0) continue;
    add_group({&w.down[x], nullptr, nullptr}, {moe_down_.data() + row * d, nullptr, nullptr},
              1, moe_gate_.data() + row * ff, moe_groups_.size(x));
  }
  if (shared) {
    add_group({&w.shared_down, nullptr, nullptr}, {shared_out_.data(), nullptr, nullptr}, 1,
              gate_.data(), n_);
  }
  MatmulGroupsOp(groups);
  AddExpertBias(moe_down_.data(), w.down_bias, d, moe_groups_);
  // Each token's sum in the order of its choices, as llama.cpp adds its ffn_moe_weighted
  // views: ((e0 w0 + e1 w1) + e2 w2) ...
  ForTokens([&](int64_t b, int64_t end) {
    for (int64_t t = b; t < end; ++t) {
      float* out = proj_.data() + t * d;
      for (int64_t c = 0; c < k; ++c) {
        const float weight = moe_weights_[t * k + c];
        const float* expert = moe_down_.data() + moe_row_[t * k + c] * d;
        for (int64_t j = 0; j < d; ++j) {
          const float weighted = expert[j] * weight;
          out[j] = c == 0 ? weighted : out[j] + weighted;
        }
      }
    }
  });
  Tap("ffn_moe_out", layer_, proj_, n_, d);
  if (!shared) return;
  ForTokens([&](int64_t b, int64_t end) {
    for (int64_t t = b; t < end; ++t) {
      float* out = proj_.data() + t * d;
      const float* expert = shared_out_.data() + t * d;
      if (!shared_gated) {  // deepseek2's: ggml_add(moe_out, ffn_shexp)
        for (int64_t j = 0; j < d; ++j) out[j] += expert[j];
        continue;
      }
      const float g = shared_gate_[t];
      const float gate = g / (1.0f + std::exp(-g)) / g;  // ggml_div(ggml_silu(g), g)
      for (int64_t j = 0; j < d; ++j) out[j] += expert[j] * gate;
    }
  });
  Tap("ffn_out", layer_, proj_, n_, d);
}

}  // namespace tokenmill
