// Structured output's cost on the default model's vocabulary (issue 24): compile time of each
// JSON Schema of tests/data/grammar/corpus.json, and the time of one FillNextTokenMask per
// token per sequence (median, p99) along random walks of the nested schema
// `schema_nested_order`, each step a token drawn uniformly from the mask. Writes the walks
// (GBNF and tokens) for bench/grammar/xgrammar_bench.py to replay with xgrammar.
// Times are this process's CPU time (bench/cpu_time.h): the machine is shared, and wall time
// would also measure the others' load. Measured, never asserted (docs/benchmarks.md).
//   build/bin/tokenmill_grammar_bench [--walks 16] [--tokens 256] [--trace FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/cpu_time.h"
#include "gguf/gguf.h"
#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "text/tokenizer/tokenizer.h"

namespace tokenmill {
namespace {

using grammar::GrammarSpec;
using Clock = std::chrono::steady_clock;

// The engine's masking loop before grammar::MaskLogits (a bit test per token), timed beside it.
void MaskLogitsPerToken(std::span<const uint32_t> bitmask, size_t vocab_size,
                        std::span<float> row) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (size_t t = 0; t < row.size(); ++t) {
    if (t >= vocab_size || ((bitmask[t / 32] >> (t % 32)) & 1u) == 0) row[t] = kMasked;
  }
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

int Run(int argc, char** argv) {
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string corpus_path = "tests/data/grammar/corpus.json";
  std::string bench_case = "schema_nested_order";
  std::string trace_path;
  int walks = 16;
  int tokens = 256;
  CLI::App app{"grammar mask and compile cost"};
  app.add_option("--model", model);
  app.add_option("--corpus", corpus_path);
  app.add_option("--case", bench_case, "corpus entry whose masks are timed");
  app.add_option("--walks", walks);
  app.add_option("--tokens", tokens, "tokens per walk at most");
  app.add_option("--trace", trace_path, "write the walks here (for xgrammar_bench.py)");
  CLI11_PARSE(app, argc, argv);

  auto file = GgufFile::Open(model);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.status().ToString().c_str());
    return 1;
  }
  auto tokenizer = Tokenizer::FromGguf(*file);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  grammar::Vocabulary vocab;
  for (int32_t t = 0; t < tokenizer->vocab_size(); ++t) {
    vocab.token_bytes.emplace_back(tokenizer->Piece(t));
  }
  vocab.eos_tokens = {tokenizer->eos()};
  const auto build_start = Clock::now();
  const auto index = grammar::VocabularyIndex::Build(std::move(vocab));
  std::printf("vocabulary index: %zu tokens, %zu trie nodes, %.1f ms\n", index->size(),
              index->trie_size(),
              std::chrono::duration<double, std::milli>(Clock::now() - build_start).count());

  std::ifstream in(corpus_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json corpus = nlohmann::json::parse(ss.str());
  nlohmann::json trace = {{"model", model}, {"eos", index->vocabulary().eos_tokens}};
  std::printf("\n%-24s %12s\n", "schema", "compile ms");
  std::shared_ptr<const grammar::CompiledGrammar> timed;
  for (const auto& c : corpus) {
    if (c["kind"] != "json_schema") continue;
    GrammarSpec spec{GrammarSpec::Kind::kJsonSchema, c["text"], {}};
    const double start = ProcessCpuSeconds();
    auto compiled = grammar::CompileGrammar(spec, index, grammar::GrammarLimits());
    const double ms = 1e3 * (ProcessCpuSeconds() - start);
    if (!compiled.ok()) {
      std::fprintf(stderr, "%s\n", compiled.status().ToString().c_str());
      return 1;
    }
    std::printf("%-24s %12.1f\n", c["name"].get<std::string>().c_str(), ms);
    trace["compile"].push_back({{"name", c["name"]},
                                {"gbnf", *grammar::SpecToGbnf(spec, grammar::GrammarLimits())},
                                {"ms", ms}});
    if (c["name"] == bench_case) {
      timed = *compiled;
      trace["gbnf"] = trace["compile"].back()["gbnf"];
    }
  }
  if (!timed) {
    std::fprintf(stderr, "no json_schema case '%s' in the corpus\n", bench_case.c_str());
    return 1;
  }

  std::mt19937 rng(24);
  std::vector<double> micros;
  std::vector<uint32_t> mask(grammar::BitmaskWords(index->size()));
  std::vector<int32_t> allowed;
  std::vector<std::vector<uint32_t>> masks;
  for (int w = 0; w < walks; ++w) {
    grammar::GrammarMatcher matcher(timed);
    std::vector<int32_t> walk;
    for (int k = 0; k < tokens && !matcher.IsTerminated(); ++k) {
      const double start = ProcessCpuSeconds();
      matcher.FillNextTokenMask(mask);
      micros.push_back(1e6 * (ProcessCpuSeconds() - start));
      masks.push_back(mask);
      allowed.clear();
      for (size_t t = 0; t < index->size(); ++t) {
        if ((mask[t / 32] >> (t % 32)) & 1) allowed.push_back(static_cast<int32_t>(t));
      }
      const int32_t token = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (!matcher.AcceptToken(token)) {
        std::fprintf(stderr, "a token of the mask was refused\n");
        return 1;
      }
      walk.push_back(token);
    }
    trace["walks"].push_back(walk);
  }
  std::printf("\nFillNextTokenMask on '%s', %d walks, %zu masks: median %.1f us, p99 %.1f us, "
              "max %.1f us\n",
              bench_case.c_str(), walks, micros.size(), Percentile(micros, 0.5),
              Percentile(micros, 0.99), Percentile(micros, 1.0));
  // Applying each mask to a logits row of the vocabulary's size, as the engine thread does
  // per constrained row: CPU time of `kRounds` passes over all the walks' masks.
  constexpr int kRounds = 20;
  std::vector<float> row(index->size());
  for (const bool per_token : {true, false, true, false}) {
    const double start = ProcessCpuSeconds();
    for (int r = 0; r < kRounds; ++r) {
      for (const std::vector<uint32_t>& m : masks) {
        std::fill(row.begin(), row.end(), 1.0f);
        if (per_token) {
          MaskLogitsPerToken(m, index->size(), row);
        } else {
          grammar::MaskLogits(m, index->size(), row);
        }
      }
    }
    const double each = 1e6 * (ProcessCpuSeconds() - start) / (kRounds * masks.size());
    std::printf("mask applied to a %zu-float row (%s, fill included): %.2f us\n", row.size(),
                per_token ? "bit per token" : "MaskLogits", each);
  }
  if (!trace_path.empty()) std::ofstream(trace_path) << trace.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace tokenmill

int main(int argc, char** argv) { return tokenmill::Run(argc, argv); }
