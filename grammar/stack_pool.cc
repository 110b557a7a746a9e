#include "grammar/stack_pool.h"

#include "common/check.h"

namespace tokenmill::grammar {
namespace {

// No node has a negative position.
constexpr NodeKey kEmptyKey{-1, -1, -1};
constexpr size_t kInitialSlots = 64;

size_t SlotOf(const NodeKey& node, size_t mask) {
  uint64_t key = ((static_cast<uint64_t>(static_cast<uint32_t>(node.pos)) << 32) |
                  static_cast<uint32_t>(node.parent)) ^
                 (static_cast<uint64_t>(static_cast<uint32_t>(node.count)) * 0x9e3779b97f4a7c15ULL);
  key ^= key >> 29;
  key *= 0xbf58476d1ce4e5b9ULL;
  key ^= key >> 32;
  return static_cast<size_t>(key) & mask;
}

}  // namespace

NodeIdMap::NodeIdMap() : keys_(kInitialSlots, kEmptyKey), ids_(kInitialSlots, -1) {}

int32_t NodeIdMap::Find(const NodeKey& key) const {
  const size_t mask = keys_.size() - 1;
  for (size_t slot = SlotOf(key, mask);; slot = (slot + 1) & mask) {
    if (keys_[slot] == key) return ids_[slot];
    if (keys_[slot] == kEmptyKey) return -1;
  }
}

void NodeIdMap::Insert(const NodeKey& key, int32_t id) {
  if ((size_ + 1) * 2 > keys_.size()) Grow();
  const size_t mask = keys_.size() - 1;
  size_t slot = SlotOf(key, mask);
  while (keys_[slot] != kEmptyKey) slot = (slot + 1) & mask;
  keys_[slot] = key;
  ids_[slot] = id;
  used_.push_back(static_cast<uint32_t>(slot));
  ++size_;
}

void NodeIdMap::Clear() {
  for (const uint32_t slot : used_) keys_[slot] = kEmptyKey;
  used_.clear();
  size_ = 0;
}

void NodeIdMap::Grow() {
  std::vector<NodeKey> keys(keys_.size() * 2, kEmptyKey);
  std::vector<int32_t> ids(keys.size(), -1);
  std::vector<uint32_t> used;
  used.reserve(used_.size());
  const size_t mask = keys.size() - 1;
  for (const uint32_t old : used_) {
    size_t slot = SlotOf(keys_[old], mask);
    while (keys[slot] != kEmptyKey) slot = (slot + 1) & mask;
    keys[slot] = keys_[old];
    ids[slot] = ids_[old];
    used.push_back(static_cast<uint32_t>(slot));
  }
  keys_ = std::move(keys);
  ids_ = std::move(ids);
  used_ = std::move(used);
}

int32_t StackPool::Intern(int32_t pos, int32_t parent, int32_t count) {
  const NodeKey key{pos, parent, count};
  int32_t id = kept_.Find(key);
  if (id >= 0) return id;
  if (in_scratch_) {
    id = scratch_.Find(key);
    if (id >= 0) return id;
  }
  id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({pos, parent, count});
  (in_scratch_ ? scratch_ : kept_).Insert(key, id);
  return id;
}

void StackPool::BeginScratch() {
  TM_CHECK(!in_scratch_);
  in_scratch_ = true;
  scratch_begin_ = nodes_.size();
}

void StackPool::EndScratch() {
  TM_CHECK(in_scratch_);
  in_scratch_ = false;
  nodes_.resize(scratch_begin_);
  scratch_.Clear();
}

}  // namespace tokenmill::grammar
