#include "model/cuda/cuda_forward.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/mmvq_kquant_math.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/half.h"
#include "kernels/kv_type.h"

namespace tokenmill::cuda {
namespace {

// RouteTokens takes ExpertGating by number.
constexpr bool SameGating(ExpertGating a, RoutingGating b) {
  return static_cast<int>(a) == static_cast<int>(b);
}
static_assert(SameGating(ExpertGating::kSoftmax, RoutingGating::kSoftmax) &&
              SameGating(ExpertGating::kSigmoid, RoutingGating::kSigmoid) &&
              SameGating(ExpertGating::kSoftmaxSelected, RoutingGating::kSoftmaxSelected));

// Appends `values` to `staging` at an 8-byte boundary; returns their offset.
template <typename T>
size_t Stage(std::vector<uint8_t>& staging, std::span<const T> values) {
  const size_t offset = (staging.size() + 7) / 8 * 8;
  staging.resize(offset + values.size_bytes());
  if (!values.empty()) std::memcpy(staging.data() + offset, values.data(), values.size_bytes());
  return offset;
}

}  // namespace

CudaForwardPass::CudaForwardPass(const Model& model, CudaForwardOptions options,
                                 CudaGraphPlan plan)
    : model_(model), options_(options), plan_(std::move(plan)) {}

CudaForwardPass::~CudaForwardPass() {
  for (auto& [key, graph] : graphs_) {
    if (graph.exec != nullptr) cudaGraphExecDestroy(graph.exec);
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

StatusOr<std::unique_ptr<CudaForwardPass>> CudaForwardPass::Create(const Model& model,
                                                                   CudaForwardOptions options) {
  if (CountDevices() == 0) {
    return FailedPreconditionError("no usable CUDA device (or no driver): use --device cpu");
  }
  const ModelConfig& c = model.config();
  // The CUDA graph is llama's, with qwen2's biases, phi3's NeoX RoPE (its fused tensors load
  // as separate views) and the blocks of the plan (qwen3's and the Gemmas').
  TM_ASSIGN_OR_RETURN(CudaGraphPlan plan, PlanCudaGraph(c));
  if (c.head_dim > kMaxHeadDim || c.n_heads % c.n_kv_heads != 0 ||
      c.n_heads / c.n_kv_heads > kMaxGroup) {
    return InvalidArgumentError("the CUDA attention kernel takes head_dim <= " +
                                std::to_string(kMaxHeadDim) + " and <= " +
                                std::to_string(kMaxGroup) +
                                " query heads per KV head; this model has head_dim " +
                                std::to_string(c.head_dim) + ": use --device cpu");
  }
  std::unique_ptr<CudaForwardPass> pass(new CudaForwardPass(model, options, std::move(plan)));
  TM_RETURN_IF_ERROR(pass->Init());
  return pass;
}

Status CudaForwardPass::Init() {
  TM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                          "creating a CUDA stream");
  TM_ASSIGN_OR_RETURN(weights_, UploadWeights(model_, options_.cublas_min_tokens > 0));
  if (options_.cublas_min_tokens > 0) TM_RETURN_IF_ERROR(gemm_.Init(stream_));
  // base^(-2i/n_rot) in double on the host, one table per distinct base (the CPU's ApplyRope
  // follows llama.cpp's float angle recursion instead: the two differ by the rounding of the
  // angle).
  const ModelConfig& c = model_.config();
  for (const float base : plan_.rope_bases) {
    std::vector<double> inv_freq(static_cast<size_t>(std::max(1, c.n_rot / 2)));
    for (int i = 0; i < c.n_rot / 2; ++i) {
      inv_freq[static_cast<size_t>(i)] = std::pow(static_cast<double>(base), -2.0 * i / c.n_rot);
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
  if (options_.max_step_tokens > 0) {
    // The split-K workspace of the widest split a step can take, and cuBLAS's activations.
    TM_RETURN_IF_ERROR(GrowScratch(options_.max_step_tokens,
                                   std::min(options_.max_logit_rows, options_.max_step_tokens),
                                   kMaxSplits));
    if (options_.cublas_min_tokens > 0) {
      TM_RETURN_IF_ERROR(gemm_.ReserveActivations(options_.max_step_tokens *
                                                  std::max({c.n_embd, c.n_ff,
                                                            c.experts.n_ff_shexp,
                                                            c.n_heads * c.head_dim})));
    }
  }
  return OkStatus();
}

Status CudaForwardPass::UploadStep(const ForwardInput& in) {
  const RaggedBatch& b = in.batch;
  std::vector<int32_t> seq_of(static_cast<size_t>(b.num_tokens()));
  for (int64_t s = 0; s < b.num_seqs(); ++s) {
    for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; ++t) {
      seq_of[static_cast<size_t>(t)] = static_cast<int32_t>(s);
    }
  }
  staging_.clear();
  const size_t ids = Stage(staging_, in.token_ids);
  const size_t rows = Stage(staging_, in.logit_rows);
  const size_t positions = Stage(staging_, b.positions);
  const size_t seqs = Stage(staging_, std::span<const int32_t>(seq_of));
  // Per KV group: the offsets of its slot_mapping, kv_indptr and kv_indices.
  std::vector<std::array<size_t, 3>> tables(b.block_tables.size());
  for (size_t g = 0; g < tables.size(); ++g) {
    tables[g][0] = Stage(staging_, b.block_tables[g].slot_mapping);
    tables[g][1] = Stage(staging_, b.block_tables[g].kv_indptr);
  }
  const ModelConfig& c = model_.config();
  const std::vector<int32_t> tiles =
      BuildAttentionTiles(b.positions, b.cu_seqlens, c.n_heads / c.n_kv_heads);
  const size_t tile_offset = Stage(staging_, std::span<const int32_t>(tiles));
  // Last, the only arrays whose length is not a function of the token count: each group's
  // kv_indices at a stride that only grows, by powers of two, in a buffer that grows the same
  // way. A decode step's pointers then stay put while its sequences grow, and its CUDA graph
  // is replayed rather than captured again (LaunchDecodeGraph).
  size_t longest = 0;
  for (const KvBlockTable& table : b.block_tables) {
    longest = std::max(longest, table.kv_indices.size());
  }
  indices_stride_ = std::max(indices_stride_, std::bit_ceil(std::max<size_t>(longest, 1024)));
  const size_t indices = (staging_.size() + 7) / 8 * 8;
  staging_.resize(indices + tables.size() * indices_stride_ * sizeof(int32_t));
  for (size_t g = 0; g < tables.size(); ++g) {
    tables[g][2] = indices + g * indices_stride_ * sizeof(int32_t);
    const std::span<const int32_t> group = b.block_tables[g].kv_indices;
    if (!group.empty()) {
      std::memcpy(staging_.data() + tables[g][2], group.data(), group.size_bytes());
    }
  }
  TM_RETURN_IF_ERROR(
      Grow(step_, static_cast<int64_t>(std::bit_ceil(std::max<size_t>(staging_.size(), 4096)))));
  TM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(step_.data(), staging_.data(), staging_.size(),
                                          cudaMemcpyHostToDevice, stream_),
                          "copying the step's inputs to the device");
  const uint8_t* base = step_.as<const uint8_t>();
  d_token_ids_ = reinterpret_cast<const int32_t*>(base + ids);
  d_logit_rows_ = reinterpret_cast<const int32_t*>(base + rows);
  d_batch_.positions = reinterpret_cast<const int32_t*>(base + positions);
  d_batch_.seq_of_token = reinterpret_cast<const int32_t*>(base + seqs);
  d_batch_.n_tokens = b.num_tokens();
  decode_only_ = b.num_seqs() == b.num_tokens();
  // A graph is replayed whatever the context: its split grid is the largest there is (blocks
  // past a token's own splits leave at once; the partition and results do not change).
  d_batch_.max_splits = decode_only_ && options_.cuda_graphs
                            ? kMaxSplits
                            : MaxSplits(b.positions.data(), b.num_tokens());
  d_batch_.tiles = reinterpret_cast<const int32_t*>(base + tile_offset);
  d_batch_.n_tiles = static_cast<int64_t>(tiles.size() / 2);
  d_tables_.resize(tables.size());
  for (size_t g = 0; g < tables.size(); ++g) {
    d_tables_[g] = DeviceBlockTable{reinterpret_cast<const int64_t*>(base + tables[g][0]),
                                    reinterpret_cast<const int32_t*>(base + tables[g][1]),
                                    reinterpret_cast<const int32_t*>(base + tables[g][2])};
  }
  return OkStatus();
}

StatusOr<CudaForwardPass::MatmulInput> CudaForwardPass::PrepareInput(const float* x,
                                                                       int64_t n_tokens,
                                                                       int64_t cols) {
  // Quantized weights have whole blocks of 32 columns; other widths only meet float weights.
  if (UsesCublas(n_tokens) || cols % kQuantBlock != 0) return MatmulInput{x, nullptr};
  TM_CUDA_RETURN_IF_ERROR(QuantizeQ8_1(x, n_tokens, cols, q8_.as<uint8_t>(), stream_),
                          "quantizing activations to q8_1");
  return MatmulInput{x, q8_.as<const uint8_t>()};
}

Status CudaForwardPass::Matmul(const DeviceWeight& w, const MatmulInput& in, int64_t n_tokens,
                               float* y) {
  if (UsesCublas(n_tokens) && w.bf16 != nullptr) return gemm_.Multiply(w, in.x, n_tokens, y);
  if (!TakesQ8_1(w.type)) return CudaStatus(Gemv(w, in.x, n_tokens, y, stream_), "GEMV");
  if (in.x_q8 == nullptr) return InternalError("a quantized GEMV without q8_1 activations");
  return CudaStatus(GemvQ8_1(w, in.x_q8, n_tokens, y, stream_), "GEMV");
}

Status CudaForwardPass::Forward(const ForwardInput& in, const KvCacheView& kv) {
  if (KvScaleBytes(kv.type) > 0 && (kv.k_scale == nullptr || kv.v_scale == nullptr)) {
    return InvalidArgumentError(std::string(KvTypeName(kv.type)) +
                                " KV needs its scale arrays (CudaKvCache allocates them)");
  }
  const int64_t n = static_cast<int64_t>(in.token_ids.size());
  const int64_t n_logits = static_cast<int64_t>(in.logit_rows.size());
  TM_RETURN_IF_ERROR(UploadStep(in));
  TM_RETURN_IF_ERROR(GrowScratch(n, n_logits, d_batch_.max_splits));

  if (!options_.cuda_graphs || !decode_only_ ||
      (options_.cublas_min_tokens > 0 && n >= options_.cublas_min_tokens)) {
    return EnqueueLayers(kv, n, n_logits);
  }
  return LaunchDecodeGraph(kv, n, n_logits);
}

Status CudaForwardPass::EnqueueLayers(const KvCacheView& kv, int64_t n, int64_t n_logits) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.n_embd;
  float* x = x_.as<float>();
  float* h = h_.as<float>();
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  float* attn = attn_.as<float>();
  float* proj = proj_.as<float>();
  float* gate = gate_.as<float>();
  float* up = up_.as<float>();
  // The Gemmas scale Q after RoPE and q.k by 1; the others q.k by 1 / sqrt(head_dim).
  const float scale =
      plan_.query_scale > 0.0f ? 1.0f : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  cudaStream_t s = stream_;

  TM_CUDA_RETURN_IF_ERROR(Embedding(weights_.token_embd.view, d_token_ids_, n, x, s), "embedding");
  if (plan_.embed_scale != 1.0f) {
    TM_CUDA_RETURN_IF_ERROR(ScaleInPlace(x, n * d, plan_.embed_scale, s), "embedding scale");
  }
  TM_CUDA_RETURN_IF_ERROR(
      RmsNorm(x, weights_.layers[0].attn_norm.data(), nullptr, n, static_cast<int>(d), c.rms_eps, h,
              s),
      "RMSNorm");
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const DeviceLayerWeights& l = weights_.layers[static_cast<size_t>(layer)];
    TM_ASSIGN_OR_RETURN(const MatmulInput normed, PrepareInput(h, n, d));
    TM_RETURN_IF_ERROR(Matmul(l.q.view, normed, n, q));
    TM_RETURN_IF_ERROR(Matmul(l.k.view, normed, n, k));
    TM_RETURN_IF_ERROR(Matmul(l.v.view, normed, n, v));
    if (c.qkv_bias) {
      TM_CUDA_RETURN_IF_ERROR(AddBias(q, l.q_bias.data(), n, c.q_dim(), s), "bias");
      TM_CUDA_RETURN_IF_ERROR(AddBias(k, l.k_bias.data(), n, c.kv_dim(), s), "bias");
      TM_CUDA_RETURN_IF_ERROR(AddBias(v, l.v_bias.data(), n, c.kv_dim(), s), "bias");
    }
    if (plan_.head_norms) {
      // Each head's row of head_dim normed in place, before RoPE.
      TM_CUDA_RETURN_IF_ERROR(RmsNorm(q, l.q_norm.data(), nullptr, n * c.n_heads, c.head_dim,
                                      c.rms_eps, q, s),
                              "Q norm");
      TM_CUDA_RETURN_IF_ERROR(RmsNorm(k, l.k_norm.data(), nullptr, n * c.n_kv_heads, c.head_dim,
                                      c.rms_eps, k, s),
                              "K norm");
    }
    const DeviceRope& rope = layer_rope_[static_cast<size_t>(layer)];
    TM_CUDA_RETURN_IF_ERROR(Rope(rope, d_batch_.positions, n, c.n_heads, q, s), "RoPE");
    TM_CUDA_RETURN_IF_ERROR(Rope(rope, d_batch_.positions, n, c.n_kv_heads, k, s), "RoPE");
    const KvCacheView kv_layer = kv.Layer(layer);
    const DeviceBlockTable& blocks = d_tables_[static_cast<size_t>(KvGroupOfLayer(c, layer))];
    TM_CUDA_RETURN_IF_ERROR(StoreKv(kv_layer, blocks.slot_mapping, n, k, v, s), "KV append");
    const DeviceAttentionVariant variant{
        .query_scale = plan_.query_scale > 0.0f ? plan_.query_scale : 1.0f,
        .softcap = plan_.attn_softcap,
        .sliding_window = plan_.layers[static_cast<size_t>(layer)].sliding_window};
    TM_CUDA_RETURN_IF_ERROR(PagedAttention(kv_layer, d_batch_, blocks, q, c.n_heads, scale,
                                           workspace_.as<float>(), attn, s, variant),
                            "paged attention");
    TM_ASSIGN_OR_RETURN(const MatmulInput attended, PrepareInput(attn, n, c.q_dim()));
    TM_RETURN_IF_ERROR(Matmul(l.o.view, attended, n, proj));
    if (plan_.post_norms) {
      TM_CUDA_RETURN_IF_ERROR(RmsNorm(proj, l.attn_post_norm.data(), nullptr, n,
                                      static_cast<int>(d), c.rms_eps, proj, s),
                              "attention post-norm");
    }
    TM_CUDA_RETURN_IF_ERROR(
        AddRmsNorm(x, proj, l.ffn_norm.data(), n, static_cast<int>(d), c.rms_eps, h, s),
        "residual add + RMSNorm");
    TM_ASSIGN_OR_RETURN(const MatmulInput ffn_in, PrepareInput(h, n, d));
    if (plan_.experts) {
      TM_RETURN_IF_ERROR(MoeFeedForward(l.moe, h, ffn_in, n, proj));
    } else {
      TM_RETURN_IF_ERROR(DenseFeedForward(l, ffn_in, n, gate, up, proj));
    }
    if (plan_.post_norms) {
      TM_CUDA_RETURN_IF_ERROR(RmsNorm(proj, l.ffn_post_norm.data(), nullptr, n,
                                      static_cast<int>(d), c.rms_eps, proj, s),
                              "feed-forward post-norm");
    }
    if (layer + 1 < c.n_layers) {
      // The residual add fused with the next layer's attention norm.
      const float* next_norm = weights_.layers[static_cast<size_t>(layer) + 1].attn_norm.data();
      TM_CUDA_RETURN_IF_ERROR(
          AddRmsNorm(x, proj, next_norm, n, static_cast<int>(d), c.rms_eps, h, s),
          "residual add + RMSNorm");
    } else {
      TM_CUDA_RETURN_IF_ERROR(AddInPlace(x, proj, n * d, s), "residual add");
    }
  }
  TM_CUDA_RETURN_IF_ERROR(RmsNorm(x, weights_.output_norm.data(), d_logit_rows_, n_logits,
                                  static_cast<int>(d), c.rms_eps, final_.as<float>(), s),
                          "output RMSNorm");
  TM_ASSIGN_OR_RETURN(const MatmulInput final_in, PrepareInput(final_.as<float>(), n_logits, d));
  TM_RETURN_IF_ERROR(Matmul(weights_.output.view, final_in, n_logits, logits_.as<float>()));
  if (plan_.final_softcap <= 0.0f) return OkStatus();
  return CudaStatus(SoftcapInPlace(logits_.as<float>(), n_logits * c.n_vocab,
                                   plan_.final_softcap, s),
                    "final logit soft-capping");
}

