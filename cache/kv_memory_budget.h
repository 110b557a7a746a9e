// One limit on the KV memory of several block pools: the models of one server (--kv-cache-memory
// shared by every model). Each pool takes memory for more blocks when its requests need them,
// from the part of the limit no pool holds. A pool that cannot serve its requests even by
// evicting its own cache asks the others, which give back what they can of their free and
// cached blocks: a request that cannot run outweighs another model's cache.
//
// Thread-safe: each engine thread holds one share. A share's `wake` runs under the budget's
// lock, so it must only signal its engine (never call the budget).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace tokenmill {

class KvMemoryShare;

class KvMemoryBudget : public std::enable_shared_from_this<KvMemoryBudget> {
 public:
  // Made shared: each share keeps the budget alive.
  static std::shared_ptr<KvMemoryBudget> Create(int64_t total_bytes);
  KvMemoryBudget(const KvMemoryBudget&) = delete;
  KvMemoryBudget& operator=(const KvMemoryBudget&) = delete;

  int64_t total_bytes() const { return total_bytes_; }
  // Bytes no share holds.
  int64_t unclaimed_bytes() const;

  // A new share, holding nothing. `wake` (may be null) is called when the share should look
  // at BytesAsked() or may take again: another share wants memory, or some came back.
  std::unique_ptr<KvMemoryShare> Join(std::function<void()> wake);

 private:
  friend class KvMemoryShare;
  struct Member {
    const KvMemoryShare* share;
    std::function<void()> wake;
    int64_t held = 0;
    // By pool (an engine's KV groups): bytes it lacked at its last shortfall, until it takes
    // them or its engine's next step.
    std::vector<int64_t> wants;
    int64_t wanted() const;
  };
  explicit KvMemoryBudget(int64_t total_bytes) : total_bytes_(total_bytes) {}
  Member& MemberOf(const KvMemoryShare* share);  // mutex_ held
  void WakeOthers(const KvMemoryShare* share);    // mutex_ held
  void WakeWanting();                             // mutex_ held

  const int64_t total_bytes_;
  mutable std::mutex mutex_;
  std::vector<Member> members_;
  int64_t held_ = 0;  // by every share together
};

// One pool's part of a KvMemoryBudget; gives back all it holds when destroyed.
class KvMemoryShare {
 public:
  ~KvMemoryShare();
  KvMemoryShare(const KvMemoryShare&) = delete;
  KvMemoryShare& operator=(const KvMemoryShare&) = delete;

  // Takes memory for at most `blocks` blocks of `block_bytes` for pool `pool` (0, 1, ...: an
  // engine's KV groups), as many as the unclaimed part holds beyond what the other shares ask
  // for; returns the blocks granted. Granting fewer than `needed` (the blocks without which
  // the pool cannot serve its requests) asks the other shares for the rest, for that pool.
  int TakeBlocks(int pool, int blocks, int needed, int64_t block_bytes);
  void GiveBlocks(int blocks, int64_t block_bytes);
  // Drops this share's asks (its engine's next step makes them again if it must).
  void ClearWant();

  int64_t held_bytes() const;
  // Bytes the other shares want that the unclaimed part cannot give them: what this share
  // should give back if it can.
  int64_t BytesAsked() const;
  void set_wake(std::function<void()> wake);

 private:
  friend class KvMemoryBudget;
  explicit KvMemoryShare(std::shared_ptr<KvMemoryBudget> budget) : budget_(std::move(budget)) {}
  std::shared_ptr<KvMemoryBudget> budget_;
};

}  // namespace tokenmill
