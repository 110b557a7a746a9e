// The CPU forward pass's speed on any GGUF, with a vocabulary or without one (the synthetic
// real-size models of bench/synthetic have none, so the engine's benchmarks cannot load them):
// prefill tokens/s of one prompt in chunks, and decode tokens/s of a batch of sequences one
// token each a step. Each is run with the weights as the server lays them out (row groups,
// where the CPU's kernels run them faster) and as in the file, alternating A B B A so that the
// machine's drift cancels; the ratio of the two is what the row-group layout gains. Wall time,
// medians over --pairs.
//
//   build/bin/tokenmill_forward_bench --model /tmp/llama32-1b-q4_k.gguf --prompt-tokens 512
//       --batch 16 --threads 2 --pairs 3

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kernels/cpu/thread_pool.h"
#include "model/forward.h"
#include "model/forward_input.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace tokenmill {
namespace {

struct Settings {
  int prompt_tokens = 512;
  int chunk = 512;          // prefill tokens a step (the server's --max-num-batched-tokens)
  int batch = 16;           // decode sequences
  int context = 128;        // each decode sequence's tokens before the timed steps
  int decode_steps = 8;
  int threads = 2;
};

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Runs one step of `builder`'s appended tokens; exits on an error (a benchmark has no caller to
// tell).
void Step(ForwardPass& forward, BatchBuilder& builder, KvCacheStorage& kv, int n_vocab,
          std::vector<float>& logits) {
  logits.resize(builder.logit_rows().size() * static_cast<size_t>(n_vocab));
  const Status s = forward.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                               kv.view(), logits);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  builder.Clear();
}

// Prefill tokens/s and decode tokens/s of `model`.
std::pair<double, double> Measure(const Model& model, ThreadPool& pool, const Settings& s) {
  const ModelConfig& c = model.config();
  constexpr int kBlockSize = 16;
  const int64_t tokens =
      std::max<int64_t>(s.prompt_tokens, int64_t{s.batch} * (s.context + s.decode_steps));
  const int64_t blocks = tokens / kBlockSize + s.batch + 2;
  KvCacheStorage kv(c, KvType::kF16, blocks, kBlockSize);
  ForwardPass forward(model, CpuContext{&KernelTable(BestCpuIsa()), &pool});
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> id(0, c.n_vocab - 1);
  auto ids = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& t : v) t = id(rng);
    return v;
  };
  std::vector<float> logits;

  BatchBuilder prefill(kBlockSize, blocks, NumKvGroups(c));
  const int seq = prefill.AddSequence();
  const std::vector<int32_t> prompt = ids(s.prompt_tokens);
  double start = Seconds();
  for (int at = 0; at < s.prompt_tokens; at += s.chunk) {
    const int n = std::min(s.chunk, s.prompt_tokens - at);
    const bool last = at + n == s.prompt_tokens;
    (void)prefill.Append(seq, std::span(prompt).subspan(at, n),
                         last ? BatchBuilder::Logits::kLast : BatchBuilder::Logits::kNone);
    Step(forward, prefill, kv, c.n_vocab, logits);
  }
  const double prefill_rate = s.prompt_tokens / (Seconds() - start);

  BatchBuilder decode(kBlockSize, blocks, NumKvGroups(c));
  std::vector<int> seqs;
  for (int b = 0; b < s.batch; ++b) {
    seqs.push_back(decode.AddSequence());
    (void)decode.Append(seqs.back(), ids(s.context), BatchBuilder::Logits::kLast);
    Step(forward, decode, kv, c.n_vocab, logits);
  }
  start = Seconds();
  for (int step = 0; step < s.decode_steps; ++step) {
    for (int q : seqs) (void)decode.Append(q, ids(1), BatchBuilder::Logits::kLast);
    Step(forward, decode, kv, c.n_vocab, logits);
  }
  const double decode_rate = s.batch * s.decode_steps / (Seconds() - start);
  return {prefill_rate, decode_rate};
}

// This process's resident memory in bytes (VmRSS), 0 where /proc does not say.
int64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  CLI::App app{"CPU forward pass speed: server layout vs the file's, A B B A"};
  std::string path;
  Settings s;
  int pairs = 3;
  app.add_option("--model", path, "GGUF file")->required();
  app.add_option("--prompt-tokens", s.prompt_tokens, "prefill prompt length")
      ->capture_default_str();
  app.add_option("--chunk", s.chunk, "prefill tokens a step")->capture_default_str();
  app.add_option("--batch", s.batch, "decode sequences")->capture_default_str();
  app.add_option("--context", s.context, "tokens of each decode sequence before timing")
      ->capture_default_str();
  app.add_option("--decode-steps", s.decode_steps, "timed decode steps")->capture_default_str();
  app.add_option("--threads", s.threads, "forward pass threads")->capture_default_str();
  app.add_option("--pairs", pairs, "A B (then B A) pairs")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<Model> models[2];
  const char* names[2] = {"server layout", "file layout"};
  for (int i = 0; i < 2; ++i) {
    ModelOptions options;
    options.layout = i == 0 ? CpuWeightLayout::kFastest : CpuWeightLayout::kAsInFile;
    StatusOr<std::unique_ptr<Model>> model = Model::Load(path, options);
    if (!model.ok()) {
      std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
      return 1;
    }
    models[i] = std::move(*model);
    if (i == 0) {  // the server's layout alone: what a server holds once loaded
      const double file_mb = 1e-6 * static_cast<double>(models[0]->file().bytes().size());
      const double resident_mb = 1e-6 * static_cast<double>(ResidentBytes());
      std::printf("resident after loading in the server layout: %.0f MB, the file %.0f MB "
                  "(%.2fx; row-group copies %.0f MB)\n",
                  resident_mb, file_mb, resident_mb / file_mb,
                  1e-6 * static_cast<double>(models[0]->cpu_copy_bytes()));
    }
  }
  ThreadPool pool(s.threads);
  std::vector<double> prefill[2], decode[2];
  for (int pair = 0; pair < pairs; ++pair) {
    for (int k = 0; k < 2; ++k) {
      const int i = pair % 2 == 0 ? k : 1 - k;  // A B, then B A
      const auto [p, d] = Measure(*models[i], pool, s);
      prefill[i].push_back(p);
      decode[i].push_back(d);
      std::printf("pair %d %-13s prefill %8.1f tok/s  decode (batch %d) %8.1f tok/s\n", pair,
                  names[i], p, s.batch, d);
      std::fflush(stdout);
    }
  }
  std::printf("median: prefill %.1f vs %.1f tok/s (%.2fx), decode %.1f vs %.1f tok/s (%.2fx)\n",
              Median(prefill[0]), Median(prefill[1]), Median(prefill[0]) / Median(prefill[1]),
              Median(decode[0]), Median(decode[1]), Median(decode[0]) / Median(decode[1]));
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) { return tokenmill::Main(argc, argv); }
