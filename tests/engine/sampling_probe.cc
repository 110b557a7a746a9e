// A test helper for test_sampling_numpy.py: reads one logits row, a sequence's tokens and
// sampling parameters as JSON on stdin and prints, as JSON, the Sampler's processed
// distribution (ComputeProbs), `num_draws` tokens drawn with seeds 0..num_draws-1, and
// the logprobs of the first draw.
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"

namespace tokenmill {
namespace {

SamplingParams ParseParams(const nlohmann::json& j) {
  SamplingParams p;
  p.temperature = j.value("temperature", 0.0f);
  p.top_k = j.value("top_k", 0);
  p.top_p = j.value("top_p", 1.0f);
  p.min_p = j.value("min_p", 0.0f);
  p.repetition_penalty = j.value("repetition_penalty", 1.0f);
  p.presence_penalty = j.value("presence_penalty", 0.0f);
  p.frequency_penalty = j.value("frequency_penalty", 0.0f);
  p.min_tokens = j.value("min_tokens", 0);
  p.ignore_eos = j.value("ignore_eos", false);
  p.stop_token_ids = j.value("stop_token_ids", std::vector<TokenId>{});
  for (const auto& pair : j.value("logit_bias", nlohmann::json::array())) {
    p.logit_bias.emplace_back(pair[0].get<TokenId>(), pair[1].get<float>());
  }
  p.top_logprobs = j.value("top_logprobs", 0);
  p.logprobs = true;
  return p;
}

int Run() {
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  const nlohmann::json in = nlohmann::json::parse(input);
  const std::vector<float> logits = in.at("logits").get<std::vector<float>>();
  const std::vector<TokenId> prompt = in.at("prompt").get<std::vector<TokenId>>();
  const std::vector<TokenId> output = in.at("output").get<std::vector<TokenId>>();
  SamplingParams params = ParseParams(in.at("params"));
  Sampler sampler(in.value("eos", std::vector<TokenId>{}));
  SamplingContext context{.params = &params, .prompt_token_ids = prompt,
                          .output_token_ids = output};

  std::vector<float> probs(logits.size());
  sampler.ComputeProbs(logits, context, probs);
  nlohmann::json out;
  out["probs"] = probs;
  std::vector<TokenId> draws;
  const int num_draws = in.value("num_draws", 0);
  nlohmann::json logprobs;
  for (int i = 0; i < num_draws; ++i) {
    params.seed = static_cast<uint64_t>(i);
    const SampledToken token = sampler.Sample(logits, context);
    draws.push_back(token.token_id);
    if (i == 0) {
      logprobs["chosen"] = {token.logprobs->chosen.token_id, token.logprobs->chosen.logprob};
      logprobs["top"] = nlohmann::json::array();
      for (const TokenLogprob& t : token.logprobs->top) {
        logprobs["top"].push_back({t.token_id, t.logprob});
      }
    }
  }
  out["draws"] = draws;
  out["logprobs"] = logprobs;
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main() { return tokenmill::Run(); }