Status CudaForwardPass::DenseFeedForward(const DeviceLayerWeights& l, const MatmulInput& in,
                                         int64_t n, float* gate, float* up, float* proj) {
  const ModelConfig& c = model_.config();
  TM_RETURN_IF_ERROR(Matmul(l.gate.view, in, n, gate));
  TM_RETURN_IF_ERROR(Matmul(l.up.view, in, n, up));
  if (plan_.gelu) {
    TM_CUDA_RETURN_IF_ERROR(
        GeluTanhGlu(gate, up, n * c.n_ff, gelu_table_.as<const float>(), gate, stream_), "GEGLU");
  } else {
    TM_CUDA_RETURN_IF_ERROR(SwiGlu(gate, up, n * c.n_ff, gate, stream_), "SwiGLU");
  }
  TM_ASSIGN_OR_RETURN(const MatmulInput gated, PrepareInput(gate, n, c.n_ff));
  return Matmul(l.down.view, gated, n, proj);
}

Status CudaForwardPass::GroupedMatmul(const DeviceWeight& w, const float* x, const uint8_t* x_q8,
                                      bool per_token, const DeviceExpertGroups& groups,
                                      float* y) {
  if (!TakesQ8_1(w.type)) {
    return CudaStatus(GroupedGemv(w, x, per_token, groups, y, stream_), "grouped expert GEMV");
  }
  return CudaStatus(GroupedGemvQ8_1(w, x_q8, per_token, groups, y, stream_),
                    "grouped expert GEMV");
}

