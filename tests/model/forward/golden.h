// Reads the golden files of tests/data/logits/ (written by
// tests/reference/make_logits_golden.py from llama.cpp and the NumPy reference, and
// make_requantized_golden.py from llama.cpp alone), and checks greedy continuations
// against them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "model/model.h"

namespace tokenmill::testing {

struct SparseLogits {
  std::vector<int32_t> ids;
  std::vector<float> values;
};

struct GoldenPrompt {
  std::string text;
  std::vector<int32_t> prompt_tokens;   // llama.cpp's tokenization
  std::vector<int32_t> continuation;    // llama.cpp's greedy tokens (stops before EOS)
  // llama.cpp's top logits after each token of prompt + continuation.
  std::vector<SparseLogits> llama_cpp_top;
  // The NumPy reference's logits after each prompt token, at sampled ids and its top ids
  // (empty where the golden has none).
  std::vector<SparseLogits> numpy_logits;
};

struct Golden {
  std::string model_file;
  // Of these prompts' continuations (llama.cpp fed one token at a time), how many llama.cpp
  // itself reproduces when run its default way, the prompt in one batch (-1 when the file
  // does not say).
  int llama_cpp_self_agreement = -1;
  // The file's tensor types and how many tensors of each (empty where the golden does not say).
  std::map<std::string, int> tensor_types;
  std::vector<GoldenPrompt> prompts;
};

Golden LoadGolden(const std::string& model_stem);

// The NumPy reference's logits of the golden's first prompt with every weight product over
// bf16 operands, as the CUDA pass's cuBLAS path rounds them (<stem>.bf16.json, written by
// tests/reference/make_bf16_logits_golden.py), at the golden's numpy_logits ids.
std::vector<SparseLogits> LoadBf16Logits(const std::string& model_stem);

// The greedy token of a logits row: the first largest.
int32_t Argmax(const float* logits, int64_t n_vocab);

// How far llama.cpp's logit for `token` lies below its best one where it chose generated
// token `i` of p's continuation (INFINITY where `token` is not among its top logits): a
// divergence with a small gap is a near-tie that a different valid rounding may flip.
float LlamaCppGap(const GoldenPrompt& p, size_t i, int32_t token);

// A gap between llama.cpp's two best logits below this is a near-tie: a different but
// equally valid rounding (int8 activations, f16 KV, summation order) may flip it.
inline constexpr float kNearTie = 0.25f;

// Runs each prompt and then its greedy continuation one decode step per token, as llama.cpp
// produced it, until ours differs. A divergence must be at a near-tie of llama.cpp's, a gap
// below `near_tie` (gtest failures otherwise); prints each one under `label`. Returns how many
// continuations are identical.
int CheckGreedyContinuations(const Model& model, const CpuContext& ctx, const Golden& golden,
                             const std::string& label, float near_tie = kNearTie);

// A gtest parameter name for a golden stem: its letters and digits, '_' for the rest.
std::string TestNameOfStem(const std::string& stem);

}  // namespace tokenmill::testing
