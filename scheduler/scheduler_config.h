// Limits of the scheduler, from the server's flags.
#pragma once

#include <vector>

#include "cache/types.h"
#include "common/status.h"

namespace tokenmill {

// Tokens one step computes at most of a request with prompt_logprobs: the runner holds a row
// of logits (n_vocab floats) for each, 256 MiB at 256 tokens of a 262144-token vocabulary.
inline constexpr int kMaxPromptLogprobsTokensPerStep = 256;

struct SchedulerConfig {
  // Tokens computed per step over all requests (--max-num-batched-tokens).
  int max_num_batched_tokens = 2048;
  // Running requests at once (--max-num-seqs).
  int max_num_seqs = 256;
  // The model's context length: prompt plus generated tokens.
  int max_model_len = 2048;
  // Waiting requests that begin computing their prompts in one step, 0 for no limit
  // (--max-prefills-per-step; the server's default is 1 on the CPU). On the CPU a step's time
  // grows with its tokens: prompts computed together each answer after all of them, one a step
  // each after its own (docs/design.md). A request with no more than a block to compute (its
  // prompt found cached) does not count.
  int max_prefills_per_step = 0;
  // Waiting requests beyond which Add refuses new ones (preempted ones always requeue).
  int max_queue = 1024;
  // An encoder's (bidirectional attention): each prompt is computed whole in one step, never
  // chunked, so the context is at most max_num_batched_tokens.
  bool whole_prompts = false;
  // The model's end-of-sequence ids (EOS, EOT): they stop a request unless ignore_eos.
  std::vector<TokenId> eos_token_ids;
};

// InvalidArgument naming the flag when a limit is not positive.
Status ValidateSchedulerConfig(const SchedulerConfig& config);

}  // namespace tokenmill
