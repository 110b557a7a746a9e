#include "tests/scheduler/fake_runner.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cache/kv_cache_manager.h"

namespace tokenmill::testing {

FakeRunner::FakeRunner(int num_blocks, int block_size, int sliding_num_blocks,
                       int sliding_window)
    : block_size_(block_size),
      sliding_window_(sliding_window),
      slots_(static_cast<size_t>(num_blocks) * block_size),
      sliding_slots_(static_cast<size_t>(sliding_num_blocks) * block_size) {}

std::optional<size_t> FakeRunner::Slot(std::span<const BlockId> table, int position) const {
  const size_t index = static_cast<size_t>(position / block_size_);
  if (position < 0 || index >= table.size()) {
    ADD_FAILURE() << "position " << position << " is outside a table of " << table.size()
                  << " blocks";
    return std::nullopt;
  }
  if (table[index] == kReleasedBlock) {
    ADD_FAILURE() << "position " << position << " is in a released block";
    return std::nullopt;
  }
  return static_cast<size_t>(table[index]) * block_size_ + position % block_size_;
}

std::optional<uint64_t> FakeRunner::Read(const Memory& memory, std::span<const BlockId> table,
                                         int position) const {
  if (position < 0) return kEmptyPrefixFingerprint;
  const std::optional<size_t> slot = Slot(table, position);
  if (!slot.has_value()) return std::nullopt;
  if (!memory[*slot].has_value()) ADD_FAILURE() << "read of unwritten K/V at " << position;
  return memory[*slot];
}

void FakeRunner::Write(Memory& memory, std::span<const BlockId> table, int position,
                       uint64_t fingerprint) {
  const std::optional<size_t> slot = Slot(table, position);
  if (slot.has_value()) memory[*slot] = fingerprint;
}

void FakeRunner::CheckWindow(const ScheduledRequest& request, int position) const {
  for (int q = std::max(0, position - sliding_window_ + 1); q < position; ++q) {
    EXPECT_EQ(Read(sliding_slots_, request.sliding_block_table, q),
              Read(slots_, request.block_table, q))
        << "request " << request.id << ": group 1 at position " << q << " for " << position;
  }
}

ModelOutput FakeRunner::Execute(const SchedulerOutput& step) {
  ModelOutput output;
  for (const ScheduledRequest& request : step.requests) {
    EXPECT_EQ(static_cast<int>(request.token_ids.size()), request.num_new_tokens)
        << "request " << request.id;
    EXPECT_GT(request.num_new_tokens, 0) << "request " << request.id;
    EXPECT_LE(request.num_logits, request.num_new_tokens) << "request " << request.id;
    if (sliding_window_ > 0) {
      EXPECT_EQ(request.sliding_block_table.size(), request.block_table.size());
    }
    std::vector<uint64_t> row_fingerprints;
    for (int i = 0; i < request.num_new_tokens; ++i) {
      const int position = request.num_computed_tokens + i;
      const std::optional<uint64_t> previous = Read(slots_, request.block_table, position - 1);
      if (!previous.has_value()) return output;
      row_fingerprints.push_back(ExtendFingerprint(*previous, request.token_ids[i]));
      Write(slots_, request.block_table, position, row_fingerprints.back());
      if (sliding_window_ > 0) {
        CheckWindow(request, position);
        Write(sliding_slots_, request.sliding_block_table, position, row_fingerprints.back());
      }
    }
    if (request.num_logits == 0) continue;
    SampledTokens sampled;
    sampled.id = request.id;
    const int first_logit_row = request.num_new_tokens - request.num_logits;
    const int first_draft_row = request.num_new_tokens - request.num_draft_tokens;
    for (int row = first_logit_row; row < request.num_new_tokens; ++row) {
      const TokenId target = TokenAfter(row_fingerprints[row]);
      sampled.token_ids.push_back(target);
      const int next = row + 1;
      // The next row is a draft: keep going only if it guessed this row's token.
      if (next < first_draft_row || next >= request.num_new_tokens) break;
      if (request.token_ids[next] != target) break;
    }
    output.requests.push_back(std::move(sampled));
  }
  return output;
}

}  // namespace tokenmill::testing
