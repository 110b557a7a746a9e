// A loaded model: the mapped GGUF file, its family, config and weight views, and the CPU's
// copy of its matrices in the row-group layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace tokenmill {

// How cpu_weights() lays out the matrices. kFastest: Q4_1, Q8_0, Q5_0 and (with AVX-512 VNNI)
// Q4_K and Q6_K regrouped (see cpu_weights()). kAsInFile: every matrix as the file holds it,
// so that every quantized matmul sums in llama.cpp's vec_dot order (the requantized goldens
// test the weight types that way).
enum class CpuWeightLayout { kFastest, kAsInFile };

// How a model is loaded.
struct ModelOptions {
  CpuWeightLayout layout = CpuWeightLayout::kFastest;
  // The context it is served with (the server's --max-model-len); 0: the file's
  // context_length. LongRoPE models take their long or short factors by it, as llama.cpp does by
  // the context it is given.
  int context = 0;
};

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& path,
                                               const ModelOptions& options = {});
  // Builds a model over an already opened file (the tokenizer may share it).
  static StatusOr<std::unique_ptr<Model>> FromFile(GgufFile file,
                                                   const ModelOptions& options = {});

  const GgufFile& file() const { return file_; }
  // How this model loads and composes its layers (model/arch/family.h).
  const ModelFamily& family() const { return *family_; }
  const ModelConfig& config() const { return config_; }
  // The file's views, as the file lays them out: for the CUDA upload, the embedding lookup
  // and anything that dequantizes rows (MatmulReference).
  const ModelWeights& weights() const { return weights_; }
  // What the CPU forward pass multiplies by: weights() with every layer matrix and output
  // matrix whose type has row groups (RegroupRows, RowGroupsPay: kernels/cpu/row_groups.h)
  // regrouped 16 rows at a time (WeightLayout::kRowGroups16), the layout of the CPU's fastest
  // kernels for them (Q4_1/Q8_0: ~2.2x ggml's order at 16 tokens, the results differ from
  // llama.cpp's in the last bits; Q5_0, Q4_K, Q6_K: ggml's order bit for bit). token_embd
  // stays the file's (the embedding lookup reads rows), so a tied output is copied apart.
  // The copies are made once at load (cpu_copy_bytes(); SmolLM2-135M Q4_1: 92 MiB), and the
  // file's pages they were read from leave the resident set (GgufFile::ReleasePages), so a
  // loaded model stays about the file's size in RAM.
  const ModelWeights& cpu_weights() const { return cpu_weights_; }
  // Bytes of the regrouped copies held for cpu_weights().
  int64_t cpu_copy_bytes() const;

  // One matrix's regrouped copy (cpu_weights() points into it).
  struct RegroupedCopy {
    std::unique_ptr<uint8_t[]> bytes;
    int64_t size;
  };

 private:
  explicit Model(GgufFile file) : file_(std::move(file)) {}

  GgufFile file_;
  const ModelFamily* family_ = nullptr;
  ModelConfig config_;
  ModelWeights weights_;
  ModelWeights cpu_weights_;
  // One buffer per regrouped matrix; cpu_weights_ points into them.
  std::vector<RegroupedCopy> regrouped_;
};

}  // namespace tokenmill
