// Speculative decoding benchmark (issue 9). Two measurements, printed as JSON lines and a table:
//
// --mode decode: single-stream greedy decode speed with each --spec method on input-grounded
//   prompts (the answer repeats, quotes or edits the prompt) and open-ended ones, through
//   EngineCore on this thread. Runs interleave (prompt by prompt, method by method, round by
//   round) so load from other processes spreads evenly; reports per prompt and method the
//   median decode tokens/s (tokens after the first over the time from the first to the last)
//   over wall time and over the process's CPU time (load-proof on a shared machine), draft
//   acceptance and tokens per step, and each method's speed ratio to none.
// --mode rows: the time of one forward step by its number of rows (one sequence verifying
//   R - 1 drafts after a 256-token context), which tells where a step's cost starts growing
//   with its rows (the limit of SpecConfig::max_batch_rows).
//
//   build/bin/tokenmill_spec_bench --model models/SmolLM2-135M-Instruct.Q4_1.gguf
//       --mode decode --methods none,ngram --max-tokens 128 --rounds 3 --threads 2
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/cpu_time.h"
#include "common/logging.h"
#include "engine/engine_core.h"
#include "engine/engine_core_builder.h"
#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace tokenmill {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model_path;
  std::string draft_model_path;
  std::string mode = "decode";
  std::vector<std::string> methods = {"none", "ngram"};
  int spec_tokens = 4;
  int max_tokens = 256;
  int rounds = 3;
  int threads = 2;
};

struct BenchPrompt {
  std::string name;
  bool grounded;
  std::string user;
};

const std::vector<BenchPrompt>& Prompts() {
  static const std::vector<BenchPrompt> prompts = {
      {"repeat", true,
       "Repeat the following paragraph exactly, word for word.\n\nThe river town of Alder "
       "Bend grew up around a single stone bridge. Every spring the water rose over the "
       "lower streets, and every summer the merchants rebuilt their stalls a little higher "
       "up the hill. By the time the railway arrived, the old market had moved entirely to "
       "the ridge, and the bridge was used only by children walking to school. The mill by "
       "the water closed in the same year, and its wheel was taken down and sold for scrap."},
      {"copy-email", true,
       "Copy this email exactly, then add a one-line summary.\n\nHi Maria,\n\nThanks for "
       "sending the draft contract on Friday. I have read it twice and I am happy with the "
       "payment terms, but the delivery date in section four should be the first of June, "
       "not the first of May. Could you correct that and send me a new copy? Once it is "
       "fixed I will sign it and post it back the same day.\n\nBest regards,\nTom"},
      {"quote", true,
       "Quote the first sentence of this text, then the last one.\n\nThe committee met on "
       "Tuesday to review the budget for the new library wing. Several members asked for "
       "more detail on the cost of the heating system and the shelving. The chair agreed "
       "to postpone the vote until the architects could present revised figures at the "
       "next meeting in March."},
      {"story", false, "Write a short story about a lighthouse keeper who finds a message in a "
                       "bottle."},
      {"explain", false, "Explain why the sky is blue to a ten-year-old."},
      {"ideas", false, "Give me some ideas for a weekend trip in the mountains."},
  };
  return prompts;
}

StatusOr<std::vector<TokenId>> ChatPrompt(const Tokenizer& tokenizer, const std::string& user) {
  // SmolLM2-Instruct's ChatML, written out: the benchmark needs no template engine.
  const std::string text = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                           "trained by Hugging Face<|im_end|>\n<|im_start|>user\n" +
                           user + "<|im_end|>\n<|im_start|>assistant\n";
  return tokenizer.Encode(text, EncodeOptions{.add_special = false, .parse_special = true});
}

struct DecodeResult {
  std::string text;
  int output_tokens = 0;
  double decode_tokens_per_second = 0.0;
  double decode_tokens_per_cpu_second = 0.0;  // over the process's CPU time: load-proof
  int64_t steps = 0;
  SpecStats spec;
};

