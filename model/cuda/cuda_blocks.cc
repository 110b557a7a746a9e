#include "model/cuda/cuda_blocks.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/mmvq_kquant_math.h"
#include "kernels/half.h"

namespace tokenmill::cuda {
namespace {

// RouteTokens takes ExpertGating by number.
constexpr bool SameGating(ExpertGating a, RoutingGating b) {
  return static_cast<int>(a) == static_cast<int>(b);
}
static_assert(SameGating(ExpertGating::kSoftmax, RoutingGating::kSoftmax) &&
              SameGating(ExpertGating::kSigmoid, RoutingGating::kSigmoid) &&
              SameGating(ExpertGating::kSoftmaxSelected, RoutingGating::kSoftmaxSelected));

Status NotPlanned(const char* block) {
  return InternalError(std::string("the CUDA blocks reached ") + block +
                       ", which PlanCudaGraph refuses");
}

}  // namespace

CudaForwardBlocks::CudaForwardBlocks(const ModelConfig& config, const CudaGraphPlan& plan,
                                     const DeviceModelWeights& weights, DeviceWeightIndex index,
                                     cudaStream_t stream, CublasGemm& gemm,
                                     int cublas_min_tokens, const CudaLoras& loras)
    : c_(config),
      plan_(plan),
      weights_(weights),
      index_(std::move(index)),
      stream_(stream),
      gemm_(gemm),
      cublas_min_tokens_(cublas_min_tokens),
      loras_(loras) {}

Status CudaForwardBlocks::Init() {
  // base^(-2i/n_rot) in double on the host, one table per distinct base (the CPU's ApplyRope
  // follows llama.cpp's float angle recursion instead: the two differ by the rounding of the
  // angle).
  for (const float base : plan_.rope_bases) {
    std::vector<double> inv_freq(static_cast<size_t>(std::max(1, c_.n_rot / 2)));
    for (int i = 0; i < c_.n_rot / 2; ++i) {
      inv_freq[static_cast<size_t>(i)] = std::pow(static_cast<double>(base), -2.0 * i / c_.n_rot);
    }
    TM_ASSIGN_OR_RETURN(DeviceBuffer table,
                        DeviceBuffer::CopyOf(std::span<const double>(inv_freq)));
    rope_inv_freq_.push_back(std::move(table));
  }
  // YaRN's range and the factor on cos and sin of each layer: as the CPU's.
  for (const CudaLayerPlan& l : plan_.layers) {
    layer_rope_.push_back(DeviceRope{
        .neox = l.rope.style == RopeStyle::kNeox,
        .head_dim = l.rope.head_dim,
        .n_rot = l.rope.n_rot,
        .position_scale = l.rope.position_scale,
        .inv_freq = rope_inv_freq_[static_cast<size_t>(l.rope_table)].as<const double>(),
        .factors = weights_.rope_factors.empty() ? nullptr : weights_.rope_factors.data(),
        .ext_factor = l.rope.ext_factor,
        .corr_low = l.rope.corr_low,
        .corr_high = l.rope.corr_high,
        .cos_sin_scale = RopeCosSinScale(l.rope)});
    // Multi-head latent attention ropes heads of n_rot (the query's and the key's roped
    // parts, each gathered apart), as the CPU's LatentAttention sets its head_dim.
    DeviceRope latent = layer_rope_.back();
    latent.head_dim = l.rope.n_rot;
    latent_rope_.push_back(latent);
  }
  if (plan_.gelu) {
    // The CPU's GELU of every f16 value (its own table, read through GeluTanhGlu with up = 1),
    // so the device's gated GELU equals the CPU's bit for bit.
    std::vector<float> x(static_cast<size_t>(kGeluTableSize));
    for (size_t h = 0; h < x.size(); ++h) x[h] = HalfToFloat(static_cast<uint16_t>(h));
    const std::vector<float> ones(x.size(), 1.0f);
    std::vector<float> table(x.size());
    ::tokenmill::GeluTanhGlu(x.data(), ones.data(), kGeluTableSize, table.data());
    TM_ASSIGN_OR_RETURN(gelu_table_, DeviceBuffer::CopyOf(std::span<const float>(table)));
  }
  return OkStatus();
}

Status CudaForwardBlocks::GrowScratch(int64_t n, int64_t n_logits, int max_splits) {
  const int64_t d = c_.n_embd;
  constexpr int64_t kF = sizeof(float);
  TM_RETURN_IF_ERROR(Grow(x_, n * d * kF));
  TM_RETURN_IF_ERROR(Grow(h_, n * d * kF));
  TM_RETURN_IF_ERROR(Grow(q_, n * c_.q_dim() * kF));
  TM_RETURN_IF_ERROR(Grow(k_, n * c_.kv_dim() * kF));
  TM_RETURN_IF_ERROR(Grow(v_, n * c_.kv_dim() * kF));
  TM_RETURN_IF_ERROR(Grow(attn_, n * c_.q_dim() * kF));
  TM_RETURN_IF_ERROR(Grow(proj_, n * d * kF));
  const ExpertConfig& e = c_.experts;
  // gate_ and up_: the dense feed-forward's, or qwen2moe's shared expert's.
  const int64_t ff = std::max(c_.n_ff, e.n_ff_shexp);
  TM_RETURN_IF_ERROR(Grow(gate_, n * ff * kF));
  TM_RETURN_IF_ERROR(Grow(up_, n * ff * kF));
  TM_RETURN_IF_ERROR(Grow(final_, std::max<int64_t>(1, n_logits) * d * kF));
  TM_RETURN_IF_ERROR(Grow(logits_, std::max<int64_t>(1, n_logits) * c_.n_vocab * kF));
  TM_RETURN_IF_ERROR(
      Grow(lora_mid_, std::max<int64_t>(1, std::max(n, n_logits) * loras_.max_rank()) * kF));
  const int64_t pairs = n * e.n_used;  // 0 without experts
  const ModelConfig::LatentAttention& m = c_.mla;
  const int64_t heads = c_.n_heads;
  TM_RETURN_IF_ERROR(Grow(q8_, std::max({Q8_1Bytes(std::max(n, n_logits),
                                                   std::max({d, ff, int64_t{c_.q_dim()}})),
                                         Q8_1Bytes(pairs, e.n_ff_exp),
                                         Q8_1Bytes(n * heads, std::max(m.qk_nope,
                                                                       m.kv_lora_rank))})));
  if (c_.HasLatentKv()) {
    const int64_t rot = c_.n_rot, q_head = m.qk_nope + rot, row = m.kv_lora_rank + rot;
    const int64_t in = std::max(m.qk_nope, m.kv_lora_rank);
    const int64_t out = std::max(m.kv_lora_rank, m.v_head);
    TM_RETURN_IF_ERROR(Grow(mla_q_a_, std::max<int64_t>(1, n * m.q_lora_rank) * kF));
    TM_RETURN_IF_ERROR(Grow(mla_q_, n * heads * q_head * kF));
    TM_RETURN_IF_ERROR(Grow(mla_kv_, n * row * kF));
    TM_RETURN_IF_ERROR(Grow(mla_pe_, n * heads * rot * kF));
    TM_RETURN_IF_ERROR(Grow(mla_kpe_, n * rot * kF));
    TM_RETURN_IF_ERROR(Grow(mla_latent_, n * m.kv_lora_rank * kF));
    TM_RETURN_IF_ERROR(Grow(mla_in_, n * heads * in * kF));
    TM_RETURN_IF_ERROR(Grow(mla_out_, n * heads * out * kF));
    TM_RETURN_IF_ERROR(Grow(mla_begin_, (heads + 1) * int64_t{sizeof(int32_t)}));
  }
  if (e.n_expert > 0) {
    constexpr int64_t kI = sizeof(int32_t);
    TM_RETURN_IF_ERROR(Grow(moe_logits_, n * e.n_expert * kF));
    TM_RETURN_IF_ERROR(Grow(moe_experts_, pairs * kI));
    TM_RETURN_IF_ERROR(Grow(moe_weights_, pairs * kF));
    TM_RETURN_IF_ERROR(Grow(moe_begin_, (e.n_expert + 1) * kI));
    TM_RETURN_IF_ERROR(Grow(moe_order_, pairs * kI));
    TM_RETURN_IF_ERROR(Grow(moe_slot_, pairs * kI));
    TM_RETURN_IF_ERROR(Grow(moe_gate_, pairs * e.n_ff_exp * kF));
    TM_RETURN_IF_ERROR(Grow(moe_up_, pairs * e.n_ff_exp * kF));
    TM_RETURN_IF_ERROR(Grow(moe_down_, pairs * d * kF));
    TM_RETURN_IF_ERROR(Grow(shared_logit_, n * kF));
    TM_RETURN_IF_ERROR(Grow(shared_out_, n * d * kF));
  }
  // The attention's output a head: V's width (the latent with multi-head latent attention).
  const int value_width = c_.HasLatentKv() ? m.kv_lora_rank : c_.head_dim;
  return Grow(workspace_, AttentionWorkspaceFloats(n, c_.n_heads, value_width, max_splits) * kF);
}

Status CudaForwardBlocks::Grow(DeviceBuffer& buffer, int64_t bytes) {
  if (bytes <= buffer.bytes()) return OkStatus();
  ++generation_;  // captured graphs point at the old memory
  return buffer.Reserve(bytes);
}

void CudaForwardBlocks::BeginStep(const CudaStep& step) {
  step_ = step;
  layer_ = 0;
  status_ = OkStatus();
  h_norm_ = nullptr;
}

StatusOr<const DeviceWeight*> CudaForwardBlocks::Device(const WeightMatrix& w) const {
  const auto found = index_.matrices.find(&w);
  if (found == index_.matrices.end()) {
    return InternalError("a matrix the CUDA pass did not upload (layer " +
                         std::to_string(layer_) + ")");
  }
  return found->second;
}

StatusOr<const float*> CudaForwardBlocks::Device(std::span<const float> v) const {
  const auto found = index_.vectors.find(v.data());
  if (v.empty() || found == index_.vectors.end()) {
    return InternalError("a vector the CUDA pass did not upload (layer " +
                         std::to_string(layer_) + ")");
  }
  return found->second;
}

StatusOr<CudaForwardBlocks::MatmulInput> CudaForwardBlocks::PrepareInput(const float* x,
                                                                         int64_t n_tokens,
                                                                         int64_t cols) {
  // Quantized weights have whole blocks of 32 columns; other widths only meet float weights.
  if (UsesCublas(n_tokens) || cols % kQuantBlock != 0) {
    return MatmulInput{x, nullptr, step_.lora_slots};
  }
  TM_CUDA_RETURN_IF_ERROR(QuantizeQ8_1(x, n_tokens, cols, q8_.as<uint8_t>(), stream_),
                          "quantizing activations to q8_1");
  return MatmulInput{x, q8_.as<const uint8_t>(), step_.lora_slots};
}

Status CudaForwardBlocks::Matmul(const DeviceWeight& w, const MatmulInput& in, int64_t n_tokens,
                                 float* y) {
  if (UsesCublas(n_tokens) && w.bf16 != nullptr) return gemm_.Multiply(w, in.x, n_tokens, y);
  if (!TakesQ8_1(w.type)) return CudaStatus(Gemv(w, in.x, n_tokens, y, stream_), "GEMV");
  if (in.x_q8 == nullptr) return InternalError("a quantized GEMV without q8_1 activations");
  return CudaStatus(GemvQ8_1(w, in.x_q8, n_tokens, y, stream_), "GEMV");
}

Status CudaForwardBlocks::Matmul(const WeightMatrix& w, const MatmulInput& in, int64_t n_tokens,
                                 float* y) {
  TM_ASSIGN_OR_RETURN(const DeviceWeight* device, Device(w));
  TM_RETURN_IF_ERROR(Matmul(*device, in, n_tokens, y));
  if (in.lora_slots == nullptr) return OkStatus();
  const std::optional<CudaLoras::Table> loras = loras_.Find(w.data);
  if (!loras.has_value()) return OkStatus();
  float* mid = lora_mid_.as<float>();
  TM_CUDA_RETURN_IF_ERROR(LoraShrink(in.x, n_tokens, w.cols, in.lora_slots, loras->pairs,
                                     loras->max_rank, mid, stream_),
                          "LoRA shrink");
  return CudaStatus(LoraExpand(mid, n_tokens, w.rows, in.lora_slots, loras->pairs,
                               loras->max_rank, y, stream_),
                    "LoRA expand");
}

void CudaForwardBlocks::Embed(const WeightMatrix& token_embd, float scale) {
  Run([&]() -> Status {
    TM_ASSIGN_OR_RETURN(const DeviceWeight* table, Device(token_embd));
    const int64_t n = step_.n_tokens;
    float* x = x_.as<float>();
    TM_CUDA_RETURN_IF_ERROR(Embedding(*table, step_.token_ids, n, x, stream_), "embedding");
    if (scale == 1.0f) return OkStatus();
    return CudaStatus(ScaleInPlace(x, n * c_.n_embd, scale, stream_), "embedding scale");
  });
}

void CudaForwardBlocks::Norm(std::span<const float> weight, const char*) {
  Run([&]() -> Status {
    if (h_norm_ == weight.data()) return OkStatus();  // AddResidual computed it
    TM_ASSIGN_OR_RETURN(const float* w, Device(weight));
    return CudaStatus(RmsNorm(x_.as<float>(), w, nullptr, step_.n_tokens,
                              static_cast<int>(c_.n_embd), c_.rms_eps, h_.as<float>(), stream_),
                      "RMSNorm");
  });
  h_norm_ = nullptr;
}

void CudaForwardBlocks::ProjectQkv(const WeightMatrix& wq, const WeightMatrix& wk,
                                   const WeightMatrix& wv) {
  Run([&]() -> Status {
    const int64_t n = step_.n_tokens;
    TM_ASSIGN_OR_RETURN(const MatmulInput normed, PrepareInput(h_.as<float>(), n, c_.n_embd));
    TM_RETURN_IF_ERROR(Matmul(wq, normed, n, q_.as<float>()));
    TM_RETURN_IF_ERROR(Matmul(wk, normed, n, k_.as<float>()));
    return Matmul(wv, normed, n, v_.as<float>());
  });
}

void CudaForwardBlocks::AddQkvBias(std::span<const float> q_bias, std::span<const float> k_bias,
                                   std::span<const float> v_bias) {
  Run([&]() -> Status {
    const int64_t n = step_.n_tokens;
    for (auto [bias, x, size] : {std::tuple{q_bias, q_.as<float>(), c_.q_dim()},
                                 std::tuple{k_bias, k_.as<float>(), c_.kv_dim()},
                                 std::tuple{v_bias, v_.as<float>(), c_.kv_dim()}}) {
      if (bias.empty()) continue;
      TM_ASSIGN_OR_RETURN(const float* b, Device(bias));
      TM_CUDA_RETURN_IF_ERROR(AddBias(x, b, n, size, stream_), "bias");
    }
    return OkStatus();
  });
}

void CudaForwardBlocks::HeadNorms(std::span<const float> q_norm, std::span<const float> k_norm) {
  Run([&]() -> Status {
    const int64_t n = step_.n_tokens;
    TM_ASSIGN_OR_RETURN(const float* qw, Device(q_norm));
    TM_ASSIGN_OR_RETURN(const float* kw, Device(k_norm));
    // Each head's row of head_dim normed in place, before RoPE.
    float* q = q_.as<float>();
    float* k = k_.as<float>();
    TM_CUDA_RETURN_IF_ERROR(
        RmsNorm(q, qw, nullptr, n * c_.n_heads, c_.head_dim, c_.rms_eps, q, stream_), "Q norm");
    return CudaStatus(
        RmsNorm(k, kw, nullptr, n * c_.n_kv_heads, c_.head_dim, c_.rms_eps, k, stream_),
        "K norm");
  });
}

void CudaForwardBlocks::Attention(QueryScale scale, std::span<const float> sinks) {
  Run([&]() -> Status {
    if (!sinks.empty() || c_.attn_temp_scale != 0.0f) return NotPlanned("this Attention");
    const int64_t n = step_.n_tokens;
    float* q = q_.as<float>();
    float* k = k_.as<float>();
    const int32_t* positions = step_.batch->positions;
    const DeviceRope& rope = layer_rope_[static_cast<size_t>(layer_)];
    TM_CUDA_RETURN_IF_ERROR(Rope(rope, positions, n, c_.n_heads, q, stream_), "RoPE");
    TM_CUDA_RETURN_IF_ERROR(Rope(rope, positions, n, c_.n_kv_heads, k, stream_), "RoPE");
    const KvCacheView kv_layer = step_.kv->Layer(layer_);
    const DeviceBlockTable& blocks =
        step_.tables[static_cast<size_t>(KvGroupOfLayer(c_, layer_))];
    TM_CUDA_RETURN_IF_ERROR(StoreKv(kv_layer, blocks.slot_mapping, n, k, v_.as<float>(), stream_),
                            "KV append");
    const CudaAttentionScales scales = AttentionScalesOnCuda(c_, scale);
    const DeviceAttentionVariant variant{
        .query_scale = scales.query_scale,
        .softcap = c_.attn_softcap,
        .sliding_window = plan_.layers[static_cast<size_t>(layer_)].sliding_window};
    return CudaStatus(PagedAttention(kv_layer, *step_.batch, blocks, q, c_.n_heads,
                                     scales.score_scale, workspace_.as<float>(),
                                     attn_.as<float>(), stream_, variant),
                      "paged attention");
  });
}

void CudaForwardBlocks::AttentionOutput(const WeightMatrix& wo, std::span<const float> bias) {
  Run([&]() -> Status {
    if (!bias.empty()) return NotPlanned("an AttentionOutput bias");
    const int64_t n = step_.n_tokens;
    // Its input's width: n_heads x head_dim, or n_heads x v_head after LatentAttention.
    TM_ASSIGN_OR_RETURN(const MatmulInput attended, PrepareInput(attn_.as<float>(), n, wo.cols));
    return Matmul(wo, attended, n, proj_.as<float>());
  });
}

void CudaForwardBlocks::PostNorm(std::span<const float> weight, const char* name) {
  Run([&]() -> Status {
    TM_ASSIGN_OR_RETURN(const float* w, Device(weight));
    float* proj = proj_.as<float>();
    return CudaStatus(RmsNorm(proj, w, nullptr, step_.n_tokens, static_cast<int>(c_.n_embd),
                              c_.rms_eps, proj, stream_),
                      name);
  });
}

Status CudaForwardBlocks::GatedFeedForward(const WeightMatrix& gate_w, const WeightMatrix& up_w,
                                           const WeightMatrix& down_w, bool gelu) {
  const int64_t n = step_.n_tokens;
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  TM_ASSIGN_OR_RETURN(const MatmulInput in, PrepareInput(h_.as<float>(), n, c_.n_embd));
  TM_RETURN_IF_ERROR(Matmul(gate_w, in, n, gate));
  TM_RETURN_IF_ERROR(Matmul(up_w, in, n, up));
  if (gelu) {
    TM_CUDA_RETURN_IF_ERROR(
        GeluTanhGlu(gate, up, n * c_.n_ff, gelu_table_.as<const float>(), gate, stream_),
        "GEGLU");
  } else {
    TM_CUDA_RETURN_IF_ERROR(SwiGlu(gate, up, n * c_.n_ff, gate, stream_), "SwiGLU");
  }
  TM_ASSIGN_OR_RETURN(const MatmulInput gated, PrepareInput(gate, n, c_.n_ff));
  return Matmul(down_w, gated, n, proj_.as<float>());
}

void CudaForwardBlocks::SwiGluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                                          const WeightMatrix& down) {
  Run([&] { return GatedFeedForward(gate, up, down, /*gelu=*/false); });
}

