#include "scheduler/kv_window.h"

#include <algorithm>
#include <string>

namespace tokenmill {
namespace {

std::string Num(int64_t value) { return std::to_string(value); }

}  // namespace

int KvWindowSinkTokens(const KvWindow& window, int block_size) {
  return (window.sink_tokens + block_size - 1) / block_size * block_size;
}

Status CheckKvWindow(const KvWindow& window, int block_size, int max_model_len) {
  if (window.sink_tokens < 0 || window.window_tokens < 0) {
    return InvalidArgumentError("kv_window.sink_tokens and window_tokens must be >= 0, got " +
                                Num(window.sink_tokens) + " and " + Num(window.window_tokens));
  }
  // Room for the sinks, at least two blocks of recent tokens (one is kept after an eviction).
  const int most_sinks = max_model_len - 2 * block_size;
  if (KvWindowSinkTokens(window, block_size) > most_sinks) {
    return InvalidArgumentError("kv_window.sink_tokens is " + Num(window.sink_tokens) +
                                ", which leaves too little of the " + Num(max_model_len) +
                                "-token context for recent tokens: give at most " +
                                Num(std::max(0, most_sinks)));
  }
  if (window.window_tokens != 0 && window.window_tokens < 2 * block_size) {
    return InvalidArgumentError("kv_window.window_tokens must be 0 (fill the context) or at "
                                "least " +
                                Num(2 * block_size) + " (two KV blocks), got " +
                                Num(window.window_tokens));
  }
  return OkStatus();
}

int KvWindowLimit(const KvWindow& window, int block_size, int max_model_len) {
  if (window.window_tokens == 0) return max_model_len;
  return std::min(max_model_len, KvWindowSinkTokens(window, block_size) + window.window_tokens);
}

int KvWindowTokensToEvict(const KvWindow& window, int block_size, int max_model_len,
                          int num_cache_tokens) {
  const int limit = KvWindowLimit(window, block_size, max_model_len);
  if (num_cache_tokens <= limit) return 0;
  const int sinks = KvWindowSinkTokens(window, block_size);
  const int recent = std::max(block_size, (limit - sinks) / 2);
  return num_cache_tokens - sinks - recent;
}

}  // namespace tokenmill