StatusOr<DecodeResult> DecodeOnce(const Model& model, const Tokenizer& tokenizer,
                                  const Model* draft, const Options& o, SpecMethod method,
                                  const std::vector<TokenId>& prompt) {
  EngineConfig config;
  config.num_threads = o.threads;
  config.kv_cache_bytes = int64_t{64} << 20;
  config.spec.method = method;
  config.spec.num_speculative_tokens = o.spec_tokens;
  TM_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core,
                      BuildEngineCore(model, tokenizer, config,
                                      method == SpecMethod::kDraft ? draft : nullptr));
  std::vector<Clock::time_point> token_times;
  std::vector<double> token_cpu_seconds;
  std::vector<TokenId> output;
  GenerateRequest request;
  request.prompt_token_ids = prompt;
  request.sampling.max_tokens = o.max_tokens;
  // Greedy: every method gives the same tokens, up to the model's end of turn.
  request.sink = [&token_times, &token_cpu_seconds, &output](GenerateOutput&& out) {
    for (const TokenId id : out.token_ids) {
      token_times.push_back(Clock::now());
      token_cpu_seconds.push_back(ProcessCpuSeconds());
      output.push_back(id);
    }
  };
  TM_RETURN_IF_ERROR(core->Add(1, std::move(request)));
  int64_t first_token_step = -1;
  while (core->has_unfinished_requests()) {
    core->Step();
    if (first_token_step < 0 && !token_times.empty()) first_token_step = core->Stats().num_steps;
  }
  DecodeResult result;
  result.text = tokenizer.Decode(output);
  result.output_tokens = static_cast<int>(token_times.size());
  const double seconds =
      std::chrono::duration<double>(token_times.back() - token_times.front()).count();
  result.decode_tokens_per_second = (result.output_tokens - 1) / seconds;
  result.decode_tokens_per_cpu_second =
      (result.output_tokens - 1) / (token_cpu_seconds.back() - token_cpu_seconds.front());
  const EngineStats stats = core->Stats();
  result.steps = stats.num_steps - first_token_step;  // decode steps after the first token
  result.spec = {stats.spec_num_drafts, stats.spec_num_draft_tokens,
                 stats.spec_num_accepted_tokens};
  return result;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

Status RunDecode(const Model& model, const Tokenizer& tokenizer, const Model* draft,
                 const Options& o) {
  std::vector<SpecMethod> methods;
  for (const std::string& name : o.methods) {
    const std::optional<SpecMethod> m = ParseSpecMethod(name);
    if (!m) return InvalidArgumentError("--methods: unknown method " + name);
    if (*m == SpecMethod::kDraft && draft == nullptr) {
      return InvalidArgumentError("--methods draft needs --draft-model");
    }
    methods.push_back(*m);
  }
  struct Key {
    std::string prompt;
    std::string method;
    bool operator<(const Key& k) const {
      return std::tie(prompt, method) < std::tie(k.prompt, k.method);
    }
  };
  std::map<Key, std::vector<double>> speeds;      // wall
  std::map<Key, std::vector<double>> cpu_speeds;  // CPU time
  std::map<Key, DecodeResult> last;
  for (int round = 0; round < o.rounds; ++round) {
    for (const BenchPrompt& p : Prompts()) {
      TM_ASSIGN_OR_RETURN(std::vector<TokenId> ids, ChatPrompt(tokenizer, p.user));
      for (const SpecMethod method : methods) {
        TM_ASSIGN_OR_RETURN(DecodeResult r, DecodeOnce(model, tokenizer, draft, o, method, ids));
        const Key key{p.name, std::string(SpecMethodName(method))};
        speeds[key].push_back(r.decode_tokens_per_second);
        cpu_speeds[key].push_back(r.decode_tokens_per_cpu_second);
        last[key] = r;
        const double acceptance =
            r.spec.num_draft_tokens ? double(r.spec.num_accepted_tokens) / r.spec.num_draft_tokens
                                    : 0.0;
        std::cout << nlohmann::json{{"round", round},
                                    {"prompt", p.name},
                                    {"grounded", p.grounded},
                                    {"method", key.method},
                                    {"prompt_tokens", ids.size()},
                                    {"output_tokens", r.output_tokens},
                                    {"decode_tokens_per_second", r.decode_tokens_per_second},
                                    {"decode_tokens_per_cpu_second",
                                     r.decode_tokens_per_cpu_second},
                                    {"decode_steps", r.steps},
                                    {"drafts", r.spec.num_drafts},
                                    {"draft_tokens", r.spec.num_draft_tokens},
                                    {"accepted_tokens", r.spec.num_accepted_tokens},
                                    {"acceptance", acceptance},
                                    {"text", r.text}}
                         .dump()
                  << std::endl;
      }
    }
  }
  std::fprintf(stderr, "\n%-11s %-8s %-6s %10s %8s %12s %8s %10s %11s\n", "prompt", "kind",
               "method", "decode t/s", "vs none", "t/CPU-s", "vs none", "acceptance",
               "tokens/step");
  for (const BenchPrompt& p : Prompts()) {
    const auto none = speeds.find({p.name, "none"});
    const double base = none == speeds.end() ? 0.0 : Median(none->second);
    const double cpu_base = none == speeds.end() ? 0.0 : Median(cpu_speeds[{p.name, "none"}]);
    for (const SpecMethod method : methods) {
      const Key key{p.name, std::string(SpecMethodName(method))};
      const DecodeResult& r = last[key];
      const double speed = Median(speeds[key]);
      const double cpu_speed = Median(cpu_speeds[key]);
      const double acceptance =
          r.spec.num_draft_tokens ? double(r.spec.num_accepted_tokens) / r.spec.num_draft_tokens
                                  : 0.0;
      std::fprintf(stderr, "%-11s %-8s %-6s %10.1f %7.2fx %12.1f %7.2fx %10.2f %11.2f\n",
                   p.name.c_str(), p.grounded ? "grounded" : "open", key.method.c_str(), speed,
                   base > 0 ? speed / base : 0.0, cpu_speed,
                   cpu_base > 0 ? cpu_speed / cpu_base : 0.0, acceptance,
                   r.steps > 0 ? double(r.output_tokens - 1) / r.steps : 0.0);
    }
  }
  return OkStatus();
}

