// `tokenmill generate --model PATH (--prompt TEXT | --prompt-tokens IDS) --max-tokens N
//  --temperature T [--json] [--threads N] [--device cpu|cuda]`: one sequence, prefilled in one step, then
// decoded one token per step over a paged KV cache; prints the continuation (generated
// tokens only), stopping at an end-of-generation token unless --ignore-eos.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/kv_type.h"
#include "model/forward.h"
#include "text/tokenizer/incremental_decoder.h"
#include "text/tokenizer/tokenizer.h"

#if TOKENMILL_HAVE_CUDA
#include "model/cuda/cuda_forward.h"
#include "model/cuda/cuda_kv_cache.h"
#endif

namespace tokenmill::cli {
namespace {

struct GenerateOptions {
  std::string model_path;
  std::string prompt;         // text, tokenized with the model's vocabulary
  std::string prompt_tokens;  // or comma-separated ids
  int max_tokens = 64;
  float temperature = 0.0f;
  uint64_t seed = 0;
  bool json = false;
  bool stats = false;
  bool ignore_eos = false;
  int threads = 0;  // 0: all hardware threads
  std::string isa;  // empty: the best this CPU has
  std::string kv_type = "f16";
  std::string device = "cpu";
};

// One forward step of the sequence: on the CPU (ForwardPass over host KV) or the GPU.
using StepFn = std::function<Status(const ForwardInput&, std::span<float>)>;

StatusOr<StepFn> CudaStep(const Model& model, KvType kv_type, int64_t blocks) {
#if TOKENMILL_HAVE_CUDA
  TM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaForwardPass> pass,
                      cuda::CudaForwardPass::Create(model));
  TM_ASSIGN_OR_RETURN(cuda::CudaKvCache kv,
                      cuda::CudaKvCache::Create(model.config(), kv_type, blocks, kBlockSize));
  auto forward = std::shared_ptr<cuda::CudaForwardPass>(std::move(pass));
  auto cache = std::make_shared<cuda::CudaKvCache>(std::move(kv));
  return StepFn([forward, cache](const ForwardInput& in, std::span<float> logits) {
    return forward->Run(in, cache->view(), logits);
  });
#else
  (void)model;
  (void)kv_type;
  (void)blocks;
  return FailedPreconditionError("--device cuda: this build has no CUDA backend; use --device cpu");
#endif
}

StatusOr<std::vector<int32_t>> ParseTokenIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const long id = std::stol(item, &used);
      if (used != item.size() || id < 0 || id > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(id));
    } catch (const std::exception&) {
      return InvalidArgumentError("--prompt-tokens wants comma-separated token ids, got '" +
                                  item + "'");
    }
  }
  if (ids.empty()) return InvalidArgumentError("--prompt-tokens is empty");
  return ids;
}

