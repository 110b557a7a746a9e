#include "tests/engine/engine_test_util.h"

#include <mutex>
#include <random>

#include "common/check.h"
#include "tests/test_paths.h"

namespace tokenmill::testing {

const TestModel& LoadTestModel(const std::string& file) {
  static std::mutex mutex;
  static std::map<std::string, TestModel>* models = new std::map<std::string, TestModel>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = models->find(file);
  if (it == models->end()) {
    auto model = Model::Load(TestModelsDir() + "/" + file);
    TM_CHECK(model.ok()) << model.status().ToString();
    auto tokenizer = Tokenizer::FromGguf((*model)->file());
    TM_CHECK(tokenizer.ok()) << tokenizer.status().ToString();
    it = models
             ->emplace(file, TestModel{std::move(*model),
                                       std::make_unique<Tokenizer>(std::move(*tokenizer))})
             .first;
  }
  return it->second;
}

void Accumulate(Collected& collected, GenerateOutput&& out) {
  TM_CHECK(!collected.finished) << "event after the final one for request " << out.id;
  ++collected.num_events;
  collected.token_ids.insert(collected.token_ids.end(), out.token_ids.begin(),
                             out.token_ids.end());
  collected.logprobs.insert(collected.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
  if (!out.prompt_logprobs.empty()) {
    collected.prompt_logprobs.insert(collected.prompt_logprobs.end(),
                                     out.prompt_logprobs.begin(), out.prompt_logprobs.end());
    collected.num_tokens_before_prompt_logprobs_done =
        static_cast<int>(collected.token_ids.size());
  }
  collected.text += out.text;
  if (out.finished) {
    collected.finished = true;
    collected.final_event = std::move(out);
  }
}

OutputSink Collector::Sink(RequestId id) {
  requests_[id];
  return [this](GenerateOutput&& out) { Accumulate(requests_.at(out.id), std::move(out)); };
}

std::vector<TokenId> RandomPrompt(int length, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> pick(3, vocab - 1);
  std::vector<TokenId> prompt(static_cast<size_t>(length));
  for (TokenId& t : prompt) t = pick(rng);
  return prompt;
}

GenerateRequest Greedy(std::vector<TokenId> prompt, int max_tokens, OutputSink sink,
                       bool ignore_eos) {
  GenerateRequest request;
  request.prompt_token_ids = std::move(prompt);
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = ignore_eos;
  request.sink = std::move(sink);
  return request;
}

EngineConfig SmallConfig(int num_kv_blocks) {
  EngineConfig config;
  config.num_kv_blocks = num_kv_blocks;
  config.num_threads = 1;
#ifdef TOKENMILL_TEST_ON_CUDA
  config.device = Device::kCuda;  // engine_cuda_test: the same tests on the GPU
#endif
  return config;
}

std::unique_ptr<EngineCore> NewCore(const TestModel& model, const EngineConfig& config) {
  auto core = BuildEngineCore(*model.model, *model.tokenizer, config);
  TM_CHECK(core.ok()) << core.status().ToString();
  return std::move(*core);
}

bool RunToCompletion(EngineCore& core, int max_steps) {
  for (int i = 0; i < max_steps && core.has_unfinished_requests(); ++i) {
    if (!core.Step()) return false;
    const Status invariants = core.scheduler().CheckInvariants();
    TM_CHECK(invariants.ok()) << invariants.ToString();
  }
  return !core.has_unfinished_requests();
}

}  // namespace tokenmill::testing
