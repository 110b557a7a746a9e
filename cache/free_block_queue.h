// The LRU queue of blocks with ref count 0, as an intrusive doubly linked list through
// KvBlock's links: push, pop and removal of any block are O(1) and allocate nothing.
//
// The front is taken first by a fresh allocation. The pool pushes a freed cached block at
// the back (most recently used) and a block with nothing cached at the front (nothing is
// lost by reusing it); a prefix hit removes its block from wherever it sits.
#pragma once

#include <vector>

#include "cache/kv_block.h"

namespace tokenmill {

class FreeBlockQueue {
 public:
  FreeBlockQueue() = default;
  FreeBlockQueue(const FreeBlockQueue&) = delete;
  FreeBlockQueue& operator=(const FreeBlockQueue&) = delete;

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  KvBlock* front() const { return head_; }

  void PushBack(KvBlock* block);
  void PushFront(KvBlock* block);
  KvBlock* PopFront();          // CHECKs that the queue is not empty.
  void Remove(KvBlock* block);  // CHECKs that the block is in the queue.
  void Clear();                 // Unlinks every block.

  // Block ids from the front (taken first) to the back.
  std::vector<BlockId> Ids() const;

 private:
  KvBlock* head_ = nullptr;
  KvBlock* tail_ = nullptr;
  int size_ = 0;
};

}  // namespace tokenmill
