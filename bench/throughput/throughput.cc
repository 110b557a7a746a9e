// Offline throughput of the engine: for each concurrency c, an engine with max_num_seqs = c
// gets N = c x waves requests submitted at once (random prompt ids, greedy, ignore_eos, the
// same max_tokens), and reports output tokens/s over the whole run, aggregate decode
// tokens/s (the tokens after each request's first, over the time from the last first token
// to the end; exact for one wave, where all decode in lockstep), the peak KV usage and the
// preemptions. Runs repeat in rounds over all concurrencies (so load from other processes
// spreads evenly); one JSON line per run, then a table of medians on stderr.
// Decode tokens per CPU second (the process's CPU time over the same interval) stand in for
// tokens/s on a machine that other processes share: time slices lost to them do not count.
// With --threads 1 that is the speed of an idle machine; with more threads, waiting workers
// that spin count too.
// --json-schema FILE constrains every request to that schema (structured output, compiled
// once; it must not let the output end before max_tokens): runs with and without it give the
// cost of the masks.
//
//   build/bin/tokenmill_throughput --model models/SmolLM2-135M-Instruct.Q4_1.gguf
//       --concurrency 1,4,16,32 --prompt-tokens 64 --max-tokens 64 --threads 2

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/cpu_time.h"
#include "common/byte_size.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "engine/grammar_vocabulary.h"
#include "grammar/compiler.h"

namespace tokenmill {
namespace {

struct Options {
  std::string model_path;
  std::vector<int> concurrency = {1, 4, 16, 32};
  int waves = 1;
  int repeats = 3;
  int prompt_tokens = 64;
  int max_tokens = 64;
  int threads = 2;
  std::string kv_cache_memory = "256MiB";
  std::string json_schema_path;  // empty: unconstrained
};

struct Result {
  int concurrency = 0;
  int requests = 0;
  int64_t output_tokens = 0;
  double wall_seconds = 0.0;
  double output_tokens_per_second = 0.0;
  double decode_tokens_per_second = 0.0;
  double decode_tokens_per_cpu_second = 0.0;
  double mean_ttft = 0.0;
  double peak_kv_usage = 0.0;
  int64_t preemptions = 0;
  int64_t steps = 0;  // forward passes: about max_tokens for one wave when all run together
};

// (wall seconds since the start, process CPU seconds), sampled as the run goes.
struct CpuSample {
  double wall, cpu;
};

// The CPU time at `wall`, interpolated between the samples around it.
double CpuAt(const std::vector<CpuSample>& samples, double wall) {
  auto after = std::lower_bound(samples.begin(), samples.end(), wall,
                                [](const CpuSample& s, double w) { return s.wall < w; });
  if (after == samples.begin()) return samples.front().cpu;
  if (after == samples.end()) return samples.back().cpu;
  const CpuSample& before = *(after - 1);
  const double span = after->wall - before.wall;
  const double f = span > 0.0 ? (wall - before.wall) / span : 0.0;
  return before.cpu + f * (after->cpu - before.cpu);
}

StatusOr<Result> RunOnce(const Model& model, const Tokenizer& tokenizer, const Options& o,
                         int concurrency, int64_t kv_bytes,
                         const std::shared_ptr<const grammar::CompiledGrammar>& grammar) {
  EngineConfig config;
  config.scheduler.max_num_seqs = concurrency;
  config.kv_cache_bytes = kv_bytes;
  config.num_threads = o.threads;
  TM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, tokenizer, config));

