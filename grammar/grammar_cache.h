// Compiled grammars by (kind, text): an LRU bounded by bytes, thread-safe, owned by whoever
// serves the model (one per VocabularyIndex). A compiled grammar can take hundreds of MiB
// (a 2.6 KB GBNF of optional wide character classes: ~250 MiB of token tables), so the cache
// counts each one's memory_bytes() and its key against a budget and drops the least recently
// used past it; a grammar over the per-grammar cap (GrammarLimits::max_table_bytes) fails to
// compile instead. Compiles outside its lock, so a slow grammar never blocks lookups of others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "grammar/compiler.h"
#include "grammar/grammar_spec.h"
#include "grammar/vocabulary.h"

namespace tokenmill::grammar {

// What the cache holds now, for /metrics.
struct GrammarCacheStats {
  int64_t bytes = 0;         // compiled grammars and their keys
  int64_t entries = 0;
  int64_t budget_bytes = 0;
  uint64_t evictions = 0;    // grammars dropped to stay within the budget, since the start
};

class GrammarCache {
 public:
  // `budget_bytes`: what the cached grammars may hold together. A grammar larger than the
  // whole budget is compiled and returned but not kept.
  GrammarCache(std::shared_ptr<const VocabularyIndex> vocab, GrammarLimits limits,
               int64_t budget_bytes = int64_t{1} << 30);

  // The cached grammar, or a fresh compilation (errors are not cached).
  StatusOr<std::shared_ptr<const CompiledGrammar>> GetOrCompile(const GrammarSpec& spec);

  size_t size() const;
  GrammarCacheStats stats() const;
  const std::shared_ptr<const VocabularyIndex>& vocab() const { return vocab_; }
  // The caps every compilation here keeps to (also for GBNF a caller writes from a schema).
  const GrammarLimits& limits() const { return limits_; }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const CompiledGrammar> grammar;
    int64_t bytes = 0;
  };

  const std::shared_ptr<const VocabularyIndex> vocab_;
  const GrammarLimits limits_;
  const int64_t budget_bytes_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> by_key_;  // keys in lru_
  int64_t bytes_ = 0;
  uint64_t evictions_ = 0;
};

// The default budget: a sixteenth of the machine's physical memory, at least one grammar at
// the per-grammar cap and at most 4 GiB.
int64_t DefaultGrammarCacheBudget(int64_t physical_memory_bytes, int64_t max_grammar_bytes);

}  // namespace tokenmill::grammar
