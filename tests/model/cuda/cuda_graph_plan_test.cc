// PlanCudaGraph on the CPU (label unit): each family's own graph (model/arch/*.cc) traced into
// the blocks the CUDA pass runs, the attention's scales and RoPE tables, and the refusals by
// the block CUDA has no kernel for; the device KV pool's host-side sizing and refusals.
#include "model/cuda/cuda_graph_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/kv_type.h"
#include "model/cuda/cuda_kv_cache.h"
#include "model/forward_input.h"

namespace tokenmill::cuda {
namespace {

ModelConfig Config(const std::string& arch, int n_layers) {
  ModelConfig c;
  c.arch_name = arch;
  c.n_layers = n_layers;
  c.n_embd = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.n_rot = 32;
  c.rope_freq_base = 10000.0f;
  return c;
}

// Weights the planner only looks at, not into: n_layers layers of empty tensors, and a
// vector for the spans a test sets.
struct Weights {
  explicit Weights(const ModelConfig& c) { w.layers.resize(static_cast<size_t>(c.n_layers)); }
  std::vector<float> values = std::vector<float>(64, 1.0f);
  std::span<const float> some() const { return values; }
  ModelWeights w;
};

StatusOr<CudaGraphPlan> Plan(const ModelFamily& family, const ModelConfig& c) {
  return PlanCudaGraph(family, c, Weights(c).w);
}

// The blocks of `layer`, in the order the graph calls them.
std::vector<std::string> LayerBlocks(const CudaGraphPlan& plan, int layer) {
  std::vector<std::string> blocks;
  for (const CudaBlockCall& call : plan.blocks) {
    if (call.layer == layer) blocks.push_back(call.block);
  }
  return blocks;
}

using Blocks = std::vector<std::string>;
const Blocks kLlamaLayer = {"Norm",        "ProjectQkv", "Attention",         "AttentionOutput",
                            "AddResidual", "Norm",       "SwiGluFeedForward", "AddResidual"};

TEST(CudaGraphPlanTest, LlamaIsTheBaseGraph) {
  auto plan = Plan(kLlamaFamily, Config("llama", 3));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(LayerBlocks(*plan, -1), (Blocks{"Embed", "Logits"}));
  for (int layer = 0; layer < 3; ++layer) EXPECT_EQ(LayerBlocks(*plan, layer), kLlamaLayer);
  EXPECT_EQ(plan->blocks.front().block, "Embed");
  EXPECT_EQ(plan->blocks.back().block, "Logits");
  EXPECT_FALSE(plan->gelu);
  ASSERT_EQ(plan->rope_bases.size(), 1u);
  ASSERT_EQ(plan->layers.size(), 3u);
  for (const CudaLayerPlan& l : plan->layers) {
    EXPECT_EQ(l.rope_table, 0);
    EXPECT_EQ(l.sliding_window, 0);
    EXPECT_EQ(l.attention.query_scale, 1.0f);
    EXPECT_EQ(l.attention.score_scale, 1.0f / std::sqrt(32.0f));
  }
}

TEST(CudaGraphPlanTest, Qwen2AddsBiasesAndQwen3NormsTheHeads) {
  auto qwen2 = Plan(kQwen2Family, Config("qwen2", 2));
  ASSERT_TRUE(qwen2.ok()) << qwen2.status().ToString();
  EXPECT_EQ(LayerBlocks(*qwen2, 1),
            (Blocks{"Norm", "ProjectQkv", "AddQkvBias", "Attention", "AttentionOutput",
                    "AddResidual", "Norm", "SwiGluFeedForward", "AddResidual"}));
  auto qwen3 = Plan(kQwen3Family, Config("qwen3", 2));
  ASSERT_TRUE(qwen3.ok()) << qwen3.status().ToString();
  EXPECT_EQ(LayerBlocks(*qwen3, 0),
            (Blocks{"Norm", "ProjectQkv", "HeadNorms", "Attention", "AttentionOutput",
                    "AddResidual", "Norm", "SwiGluFeedForward", "AddResidual"}));
  EXPECT_FALSE(qwen3->gelu);
  EXPECT_EQ(qwen3->layers[0].attention.query_scale, 1.0f);
}

TEST(CudaGraphPlanTest, Phi3ScalesTheScoresAsTheDefault) {
  // phi3's graph scales Q by 1 / sqrt(head_dim); the CUDA attention scales q.k by it instead,
  // as the CUDA pass always has.
  auto plan = Plan(kPhi3Family, Config("phi3", 2));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(LayerBlocks(*plan, 0), kLlamaLayer);
  EXPECT_EQ(plan->layers[1].attention.query_scale, 1.0f);
  EXPECT_EQ(plan->layers[1].attention.score_scale, 1.0f / std::sqrt(32.0f));
}

TEST(CudaGraphPlanTest, GemmaScalesEmbeddingsAndQueriesAndGatesWithGelu) {
  auto plan = Plan(kGemmaFamily, Config("gemma", 2));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->gelu);
  EXPECT_EQ(LayerBlocks(*plan, 0),
            (Blocks{"Norm", "ProjectQkv", "Attention", "AttentionOutput", "AddResidual", "Norm",
                    "GeluFeedForward", "AddResidual"}));
  EXPECT_EQ(plan->layers[0].attention.query_scale, 1.0f / std::sqrt(32.0f));
  EXPECT_EQ(plan->layers[0].attention.score_scale, 1.0f);
}

TEST(CudaGraphPlanTest, Gemma2SlidesEvenLayersAndPostNorms) {
  ModelConfig c = Config("gemma2", 4);
  c.sliding_window = 6;
  c.sliding_layers = {true, false, true, false};
  c.attn_softcap = 2.0f;
  c.final_softcap = 5.0f;
  for (int i = 0; i < 4; ++i) c.rope_layers.push_back({10000.0f, 1.0f});
  auto plan = Plan(kGemma2Family, c);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(LayerBlocks(*plan, 3),
            (Blocks{"Norm", "ProjectQkv", "Attention", "AttentionOutput", "PostNorm",
                    "AddResidual", "Norm", "GeluFeedForward", "PostNorm", "AddResidual"}));
  EXPECT_EQ(plan->layers[0].attention.query_scale, 1.0f / std::sqrt(32.0f));
  EXPECT_EQ(plan->rope_bases.size(), 1u);  // the same base twice is one table
  const int want[] = {6, 0, 6, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(plan->layers[i].sliding_window, want[i]) << i;
  // The 27B (46 layers) scales Q by 1 / sqrt(n_embd / n_head), not 1 / sqrt(head_dim).
  c = Config("gemma2", 46);
  c.n_embd = 4608;
  c.n_heads = 32;
  c.head_dim = 128;
  plan = Plan(kGemma2Family, c);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->layers[45].attention.query_scale, 1.0f / std::sqrt(144.0f));
}

TEST(CudaGraphPlanTest, Gemma3GivesEachBaseATableAndScalesOnlyTheGlobalLayers) {
  ModelConfig c = Config("gemma3", 7);
  c.rope_freq_base = 1e6f;
  c.rope_position_scale = 0.5f;
  c.sliding_window = 8;
  c.sliding_layers = {true, true, true, true, true, false, true};
  for (int i = 0; i < 7; ++i) {
    c.rope_layers.push_back(c.sliding_layers[i] ? ModelConfig::LayerRope{10000.0f, 1.0f}
                                                : ModelConfig::LayerRope{1e6f, 0.5f});
  }
  auto plan = Plan(kGemma3Family, c);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->gelu);
  EXPECT_EQ(LayerBlocks(*plan, 5),
            (Blocks{"Norm", "ProjectQkv", "HeadNorms", "Attention", "AttentionOutput",
                    "PostNorm", "AddResidual", "Norm", "GeluFeedForward", "PostNorm",
                    "AddResidual"}));
  ASSERT_EQ(plan->rope_bases.size(), 2u);
  EXPECT_EQ(plan->rope_bases[0], 10000.0f);
  EXPECT_EQ(plan->rope_bases[1], 1e6f);
  for (int i = 0; i < 7; ++i) {
    const CudaLayerPlan& l = plan->layers[i];
    const bool global = i == 5;
    EXPECT_EQ(l.rope_table, global ? 1 : 0) << i;
    EXPECT_EQ(l.rope.freq_base, global ? 1e6f : 10000.0f) << i;
    EXPECT_EQ(l.rope.position_scale, global ? 0.5f : 1.0f) << i;
    EXPECT_EQ(l.sliding_window, global ? 0 : 8) << i;
    EXPECT_TRUE(l.rope.freq_factors.empty());
  }
}

