// Teacher-forced streaming of a text through the KV cache under the engine's kv_window
// policy (scheduler/kv_window.h), for `tokenmill perplexity --kv-window`: the text's tokens
// enter the cache as a generation's would, and when the cache would hold more than the
// window allows the same rule evicts from the middle and the kept tokens are recomputed at
// their new cache positions, as the scheduler does. Tokens that fit without an eviction are
// computed together (the result is the same as one at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "common/status.h"
#include "kernels/cpu/matmul.h"
#include "model/forward.h"
#include "scheduler/kv_window.h"

namespace tokenmill::cli {

// Tokens per forward step: bounds the logits buffer (step x vocabulary floats).
inline constexpr int kStepTokens = 128;

class KvWindowStream {
 public:
  // Called with each text token's next-token logits (n_vocab floats), in text order, and
  // the token's cache position: the cache then holds the sinks and the text tokens up to
  // this one that follow them at positions sinks..cache_position.
  using OnLogits = std::function<void(int64_t text_index, int64_t cache_position,
                                      std::span<const float> logits)>;

  // `max_tokens`: the longest text Run gets.
  KvWindowStream(const Model& model, CpuContext ctx, KvType type, KvWindow window,
                 int max_tokens);

  // Streams `text` from an empty cache; returns the tokens evicted on the way.
  StatusOr<int64_t> Run(std::span<const int32_t> text, const OnLogits& on_logits);

 private:
  const Model& model_;
  ForwardPass forward_;
  KvWindow window_;
  int max_model_len_;
  int64_t blocks_;
  KvCacheStorage storage_;
};

}  // namespace tokenmill::cli
