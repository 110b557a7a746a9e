// Layers of their own KV shape and layers reading another layer's KV (ModelConfig's
// layer_shapes and kv_source_layers): what KvCacheStorage allocates and lends each layer, the
// bytes a token's KV takes, and the shapes and sharing CheckLayerShapes and
// CheckKvGroupShapes refuse.
#include <gtest/gtest.h>

#include <string>

#include "model/forward_input.h"
#include "model/kv_cache.h"

namespace tokenmill {
namespace {

// Gemma 4's layout in small: sliding layers (0, 1, 3, 4) of head 16 and full ones (2, 5) of
// head 32; layers 3 to 5 store nothing, reading layer 1's (sliding) or 2's (full) KV.
ModelConfig SharedConfig() {
  ModelConfig c;
  c.arch_name = "test";
  c.n_layers = 6;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.n_rot = 32;
  c.n_ff = 64;
  c.sliding_window = 8;
  c.sliding_layers = {true, true, false, true, true, false};
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const bool sliding = c.sliding_layers[static_cast<size_t>(layer)];
    c.layer_shapes.push_back({sliding ? 16 : 32, 2, sliding ? 16 : 32, 64});
  }
  c.kv_source_layers = {0, 1, 2, 1, 1, 2};
  return c;
}

TEST(KvSharingTest, OnlyStoringLayersOwnMemoryAndReadersGetTheirSourcesView) {
  const ModelConfig c = SharedConfig();
  ASSERT_TRUE(CheckLayerShapes(c).ok()) << CheckLayerShapes(c).ToString();
  ASSERT_TRUE(CheckKvGroupShapes(c).ok());
  ASSERT_EQ(NumKvGroups(c), 2);
  const int64_t full_blocks = 7, sliding_blocks = 3;
  KvCacheStorage storage(c, KvType::kInt8, std::vector<int64_t>{full_blocks, sliding_blocks}, 4);
  const KvCacheView view = storage.view();
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const KvCacheView own = view.Layer(layer);
    const KvCacheView source = view.Layer(c.KvSourceLayer(layer));
    EXPECT_EQ(own.k, source.k) << layer;
    EXPECT_EQ(own.v_scale, source.v_scale) << layer;
    EXPECT_EQ(own.head_dim, c.Shape(layer).head_dim) << layer;
    EXPECT_EQ(own.num_blocks, c.IsSlidingLayer(layer) ? sliding_blocks : full_blocks) << layer;
  }
  // The storing layers' memory is their own.
  EXPECT_NE(view.Layer(0).k, view.Layer(1).k);
  EXPECT_NE(view.Layer(1).k, view.Layer(2).k);
  // Bytes a token: K and V of 2 KV heads in the 3 storing layers only, int8 with a float scale
  // a row: sliding (16 + 4) x 2 x 2 twice, full (32 + 4) x 2 x 2 once.
  EXPECT_EQ(KvBytesPerToken(c, KvType::kInt8, KvType::kInt8), 2 * 80 + 144);
  EXPECT_EQ(KvBytesPerToken(c, KvType::kInt8, KvType::kInt8, /*group=*/1), 2 * 80);
  EXPECT_EQ(KvBytesPerToken(c, KvType::kF16, KvType::kF16, /*group=*/0), 2 * 2 * 32 * 2);
  EXPECT_EQ(NumStoringLayersInKvGroup(c, 1), 2);
  EXPECT_EQ(NumLayersInKvGroup(c, 1), 4);
}

TEST(KvSharingTest, ImpossibleSharingIsRefusedNamingTheLayer) {
  const auto refusal = [](const ModelConfig& c) {
    return std::string(CheckLayerShapes(c).message());
  };
  ModelConfig later = SharedConfig();
  later.kv_source_layers = {0, 4, 2, 1, 4, 2};  // layer 1 reads a later layer
  EXPECT_NE(refusal(later).find("layer 1 reads the KV of layer 4"), std::string::npos);
  ModelConfig other_kind = SharedConfig();
  other_kind.kv_source_layers[3] = 2;  // a sliding layer reading a full one
  EXPECT_NE(refusal(other_kind).find("layer 3 reads the KV of layer 2"), std::string::npos);
  ModelConfig chained = SharedConfig();
  chained.kv_source_layers[4] = 3;  // layer 3 stores nothing to read
  EXPECT_NE(refusal(chained).find("layer 4 reads the KV of layer 3"), std::string::npos);
  ModelConfig short_list = SharedConfig();
  short_list.kv_source_layers.pop_back();
  EXPECT_NE(refusal(short_list).find("the KV sharing has 5 entries for 6 layers"),
            std::string::npos);
  ModelConfig too_wide = SharedConfig();
  too_wide.layer_shapes[0].head_dim = 64;  // larger than the model's head_dim
  EXPECT_NE(refusal(too_wide).find("layer 0 has impossible sizes"), std::string::npos);
  // Storing layers of one group must share one KV shape: each group's pool assumes it.
  ModelConfig mixed = SharedConfig();
  mixed.layer_shapes[1].n_kv_heads = 1;
  mixed.kv_source_layers = {0, 1, 2, 3, 4, 5};
  ASSERT_TRUE(CheckLayerShapes(mixed).ok());
  EXPECT_EQ(CheckKvGroupShapes(mixed).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tokenmill