ModelConfig WithExperts(ModelConfig c, int n_expert, int n_used) {
  c.experts.n_expert = n_expert;
  c.experts.n_used = n_used;
  c.experts.n_ff_exp = 32;
  return c;
}

TEST(CudaGraphPlanTest, MixturesOfExpertsRunTheirFamiliesAttention) {
  // Mixtral: llama's graph with experts.
  auto mixtral = Plan(kLlamaFamily, WithExperts(Config("llama", 2), 8, 2));
  ASSERT_TRUE(mixtral.ok()) << mixtral.status().ToString();
  Blocks moe_layer = kLlamaLayer;
  moe_layer[6] = "MoeFeedForward";
  EXPECT_EQ(LayerBlocks(*mixtral, 1), moe_layer);
  // qwen3moe: qwen3's head norms.
  auto qwen3moe = Plan(kQwen3MoeFamily, WithExperts(Config("qwen3moe", 2), 16, 3));
  ASSERT_TRUE(qwen3moe.ok()) << qwen3moe.status().ToString();
  EXPECT_EQ(LayerBlocks(*qwen3moe, 0),
            (Blocks{"Norm", "ProjectQkv", "HeadNorms", "Attention", "AttentionOutput",
                    "AddResidual", "Norm", "MoeFeedForward", "AddResidual"}));
  EXPECT_EQ(qwen3moe->layers.size(), 2u);
  // qwen2moe: qwen2's attention with its biases.
  ModelConfig qwen2moe = WithExperts(Config("qwen2moe", 2), 12, 4);
  qwen2moe.experts.n_ff_shexp = 96;
  auto plan = Plan(kQwen2MoeFamily, qwen2moe);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(LayerBlocks(*plan, 0),
            (Blocks{"Norm", "ProjectQkv", "AddQkvBias", "Attention", "AttentionOutput",
                    "AddResidual", "Norm", "MoeFeedForward", "AddResidual"}));
  // A dense llama has none.
  EXPECT_EQ(LayerBlocks(*Plan(kLlamaFamily, Config("llama", 2)), 0), kLlamaLayer);
}