void CudaForwardBlocks::GeluFeedForward(const WeightMatrix& gate, const WeightMatrix& up,
                                        const WeightMatrix& down) {
  Run([&] { return GatedFeedForward(gate, up, down, /*gelu=*/true); });
}

void CudaForwardBlocks::MoeFeedForward(const MoeWeights& w) {
  Run([&]() -> Status {
    const auto found = index_.mixtures.find(&w);
    if (found == index_.mixtures.end()) {
      return InternalError("a mixture of experts the CUDA pass did not upload");
    }
    return ExpertsFeedForward(*found->second);
  });
}

void CudaForwardBlocks::OaiMoeFeedForward(const MoeWeights&) {
  Run([] { return NotPlanned("OaiMoeFeedForward"); });
}

void CudaForwardBlocks::AddEncoderInputs(const EncoderInputs&) {
  Run([] { return NotPlanned("AddEncoderInputs"); });
}

void CudaForwardBlocks::LayerNorm(std::span<const float>, std::span<const float>, const char*) {
  Run([] { return NotPlanned("LayerNorm"); });
}

void CudaForwardBlocks::GeluMlp(const WeightMatrix&, std::span<const float>, const WeightMatrix&,
                                std::span<const float>) {
  Run([] { return NotPlanned("GeluMlp"); });
}