Status RunRows(const Model& model, const Options& o) {
  ThreadPool pool(o.threads);
  ForwardPass forward(model, CpuContext{&KernelTable(BestCpuIsa()), &pool});
  constexpr int kBlockSize = 16;
  constexpr int kContext = 256;
  constexpr int kBlocks = (kContext + 128) / kBlockSize + 1;
  KvCacheStorage kv(model.config(), KvType::kF16, kBlocks, kBlockSize);
  std::vector<int32_t> context(kContext);
  for (int i = 0; i < kContext; ++i) context[static_cast<size_t>(i)] = 100 + i;
  std::vector<float> logits;
  // CPU time (of the whole process) counts only work done, whatever else loads the machine;
  // with --threads 1 it is the step's cost. Ratios are to the one-row step.
  std::fprintf(stderr, "%5s %10s %10s %12s %10s\n", "rows", "ms/step", "ms/row", "cpu ms/step",
               "x one row");
  double one_row_cpu_ms = 0.0;
  for (const int rows : {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64}) {
    std::vector<double> times, cpu_times;
    for (int rep = 0; rep < 3 * o.rounds; ++rep) {
      BatchBuilder builder(kBlockSize, kBlocks);
      const int seq = builder.AddSequence();
      TM_RETURN_IF_ERROR(builder.Append(seq, context, BatchBuilder::Logits::kNone));
      TM_RETURN_IF_ERROR(forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                     kv.view(), std::span<float>()));
      builder.Clear();
      const std::vector<int32_t> step(static_cast<size_t>(rows), 42);
      TM_RETURN_IF_ERROR(builder.Append(seq, step, BatchBuilder::Logits::kAll));
      logits.resize(static_cast<size_t>(rows) * static_cast<size_t>(model.config().n_vocab));
      const auto start = Clock::now();
      const double cpu_start = ProcessCpuSeconds();
      TM_RETURN_IF_ERROR(
          forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()}, kv.view(),
                      logits));
      cpu_times.push_back(1e3 * (ProcessCpuSeconds() - cpu_start));
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    const double ms = Median(times);
    const double cpu_ms = Median(cpu_times);
    if (rows == 1) one_row_cpu_ms = cpu_ms;
    std::cout << nlohmann::json{{"rows", rows}, {"ms_per_step", ms}, {"cpu_ms_per_step", cpu_ms}}
                     .dump()
              << std::endl;
    std::fprintf(stderr, "%5d %10.2f %10.2f %12.2f %10.2f\n", rows, ms, ms / rows, cpu_ms,
                 cpu_ms / one_row_cpu_ms);
  }
  return OkStatus();
}

Status Main(const Options& o) {
  TM_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(o.model_path));
  if (o.mode == "rows") return RunRows(*model, o);
  TM_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromGguf(model->file()));
  std::unique_ptr<Model> draft;
  if (!o.draft_model_path.empty()) {
    TM_ASSIGN_OR_RETURN(draft, Model::Load(o.draft_model_path));
  }
  return RunDecode(*model, tokenizer, draft.get(), o);
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) {
  tokenmill::Options o;
  CLI::App app{"Speculative decoding: decode speed by --spec method, and step cost by rows"};
  app.add_option("--model", o.model_path, "GGUF model")->required();
  app.add_option("--draft-model", o.draft_model_path, "GGUF draft model (method draft)");
  app.add_option("--mode", o.mode, "decode or rows")->check(CLI::IsMember({"decode", "rows"}));
  app.add_option("--methods", o.methods, "spec methods to compare (none is the baseline)")
      ->delimiter(',');
  app.add_option("--spec-tokens", o.spec_tokens, "most draft tokens per step");
  app.add_option("--max-tokens", o.max_tokens, "generated tokens per run");
  app.add_option("--rounds", o.rounds, "interleaved repetitions")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "CPU threads")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  // The engine's log (its KV plan) on stderr: stdout holds the results.
  (void)tokenmill::SetupLogging("info");
  const tokenmill::Status status = tokenmill::Main(o);
  if (!status.ok()) {
    std::cerr << status.ToString() << "\n";
    return 1;
  }
  return 0;
}
