#include "grammar/grammar_cache.h"

#include <algorithm>

#include "common/check.h"
#include "grammar/compiled_grammar.h"

namespace tokenmill::grammar {
namespace {

// Kind, then each field length-prefixed, so no two specs share a key.
std::string CacheKey(const GrammarSpec& spec) {
  std::string key(GrammarKindName(spec.kind));
  const auto append = [&key](const std::string& field) {
    key += '\0';
    key += std::to_string(field.size());
    key += ':';
    key += field;
  };
  append(spec.text);
  for (const std::string& choice : spec.choices) append(choice);
  return key;
}

}  // namespace

GrammarCache::GrammarCache(std::shared_ptr<const VocabularyIndex> vocab, GrammarLimits limits,
                           int64_t budget_bytes)
    : vocab_(std::move(vocab)), limits_(limits), budget_bytes_(budget_bytes) {
  TM_CHECK(vocab_ != nullptr);
  TM_CHECK_GT(budget_bytes_, 0);
}

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::GetOrCompile(
    const GrammarSpec& spec) {
  std::string key = CacheKey(spec);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = by_key_.find(key);
    if (it != by_key_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->grammar;
    }
  }
  TM_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGrammar> compiled,
                      CompileGrammar(spec, vocab_, limits_));
  const int64_t bytes = compiled->memory_bytes() + static_cast<int64_t>(key.capacity());
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = by_key_.find(key);  // another thread may have compiled it meanwhile
  if (it != by_key_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->grammar;
  }
  if (bytes > budget_bytes_) return compiled;  // would evict everything and still not fit
  while (!lru_.empty() && bytes_ + bytes > budget_bytes_) {
    by_key_.erase(lru_.back().key);
    bytes_ -= lru_.back().bytes;
    lru_.pop_back();
    ++evictions_;
  }
  lru_.push_front({std::move(key), compiled, bytes});
  by_key_.emplace(lru_.front().key, lru_.begin());
  bytes_ += bytes;
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {.bytes = bytes_,
          .entries = static_cast<int64_t>(lru_.size()),
          .budget_bytes = budget_bytes_,
          .evictions = evictions_};
}

int64_t DefaultGrammarCacheBudget(int64_t physical_memory_bytes, int64_t max_grammar_bytes) {
  constexpr int64_t kMaxBudget = int64_t{4} << 30;
  return std::max(std::min(physical_memory_bytes / 16, kMaxBudget), max_grammar_bytes);
}

}  // namespace tokenmill::grammar