Status CudaForwardPass::MoeFeedForward(const DeviceMoeWeights& w, const float* h,
                                       const MatmulInput& in, int64_t n, float* proj) {
  const ModelConfig& c = model_.config();
  const ExpertConfig& e = c.experts;
  const int64_t d = c.n_embd, k = e.n_used, ff = e.n_ff_exp;
  cudaStream_t s = stream_;
  // The router's logits, then each token's experts and weights (RouteToken's arithmetic).
  float* logits = moe_logits_.as<float>();
  TM_RETURN_IF_ERROR(Matmul(w.router.view, in, n, logits));
  const DeviceRouting routing{e.n_expert, e.n_used, static_cast<RoutingGating>(e.gating),
                              e.normalize, e.scale};
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
  float* shared_gate = gate_.as<float>();
  float* shared_up = up_.as<float>();
  if (shared) {  // before q8_ holds anything but h
    const MatmulInput shared_in{h, h_q8};
    TM_RETURN_IF_ERROR(Matmul(w.shared_gate.view, shared_in, n, shared_gate));
    TM_RETURN_IF_ERROR(Matmul(w.shared_up.view, shared_in, n, shared_up));
    TM_RETURN_IF_ERROR(Matmul(w.shared_gate_inp.view, shared_in, n, shared_logit_.as<float>()));
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
                           shared ? shared_logit_.as<const float>() : nullptr, proj, s),
      "the experts' weighted sum");
}

