#include "cache/free_block_queue.h"

#include "common/check.h"

namespace tokenmill {

void FreeBlockQueue::PushBack(KvBlock* block) {
  TM_CHECK(!block->in_free_queue) << "block " << block->id << " is already in the free queue";
  block->prev_free = tail_;
  block->next_free = nullptr;
  if (tail_ != nullptr) {
    tail_->next_free = block;
  } else {
    head_ = block;
  }
  tail_ = block;
  block->in_free_queue = true;
  ++size_;
}

void FreeBlockQueue::PushFront(KvBlock* block) {
  TM_CHECK(!block->in_free_queue) << "block " << block->id << " is already in the free queue";
  block->prev_free = nullptr;
  block->next_free = head_;
  if (head_ != nullptr) {
    head_->prev_free = block;
  } else {
    tail_ = block;
  }
  head_ = block;
  block->in_free_queue = true;
  ++size_;
}

KvBlock* FreeBlockQueue::PopFront() {
  TM_CHECK(head_ != nullptr) << "PopFront on an empty free queue";
  KvBlock* block = head_;
  Remove(block);
  return block;
}

void FreeBlockQueue::Remove(KvBlock* block) {
  TM_CHECK(block->in_free_queue) << "block " << block->id << " is not in the free queue";
  if (block->prev_free != nullptr) {
    block->prev_free->next_free = block->next_free;
  } else {
    head_ = block->next_free;
  }
  if (block->next_free != nullptr) {
    block->next_free->prev_free = block->prev_free;
  } else {
    tail_ = block->prev_free;
  }
  block->prev_free = nullptr;
  block->next_free = nullptr;
  block->in_free_queue = false;
  --size_;
}

void FreeBlockQueue::Clear() {
  while (head_ != nullptr) Remove(head_);
}

std::vector<BlockId> FreeBlockQueue::Ids() const {
  std::vector<BlockId> ids;
  ids.reserve(size_);
  for (const KvBlock* b = head_; b != nullptr; b = b->next_free) ids.push_back(b->id);
  return ids;
}

}  // namespace tokenmill
