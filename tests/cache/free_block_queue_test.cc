#include "cache/free_block_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace tokenmill {
namespace free_block_queue_test {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class FreeBlockQueueTest : public ::testing::Test {
 protected:
  FreeBlockQueueTest() : blocks_(6) {
    for (int i = 0; i < 6; ++i) blocks_[i].id = i;
  }
  std::vector<KvBlock> blocks_;
  FreeBlockQueue queue_;
};

TEST_F(FreeBlockQueueTest, PopsInPushOrderAndPushFrontJumpsTheLine) {
  for (int i = 0; i < 4; ++i) queue_.PushBack(&blocks_[i]);
  queue_.PushFront(&blocks_[5]);
  EXPECT_THAT(queue_.Ids(), ElementsAre(5, 0, 1, 2, 3));
  EXPECT_EQ(queue_.PopFront()->id, 5);
  EXPECT_EQ(queue_.PopFront()->id, 0);
  EXPECT_EQ(queue_.size(), 3);
  EXPECT_FALSE(blocks_[0].in_free_queue);
}

TEST_F(FreeBlockQueueTest, RemovesFromHeadMiddleAndTail) {
  for (int i = 0; i < 5; ++i) queue_.PushBack(&blocks_[i]);
  queue_.Remove(&blocks_[2]);
  EXPECT_THAT(queue_.Ids(), ElementsAre(0, 1, 3, 4));
  queue_.Remove(&blocks_[0]);
  queue_.Remove(&blocks_[4]);
  EXPECT_THAT(queue_.Ids(), ElementsAre(1, 3));
  EXPECT_EQ(blocks_[1].prev_free, nullptr);
  EXPECT_EQ(blocks_[3].next_free, nullptr);
  // A removed block can come back, at either end.
  queue_.PushBack(&blocks_[2]);
  queue_.PushFront(&blocks_[4]);
  EXPECT_THAT(queue_.Ids(), ElementsAre(4, 1, 3, 2));
  queue_.Clear();
  EXPECT_THAT(queue_.Ids(), IsEmpty());
  EXPECT_TRUE(queue_.empty());
  for (const KvBlock& b : blocks_) EXPECT_FALSE(b.in_free_queue);
}

TEST_F(FreeBlockQueueTest, RemovingTheOnlyBlockEmptiesTheQueue) {
  queue_.PushBack(&blocks_[3]);
  queue_.Remove(&blocks_[3]);
  EXPECT_TRUE(queue_.empty());
  EXPECT_EQ(queue_.front(), nullptr);
  queue_.PushBack(&blocks_[1]);
  EXPECT_THAT(queue_.Ids(), ElementsAre(1));
}

TEST_F(FreeBlockQueueTest, MisuseIsAProgrammerError) {
  queue_.PushBack(&blocks_[0]);
  EXPECT_DEATH(queue_.PushBack(&blocks_[0]), "already in the free queue");
  EXPECT_DEATH(queue_.Remove(&blocks_[1]), "not in the free queue");
  FreeBlockQueue empty;
  EXPECT_DEATH(empty.PopFront(), "empty free queue");
}

}  // namespace free_block_queue_test
}  // namespace tokenmill
