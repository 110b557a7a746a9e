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
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace tokenmill {

// How the pairs are kept for the kernels: kF32 keeps the file's values (A in f32, as llama.cpp
// multiplies an f32 adapter; B in f16 where the file has it so, else f32: exact either way).
// kQ8_0 keeps A in Q8_0 rows (llama.cpp's quantize_row_q8_0: a quarter of f32's bytes and the
// int8 dot products of the base matrices; A·x then differs from the f32 one by the rounding of A
// and x to 8 bits) and B in f16 (B·(A·x) reads each adapter's B once a step: half the bytes).
enum class LoraWeights { kF32, kQ8_0 };

// The pair as the blocks take it: A as a matrix of the kernels (rank rows of the base matrix's
// inputs), B transposed (rank rows of the base matrix's outputs), so that B·(A·x) is rank
// scaled row additions: B's rows are rank long, too short for dot products to pay.
struct LoraPair {
  WeightMatrix a;
  // Bᵀ, rank x outputs, row-major: in f32, or (b_transposed empty) in f16.
  std::span<const float> b_transposed;
  std::span<const uint16_t> b_transposed_f16;
  int64_t rank = 0;
  float scale = 1.0f;

  // Bᵀ's first byte: the pair's identity.
  const void* b_data() const {
    return b_transposed.empty() ? static_cast<const void*>(b_transposed_f16.data())
                                : static_cast<const void*>(b_transposed.data());
  }
};

class LoraAdapter {
 public:
  // The adapter at `path` for `base` (which must outlive it).
  static StatusOr<std::unique_ptr<LoraAdapter>> Load(const std::string& path, const Model& base,
                                                     LoraWeights weights = LoraWeights::kF32);

  // The pair that adapts the base matrix `w` (one of base.weights()' or base.cpu_weights'
  // matrices: both layouts map to it); null where the adapter leaves it as it is.
  const LoraPair* Find(const WeightMatrix& w) const;
  int num_pairs() const { return num_pairs_; }
  // Every pair by the data of the base matrix it adapts; a pair is there once for each of its
  // base matrix's layouts (base.weights()' and base.cpu_weights').
  const std::unordered_map<const uint8_t*, LoraPair>& pairs_by_base() const {
    return by_base_data_;
  }
  const GgufFile& file() const { return file_; }

 private:
  explicit LoraAdapter(GgufFile file) : file_(std::move(file)) {}
  // `w` in `weights`' type (for Q8_0, its cols a multiple of 32), kept in converted_.
  WeightMatrix Converted(const WeightMatrix& w, LoraWeights weights);
  // `w` transposed, kept in converted_: in f32 into pair.b_transposed, or in f16 into
  // pair.b_transposed_f16.
  void Transposed(const WeightMatrix& w, bool f16, LoraPair& pair);

  GgufFile file_;
  std::vector<std::vector<uint8_t>> converted_;  // the pairs' matrices point into these
  std::unordered_map<const uint8_t*, LoraPair> by_base_data_;
  int num_pairs_ = 0;
};

}  // namespace tokenmill
