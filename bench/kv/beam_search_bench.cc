// What beam search costs in KV memory and time, against the same number of independent
// sequences: one request of --prompt-tokens random ids decoded --max-tokens tokens (EOS
// ignored) as a beam search of width W, and as n = W sampled sequences (temperature 1), each
// on a fresh engine stepped on this thread. Reports the peak KV blocks in use (beams share
// their prefix blocks by reference; forks copy only a partial block), the blocks a step
// copied, the wall time and the generated tokens per second. One JSON line per (mode, W).
//
//   build/bin/tokenmill_beam_search_bench --model models/SmolLM2-135M-Instruct.Q4_1.gguf
//       --prompt-tokens 512 --max-tokens 64 --widths 1,2,4,8 --threads 2
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "engine/engine_core_builder.h"

namespace tokenmill {
namespace {

struct Options {
  std::string model_path;
  int prompt_tokens = 512;
  int max_tokens = 64;
  std::vector<int> widths = {1, 2, 4, 8};
  int threads = 2;
};

StatusOr<nlohmann::json> Measure(const Model& model, const Tokenizer& tokenizer,
                                 const Options& o, int width, bool beam) {
  EngineConfig config;
  config.num_threads = o.threads;
  config.kv_cache_bytes = int64_t{1} << 30;
  TM_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core,
                      BuildEngineCore(model, tokenizer, config, nullptr));
  std::mt19937 rng(7);
  std::uniform_int_distribution<TokenId> pick(3, tokenizer.vocab_size() - 1);
  GenerateRequest request;
  request.prompt_token_ids.resize(static_cast<size_t>(o.prompt_tokens));
  for (TokenId& t : request.prompt_token_ids) t = pick(rng);
  request.sampling.max_tokens = o.max_tokens;
  request.sampling.ignore_eos = true;
  request.n = width;
  if (beam) {
    request.beam_search = BeamSearchParams{};
  } else {
    request.sampling.temperature = 1.0f;
    request.sampling.seed = 1;
  }
  int64_t generated = 0;
  request.sink = [&generated](GenerateOutput&& out) {
    generated += static_cast<int64_t>(out.token_ids.size());
  };
  TM_RETURN_IF_ERROR(core->Add(1, std::move(request)));
  int peak_blocks = 0;
  int64_t steps = 0;
  const auto start = std::chrono::steady_clock::now();
  while (core->has_unfinished_requests()) {
    if (!core->Step()) return InternalError("a step could run nothing");
    ++steps;
    peak_blocks = std::max(peak_blocks, core->kv_cache().Stats().num_in_use_blocks);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TM_RETURN_IF_ERROR(core->CheckIdle());
  return nlohmann::json{{"mode", beam ? "beam" : "sampled"},
                        {"width", width},
                        {"prompt_tokens", o.prompt_tokens},
                        {"max_tokens", o.max_tokens},
                        {"peak_kv_blocks_in_use", peak_blocks},
                        {"steps", steps},
                        {"preemptions", core->Stats().num_preemptions},
                        {"wall_seconds", seconds},
                        {"generated_tokens", generated},
                        {"tokens_per_second", static_cast<double>(generated) / seconds}};
}

int Run(const Options& o) {
  auto fail = [](const Status& s) {
    std::cerr << "error: " << s.ToString() << "\n";
    return 1;
  };
  StatusOr<std::unique_ptr<Model>> model = Model::Load(o.model_path);
  if (!model.ok()) return fail(model.status());
  StatusOr<Tokenizer> tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return fail(tokenizer.status());
  for (const int width : o.widths) {
    for (const bool beam : {true, false}) {
      StatusOr<nlohmann::json> result = Measure(**model, *tokenizer, o, width, beam);
      if (!result.ok()) return fail(result.status());
      std::cout << result->dump() << std::endl;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  tokenmill::Options o;
  CLI::App app("Beam search against as many sampled sequences: KV blocks and time");
  app.add_option("--model", o.model_path, "GGUF file")->required();
  app.add_option("--prompt-tokens", o.prompt_tokens, "random prompt ids (default 512)");
  app.add_option("--max-tokens", o.max_tokens, "generated tokens (default 64)");
  app.add_option("--widths", o.widths, "beam widths = sequences (default 1,2,4,8)")
      ->delimiter(',');
  app.add_option("--threads", o.threads, "CPU threads of the forward pass (default 2)");
  CLI11_PARSE(app, argc, argv);
  // The engine's log (its KV plan) on stderr: stdout holds the results.
  (void)tokenmill::SetupLogging("info");
  return tokenmill::Run(o);
}