void CudaForwardBlocks::PerLayerInputs(const PerLayerEmbeddings&) {
  Run([] { return NotPlanned("PerLayerInputs"); });
}

void CudaForwardBlocks::ProjectQ(const WeightMatrix&) {
  Run([] { return NotPlanned("ProjectQ"); });
}

void CudaForwardBlocks::LatentAttention(const LatentAttentionWeights& w) {
  Run([&]() -> Status {
    const auto found = index_.latent.find(&w);
    if (found == index_.latent.end()) {
      return InternalError("a latent attention the CUDA pass did not upload");
    }
    return LatentAttentionSteps(*found->second);
  });
}

Status CudaForwardBlocks::PerHeadMatmul(const DeviceWeight& w, const DeviceExpertGroups& groups,
                                        const float* x, int64_t n_tokens, float* y) {
  const uint8_t* x_q8 = nullptr;
  if (TakesQ8_1(w.type)) {
    TM_CUDA_RETURN_IF_ERROR(QuantizeQ8_1(x, n_tokens * c_.n_heads, w.cols, q8_.as<uint8_t>(),
                                         stream_),
                            "quantizing to q8_1");
    x_q8 = q8_.as<const uint8_t>();
  }
  return GroupedMatmul(w, x, x_q8, /*per_token=*/false, groups, y);
}

