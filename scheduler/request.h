// One generation request as the scheduler tracks it: its tokens, how many of them have K/V
// in the cache, and where it is in its life.
//
// States:  waiting -> running -> finished (stopped, length, aborted)
//                       |  ^
//                       v  |  (recompute: blocks freed, prefix stays cached)
//                    preempted (back in the waiting queue)
// A request catches up: each step computes some of num_tokens() - num_computed_tokens
// (a prompt chunk, one decode token, or the last token plus draft tokens to verify).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/types.h"
#include "scheduler/kv_window.h"

namespace tokenmill {

using RequestId = uint64_t;

// How a request picks its tokens and when it stops. The scheduler reads the stop fields;
// the sampler (engine/sampling/sampler.h) the rest, applied to each logits row in this order:
// repetition/frequency/presence penalties -> min_tokens mask -> logit_bias -> temperature ->
// top_k -> top_p -> min_p -> a draw with the RNG at (seed, sequence_index, output position).
// Neutral values (the defaults) change nothing; temperature 0 is greedy (argmax).
struct SamplingParams {
  int max_tokens = 16;                  // generated tokens, at least 1
  std::vector<TokenId> stop_token_ids;  // finish (stopped) after any of these
  bool ignore_eos = false;              // keep going past the model's EOS ids
  // End-of-generation ids (unless ignore_eos) and stop_token_ids are masked until this many
  // tokens were generated.
  int min_tokens = 0;

  float temperature = 0.0f;  // below 1e-5: greedy
  int top_k = 0;             // 0 or -1: off
  float top_p = 1.0f;        // (0, 1]; 1: off
  float min_p = 0.0f;        // [0, 1]; 0: off
  // Over prompt and output tokens: a positive logit is divided by it, a negative one
  // multiplied (as HF, vLLM and llama.cpp do). 1: off.
  float repetition_penalty = 1.0f;
  // Over output tokens: logit -= presence * (count > 0) + frequency * count. 0: off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to these ids' logits, in [-100, 100].
  std::vector<std::pair<TokenId, float>> logit_bias;

  // The RNG stream is (seed, sequence_index): the same seed gives the same tokens whatever
  // else is batched. Unset: the engine draws one when the request is added.
  std::optional<uint64_t> seed;
  int sequence_index = 0;  // which of a request's n sequences this is

  // Log-probabilities (the model's raw log-softmax) of each chosen token, and of the
  // top_logprobs most likely ids at each step (top_logprobs > 0 needs logprobs: the engine's
  // validation refuses it alone; a sampler given it alone still reports both).
  bool logprobs = false;
  int top_logprobs = 0;
  // Set: the log-probability of each prompt token given those before it, and of this many
  // most likely ids at each prompt position (vLLM's prompt_logprobs). Cached positions have
  // no logits, so the scheduler never serves such a request from the prefix cache (it still
  // writes the cache).
  std::optional<int> prompt_logprobs;

