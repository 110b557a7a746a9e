// A llama-architecture GGUF with random quantized weights, written where it is needed (a GPU
// machine cannot be brought an 8B model): Llama-3-8B's shapes by default, deterministic from a
// seed. For benchmarks, which feed token ids; a tokenizer only if taken from another file
// (vocab_from). Weights are scaled like a
// trained model's (std ~0.02, norms 1), so activations stay finite through every layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/tensor_type.h"

namespace tokenmill::bench {

struct SyntheticShape {
  int n_layers = 32;
  int n_embd = 4096;
  int n_heads = 32;
  int n_kv_heads = 8;
  int n_ff = 14336;
  int n_vocab = 128256;
  int context_length = 8192;
};

struct SyntheticModelSpec {
  SyntheticShape shape;  // Llama-3-8B's
  // The layer matrices and token_embd; output.weight is Q8_0 (Q6_K beside Q4_K, as in
  // llama.cpp's Q4_K_M), as llama.cpp keeps the output at higher precision. Q4_0, Q5_0, Q5_1,
  // IQ4_NL or Q8_0 (block-32 types the CUDA forward pass runs), or Q4_K (the CPU's; --embd and
  // --ff multiples of 256).
  TensorType matrix_type = TensorType::kQ4_0;
  uint64_t seed = 1;
  // A GGUF whose tokenizer.* keys the model takes (a vocabulary-only file such as llama.cpp's
  // ggml-vocab-llama-bpe.gguf, Llama 3's 128256 tokens), so that engines that need a tokenizer
  // (llama.cpp's, the server's) load it; its token count must equal shape.n_vocab. Empty: none.
  std::string vocab_from;
};

struct SyntheticTensor {
  std::string name;
  TensorType type;
  std::vector<uint64_t> shape;  // GGUF order: columns first
  uint64_t bytes;
};

// The tensors of `spec` in file order, or InvalidArgument naming the setting to change.
StatusOr<std::vector<SyntheticTensor>> SyntheticTensors(const SyntheticModelSpec& spec);

// Writes the model to `path` (streamed: memory stays a row's worth whatever the size).
Status WriteSyntheticModel(const SyntheticModelSpec& spec, const std::string& path);

}  // namespace tokenmill::bench
