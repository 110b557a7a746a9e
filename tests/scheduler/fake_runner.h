// A model-free runner for scheduler tests. It keeps a simulated KV memory: each slot holds a
// fingerprint of the whole token prefix ending at its position, computed from the previous
// position's slot read back through the request's block table (as attention reads K/V).
// A row that needs logits "samples" the token its fingerprint names. So a wrong block
// table, a prefix hit on the wrong K/V, or a recompute that skipped a token changes the
// tokens, which the tests compare with ReferenceContinuation over the plain sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "scheduler/scheduler_output.h"

namespace tokenmill::testing {

inline constexpr int kVocabSize = 1000;
inline constexpr uint64_t kEmptyPrefixFingerprint = 0x243f6a8885a308d3ULL;

// Fingerprint of prefix + token (splitmix64 finalizer).
inline uint64_t ExtendFingerprint(uint64_t prefix, TokenId token) {
  uint64_t x = prefix ^ (static_cast<uint64_t>(token) + 0x9e3779b97f4a7c15ULL);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The token a greedy model picks after the prefix with this fingerprint.
inline TokenId TokenAfter(uint64_t fingerprint) {
  return static_cast<TokenId>(fingerprint % kVocabSize);
}

// The `count` tokens a greedy model generates after `tokens`, computed directly.
inline std::vector<TokenId> ReferenceContinuation(std::span<const TokenId> tokens, int count) {
  uint64_t fingerprint = kEmptyPrefixFingerprint;
  for (const TokenId token : tokens) fingerprint = ExtendFingerprint(fingerprint, token);
  std::vector<TokenId> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(TokenAfter(fingerprint));
    fingerprint = ExtendFingerprint(fingerprint, out.back());
  }
  return out;
}

// With a sliding window, a second memory stands for KV group 1's layers: each row also reads
// group 1's slots of the window before it (through sliding_block_table), which must hold the
// same fingerprints as group 0's, so a released block read, or one reused too early, fails.
class FakeRunner {
 public:
  FakeRunner(int num_blocks, int block_size, int sliding_num_blocks = 0, int sliding_window = 0);

  // Writes every row's fingerprint into its slot, then for each request with num_logits > 0
  // verifies its draft rows greedily (accept while the draft equals the token the row before
  // names) and returns the accepted drafts plus one sampled token. Reports a gtest failure
  // for any inconsistency in the step (rows, tables, unwritten K/V).
  ModelOutput Execute(const SchedulerOutput& step);

 private:
  using Memory = std::vector<std::optional<uint64_t>>;
  std::optional<uint64_t> Read(const Memory& memory, std::span<const BlockId> table,
                               int position) const;
  void Write(Memory& memory, std::span<const BlockId> table, int position, uint64_t fingerprint);
  std::optional<size_t> Slot(std::span<const BlockId> table, int position) const;
  // Group 1's window before `position` equals group 0's fingerprints there.
  void CheckWindow(const ScheduledRequest& request, int position) const;

  int block_size_;
  int sliding_window_;
  Memory slots_;
  Memory sliding_slots_;
};

}  // namespace tokenmill::testing