// The message of a refusal, after checking its code and that it names the model's
// architecture and the way out.
std::string Refusal(const StatusOr<CudaGraphPlan>& plan, const std::string& arch) {
  EXPECT_EQ(plan.status().code(), StatusCode::kUnimplemented) << plan.status().ToString();
  const std::string message(plan.status().message());
  EXPECT_NE(message.find("used by this '" + arch + "' model: use --device cpu"),
            std::string::npos)
      << message;
  return message;
}

TEST(CudaGraphPlanTest, GptOssIsRefusedByItsBlocks) {
  // gpt-oss: attention sinks, the attention output's bias and its experts' clamped SwiGLU
  // with biases have no CUDA kernels.
  const ModelConfig c = WithExperts(Config("gpt-oss", 2), 32, 4);
  Weights weights(c);
  for (LayerWeights& l : weights.w.layers) {
    l.attn_sinks = weights.some();
    l.o_bias = weights.some();
  }
  const std::string message = Refusal(PlanCudaGraph(kGptOssFamily, c, weights.w), "gpt-oss");
  EXPECT_NE(message.find("CUDA has no kernel for blocks Attention (attention sinks), "
                         "AttentionOutput (output bias) and OaiMoeFeedForward (clamped SwiGLU "
                         "with biases)"),
            std::string::npos)
      << message;
}