// Greedy at temperature 0, else a draw from softmax(logits / temperature).
int32_t Sample(std::span<const float> logits, float temperature, std::mt19937_64& rng) {
  const auto best = std::max_element(logits.begin(), logits.end());
  if (temperature <= 0.0f) return static_cast<int32_t>(best - logits.begin());
  std::vector<double> weights(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    weights[i] = std::exp((logits[i] - *best) / static_cast<double>(temperature));
  }
  std::discrete_distribution<int32_t> pick(weights.begin(), weights.end());
  return pick(rng);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int RunGenerate(const GenerateOptions& o) {
  if (o.max_tokens < 0) return Fail(InvalidArgumentError("--max-tokens must be >= 0"));
  const std::optional<CpuIsa> isa = o.isa.empty() ? BestCpuIsa() : ParseIsa(o.isa);
  if (!isa || !CpuSupports(*isa)) {
    return Fail(InvalidArgumentError("--isa '" + o.isa + "' is unknown or this CPU lacks it " +
                                     "(scalar, avx2, avx512vnni)"));
  }
  const StatusOr<KvType> kv_type = ParseKvType(o.kv_type);
  if (!kv_type.ok()) return Fail(InvalidArgumentError("--kv-type: " + kv_type.status().message()));
  if (Status s = CheckKvTypeOnDevice(*kv_type, o.device == "cuda", "--kv-type"); !s.ok()) {
    return Fail(s);
  }
  StatusOr<std::unique_ptr<Model>> model = Model::Load(o.model_path);
  if (!model.ok()) return Fail(model.status());
  const ModelConfig& c = (*model)->config();
  if (Status s = CheckKvTypeFitsLayers(c, *kv_type); !s.ok()) return Fail(s);
  // A vocabulary is needed for --prompt and for text; with --prompt-tokens a model file
  // without one still runs (its continuation is printed as ids).
  StatusOr<Tokenizer> tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok() && o.prompt_tokens.empty()) return Fail(tokenizer.status());
  StatusOr<std::vector<int32_t>> prompt =
      o.prompt_tokens.empty() ? tokenizer->Encode(o.prompt) : ParseTokenIds(o.prompt_tokens);
  if (!prompt.ok()) return Fail(prompt.status());
  if (prompt->empty()) return Fail(InvalidArgumentError("the prompt has no tokens"));
  const int64_t total = static_cast<int64_t>(prompt->size()) + o.max_tokens;
  if (total > c.context_length) {
    return Fail(OutOfRangeError("prompt plus --max-tokens is " + std::to_string(total) +
                                " tokens; the model's context is " +
                                std::to_string(c.context_length)));
  }
  const int threads = o.threads > 0
                          ? o.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  ForwardPass forward(**model, CpuContext{&KernelTable(*isa), &pool});
  const int64_t blocks = (total + kBlockSize - 1) / kBlockSize;
  KvCacheStorage storage(c, *kv_type, o.device == "cpu" ? blocks : 1, kBlockSize);
  StepFn run_step = [&forward, &storage](const ForwardInput& in, std::span<float> logits) {
    return forward.Run(in, storage.view(), logits);
  };
  if (o.device == "cuda") {
    StatusOr<StepFn> cuda_step = CudaStep(**model, *kv_type, blocks);
    if (!cuda_step.ok()) return Fail(cuda_step.status());
    run_step = std::move(*cuda_step);
  }
  BatchBuilder builder(kBlockSize, blocks, NumKvGroups(c));
  const int seq = builder.AddSequence();
  std::mt19937_64 rng(o.seed);
  std::vector<float> logits(static_cast<size_t>(c.n_vocab));
  std::vector<int32_t> generated;
  // The continuation's text: streamed as it is generated unless --json.
  std::optional<IncrementalDecoder> decoder;
  if (tokenizer.ok()) decoder.emplace(*tokenizer, DecodeOptions{.strip_space_prefix = false});
  std::string text;
  std::vector<int32_t> step = *prompt;
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  while (static_cast<int>(generated.size()) < o.max_tokens) {
    const auto start = std::chrono::steady_clock::now();
    if (Status s = builder.Append(seq, step, BatchBuilder::Logits::kLast); !s.ok()) return Fail(s);
    const Status s = run_step({builder.token_ids(), builder.batch(), builder.logit_rows()}, logits);
    if (!s.ok()) return Fail(s);
    builder.Clear();
    (generated.empty() ? prefill_seconds : decode_seconds) += SecondsSince(start);
    const int32_t next = Sample(logits, o.temperature, rng);
    if (!o.ignore_eos && tokenizer.ok() && tokenizer->IsEndOfGeneration(next)) break;
    generated.push_back(next);
    const std::string piece = decoder ? decoder->Add(next) : std::to_string(next) + " ";
    text += piece;
    if (!o.json) std::cout << piece << std::flush;
    step = {next};
  }
  // The last sampled token needs no forward step; decode steps = generated - 1.
  const int64_t decode_steps = std::max<int64_t>(0, static_cast<int64_t>(generated.size()) - 1);
  const std::string rest = decoder ? decoder->Finish() : "";
  text += rest;
  if (o.json) {
    nlohmann::json out = {{"tokens", generated}, {"text", text}};
    if (o.stats) {
      out["stats"] = {{"prompt_tokens", prompt->size()},
                      {"prefill_seconds", prefill_seconds},
                      {"decode_steps", decode_steps},
                      {"decode_seconds", decode_seconds},
                      {"threads", threads},
                      {"isa", IsaName(*isa)},
                      {"device", o.device}};
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << rest << std::endl;
  }
  if (o.stats && !o.json) {
    std::cerr << "prefill: " << prompt->size() / prefill_seconds << " tokens/s; decode: "
              << (decode_seconds > 0 ? decode_steps / decode_seconds : 0.0) << " tokens/s ("
              << threads << " threads, " << IsaName(*isa) << ", " << o.device << ")\n";
  }
  return 0;
}

}  // namespace

Command AddGenerateCommand(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* sub = app.add_subcommand("generate", "Continue a prompt with the model");
  sub->add_option("--model", o->model_path, "GGUF file")->required();
  CLI::Option* prompt = sub->add_option("--prompt", o->prompt, "prompt text");
  CLI::Option* ids =
      sub->add_option("--prompt-tokens", o->prompt_tokens, "or the prompt as comma-separated ids");
  prompt->excludes(ids);
  sub->callback([prompt, ids] {
    if (prompt->count() + ids->count() == 0) {
      throw CLI::RequiredError("--prompt or --prompt-tokens");
    }
  });
  sub->add_option("--max-tokens", o->max_tokens, "tokens to generate (default 64)");
  sub->add_option("--temperature", o->temperature, "0: greedy (default)");
  sub->add_option("--seed", o->seed, "random seed for temperature > 0");
  sub->add_flag("--json", o->json, R"(print {"tokens": [...], "text": "..."})");
  sub->add_flag("--stats", o->stats, "report prefill and decode speed");
  sub->add_flag("--ignore-eos", o->ignore_eos, "keep generating after end-of-sequence");
  sub->add_option("--threads", o->threads, "CPU threads (default: all)");
  sub->add_option("--isa", o->isa, "kernels: scalar, avx2 or avx512vnni (default: best)");
  sub->add_option("--kv-type", o->kv_type,
                  "KV cache element type: f16 (default), f32, int8, q4_0, int4 or fp8 "
                  "(--device cuda only)");
  sub->add_option("--device", o->device, "cpu (default) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  return {sub, [o] { return RunGenerate(*o); }};
}

}  // namespace tokenmill::cli
