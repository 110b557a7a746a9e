#include "model/cuda/cuda_graph_plan.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "kernels/cuda/moe_math.h"

namespace tokenmill::cuda {
namespace {

// Records each block the graph calls into the plan, and what of it has no CUDA kernel.
class PlanningBlocks final : public ForwardBlocks {
 public:
  PlanningBlocks(const ModelConfig& config, CudaGraphPlan& plan) : c_(config), plan_(plan) {}

  // Each block the CUDA kernels lack, "Block (what)", once, in the order first called.
  const std::vector<std::string>& missing() const { return missing_; }
  bool moe_without_experts() const { return moe_without_experts_; }

  void BeginLayer(int layer) override { layer_ = layer; }
  void Embed(const WeightMatrix&, float) override { Call("Embed", -1); }
  void Norm(std::span<const float>, const char*) override { Call("Norm"); }
  void ProjectQkv(const WeightMatrix&, const WeightMatrix&, const WeightMatrix&) override {
    Call("ProjectQkv");
  }
  void AddQkvBias(std::span<const float>, std::span<const float>,
                  std::span<const float>) override {
    Call("AddQkvBias");
  }
  void HeadNorms(std::span<const float>, std::span<const float>) override { Call("HeadNorms"); }
  void PerLayerInputs(const PerLayerEmbeddings&) override {
    Call("PerLayerInputs", -1);
    Lacks("PerLayerInputs (per-layer embeddings)");
  }
  void AddEncoderInputs(const EncoderInputs&) override {
    Call("AddEncoderInputs", -1);
    Lacks("AddEncoderInputs (an encoder's inputs)");
  }
  void LayerNorm(std::span<const float>, std::span<const float>, const char*) override {
    Call("LayerNorm");
    Lacks("LayerNorm");
  }
  void GeluMlp(const WeightMatrix&, std::span<const float>, const WeightMatrix&,
               std::span<const float>) override {
    Call("GeluMlp");
    Lacks("GeluMlp (an ungated GELU feed-forward)");
  }
  void ProjectQ(const WeightMatrix&) override {
    Call("ProjectQ");
    Lacks("ProjectQ (a layer reading another layer's KV)");
  }
  void ValueNorm() override {
    Call("ValueNorm");
    Lacks("ValueNorm");
  }
  void PerLayerEmbedding(const WeightMatrix&, const WeightMatrix&) override {
    Call("PerLayerEmbedding");
    Lacks("PerLayerEmbedding");
  }
  void ScaleResidual(std::span<const float>) override {
    Call("ScaleResidual");
    Lacks("ScaleResidual");
  }
  void SparseGeluFeedForward(const WeightMatrix&, const WeightMatrix&, const WeightMatrix&,
                             float) override {
    Call("SparseGeluFeedForward");
    Lacks("SparseGeluFeedForward (activation sparsity)");
  }
  void AltUpStreams(std::span<const WeightMatrix>) override {
    Call("AltUpStreams", -1);
    Lacks("AltUp");
  }
  void AltUpPredict(const AltUpWeights&) override { Call("AltUpPredict"); }
  void AltUpCorrect(const AltUpWeights&, const WeightMatrix&, const WeightMatrix&,
                    std::span<const float>) override {
    Call("AltUpCorrect");
  }
  void AltUpMerge(std::span<const WeightMatrix>) override { Call("AltUpMerge", -1); }
  void Laurel(const LaurelWeights&) override {
    Call("Laurel");
    Lacks("Laurel");
  }
  void AddLaurel() override { Call("AddLaurel"); }
  void Attention(QueryScale scale, std::span<const float> sinks) override {
    Call("Attention");
    if (!sinks.empty()) Lacks("Attention (attention sinks)");
    if (!c_.StoresKv(layer_)) Lacks("Attention (KV of another layer)");
    if (c_.Shape(layer_).head_dim != c_.head_dim || c_.Shape(layer_).n_kv_heads != c_.n_kv_heads ||
        c_.Shape(layer_).n_rot != c_.n_rot) {
      Lacks("Attention (layers of different head sizes)");
    }
    if (c_.attn_temp_scale != 0.0f) Lacks("Attention (attention temperature)");
    if (layer_ >= 0 && layer_ < static_cast<int>(plan_.layers.size())) {
      plan_.layers[static_cast<size_t>(layer_)].attention = AttentionScalesOnCuda(c_, scale);
    }
  }
  void LatentAttention(const LatentAttentionWeights&) override {
    Call("LatentAttention");
    if (!c_.StoresKv(layer_)) Lacks("LatentAttention (KV of another layer)");
    if (c_.Shape(layer_).head_dim != c_.head_dim || c_.Shape(layer_).n_rot != c_.n_rot) {
      Lacks("LatentAttention (layers of different head sizes)");
    }
  }
  void AttentionOutput(const WeightMatrix&, std::span<const float> bias) override {
    Call("AttentionOutput");
    if (!bias.empty()) Lacks("AttentionOutput (output bias)");
  }
  void PostNorm(std::span<const float>, const char*) override { Call("PostNorm"); }
  void SwiGluFeedForward(const WeightMatrix&, const WeightMatrix&,
                         const WeightMatrix&) override {
    Call("SwiGluFeedForward");
    if (c_.Shape(layer_).n_ff != c_.n_ff) Lacks("SwiGluFeedForward (per-layer widths)");
  }
  void GeluFeedForward(const WeightMatrix&, const WeightMatrix&, const WeightMatrix&) override {
    Call("GeluFeedForward");
    if (c_.Shape(layer_).n_ff != c_.n_ff) Lacks("GeluFeedForward (per-layer widths)");
    plan_.gelu = true;
  }
  void MoeFeedForward(const MoeWeights& w) override {
    Call("MoeFeedForward");
    if (c_.experts.n_expert == 0) moe_without_experts_ = true;
    if (!w.router_bias.empty() || !w.gate_bias.empty() || !w.up_bias.empty() ||
        !w.down_bias.empty()) {
      Lacks("MoeFeedForward (expert or router biases)");
    }
    if (c_.experts.n_groups > kMaxRoutingGroups) {
      Lacks("MoeFeedForward (more than " + std::to_string(kMaxRoutingGroups) +
            " expert groups)");
    }
  }
  void OaiMoeFeedForward(const MoeWeights&) override {
    Call("OaiMoeFeedForward");
    Lacks("OaiMoeFeedForward (clamped SwiGLU with biases)");
  }
  void AddResidual(const char*, std::span<const float>) override { Call("AddResidual"); }
  void Logits(std::span<const float>, const WeightMatrix&) override { Call("Logits", -1); }

