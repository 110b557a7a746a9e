// A LoRA adapter in llama.cpp's GGUF form (general.type "adapter", adapter.type "lora",
// adapter.lora.alpha; convert_lora_to_gguf.py writes it): for each base matrix it adapts, a
// pair <name>.lora_a (rank rows of the matrix's inputs) and <name>.lora_b (its outputs' rows of
// rank), so that W·x becomes W·x + scale · B·(A·x), scale = alpha / rank (alpha 0: 1), as
// llama.cpp's build_lora_mm. The attention and feed-forward matrices of every layer and the
// output head may be adapted; an adapter of anything else (embeddings, experts, fused
// tensors), of another architecture or shape, or an aLoRA file
// (adapter.alora.invocation_tokens) is refused by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace tokenmill {

// The pair as the kernels take it: f32, the rank padded with zeros to a multiple of 32 (A's
// extra rows and B's extra columns zero), so that B's short rows run on the SIMD path too.
struct LoraPair {
  WeightMatrix a;  // padded rank rows of the base matrix's cols
  WeightMatrix b;  // the base matrix's rows, of the padded rank
  float scale = 1.0f;
};

class LoraAdapter {
 public:
  // The adapter at `path` for `base` (which must outlive it).
  static StatusOr<std::unique_ptr<LoraAdapter>> Load(const std::string& path, const Model& base);

  // The pair that adapts the base matrix `w` (one of base.weights()' or base.cpu_weights'
  // matrices: both layouts map to it); null where the adapter leaves it as it is.
  const LoraPair* Find(const WeightMatrix& w) const;
  int num_pairs() const { return num_pairs_; }
  const GgufFile& file() const { return file_; }

 private:
  explicit LoraAdapter(GgufFile file) : file_(std::move(file)) {}
  // `w` (rows x cols at most) in f32, zero-padded to rows x cols, kept in padded_.
  WeightMatrix Padded(const WeightMatrix& w, int64_t rows, int64_t cols);

  GgufFile file_;
  std::vector<std::vector<float>> padded_;  // the pairs' matrices point into these
  std::unordered_map<const uint8_t*, LoraPair> by_base_data_;
  int num_pairs_ = 0;
};

}  // namespace tokenmill
