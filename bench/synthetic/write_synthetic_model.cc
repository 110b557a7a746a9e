// Writes a llama GGUF with random Q4_0, Q5_0, Q5_1, IQ4_NL, Q8_0 or Q4_K weights
// (bench/synthetic/synthetic_model.h): Llama-3-8B's shapes unless told otherwise. The GPU
// bundle's `run` makes its benchmark models with it on the GPU machine.
//   tokenmill_synthetic_model --out llama3-8b-q4_0.gguf [--type q8_0] [--seed 7] [--layers 2]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <utility>

#include "bench/synthetic/synthetic_model.h"

int main(int argc, char** argv) {
  using namespace tokenmill;
  CLI::App app{"write a llama GGUF with random quantized weights (Llama-3-8B shapes by default)"};
  bench::SyntheticModelSpec spec;
  bench::SyntheticShape& s = spec.shape;
  std::string out, type_name = "q4_0";
  app.add_option("--out", out, "the GGUF file to write")->required();
  app.add_option("--type", type_name,
                 "q4_0, q5_0, q5_1, iq4_nl or q8_0 (output.weight q8_0), or q4_k (output q6_k)");
  app.add_option("--seed", spec.seed, "the same seed writes the same bytes");
  app.add_option("--vocab-from", spec.vocab_from,
                 "take the tokenizer.* keys of this GGUF (its token count must equal --vocab)");
  app.add_option("--layers", s.n_layers, "blocks")->capture_default_str();
  app.add_option("--embd", s.n_embd, "embedding width")->capture_default_str();
  app.add_option("--heads", s.n_heads, "query heads")->capture_default_str();
  app.add_option("--kv-heads", s.n_kv_heads, "KV heads")->capture_default_str();
  app.add_option("--ff", s.n_ff, "feed-forward width")->capture_default_str();
  app.add_option("--vocab", s.n_vocab, "vocabulary (rows of token_embd and output)")
      ->capture_default_str();
  app.add_option("--context", s.context_length, "llama.context_length")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const std::pair<const char*, TensorType> types[] = {
      {"q4_0", TensorType::kQ4_0},  {"q5_0", TensorType::kQ5_0},   {"q5_1", TensorType::kQ5_1},
      {"iq4_nl", TensorType::kIQ4_NL}, {"q8_0", TensorType::kQ8_0},  {"q4_k", TensorType::kQ4_K}};
  const auto* found = std::find_if(std::begin(types), std::end(types),
                                   [&](const auto& t) { return type_name == t.first; });
  if (found == std::end(types)) {
    std::fprintf(stderr, "error: --type %s: use q4_0, q5_0, q5_1, iq4_nl, q8_0 or q4_k\n",
                 type_name.c_str());
    return 2;
  }
  spec.matrix_type = found->second;
  const auto start = std::chrono::steady_clock::now();
  if (Status st = bench::WriteSyntheticModel(spec, out); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s (%s, seed %llu) in %.1f s\n", out.c_str(), type_name.c_str(),
              static_cast<unsigned long long>(spec.seed), seconds);
  return 0;
}