  bool greedy() const { return temperature < 1e-5f; }
  bool wants_logprobs() const { return logprobs || top_logprobs > 0; }
};

// What a request computes its prompt for: generation, sampling from the prompt's last row,
// or an embedding, which samples nothing and finishes (kStop) in the step that computes its
// prompt's last token. An embedding that pools every prompt row (mean, CLS) computes them
// all, reading no cached prefix (as prompt_logprobs); one that pools the last row may.
enum class PromptUse { kGenerate, kEmbedLastRow, kEmbedEveryRow };

// What a caller submits; the scheduler assigns the arrival order.
struct NewRequest {
  RequestId id = 0;
  std::vector<TokenId> prompt_token_ids;
  SamplingParams sampling;
  // Smaller runs first (0 by default); ties go to the earlier arrival.
  int priority = 0;
  // Who asked ("" for anonymous): a tenant's sequences count against its share of the KV
  // pool and the batch (Scheduler).
  std::string tenant;
  // Keeps tenants apart in the prefix cache.
  std::string cache_salt;
  std::chrono::steady_clock::time_point arrival_time = std::chrono::steady_clock::now();
  // Set: the request may run past the context length, evicting from the middle of its K/V.
  std::optional<KvWindow> kv_window;
  // Tokens the output will likely repeat (a predicted output): draft source only.
  std::vector<TokenId> predicted_token_ids;
  PromptUse prompt_use = PromptUse::kGenerate;
  // The LoRA adapter it runs with (0: none), opaque here: the engine's (GenerateRequest::lora).
  int lora = 0;
};

enum class RequestState {
  kWaiting,
  kRunning,
  kPreempted,  // waiting again, to recompute its K/V
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
};

enum class FinishReason {
  kStop,    // EOS, a stop token id, or (from the engine) a stop string
  kLength,  // max_tokens or the context length
  kAbort,   // cancelled by the client
};

std::string_view RequestStateName(RequestState state);
std::string_view FinishReasonName(FinishReason reason);
RequestState FinishedState(FinishReason reason);
bool IsFinished(RequestState state);

// Plain data owned by the Scheduler, which alone changes it; others read it through const.
struct Request {
  Request(NewRequest spec, uint64_t arrival_order);

  RequestId id = 0;
  SamplingParams sampling;
  int priority = 0;
  uint64_t arrival_order = 0;  // unique, increasing with each Add
  std::chrono::steady_clock::time_point arrival_time;
  std::string tenant;
  std::string cache_salt;
  std::optional<KvWindow> kv_window;
  std::vector<TokenId> predicted_token_ids;  // NewRequest's: speculation may draft from them
  PromptUse prompt_use = PromptUse::kGenerate;
  int lora = 0;  // NewRequest's

  // Prompt then generated (and accepted draft) tokens: the verified tokens.
  std::vector<TokenId> token_ids;
  int num_prompt_tokens = 0;
  // With a kv_window: token_ids[num_sink_tokens, num_sink_tokens + num_evicted_tokens) were
  // evicted from the cache. The cache holds the other tokens in order, at positions 0, 1, ..
  // ("cache positions"); without evictions they equal the token indices.
  int num_sink_tokens = 0;  // kv_window's sink_tokens rounded up to whole blocks
  int num_evicted_tokens = 0;
  // Cache positions whose K/V are in the cache. May run past num_cache_tokens() by the draft
  // tokens of the step in flight; Update rolls back the rejected ones.
  int num_computed_tokens = 0;
  // Proposed tokens awaiting verification: they get lookahead slots, are never hashed, and
  // are dropped on preemption.
  std::vector<TokenId> draft_token_ids;

  // Its sampled token was taken back (Update got none): it waits, running or preempted, for
  // the engine to give it its next token (Scheduler::Extend) and computes nothing till then.
  bool parked = false;

  RequestState state = RequestState::kWaiting;
  int num_cached_prompt_tokens = 0;  // prompt tokens served by the prefix cache at admission
  int num_preemptions = 0;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  // Verified tokens that belong in the cache: all of them but the evicted ones.
  int num_cache_tokens() const { return num_tokens() - num_evicted_tokens; }
  // The token at a cache position.
  TokenId cache_token(int position) const {
    return token_ids[position < num_sink_tokens ? position : position + num_evicted_tokens];
  }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool embeds() const { return prompt_use != PromptUse::kGenerate; }
  // Whether each prompt row's output counts (prompt logprobs, or an embedding pooling every
  // row): cached positions have none, so it reads no cached prefix (it still writes them).
  bool uses_every_prompt_row() const {
    return sampling.prompt_logprobs.has_value() || prompt_use == PromptUse::kEmbedEveryRow;
  }
  std::span<const TokenId> prompt_token_ids() const {
    return std::span<const TokenId>(token_ids).first(num_prompt_tokens);
  }
  std::span<const TokenId> output_token_ids() const {
    return std::span<const TokenId>(token_ids).subspan(num_prompt_tokens);
  }
};

}  // namespace tokenmill