 private:
  void Call(const char* block) { Call(block, layer_); }
  void Call(const char* block, int layer) { plan_.blocks.push_back({block, layer}); }
  void Lacks(const std::string& what) {
    if (std::find(missing_.begin(), missing_.end(), what) == missing_.end()) {
      missing_.push_back(what);
    }
  }

  const ModelConfig& c_;
  CudaGraphPlan& plan_;
  int layer_ = -1;
  std::vector<std::string> missing_;
  bool moe_without_experts_ = false;
};

// "a", "a and b", "a, b and c".
std::string Listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 < items.size() ? ", " : " and ";
    out += items[i];
  }
  return out;
}

}  // namespace

CudaAttentionScales AttentionScalesOnCuda(const ModelConfig& c, QueryScale scale) {
  const float inverse_sqrt = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (scale.factor > 0.0f && !scale.may_scale_scores) return {scale.factor, 1.0f};
  return {1.0f, inverse_sqrt};
}

StatusOr<CudaGraphPlan> PlanCudaGraph(const ModelFamily& family, const ModelConfig& c,
                                      const ModelWeights& weights) {
  CudaGraphPlan plan;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    CudaLayerPlan l;
    l.rope = LayerRope(c, layer, {});
    const auto base = std::find(plan.rope_bases.begin(), plan.rope_bases.end(), l.rope.freq_base);
    l.rope_table = static_cast<int>(base - plan.rope_bases.begin());
    if (base == plan.rope_bases.end()) plan.rope_bases.push_back(l.rope.freq_base);
    l.sliding_window = c.IsSlidingLayer(layer) ? c.sliding_window : 0;
    l.attention = AttentionScalesOnCuda(c, {});
    plan.layers.push_back(l);
  }
  PlanningBlocks blocks(c, plan);
  family.forward(c, weights, blocks);
  if (!blocks.missing().empty()) {
    const bool one = blocks.missing().size() == 1;
    return UnimplementedError(std::string("CUDA has no kernel for block") + (one ? " " : "s ") +
                              Listed(blocks.missing()) + " used by this '" + c.arch_name +
                              "' model: use --device cpu");
  }
  if (blocks.moe_without_experts()) {
    return InvalidArgumentError("the '" + c.arch_name +
                                "' graph has a mixture of experts but the model no experts");
  }
  return plan;
}

}  // namespace tokenmill::cuda