  const int n = concurrency * o.waves;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<TokenId> pick(3, tokenizer.vocab_size() - 1);
  std::vector<std::unique_ptr<OutputStream>> streams;
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < n; ++i) {
    streams.push_back(std::make_unique<OutputStream>());
    GenerateRequest r;
    r.prompt_token_ids.resize(static_cast<size_t>(o.prompt_tokens));
    for (TokenId& t : r.prompt_token_ids) t = pick(rng);
    r.sampling.max_tokens = o.max_tokens;
    r.sampling.ignore_eos = true;
    r.grammar = grammar;
    r.sink = streams.back()->Sink();
    requests.push_back(std::move(r));
  }
  const auto start = std::chrono::steady_clock::now();
  auto since_start = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<CpuSample> cpu_samples = {{0.0, ProcessCpuSeconds()}};
  for (GenerateRequest& r : requests) TM_RETURN_IF_ERROR(engine->Submit(std::move(r)).status());

  Result result;
  result.concurrency = concurrency;
  result.requests = n;
  double last_first_token = 0.0, last_end = 0.0, ttft_sum = 0.0;
  int64_t decode_tokens = 0;
  for (auto& stream : streams) {
    while (true) {
      std::optional<GenerateOutput> out = stream->NextFor(std::chrono::milliseconds(2));
      cpu_samples.push_back({since_start(), ProcessCpuSeconds()});
      result.peak_kv_usage = std::max(result.peak_kv_usage, engine->Stats().kv_usage);
      if (!out) continue;
      result.output_tokens += static_cast<int64_t>(out->token_ids.size());
      if (!out->finished) continue;
      if (out->finish_reason != CompletionReason::kLength) {
        return InternalError("a request ended with " +
                             std::string(CompletionReasonName(*out->finish_reason)) + ": " +
                             out->error.ToString());
      }
      const RequestTimings& t = out->timings;
      last_first_token = std::max(last_first_token, t.time_to_first_token);
      last_end = std::max(last_end, t.total_seconds);
      ttft_sum += t.time_to_first_token;
      decode_tokens += out->usage.completion_tokens - 1;
      break;
    }
  }
  result.wall_seconds = since_start();
  result.output_tokens_per_second = static_cast<double>(result.output_tokens) / result.wall_seconds;
  result.decode_tokens_per_second =
      static_cast<double>(decode_tokens) / (last_end - last_first_token);
  result.decode_tokens_per_cpu_second =
      static_cast<double>(decode_tokens) /
      (CpuAt(cpu_samples, last_end) - CpuAt(cpu_samples, last_first_token));
  result.mean_ttft = ttft_sum / n;
  engine->Shutdown();  // then the stats include the last step
  result.preemptions = engine->Stats().num_preemptions;
  result.steps = engine->Stats().num_steps;
  return result;
}

