// Shared pieces of the engine tests: the test models (loaded once), requests of random
// prompts, and collecting a request's events.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_core.h"
#include "engine/engine_core_builder.h"
#include "model/model.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill::testing {

struct TestModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// models/<file>, loaded on first use and kept for the test binary's life.
const TestModel& LoadTestModel(const std::string& file);
inline const TestModel& Stories() { return LoadTestModel("stories260K.gguf"); }
inline const TestModel& SmolLm2() { return LoadTestModel("SmolLM2-135M-Instruct.Q4_1.gguf"); }

// Everything a request streamed, concatenated, and its final event.
struct Collected {
  std::vector<TokenId> token_ids;
  std::vector<TokenLogprobs> logprobs;  // when the request asked for them
  std::vector<TokenLogprobs> prompt_logprobs;  // with sampling.prompt_logprobs
  int num_tokens_before_prompt_logprobs_done = -1;  // tokens seen when the last entry came
  std::string text;
  int num_events = 0;
  bool finished = false;
  GenerateOutput final_event;
};
void Accumulate(Collected& collected, GenerateOutput&& out);

// Collects the events of requests driven through an EngineCore on this thread.
class Collector {
 public:
  OutputSink Sink(RequestId id);
  const Collected& operator[](RequestId id) const { return requests_.at(id); }
  bool finished(RequestId id) const { return requests_.at(id).finished; }

 private:
  std::map<RequestId, Collected> requests_;
};

// Collects the events of one request with n sequences (or beam search hypotheses), by index.
class SequenceCollector {
 public:
  OutputSink Sink() {
    return [this](GenerateOutput&& out) { Accumulate(sequences_[out.index], std::move(out)); };
  }
  const Collected& operator[](int index) const { return sequences_.at(index); }
  size_t size() const { return sequences_.size(); }

 private:
  std::map<int, Collected> sequences_;
};

// `length` prompt tokens drawn from [3, vocab) by a generator seeded with `seed`.
std::vector<TokenId> RandomPrompt(int length, int vocab, uint32_t seed);

GenerateRequest Greedy(std::vector<TokenId> prompt, int max_tokens, OutputSink sink,
                       bool ignore_eos = true);

// A config small enough for the test machine: one thread, a fixed KV pool (on the GPU in
// engine_cuda_test).
EngineConfig SmallConfig(int num_kv_blocks = 256);

// An engine core over `model` (CHECKs that it builds).
std::unique_ptr<EngineCore> NewCore(const TestModel& model,
                                    const EngineConfig& config = SmallConfig());
inline const Tokenizer& StoriesTokenizer() { return *Stories().tokenizer; }
inline int StoriesVocab() { return StoriesTokenizer().vocab_size(); }
// Steps until no request is left; false if a step could run nothing meanwhile.
bool RunToCompletion(EngineCore& core, int max_steps = 100000);

}  // namespace tokenmill::testing