Status CudaForwardPass::GrowScratch(int64_t n, int64_t n_logits, int max_splits) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.n_embd;
  constexpr int64_t kF = sizeof(float);
  TM_RETURN_IF_ERROR(Grow(x_, n * d * kF));
  TM_RETURN_IF_ERROR(Grow(h_, n * d * kF));
  TM_RETURN_IF_ERROR(Grow(q_, n * c.q_dim() * kF));
  TM_RETURN_IF_ERROR(Grow(k_, n * c.kv_dim() * kF));
  TM_RETURN_IF_ERROR(Grow(v_, n * c.kv_dim() * kF));
  TM_RETURN_IF_ERROR(Grow(attn_, n * c.q_dim() * kF));
  TM_RETURN_IF_ERROR(Grow(proj_, n * d * kF));
  const ExpertConfig& e = c.experts;
  // gate_ and up_: the dense feed-forward's, or qwen2moe's shared expert's.
  const int64_t ff = std::max(c.n_ff, e.n_ff_shexp);
  TM_RETURN_IF_ERROR(Grow(gate_, n * ff * kF));
  TM_RETURN_IF_ERROR(Grow(up_, n * ff * kF));
  TM_RETURN_IF_ERROR(Grow(final_, std::max<int64_t>(1, n_logits) * d * kF));
  TM_RETURN_IF_ERROR(Grow(logits_, std::max<int64_t>(1, n_logits) * c.n_vocab * kF));
  const int64_t pairs = n * e.n_used;  // 0 without experts
  TM_RETURN_IF_ERROR(Grow(q8_, std::max(Q8_1Bytes(std::max(n, n_logits),
                                                  std::max({d, ff, int64_t{c.q_dim()}})),
                                        Q8_1Bytes(pairs, e.n_ff_exp))));
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
  return Grow(workspace_, AttentionWorkspaceFloats(n, c.n_heads, c.head_dim, max_splits) * kF);
}