TEST(CudaGraphPlanTest, Mistral3IsRefusedByItsTemperatureAndOutputBias) {
  ModelConfig c = Config("mistral3", 2);
  c.attn_temp_scale = 0.5f;
  c.attn_temp_length = 16;
  std::string message = Refusal(Plan(kMistral3Family, c), "mistral3");
  EXPECT_NE(message.find("CUDA has no kernel for block Attention (attention temperature)"),
            std::string::npos)
      << message;
  c.attn_temp_scale = 0.0f;
  Weights weights(c);
  weights.w.layers[1].o_bias = weights.some();
  message = Refusal(PlanCudaGraph(kMistral3Family, c, weights.w), "mistral3");
  EXPECT_NE(message.find("block AttentionOutput (output bias)"), std::string::npos) << message;
}

TEST(CudaGraphPlanTest, ExpertOrRouterBiasesAreRefusedByTheirBlock) {
  const ModelConfig c = WithExperts(Config("llama", 2), 8, 2);
  Weights weights(c);
  weights.w.layers[0].moe.router_bias = weights.some();
  const std::string message = Refusal(PlanCudaGraph(kLlamaFamily, c, weights.w), "llama");
  EXPECT_NE(message.find("block MoeFeedForward (expert or router biases)"), std::string::npos)
      << message;
}

TEST(CudaGraphPlanTest, Gemma4IsRefusedByItsBlocks) {
  // Sliding layers of a smaller head, the last two reading layers 0's and 1's KV, per-layer
  // embeddings and output scales: none has a CUDA kernel yet.
  ModelConfig c = Config("gemma4", 4);
  c.n_ff = 128;
  c.sliding_window = 8;
  c.sliding_layers = {true, false, true, false};
  for (int layer = 0; layer < 4; ++layer) {
    const bool sliding = c.sliding_layers[static_cast<size_t>(layer)];
    c.layer_shapes.push_back({sliding ? 16 : 32, 2, sliding ? 16 : 32, 128});
  }
  c.kv_source_layers = {0, 1, 0, 1};
  Weights weights(c);
  weights.w.per_layer.width = 8;
  for (LayerWeights& l : weights.w.layers) l.out_scale = weights.some();
  const std::string message = Refusal(PlanCudaGraph(kGemma4Family, c, weights.w), "gemma4");
  EXPECT_NE(message.find("CUDA has no kernel for blocks PerLayerInputs (per-layer embeddings), "
                         "ValueNorm, Attention (layers of different head sizes), "
                         "PerLayerEmbedding, ScaleResidual, ProjectQ (a layer reading another "
                         "layer's KV) and Attention (KV of another layer)"),
            std::string::npos)
      << message;
}

TEST(CudaGraphPlanTest, Gemma3nIsRefusedByItsBlocks) {
  ModelConfig c = Config("gemma3n", 2);
  c.n_ff = 128;
  const std::string message = Refusal(Plan(kGemma3nFamily, c), "gemma3n");
  EXPECT_NE(message.find("CUDA has no kernel for blocks PerLayerInputs (per-layer embeddings), "
                         "AltUp, Laurel, ValueNorm and SparseGeluFeedForward (activation "
                         "sparsity)"),
            std::string::npos)
      << message;
}