Status CudaForwardBlocks::LatentAttentionSteps(const DeviceLatentAttentionWeights& w) {
  const ModelConfig::LatentAttention& m = c_.mla;
  const int64_t n = step_.n_tokens, heads = c_.n_heads, rot = c_.n_rot, nope = m.qk_nope,
                lora = m.kv_lora_rank, v_head = m.v_head;
  const int64_t q_head = nope + rot;  // a head of the projected query
  const int64_t row = lora + rot;     // a K row, and a head of the absorbed query
  cudaStream_t s = stream_;
  float* q = mla_q_.as<float>();
  float* kv = mla_kv_.as<float>();
  // The query (through its LoRA, normed between, or a plain q) and the latent with its key.
  TM_ASSIGN_OR_RETURN(const MatmulInput in, PrepareInput(h_.as<float>(), n, c_.n_embd));
  if (m.q_lora_rank > 0) {
    float* q_a = mla_q_a_.as<float>();
    TM_RETURN_IF_ERROR(Matmul(w.q_a.view, in, n, q_a));
    TM_RETURN_IF_ERROR(Matmul(w.kv_a.view, in, n, kv));  // before q8_ holds q_a
    TM_CUDA_RETURN_IF_ERROR(RmsNorm(q_a, w.q_a_norm.data(), nullptr, n, m.q_lora_rank,
                                    c_.rms_eps, q_a, s),
                            "query LoRA RMSNorm");
    TM_ASSIGN_OR_RETURN(const MatmulInput q_in, PrepareInput(q_a, n, m.q_lora_rank));
    TM_RETURN_IF_ERROR(Matmul(w.q_b.view, q_in, n, q));
  } else {
    TM_RETURN_IF_ERROR(Matmul(w.q.view, in, n, q));
    TM_RETURN_IF_ERROR(Matmul(w.kv_a.view, in, n, kv));
  }
  // RoPE of the query's roped parts (a head of rot each) and of the key's.
  const int32_t* positions = step_.batch->positions;
  const DeviceRope& rope = latent_rope_[static_cast<size_t>(layer_)];
  float* pe = mla_pe_.as<float>();
  TM_CUDA_RETURN_IF_ERROR(
      CopyStrided(q + nope, q_head, 0, pe, rot, 0, n * heads, 1, rot, s), "query's rope part");
  TM_CUDA_RETURN_IF_ERROR(Rope(rope, positions, n, static_cast<int>(heads), pe, s), "RoPE");
  // The K row: the normed latent, then the roped key.
  float* k = k_.as<float>();
  float* latent = mla_latent_.as<float>();
  float* k_pe = mla_kpe_.as<float>();
  TM_CUDA_RETURN_IF_ERROR(CopyStrided(kv, row, 0, latent, lora, 0, n, 1, lora, s), "latent");
  TM_CUDA_RETURN_IF_ERROR(RmsNorm(latent, w.kv_a_norm.data(), nullptr, n,
                                  static_cast<int>(lora), c_.rms_eps, latent, s),
                          "latent RMSNorm");
  TM_CUDA_RETURN_IF_ERROR(CopyStrided(latent, lora, 0, k, row, 0, n, 1, lora, s), "K rows");
  TM_CUDA_RETURN_IF_ERROR(CopyStrided(kv + lora, row, 0, k_pe, rot, 0, n, 1, rot, s),
                          "key's rope part");
  TM_CUDA_RETURN_IF_ERROR(Rope(rope, positions, n, 1, k_pe, s), "RoPE");
  TM_CUDA_RETURN_IF_ERROR(CopyStrided(k_pe, rot, 0, k + lora, row, 0, n, 1, rot, s), "K rows");

  // Each head's q_nope into the latent space through its k_b: the absorbed query is
  // [k_b q_nope, q_pe] a head. Per-head rows are [head][token]: the heads as a mixture's
  // experts, each over its own n rows (per_token false), for k_b and v_b alike.
  const DeviceExpertGroups groups{mla_begin_.as<int32_t>(), nullptr, nullptr, c_.n_heads, 1, n};
  TM_CUDA_RETURN_IF_ERROR(UniformExpertGroups(groups, s), "per-head groups");
  float* per_head_in = mla_in_.as<float>();
  float* per_head_out = mla_out_.as<float>();
  TM_CUDA_RETURN_IF_ERROR(
      CopyStrided(q, q_head, heads * q_head, per_head_in, n * nope, nope, heads, n, nope, s),
      "per-head queries");
  TM_RETURN_IF_ERROR(PerHeadMatmul(w.k_b.view, groups, per_head_in, n, per_head_out));
  float* absorbed = q_.as<float>();
  TM_CUDA_RETURN_IF_ERROR(CopyStrided(per_head_out, n * lora, lora, absorbed, row, heads * row,
                                      heads, n, lora, s),
                          "absorbed queries");
  TM_CUDA_RETURN_IF_ERROR(CopyStrided(pe, rot, 0, absorbed + lora, row, 0, n * heads, 1, rot, s),
                          "absorbed queries");

  // The latent rows stored, then multi-query attention over them: each head's output is the
  // latent part (V within K), lora wide.
  const KvCacheView kv_layer = step_.kv->Layer(layer_);
  const DeviceBlockTable& blocks = step_.tables[static_cast<size_t>(KvGroupOfLayer(c_, layer_))];
  TM_CUDA_RETURN_IF_ERROR(StoreKv(kv_layer, blocks.slot_mapping, n, k, k, s), "KV append");
  const DeviceAttentionVariant variant{.value_dim = static_cast<int32_t>(lora)};
  float* attn = attn_.as<float>();
  TM_CUDA_RETURN_IF_ERROR(PagedAttention(kv_layer, *step_.batch, blocks, absorbed,
                                         static_cast<int>(heads), m.score_scale,
                                         workspace_.as<float>(), attn, s, variant),
                          "paged attention");

  // Each head's latent output out of the latent space through its v_b, into [token][head].
  TM_CUDA_RETURN_IF_ERROR(
      CopyStrided(attn, lora, heads * lora, per_head_in, n * lora, lora, heads, n, lora, s),
      "per-head latent outputs");
  TM_RETURN_IF_ERROR(PerHeadMatmul(w.v_b.view, groups, per_head_in, n, per_head_out));
  return CudaStatus(CopyStrided(per_head_out, n * v_head, v_head, attn, v_head, heads * v_head,
                                heads, n, v_head, s),
                    "attention output");
}

