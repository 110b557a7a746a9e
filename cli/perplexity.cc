// `tokenmill perplexity --model PATH --file TEXT [--ctx N] [--kv-type T [--kv-type-v T]]
//  [--compare-kv-type T [--compare-kv-type-v T] | --kv-window N [--sink-tokens S]]
//  [--max-chunks N] [--json]`:
// perplexity of the model over a text, as llama.cpp's perplexity tool measures it: the
// tokens are cut into chunks of --ctx, each chunk runs from an empty KV cache, and only the
// second half of each chunk is scored (every scored token then sees at least ctx/2 tokens
// of context).
// --kv-type-v (--compare-kv-type-v) gives V a type of its own in the first (second) run.
// With --compare-kv-type the same chunks also run over a second KV cache of that type and
// the tool reports both perplexities, the mean KL divergence KL(first || second) of the
// next-token distributions and how often their top-1 tokens agree.
// With --kv-window each chunk instead streams through the cache under the engine's
// kv_window policy (attention sinks, cli/kv_window_stream.h): the same tokens are scored,
// so the perplexity compares with the full-context one of the same --ctx; the chunk may be
// longer than the model's context.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/kv_window_stream.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/kv_type.h"
#include "model/forward.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill::cli {
namespace {

struct PerplexityOptions {
  std::string model_path;
  std::string file;
  int ctx = 512;
  int max_chunks = 0;  // 0: all
  std::string kv_type = "f16";
  std::string kv_type_v;        // empty: kv_type's
  std::string compare_kv_type;  // empty: no comparison
  std::string compare_kv_type_v;  // empty: compare_kv_type's
  int threads = 0;
  bool json = false;
  int kv_window = -1;  // < 0: full context; else KvWindow::window_tokens
  int sink_tokens = KvWindow{}.sink_tokens;
};

// log-softmax of one row of logits, in double.
std::vector<double> LogSoftmax(std::span<const float> logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits) sum += std::exp(x - max);
  const double log_sum = std::log(sum) + max;
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_sum;
  return out;
}

// One KV cache type's pass over a chunk: the logits of every token of the chunk.
class ChunkRunner {
 public:
  ChunkRunner(const Model& model, CpuContext ctx, KvType type, int chunk_tokens,
              std::optional<KvType> v_type = std::nullopt)
      : model_(model),
        forward_(model, ctx),
        blocks_((chunk_tokens + kBlockSize - 1) / kBlockSize),
        storage_(model.config(), type, blocks_, kBlockSize, v_type) {}

  // Fills logits (tokens.size() x n_vocab) from an empty cache.
  Status Run(std::span<const int32_t> tokens, std::vector<float>& logits) {
    const int64_t vocab = model_.config().n_vocab;
    logits.resize(tokens.size() * vocab);
    BatchBuilder builder(kBlockSize, blocks_, NumKvGroups(model_.config()));
    const int seq = builder.AddSequence();
    for (size_t begin = 0; begin < tokens.size(); begin += kStepTokens) {
      const size_t n = std::min<size_t>(kStepTokens, tokens.size() - begin);
      TM_RETURN_IF_ERROR(
          builder.Append(seq, tokens.subspan(begin, n), BatchBuilder::Logits::kAll));
      const std::span<float> out = std::span<float>(logits).subspan(begin * vocab, n * vocab);
      TM_RETURN_IF_ERROR(forward_.Run(
          {builder.token_ids(), builder.batch(), builder.logit_rows()}, storage_.view(), out));
      builder.Clear();
    }
    return OkStatus();
  }

 private:
  const Model& model_;
  ForwardPass forward_;
  int64_t blocks_;
  KvCacheStorage storage_;
};

struct Totals {
  double nll = 0.0;  // Σ -log p(next token)
  double Perplexity(int64_t n) const { return std::exp(nll / static_cast<double>(n)); }
};

