// The kv_window policy (bounded-memory generation with attention sinks) as pure arithmetic,
// shared by the Scheduler and by `tokenmill perplexity --kv-window`, which measures its
// quality: the same rule decides what both keep.
#pragma once

#include "common/status.h"

namespace tokenmill {

// Bounded-memory generation past the context (StreamingLLM-style attention sinks): the
// cache keeps the first sink_tokens (rounded up to whole blocks) and recent tokens; when the
// request would hold more than sink + window_tokens (or the context), whole blocks from the
// middle are evicted and the generation goes on. Off (unset) by default.
struct KvWindow {
  int sink_tokens = 4;
  int window_tokens = 0;  // 0: as many as the context leaves after the sinks
};

// sink_tokens rounded up to whole blocks: the tokens whose K/V are never evicted.
int KvWindowSinkTokens(const KvWindow& window, int block_size);

// InvalidArgument naming the field to change when the window does not fit the context.
Status CheckKvWindow(const KvWindow& window, int block_size, int max_model_len);

// Most tokens the cache holds for the request.
int KvWindowLimit(const KvWindow& window, int block_size, int max_model_len);

// How many tokens after the sinks to evict when the cache would hold num_cache_tokens: 0
// within the limit, else all but the sinks and the most recent half of the window (at least
// one block), so one recompute of the kept tokens is amortized over many steps.
int KvWindowTokensToEvict(const KvWindow& window, int block_size, int max_model_len,
                          int num_cache_tokens);

}  // namespace tokenmill