void CudaForwardBlocks::ValueNorm() {
  Run([] { return NotPlanned("ValueNorm"); });
}

void CudaForwardBlocks::PerLayerEmbedding(const WeightMatrix&, const WeightMatrix&) {
  Run([] { return NotPlanned("PerLayerEmbedding"); });
}

void CudaForwardBlocks::ScaleResidual(std::span<const float>) {
  Run([] { return NotPlanned("ScaleResidual"); });
}

void CudaForwardBlocks::SparseGeluFeedForward(const WeightMatrix&, const WeightMatrix&,
                                              const WeightMatrix&, float) {
  Run([] { return NotPlanned("SparseGeluFeedForward"); });
}

void CudaForwardBlocks::AltUpStreams(std::span<const WeightMatrix>) {
  Run([] { return NotPlanned("AltUpStreams"); });
}

void CudaForwardBlocks::AltUpPredict(const AltUpWeights&) {
  Run([] { return NotPlanned("AltUpPredict"); });
}

void CudaForwardBlocks::AltUpCorrect(const AltUpWeights&, const WeightMatrix&,
                                     const WeightMatrix&, std::span<const float>) {
  Run([] { return NotPlanned("AltUpCorrect"); });
}

void CudaForwardBlocks::AltUpMerge(std::span<const WeightMatrix>) {
  Run([] { return NotPlanned("AltUpMerge"); });
}