int RunPerplexity(const PerplexityOptions& o) {
  const StatusOr<KvType> type = ParseKvType(o.kv_type);
  if (!type.ok()) return Fail(InvalidArgumentError("--kv-type: " + type.status().message()));
  if (Status s = CheckKvTypeOnDevice(*type, /*cuda=*/false, "--kv-type"); !s.ok()) return Fail(s);
  // An optional type flag's value, checked for the CPU.
  const auto parse = [](const std::string& name,
                        std::string_view flag) -> StatusOr<std::optional<KvType>> {
    if (name.empty()) return std::optional<KvType>();
    const StatusOr<KvType> t = ParseKvType(name);
    if (!t.ok()) return InvalidArgumentError(std::string(flag) + ": " + t.status().message());
    TM_RETURN_IF_ERROR(CheckKvTypeOnDevice(*t, /*cuda=*/false, flag));
    return std::optional<KvType>(*t);
  };
  const StatusOr<std::optional<KvType>> v_type = parse(o.kv_type_v, "--kv-type-v");
  const StatusOr<std::optional<KvType>> compare = parse(o.compare_kv_type, "--compare-kv-type");
  const StatusOr<std::optional<KvType>> compare_v =
      parse(o.compare_kv_type_v, "--compare-kv-type-v");
  for (const auto* parsed : {&v_type, &compare, &compare_v}) {
    if (!parsed->ok()) return Fail(parsed->status());
  }
  if (*compare_v && !*compare) {
    return Fail(InvalidArgumentError("--compare-kv-type-v needs --compare-kv-type (K's type)"));
  }
  if (o.ctx < 4) return Fail(InvalidArgumentError("--ctx must be at least 4"));
  const bool windowed = o.kv_window >= 0;
  if (windowed && *compare) {
    return Fail(InvalidArgumentError("--compare-kv-type and --kv-window do not go together: "
                                     "run the two configurations separately"));
  }
  if (windowed && *v_type) {
    return Fail(InvalidArgumentError("--kv-type-v and --kv-window do not go together yet: "
                                     "drop one of them"));
  }
  std::ifstream in(o.file, std::ios::binary);
  if (!in) return Fail(NotFoundError("cannot read --file " + o.file));
  std::stringstream text;
  text << in.rdbuf();

  StatusOr<std::unique_ptr<Model>> model = Model::Load(o.model_path);
  if (!model.ok()) return Fail(model.status());
  const ModelConfig& c = (*model)->config();
  for (const std::optional<KvType> t : {std::optional<KvType>(*type), *v_type, *compare,
                                        *compare_v}) {
    if (!t) continue;
    if (Status s = CheckKvTypeFitsLayers(c, *t); !s.ok()) return Fail(s);
  }
  if (!windowed && o.ctx > c.context_length) {
    return Fail(InvalidArgumentError("--ctx " + std::to_string(o.ctx) +
                                     " exceeds the model's context of " +
                                     std::to_string(c.context_length)));
  }
  StatusOr<Tokenizer> tokenizer = Tokenizer::FromGguf((*model)->file());
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  StatusOr<std::vector<int32_t>> tokens = tokenizer->Encode(text.str());
  if (!tokens.ok()) return Fail(tokens.status());
  int64_t chunks = static_cast<int64_t>(tokens->size()) / o.ctx;
  if (o.max_chunks > 0) chunks = std::min<int64_t>(chunks, o.max_chunks);
  if (chunks == 0) {
    return Fail(InvalidArgumentError("the text has " + std::to_string(tokens->size()) +
                                     " tokens, fewer than one chunk of --ctx " +
                                     std::to_string(o.ctx)));
  }

  const int threads = o.threads > 0
                          ? o.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  const CpuContext ctx{&KernelTable(BestCpuIsa()), &pool};
  const int64_t vocab = c.n_vocab;
  const int first = o.ctx / 2;
  Totals base_totals, other_totals;
  double kl_sum = 0.0, kl_max = 0.0;
  int64_t scored = 0, top1_same = 0;
  if (windowed) {
    const KvWindow kv_window{.sink_tokens = o.sink_tokens, .window_tokens = o.kv_window};
    KvWindowStream stream(**model, ctx, *type, kv_window, o.ctx);
    int64_t evicted = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const std::span<const int32_t> chunk_tokens(tokens->data() + chunk * o.ctx, o.ctx);
      const StatusOr<int64_t> chunk_evicted =
          stream.Run(chunk_tokens, [&](int64_t i, int64_t, std::span<const float> row) {
            if (i < first || i + 1 >= o.ctx) return;
            base_totals.nll -= LogSoftmax(row)[chunk_tokens[i + 1]];
            ++scored;
          });
      if (!chunk_evicted.ok()) return Fail(chunk_evicted.status());
      evicted += *chunk_evicted;
      if (!o.json) {
        std::cerr << "chunk " << chunk + 1 << "/" << chunks << ": perplexity "
                  << base_totals.Perplexity(scored) << "\n";
      }
    }
    const nlohmann::json out = {
        {"file", o.file},
        {"text_tokens", tokens->size()},
        {"ctx", o.ctx},
        {"chunks", chunks},
        {"scored_tokens", scored},
        {"kv_type", o.kv_type},
        {"kv_window", {{"sink_tokens", o.sink_tokens}, {"window_tokens", o.kv_window}}},
        {"evicted_tokens", evicted},
        {"perplexity", base_totals.Perplexity(scored)}};
    std::cout << (o.json ? out.dump() : out.dump(2)) << "\n";
    return 0;
  }

  ChunkRunner base(**model, ctx, *type, o.ctx, *v_type);
  std::unique_ptr<ChunkRunner> other;
  if (*compare) {
    other = std::make_unique<ChunkRunner>(**model, ctx, **compare, o.ctx, *compare_v);
  }
  std::vector<float> base_logits, other_logits;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const std::span<const int32_t> window(tokens->data() + chunk * o.ctx, o.ctx);
    if (Status s = base.Run(window, base_logits); !s.ok()) return Fail(s);
    if (other) {
      if (Status s = other->Run(window, other_logits); !s.ok()) return Fail(s);
    }
    // Row i predicts token i + 1.
    for (int i = first; i + 1 < o.ctx; ++i) {
      const std::span<const float> row(base_logits.data() + i * vocab, vocab);
      const std::vector<double> lp = LogSoftmax(row);
      base_totals.nll -= lp[window[i + 1]];
      if (other) {
        const std::span<const float> other_row(other_logits.data() + i * vocab, vocab);
        const std::vector<double> lq = LogSoftmax(other_row);
        other_totals.nll -= lq[window[i + 1]];
        double kl = 0.0;
        for (int64_t v = 0; v < vocab; ++v) kl += std::exp(lp[v]) * (lp[v] - lq[v]);
        kl_sum += kl;
        kl_max = std::max(kl_max, kl);
        top1_same += std::max_element(row.begin(), row.end()) - row.begin() ==
                     std::max_element(other_row.begin(), other_row.end()) - other_row.begin();
      }
      ++scored;
    }
    if (!o.json) {
      std::cerr << "chunk " << chunk + 1 << "/" << chunks << ": perplexity "
                << base_totals.Perplexity(scored) << "\n";
    }
  }

  nlohmann::json out = {{"file", o.file},
                        {"text_tokens", tokens->size()},
                        {"ctx", o.ctx},
                        {"chunks", chunks},
                        {"scored_tokens", scored},
                        {"kv_type", o.kv_type},
                        {"perplexity", base_totals.Perplexity(scored)}};
  if (*v_type) out["kv_type_v"] = o.kv_type_v;
  if (other) {
    const double p0 = base_totals.Perplexity(scored), p1 = other_totals.Perplexity(scored);
    out["compare"] = {{"kv_type", o.compare_kv_type},
                      {"kv_type_v", o.compare_kv_type_v.empty() ? o.compare_kv_type
                                                                : o.compare_kv_type_v},
                      {"perplexity", p1},
                      {"perplexity_change_percent", 100.0 * (p1 / p0 - 1.0)},
                      {"mean_kl_divergence", kl_sum / static_cast<double>(scored)},
                      {"max_kl_divergence", kl_max},
                      {"top1_agreement_percent", 100.0 * top1_same / static_cast<double>(scored)}};
  }
  if (o.json) {
    std::cout << out.dump() << "\n";
  } else {
    std::cout << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

Command AddPerplexityCommand(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* sub = app.add_subcommand(
      "perplexity", "Perplexity over a text file in chunks of --ctx (the second half scored)");
  sub->add_option("--model", o->model_path, "GGUF file")->required();
  sub->add_option("--file", o->file, "UTF-8 text")->required();
  sub->add_option("--ctx", o->ctx, "tokens per chunk (default 512)");
  sub->add_option("--max-chunks", o->max_chunks, "score at most this many chunks (0: all)");
  sub->add_option("--kv-type", o->kv_type,
                  "KV cache element type: f16 (default), f32, int8, q4_0 or int4");
  sub->add_option("--kv-type-v", o->kv_type_v,
                  "V's element type when it should differ from --kv-type's (K's then): f16, "
                  "f32, int8, q4_0 or int4");
  sub->add_option("--compare-kv-type", o->compare_kv_type,
                  "also run over this KV type; report its perplexity and mean KL divergence");
  sub->add_option("--compare-kv-type-v", o->compare_kv_type_v,
                  "V's element type of the --compare-kv-type run when it should differ");
  sub->add_option("--threads", o->threads, "CPU threads (default: all)");
  sub->add_option("--kv-window", o->kv_window,
                  "stream each chunk under the kv_window policy with this window_tokens "
                  "(0: the model's context; default: off, full context)");
  sub->add_option("--sink-tokens", o->sink_tokens,
                  "kv_window sink tokens, rounded up to whole 16-token blocks (default 4)");
  sub->add_flag("--json", o->json, "one JSON line, no progress");
  return {sub, [o] { return RunPerplexity(*o); }};
}

}  // namespace tokenmill::cli