Status CudaForwardPass::Grow(DeviceBuffer& buffer, int64_t bytes) {
  if (bytes <= buffer.bytes()) return OkStatus();
  ++buffer_generation_;  // captured graphs point at the old memory
  return buffer.Reserve(bytes);
}

Status CudaForwardPass::LaunchDecodeGraph(const KvCacheView& kv, int64_t n, int64_t n_logits) {
  const std::pair<int64_t, int64_t> key(n, n_logits);
  DecodeGraph& g = graphs_[key];
  std::vector<const int32_t*> kv_indices;
  for (const DeviceBlockTable& table : d_tables_) kv_indices.push_back(table.kv_indices);
  if (g.exec == nullptr || g.generation != buffer_generation_ || g.kv_k != kv.k ||
      g.kv_indices != kv_indices) {
    TM_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                            "capturing a decode step");
    const Status enqueued = EnqueueLayers(kv, n, n_logits);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    TM_RETURN_IF_ERROR(enqueued);
    TM_CUDA_RETURN_IF_ERROR(ended, "capturing a decode step");
    ++num_graph_captures_;
    // The same kernels with other pointers: update the executable graph in place, and
    // instantiate a new one only when CUDA cannot.
    cudaGraphExecUpdateResultInfo update_info{};
    if (g.exec == nullptr || cudaGraphExecUpdate(g.exec, graph, &update_info) != cudaSuccess) {
      cudaGetLastError();  // a failed update is not sticky
      if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
      g.exec = nullptr;
      const cudaError_t made = cudaGraphInstantiate(&g.exec, graph, 0);
      cudaGraphDestroy(graph);
      TM_CUDA_RETURN_IF_ERROR(made, "instantiating a decode step's graph");
    } else {
      cudaGraphDestroy(graph);
    }
    g.generation = buffer_generation_;
    g.kv_k = kv.k;
    g.kv_indices = std::move(kv_indices);
  }
  return CudaStatus(cudaGraphLaunch(g.exec, stream_), "launching a decode step's graph");
}

