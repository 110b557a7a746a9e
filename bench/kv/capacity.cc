// KV capacity by cache type: for a fixed --kv-cache-memory, how many sequences of
// --seq-tokens tokens fit at once. The prediction comes from the engine's block count
// (blocks / ceil(seq_tokens / block_size)); then it is confirmed by running: predicted + 1
// requests (random prompt ids, greedy, ignore_eos) are submitted at once to an engine with
// no sequence limit, and the peak number running together and the preemptions are
// reported. One JSON line per KV type.
//
//   build/bin/tokenmill_kv_capacity --model models/SmolLM2-135M-Instruct.Q4_1.gguf
//       --kv-cache-memory 128MiB --seq-tokens 1024 --kv-types f16,int8 --threads 2
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/byte_size.h"
#include "common/logging.h"
#include "engine/engine.h"

namespace tokenmill {
namespace {

struct Options {
  std::string model_path;
  std::string kv_cache_memory = "128MiB";
  std::vector<std::string> kv_types = {"f16", "int8"};
  int seq_tokens = 1024;
  int max_tokens = 16;  // generated per request; the prompt is seq_tokens - max_tokens
  int threads = 2;
  bool run = true;
};

StatusOr<nlohmann::json> Measure(const Model& model, const Tokenizer& tokenizer, const Options& o,
                                 KvType type, int64_t kv_bytes) {
  EngineConfig config;
  config.kv_type = type;
  config.kv_cache_bytes = kv_bytes;
  config.num_threads = o.threads;
  config.scheduler.max_num_seqs = 1 << 20;
  TM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, tokenizer, config));
  const int blocks = engine->Stats().num_kv_blocks;
  const int blocks_per_seq = (o.seq_tokens + config.block_size - 1) / config.block_size;
  const int predicted = blocks / blocks_per_seq;
  nlohmann::json out = {{"kv_type", KvTypeName(type)},
                        {"kv_cache_memory", o.kv_cache_memory},
                        {"kv_blocks", blocks},
                        {"block_size", config.block_size},
                        {"seq_tokens", o.seq_tokens},
                        {"predicted_concurrent_seqs", predicted}};
  if (!o.run) return out;

  const int n = predicted + 1;
  std::mt19937 rng(7);
  std::uniform_int_distribution<TokenId> pick(3, tokenizer.vocab_size() - 1);
  std::vector<std::unique_ptr<OutputStream>> streams;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    streams.push_back(std::make_unique<OutputStream>());
    GenerateRequest r;
    r.prompt_token_ids.resize(static_cast<size_t>(o.seq_tokens - o.max_tokens));
    for (TokenId& t : r.prompt_token_ids) t = pick(rng);
    r.sampling.max_tokens = o.max_tokens;
    r.sampling.ignore_eos = true;
    r.sink = streams.back()->Sink();
    TM_RETURN_IF_ERROR(engine->Submit(std::move(r)).status());
  }
  int peak_running = 0, peak_blocks_in_use = 0, finished = 0;
  for (auto& stream : streams) {
    while (true) {
      std::optional<GenerateOutput> event = stream->NextFor(std::chrono::milliseconds(2));
      const EngineStats s = engine->Stats();
      peak_running = std::max(peak_running, s.num_running);
      peak_blocks_in_use = std::max(peak_blocks_in_use, s.num_kv_blocks_in_use);
      if (!event || !event->finished) continue;
      if (event->finish_reason != CompletionReason::kLength) {
        return InternalError("a request ended with " +
                             std::string(CompletionReasonName(*event->finish_reason)));
      }
      ++finished;
      break;
    }
  }
  engine->Shutdown();
  out["requests"] = n;
  out["finished"] = finished;
  out["peak_running"] = peak_running;
  out["peak_kv_blocks_in_use"] = peak_blocks_in_use;
  out["preemptions"] = engine->Stats().num_preemptions;
  out["wall_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

int Run(const Options& o) {
  auto fail = [](const Status& s) {
    std::cerr << "error: " << s.ToString() << "\n";
    return 1;
  };
  if (o.max_tokens < 1 || o.seq_tokens <= o.max_tokens) {
    return fail(InvalidArgumentError("--max-tokens must be in [1, --seq-tokens)"));
  }
  StatusOr<int64_t> kv_bytes = ParseByteSize(o.kv_cache_memory);
  if (!kv_bytes.ok()) return fail(kv_bytes.status());
  StatusOr<std::unique_ptr<Model>> model = Model::Load(o.model_path);
  if (!model.ok()) return fail(model.status());
  StatusOr<Tokenizer> tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return fail(tokenizer.status());
  for (const std::string& name : o.kv_types) {
    StatusOr<KvType> type = ParseKvType(name);
    if (!type.ok()) return fail(type.status());
    StatusOr<nlohmann::json> result = Measure(**model, *tokenizer, o, *type, *kv_bytes);
    if (!result.ok()) return fail(result.status());
    std::cout << result->dump() << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  tokenmill::Options o;
  CLI::App app("KV cache capacity by cache type: predicted from the block count, then run");
  app.add_option("--model", o.model_path, "GGUF file")->required();
  app.add_option("--kv-cache-memory", o.kv_cache_memory, "KV pool size (default 128MiB)");
  app.add_option("--kv-types", o.kv_types, "KV cache types (default f16,int8)")->delimiter(',');
  app.add_option("--seq-tokens", o.seq_tokens, "tokens per sequence, prompt + generated (1024)");
  app.add_option("--max-tokens", o.max_tokens, "generated tokens per sequence (default 16)");
  app.add_option("--threads", o.threads, "CPU threads of the forward pass (default 2)");
  app.add_flag("!--no-run", o.run, "only predict from the block count");
  CLI11_PARSE(app, argc, argv);
  // The engine's log (its KV plan) on stderr: stdout holds the results.
  (void)tokenmill::SetupLogging("info");
  return tokenmill::Run(o);
}