void CudaForwardBlocks::Laurel(const LaurelWeights&) {
  Run([] { return NotPlanned("Laurel"); });
}

void CudaForwardBlocks::AddLaurel() {
  Run([] { return NotPlanned("AddLaurel"); });
}

Status CudaForwardBlocks::GroupedMatmul(const DeviceWeight& w, const float* x,
                                        const uint8_t* x_q8, bool per_token,
                                        const DeviceExpertGroups& groups, float* y) {
  if (!TakesQ8_1(w.type)) {
    return CudaStatus(GroupedGemv(w, x, per_token, groups, y, stream_), "grouped expert GEMV");
  }
  return CudaStatus(GroupedGemvQ8_1(w, x_q8, per_token, groups, y, stream_),
                    "grouped expert GEMV");
}

Status CudaForwardBlocks::ExpertsFeedForward(const DeviceMoeWeights& w) {
  const ExpertConfig& e = c_.experts;
  const int64_t n = step_.n_tokens, d = c_.n_embd, k = e.n_used, ff = e.n_ff_exp;
  cudaStream_t s = stream_;
  const float* h = h_.as<float>();
  TM_ASSIGN_OR_RETURN(const MatmulInput in, PrepareInput(h, n, d));
  // The router's logits, then each token's experts and weights (RouteToken's arithmetic).
  float* logits = moe_logits_.as<float>();
  TM_RETURN_IF_ERROR(Matmul(w.router.view, in, n, logits));
  const DeviceRouting routing{e.n_expert,
                              e.n_used,
                              static_cast<RoutingGating>(e.gating),
                              e.normalize,
                              e.scale,
                              w.selection_bias.empty() ? nullptr : w.selection_bias.data(),
                              e.n_groups,
                              e.n_groups_used};
  TM_CUDA_RETURN_IF_ERROR(RouteTokens(routing, logits, n, moe_experts_.as<int32_t>(),
                                      moe_weights_.as<float>(), s),
                          "routing");
  const DeviceExpertGroups groups{moe_begin_.as<int32_t>(), moe_order_.as<int32_t>(),
                                  moe_slot_.as<int32_t>(), e.n_expert, e.n_used, n};
  TM_CUDA_RETURN_IF_ERROR(GroupExpertPairs(moe_experts_.as<int32_t>(), groups, s),
                          "grouping by expert");
  // Gate and up of the routed experts over each token's h: the q8_1 copy PrepareInput made,
  // or one of its own when cuBLAS took the step's dense matmuls.
  const uint8_t* h_q8 = in.x_q8;
  if (h_q8 == nullptr && TakesQ8_1(w.gate.view.type)) {
    TM_CUDA_RETURN_IF_ERROR(QuantizeQ8_1(h, n, d, q8_.as<uint8_t>(), s), "quantizing to q8_1");
    h_q8 = q8_.as<const uint8_t>();
  }
  float* gate = moe_gate_.as<float>();
  float* up = moe_up_.as<float>();
  TM_RETURN_IF_ERROR(GroupedMatmul(w.gate.view, h, h_q8, true, groups, gate));
  TM_RETURN_IF_ERROR(GroupedMatmul(w.up.view, h, h_q8, true, groups, up));
  const bool shared = w.has_shared();
  const bool shared_gated = shared && w.shared_gated();  // deepseek2's are not
  float* shared_gate = gate_.as<float>();
  float* shared_up = up_.as<float>();
  if (shared) {  // before q8_ holds anything but h
    const MatmulInput shared_in{h, h_q8};
    TM_RETURN_IF_ERROR(Matmul(w.shared_gate.view, shared_in, n, shared_gate));
    TM_RETURN_IF_ERROR(Matmul(w.shared_up.view, shared_in, n, shared_up));
    if (shared_gated) {
      TM_RETURN_IF_ERROR(
          Matmul(w.shared_gate_inp.view, shared_in, n, shared_logit_.as<float>()));
    }
  }
  TM_CUDA_RETURN_IF_ERROR(SwiGlu(gate, up, n * k * ff, gate, s), "SwiGLU");
  // Down over the slots' own rows.
  const uint8_t* gate_q8 = nullptr;
  if (TakesQ8_1(w.down.view.type)) {
    TM_CUDA_RETURN_IF_ERROR(QuantizeQ8_1(gate, n * k, ff, q8_.as<uint8_t>(), s),
                            "quantizing to q8_1");
    gate_q8 = q8_.as<const uint8_t>();
  }
  float* down = moe_down_.as<float>();
  TM_RETURN_IF_ERROR(GroupedMatmul(w.down.view, gate, gate_q8, false, groups, down));
  if (shared) {
    const int64_t shared_ff = e.n_ff_shexp;
    TM_CUDA_RETURN_IF_ERROR(SwiGlu(shared_gate, shared_up, n * shared_ff, shared_gate, s),
                            "SwiGLU");
    // After the experts' down GEMV in stream order, so q8_ is free again.
    TM_ASSIGN_OR_RETURN(const MatmulInput gated, PrepareInput(shared_gate, n, shared_ff));
    TM_RETURN_IF_ERROR(Matmul(w.shared_down.view, gated, n, shared_out_.as<float>()));
  }
  return CudaStatus(
      CombineExpertOutputs(down, moe_weights_.as<const float>(), moe_slot_.as<const int32_t>(), n,
                           e.n_used, d, shared ? shared_out_.as<const float>() : nullptr,
                           shared_gated ? shared_logit_.as<const float>() : nullptr,
                           proj_.as<float>(), s),
      "the experts' weighted sum");
}

