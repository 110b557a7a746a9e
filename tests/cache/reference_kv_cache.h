// A deliberately naive model of the KV cache manager's policy, for the randomized test:
// blocks are keyed by their whole prefix (salt + every token up to the block's end) in a
// std::map instead of chained hashes, the free queue is a std::deque searched linearly,
// and nothing is counted incrementally. Same policy, independent data structures.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/kv_cache_manager.h"

namespace tokenmill::testing {

class ReferenceKvCache {
 public:
  using PrefixKey = std::pair<std::string, std::vector<TokenId>>;

  ReferenceKvCache(int num_blocks, int block_size, int watermark_blocks)
      : block_size_(block_size),
        watermark_blocks_(watermark_blocks),
        ref_(num_blocks, 0),
        content_(num_blocks) {
    for (BlockId id = 0; id < num_blocks; ++id) queue_.push_back(id);
  }

  std::vector<BlockId> Lookup(const KvCacheRequest& r) {
    if (r.num_computed_tokens > 0 || !Table(r.id).empty()) return {};
    const int n = static_cast<int>(r.verified_tokens.size());
    query_tokens_ += n;
    std::vector<BlockId> hit;
    for (int i = 0; i < (n > 0 ? (n - 1) / block_size_ : 0); ++i) {
      const PrefixKey key = KeyOf(r, i);
      std::optional<BlockId> best;
      for (BlockId id = 0; id < static_cast<BlockId>(ref_.size()); ++id) {
        if (content_[id] != key) continue;
        // Prefer a copy in use, then the lowest id.
        if (!best.has_value() || (ref_[id] > 0 && ref_[*best] == 0)) best = id;
      }
      if (!best.has_value()) break;
      hit.push_back(*best);
    }
    hit_tokens_ += static_cast<int64_t>(hit.size()) * block_size_;
    return hit;
  }

  std::optional<std::vector<BlockId>> Allocate(const KvCacheRequest& r, int num_new,
                                               int num_lookahead, const std::vector<BlockId>& hit) {
    const bool first = Table(r.id).empty();
    const int64_t tokens = int64_t{r.num_computed_tokens} +
                           static_cast<int64_t>(hit.size()) * block_size_ + num_new + num_lookahead;
    const int64_t required = (tokens + block_size_ - 1) / block_size_;
    const int64_t to_allocate =
        std::max<int64_t>(0, required - static_cast<int64_t>(Table(r.id).size() + hit.size()));
    const int64_t evictable_hits =
        std::count_if(hit.begin(), hit.end(), [&](BlockId id) { return ref_[id] == 0; });
    if (to_allocate + (first ? watermark_blocks_ : 0) >
        static_cast<int64_t>(queue_.size()) - evictable_hits) {
      return std::nullopt;
    }
    Entry& entry = tables_[r.id];
    for (const BlockId id : hit) {
      if (ref_[id]++ == 0) queue_.erase(std::find(queue_.begin(), queue_.end(), id));
      entry.blocks.push_back(id);
    }
    if (first) entry.num_cached = static_cast<int>(hit.size());
    std::vector<BlockId> fresh;
    for (int64_t i = 0; i < to_allocate; ++i) {
      const BlockId id = queue_.front();
      queue_.pop_front();
      if (content_[id].has_value()) ++evictions_;
      content_[id].reset();
      ref_[id] = 1;
      entry.blocks.push_back(id);
      fresh.push_back(id);
    }
    CacheComputed(r);
    return fresh;
  }

  void CacheComputed(const KvCacheRequest& r) {
    auto it = tables_.find(r.id);
    if (it == tables_.end()) return;
    Entry& entry = it->second;
    const int computed =
        std::min(r.num_computed_tokens, static_cast<int>(r.verified_tokens.size()));
    const int full = std::min(computed / block_size_, static_cast<int>(entry.blocks.size()));
    for (int i = entry.num_cached; i < full; ++i) content_[entry.blocks[i]] = KeyOf(r, i);
    entry.num_cached = std::max(entry.num_cached, full);
  }

  void Free(const KvCacheRequest& r) {
    auto it = tables_.find(r.id);
    if (it == tables_.end()) return;
    CacheComputed(r);
    const std::vector<BlockId>& blocks = it->second.blocks;
    for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
      if (--ref_[*b] > 0) continue;
      if (content_[*b].has_value()) {
        queue_.push_back(*b);
      } else {
        queue_.push_front(*b);
      }
    }
    tables_.erase(it);
  }

  bool ResetPrefixCache() {
    if (std::any_of(ref_.begin(), ref_.end(), [](int r) { return r > 0; })) return false;
    Reset();
    return true;
  }

  void Reset() {
    tables_.clear();
    queue_.clear();
    for (BlockId id = 0; id < static_cast<BlockId>(ref_.size()); ++id) {
      ref_[id] = 0;
      content_[id].reset();
      queue_.push_back(id);
    }
  }

  std::vector<BlockId> Table(uint64_t id) const {
    const auto it = tables_.find(id);
    return it == tables_.end() ? std::vector<BlockId>{} : it->second.blocks;
  }
  std::vector<BlockId> Queue() const { return {queue_.begin(), queue_.end()}; }
  std::vector<uint64_t> RequestIds() const {
    std::vector<uint64_t> ids;
    for (const auto& [id, entry] : tables_) ids.push_back(id);
    return ids;
  }
  int NumCachedEvictable() const {
    int n = 0;
    for (const BlockId id : queue_) n += content_[id].has_value() ? 1 : 0;
    return n;
  }
  int64_t evictions() const { return evictions_; }
  int64_t query_tokens() const { return query_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }

 private:
  struct Entry {
    std::vector<BlockId> blocks;
    int num_cached = 0;
  };

  PrefixKey KeyOf(const KvCacheRequest& r, int block_index) const {
    const auto end = r.verified_tokens.begin() + (block_index + 1) * block_size_;
    return {std::string(r.cache_salt), std::vector<TokenId>(r.verified_tokens.begin(), end)};
  }

  int block_size_;
  int watermark_blocks_;
  std::vector<int> ref_;
  std::vector<std::optional<PrefixKey>> content_;
  std::deque<BlockId> queue_;
  std::map<uint64_t, Entry> tables_;
  int64_t evictions_ = 0;
  int64_t query_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace tokenmill::testing
