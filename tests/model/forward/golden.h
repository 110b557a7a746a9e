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

}  // namespace tokenmill::testing
