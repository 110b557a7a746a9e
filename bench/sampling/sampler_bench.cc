// The sampler's cost per token on a SmolLM2-sized row (49152 logits, normal * 3) with 200
// prompt and 200 output tokens of history: median microseconds of Sampler::Sample for each
// parameter set. Measured, never asserted (docs/benchmarks.md).
//   build/bin/tokenmill_sampler_bench [--vocab N] [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"

namespace tokenmill {
namespace {

struct Case {
  const char* name;
  SamplingParams params;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  SamplingParams p;
  cases.push_back({"greedy", p});
  p.top_logprobs = 5;
  cases.push_back({"greedy + top_logprobs 5", p});
  p = {};
  p.temperature = 0.8f;
  cases.push_back({"temperature 0.8", p});
  p.top_k = 50;
  cases.push_back({"temperature + top_k 50", p});
  p.top_k = 0;
  p.top_p = 0.95f;
  cases.push_back({"temperature + top_p 0.95", p});
  p.top_p = 1.0f;
  p.min_p = 0.05f;
  cases.push_back({"temperature + min_p 0.05", p});
  p.top_k = 50;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.5f;
  p.logit_bias = {{1, 2.0f}, {2, -2.0f}};
  cases.push_back({"all processors", p});
  return cases;
}

int Run(int argc, char** argv) {
  int vocab = 49152;
  int reps = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--vocab") == 0) vocab = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<TokenId> id(0, vocab - 1);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& l : logits) l = normal(rng);
  std::vector<TokenId> prompt(200), output(200);
  for (TokenId& t : prompt) t = id(rng);
  for (TokenId& t : output) t = id(rng);

  Sampler sampler;
  std::printf("| parameters | median us per token (vocab %d, %d reps) |\n| --- | --- |\n", vocab,
              reps);
  for (Case& c : Cases()) {
    std::vector<double> micros;
    for (int r = 0; r < reps; ++r) {
      c.params.seed = static_cast<uint64_t>(r);
      const SamplingContext context{.params = &c.params, .prompt_token_ids = prompt,
                                    .output_token_ids = output};
      const auto start = std::chrono::steady_clock::now();
      const SampledToken token = sampler.Sample(logits, context);
      const auto end = std::chrono::steady_clock::now();
      if (token.token_id < 0) return 1;
      micros.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    std::nth_element(micros.begin(), micros.begin() + reps / 2, micros.end());
    std::printf("| %s | %.0f |\n", c.name, micros[static_cast<size_t>(reps / 2)]);
  }
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) { return tokenmill::Run(argc, argv); }
