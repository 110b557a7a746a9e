#include "grammar/grammar_cache.h"

#include "common/check.h"

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
                           size_t capacity)
    : vocab_(std::move(vocab)), limits_(limits), capacity_(capacity) {
  TM_CHECK(vocab_ != nullptr);
  TM_CHECK_GT(capacity_, 0u);
}

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::GetOrCompile(
    const GrammarSpec& spec) {
  const std::string key = CacheKey(spec);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = by_key_.find(key);
    if (it != by_key_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  TM_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledGrammar> compiled,
                      CompileGrammar(spec, vocab_, limits_));
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = by_key_.find(key);  // another thread may have compiled it meanwhile
  if (it != by_key_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  lru_.emplace_front(key, compiled);
  by_key_[key] = lru_.begin();
  if (lru_.size() > capacity_) {
    by_key_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

}  // namespace tokenmill::grammar
