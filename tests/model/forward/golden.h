// Reads the golden files of tests/data/logits/ (written by
// tests/reference/make_logits_golden.py from llama.cpp and the NumPy reference).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  // The NumPy reference's logits after each prompt token, at sampled ids and its top ids.
  std::vector<SparseLogits> numpy_logits;
};

struct Golden {
  std::string model_file;
  // Of these prompts' continuations (llama.cpp fed one token at a time), how many llama.cpp
  // itself reproduces when run its default way, the prompt in one batch (-1 when the file
  // does not say).
  int llama_cpp_self_agreement = -1;
  std::vector<GoldenPrompt> prompts;
};

Golden LoadGolden(const std::string& model_stem);

// The greedy token of a logits row: the first largest.
int32_t Argmax(const float* logits, int64_t n_vocab);

// How far llama.cpp's logit for `token` lies below its best one where it chose generated
// token `i` of p's continuation (INFINITY where `token` is not among its top logits): a
// divergence with a small gap is a near-tie that a different valid rounding may flip.
float LlamaCppGap(const GoldenPrompt& p, size_t i, int32_t token);

// A gtest parameter name for a golden stem: its letters and digits, '_' for the rest.
std::string TestNameOfStem(const std::string& stem);

}  // namespace tokenmill::testing