Status CudaForwardPass::Run(const ForwardInput& in, const KvCacheView& kv,
                            std::span<float> logits) {
  TM_RETURN_IF_ERROR(ValidateForwardInput(model_.config(), in, kv, logits.size()));
  TM_RETURN_IF_ERROR(Forward(in, kv));
  if (!logits.empty()) {
    TM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits.data(), logits_.data(), logits.size_bytes(),
                                            cudaMemcpyDeviceToHost, stream_),
                            "copying logits to the host");
  }
  return CudaStatus(cudaStreamSynchronize(stream_), "running the forward pass");
}

Status CudaForwardPass::RunGreedy(const ForwardInput& in, const KvCacheView& kv,
                                  std::span<int32_t> token_ids) {
  const ModelConfig& c = model_.config();
  if (token_ids.size() != in.logit_rows.size()) {
    return InvalidArgumentError("RunGreedy needs one output id per logit row");
  }
  TM_RETURN_IF_ERROR(ValidateForwardInput(c, in, kv, in.logit_rows.size() *
                                                         static_cast<size_t>(c.n_vocab)));
  TM_RETURN_IF_ERROR(Forward(in, kv));
  const int64_t n_rows = static_cast<int64_t>(token_ids.size());
  TM_RETURN_IF_ERROR(Grow(argmax_, std::max<int64_t>(1, n_rows) * 4));
  TM_CUDA_RETURN_IF_ERROR(
      ArgmaxRows(logits_.as<float>(), n_rows, c.n_vocab, argmax_.as<int32_t>(), stream_),
      "argmax");
  if (n_rows > 0) {
    TM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(token_ids.data(), argmax_.data(),
                                            token_ids.size_bytes(), cudaMemcpyDeviceToHost,
                                            stream_),
                            "copying token ids to the host");
  }
  return CudaStatus(cudaStreamSynchronize(stream_), "running the forward pass");
}

}  // namespace tokenmill::cuda
