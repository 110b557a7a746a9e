// Compiled grammars by (kind, text): a bounded LRU, thread-safe, owned by whoever serves the
// model (one per VocabularyIndex). Compiles outside its lock, so a slow grammar never blocks
// lookups of others.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/status.h"
#include "grammar/compiler.h"
#include "grammar/grammar_spec.h"
#include "grammar/vocabulary.h"

namespace tokenmill::grammar {

class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const VocabularyIndex> vocab, GrammarLimits limits,
               size_t capacity = 256);

  // The cached grammar, or a fresh compilation (errors are not cached).
  StatusOr<std::shared_ptr<const CompiledGrammar>> GetOrCompile(const GrammarSpec& spec);

  size_t size() const;
  const std::shared_ptr<const VocabularyIndex>& vocab() const { return vocab_; }
  // The caps every compilation here keeps to (also for GBNF a caller writes from a schema).
  const GrammarLimits& limits() const { return limits_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;

  const std::shared_ptr<const VocabularyIndex> vocab_;
  const GrammarLimits limits_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_key_;
};

}  // namespace tokenmill::grammar