TEST(CudaGraphPlanTest, Deepseek2RunsItsLatentAttentionAndDeepSeeksRouting) {
  // A dense leading layer, then experts with DeepSeek-V3's selection bias, groups and shared
  // experts added without a gate: all of it has CUDA kernels (LatentAttention over the latent
  // cache, RouteTokens with the bias and the groups, the ungated shared expert's add).
  ModelConfig c = WithExperts(Config("deepseek2", 2), 8, 2);
  c.mla = {.kv_lora_rank = 24, .qk_nope = 16, .v_head = 16, .score_scale = 0.1f};
  c.experts.n_dense_leading = 1;
  c.experts.n_groups = 4;
  c.experts.n_groups_used = 2;
  Weights weights(c);
  weights.w.layers[1].moe.selection_bias = weights.some();
  weights.w.layers[1].moe.shared_gate.rows = 32;
  auto plan = PlanCudaGraph(kDeepseek2Family, c, weights.w);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(LayerBlocks(*plan, -1), (Blocks{"Embed", "Logits"}));
  EXPECT_EQ(LayerBlocks(*plan, 0),
            (Blocks{"Norm", "LatentAttention", "AttentionOutput", "AddResidual", "Norm",
                    "SwiGluFeedForward", "AddResidual"}));
  EXPECT_EQ(LayerBlocks(*plan, 1),
            (Blocks{"Norm", "LatentAttention", "AttentionOutput", "AddResidual", "Norm",
                    "MoeFeedForward", "AddResidual"}));
  ASSERT_EQ(plan->layers.size(), 2u);
  for (const CudaLayerPlan& l : plan->layers) EXPECT_EQ(l.sliding_window, 0);
  // More groups than RouteTokens' mask holds are refused by the block.
  c.experts = WithExperts(Config("deepseek2", 2), 130, 2).experts;
  c.experts.n_dense_leading = 1;
  c.experts.n_groups = 65;
  c.experts.n_groups_used = 2;
  const std::string message = Refusal(PlanCudaGraph(kDeepseek2Family, c, weights.w),
                                      "deepseek2");
  EXPECT_NE(message.find("CUDA has no kernel for block MoeFeedForward (more than 64 expert "
                         "groups)"),
            std::string::npos)
      << message;
}

// The device pool of a latent cache (host logic, no device): a block counts K alone (one row
// of kv_lora_rank + n_rot a token and layer, as the CPU's pool), and 4-bit types, which CUDA's
// latent attention has no kernel for, are refused naming the type and the way out.
TEST(CudaKvCacheTest, LatentCachesCountKAloneAndRefuseFourBitTypesByName) {
  ModelConfig c = Config("deepseek2", 3);
  c.n_kv_heads = 1;
  c.head_dim = 576;
  c.n_rot = 64;
  c.mla = {.kv_lora_rank = 512, .qk_nope = 128, .v_head = 128, .score_scale = 0.1f};
  EXPECT_EQ(CudaKvCache::BytesPerBlock(c, KvType::kF16, 16), 3 * 576 * 2 * 16);
  EXPECT_EQ(CudaKvCache::BytesPerBlock(c, KvType::kInt8, 16), 3 * (576 + 4) * 16);
  EXPECT_EQ(CudaKvCache::BytesPerBlock(c, KvType::kF16, 16),
            KvBytesPerToken(c, KvType::kF16, KvType::kF16) * 16);
  ModelConfig gqa = c;
  gqa.mla = {};
  EXPECT_EQ(CudaKvCache::BytesPerBlock(gqa, KvType::kF16, 16),
            2 * CudaKvCache::BytesPerBlock(c, KvType::kF16, 16));
  for (KvType type : {KvType::kF16, KvType::kF32, KvType::kInt8, KvType::kFp8}) {
    EXPECT_TRUE(CheckKvTypeForLatentOnCuda(c, type).ok());
  }
  for (KvType type : {KvType::kQ4_0, KvType::kInt4}) {
    const Status s = CheckKvTypeForLatentOnCuda(c, type);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(std::string(KvTypeName(type)) +
                               " does not run on CUDA for multi-head latent attention"),
              std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find("'deepseek2'"), std::string::npos) << s.ToString();
    EXPECT_TRUE(CheckKvTypeForLatentOnCuda(gqa, type).ok());  // GQA's 4-bit rows run
  }
}

TEST(CudaGraphPlanTest, AMixtureGraphWithoutExpertsIsMalformed) {
  EXPECT_EQ(Plan(kQwen3MoeFamily, Config("qwen3moe", 2)).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tokenmill::cuda