void CudaForwardBlocks::AddResidual(const char*, std::span<const float> next_norm) {
  Run([&]() -> Status {
    const int64_t n = step_.n_tokens;
    float* x = x_.as<float>();
    const float* proj = proj_.as<const float>();
    if (next_norm.empty()) {
      return CudaStatus(AddInPlace(x, proj, n * c_.n_embd, stream_), "residual add");
    }
    TM_ASSIGN_OR_RETURN(const float* w, Device(next_norm));
    return CudaStatus(AddRmsNorm(x, proj, w, n, static_cast<int>(c_.n_embd), c_.rms_eps,
                                 h_.as<float>(), stream_),
                      "residual add + RMSNorm");
  });
  h_norm_ = next_norm.empty() ? nullptr : next_norm.data();
}

void CudaForwardBlocks::Logits(std::span<const float> output_norm, const WeightMatrix& output) {
  Run([&]() -> Status {
    const int64_t d = c_.n_embd, n_logits = step_.n_logits;
    TM_ASSIGN_OR_RETURN(const float* norm, Device(output_norm));
    float* final = final_.as<float>();
    float* logits = logits_.as<float>();
    TM_CUDA_RETURN_IF_ERROR(RmsNorm(x_.as<float>(), norm, step_.logit_rows, n_logits,
                                    static_cast<int>(d), c_.rms_eps, final, stream_),
                            "output RMSNorm");
    TM_ASSIGN_OR_RETURN(MatmulInput final_in, PrepareInput(final, n_logits, d));
    final_in.lora_slots = step_.logit_lora_slots;  // its rows are the logit rows
    TM_RETURN_IF_ERROR(Matmul(output, final_in, n_logits, logits));
    if (c_.final_softcap <= 0.0f) return OkStatus();
    return CudaStatus(SoftcapInPlace(logits, n_logits * c_.n_vocab, c_.final_softcap, stream_),
                      "final logit soft-capping");
  });
}

}  // namespace tokenmill::cuda