int Run(const Options& o) {
  auto fail = [](const Status& s) {
    std::cerr << "error: " << s.ToString() << "\n";
    return 1;
  };
  if (o.repeats < 1 || o.waves < 1 || o.concurrency.empty() || o.prompt_tokens < 1 ||
      o.max_tokens < 2) {
    return fail(InvalidArgumentError(
        "--repeats, --waves and --prompt-tokens must be positive, --max-tokens at least 2 and "
        "--concurrency non-empty"));
  }
  StatusOr<int64_t> kv_bytes = ParseByteSize(o.kv_cache_memory);
  if (!kv_bytes.ok()) return fail(kv_bytes.status());
  StatusOr<std::unique_ptr<Model>> model = Model::Load(o.model_path);
  if (!model.ok()) return fail(model.status());
  StatusOr<Tokenizer> tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return fail(tokenizer.status());
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  if (!o.json_schema_path.empty()) {
    std::ifstream file(o.json_schema_path);
    if (!file) return fail(NotFoundError("--json-schema: cannot read " + o.json_schema_path));
    const std::string text((std::istreambuf_iterator<char>(file)), {});
    StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled = grammar::CompileGrammar(
        {.kind = grammar::GrammarSpec::Kind::kJsonSchema, .text = text, .choices = {}},
        grammar::VocabularyIndex::Build(GrammarVocabulary(*tokenizer)), grammar::GrammarLimits{});
    if (!compiled.ok()) return fail(compiled.status());
    grammar = *compiled;
  }
  std::vector<std::vector<Result>> runs(o.concurrency.size());
  for (int round = 0; round < o.repeats; ++round) {
    for (size_t i = 0; i < o.concurrency.size(); ++i) {
      StatusOr<Result> r =
          RunOnce(**model, *tokenizer, o, o.concurrency[i], *kv_bytes, grammar);
      if (!r.ok()) return fail(r.status());
      runs[i].push_back(*r);
      std::cout << nlohmann::json{{"round", round},
                                  {"concurrency", r->concurrency},
                                  {"requests", r->requests},
                                  {"prompt_tokens", o.prompt_tokens},
                                  {"max_tokens", o.max_tokens},
                                  {"threads", o.threads},
                                  {"json_schema", o.json_schema_path},
                                  {"output_tokens", r->output_tokens},
                                  {"wall_seconds", r->wall_seconds},
                                  {"output_tokens_per_second", r->output_tokens_per_second},
                                  {"decode_tokens_per_second", r->decode_tokens_per_second},
                                  {"decode_tokens_per_cpu_second",
                                   r->decode_tokens_per_cpu_second},
                                  {"mean_ttft_seconds", r->mean_ttft},
                                  {"peak_kv_usage", r->peak_kv_usage},
                                  {"preemptions", r->preemptions},
                                  {"steps", r->steps}}
                       .dump()
                << std::endl;
    }
  }
  // The run of median decode speed stands for each concurrency.
  std::vector<Result> results;
  for (std::vector<Result>& r : runs) {
    std::sort(r.begin(), r.end(), [](const Result& a, const Result& b) {
      return a.decode_tokens_per_second < b.decode_tokens_per_second;
    });
    results.push_back(r[r.size() / 2]);
  }
  // Medians of the CPU-time speed, on their own (not necessarily the same runs).
  std::vector<double> cpu_speeds;
  for (std::vector<Result>& r : runs) {
    std::sort(r.begin(), r.end(), [](const Result& a, const Result& b) {
      return a.decode_tokens_per_cpu_second < b.decode_tokens_per_cpu_second;
    });
    cpu_speeds.push_back(r[r.size() / 2].decode_tokens_per_cpu_second);
  }
  std::fprintf(stderr, "%11s %8s %12s %12s %10s %14s %10s %8s %8s %11s %6s\n", "concurrency",
               "requests", "output tok/s", "decode tok/s", "x single", "decode tok/cpu-s",
               "x single", "TTFT s", "peak KV", "preemptions", "steps");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::fprintf(stderr, "%11d %8d %12.1f %12.1f %10.2f %16.1f %10.2f %8.3f %7.1f%% %11lld %6lld\n",
                 r.concurrency, r.requests, r.output_tokens_per_second, r.decode_tokens_per_second,
                 r.decode_tokens_per_second / results.front().decode_tokens_per_second,
                 cpu_speeds[i], cpu_speeds[i] / cpu_speeds.front(), r.mean_ttft,
                 100.0 * r.peak_kv_usage, static_cast<long long>(r.preemptions),
                 static_cast<long long>(r.steps));
  }
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  tokenmill::Options o;
  CLI::App app("Offline throughput of the tokenmill engine at several concurrencies");
  app.add_option("--model", o.model_path, "GGUF file")->required();
  app.add_option("--concurrency", o.concurrency, "max running sequences, one run each")
      ->delimiter(',');
  app.add_option("--waves", o.waves, "requests per run = concurrency x waves (default 1)");
  app.add_option("--repeats", o.repeats, "rounds over all concurrencies; medians (default 3)");
  app.add_option("--prompt-tokens", o.prompt_tokens, "prompt length (default 64)");
  app.add_option("--max-tokens", o.max_tokens, "generated tokens per request (default 64)");
  app.add_option("--threads", o.threads, "CPU threads of the forward pass (default 2)");
  app.add_option("--kv-cache-memory", o.kv_cache_memory, "KV pool size (default 256MiB)");
  app.add_option("--json-schema", o.json_schema_path,
                 "constrain every request to this JSON Schema (structured output)");
  CLI11_PARSE(app, argc, argv);
  // The engine's log (its KV plan) on stderr: stdout holds the results.
  (void)tokenmill::SetupLogging("info");
  return tokenmill::Run(o);
}
