#include "cli/kv_window_stream.h"

#include <algorithm>
#include <vector>

#include "cli/command.h"

namespace tokenmill::cli {

KvWindowStream::KvWindowStream(const Model& model, CpuContext ctx, KvType type,
                               KvWindow window, int max_tokens)
    : model_(model),
      forward_(model, ctx),
      window_(window),
      max_model_len_(model.config().context_length),
      // The cache holds at most limit + 1 tokens (just before an eviction).
      blocks_((std::min(max_tokens, KvWindowLimit(window, kBlockSize, max_model_len_) + 1) +
               kBlockSize - 1) / kBlockSize),
      storage_(model.config(), type, blocks_, kBlockSize) {}

StatusOr<int64_t> KvWindowStream::Run(std::span<const int32_t> text, const OnLogits& on_logits) {
  TM_RETURN_IF_ERROR(CheckKvWindow(window_, kBlockSize, max_model_len_));
  const int64_t vocab = model_.config().n_vocab;
  const int sinks = KvWindowSinkTokens(window_, kBlockSize);
  const int limit = KvWindowLimit(window_, kBlockSize, max_model_len_);
  BatchBuilder builder(kBlockSize, blocks_, NumKvGroups(model_.config()));
  const int seq = builder.AddSequence();
  std::vector<float> logits;
  std::vector<int32_t> step_tokens;
  int64_t num_tokens = 0;   // text tokens that entered the stream
  int64_t num_evicted = 0;  // text[sinks, sinks + num_evicted) left the cache
  const auto text_index = [&](int64_t cache_position) {
    return cache_position < sinks ? cache_position : cache_position + num_evicted;
  };
  while (num_tokens < static_cast<int64_t>(text.size())) {
    // As many tokens as fit before the next eviction (at least one, which triggers it).
    const int64_t cache_tokens = num_tokens - num_evicted;
    const int64_t first_new = cache_tokens;  // cache position of the first new token
    num_tokens += std::min<int64_t>(static_cast<int64_t>(text.size()) - num_tokens,
                                    std::max<int64_t>(1, limit - cache_tokens));
    const int evict = KvWindowTokensToEvict(window_, kBlockSize, max_model_len_,
                                            static_cast<int>(num_tokens - num_evicted));
    int64_t recompute_from = first_new;
    if (evict > 0) {
      num_evicted += evict;
      recompute_from = std::min<int64_t>(builder.SequenceLength(seq), sinks);
      TM_RETURN_IF_ERROR(builder.Truncate(seq, static_cast<int32_t>(recompute_from)));
    }
    const int64_t first_scored = first_new - (evict > 0 ? evict : 0);
    const int64_t end = num_tokens - num_evicted;
    for (int64_t begin = recompute_from; begin < end; begin += kStepTokens) {
      const int64_t n = std::min<int64_t>(kStepTokens, end - begin);
      step_tokens.clear();
      for (int64_t p = begin; p < begin + n; ++p) step_tokens.push_back(text[text_index(p)]);
      // Kept tokens are recomputed for their K/V only; the new ones are scored.
      const bool scored = begin + n > first_scored;
      const std::span<const int32_t> step(step_tokens);
      TM_RETURN_IF_ERROR(builder.Append(
          seq, step, scored ? BatchBuilder::Logits::kAll : BatchBuilder::Logits::kNone));
      logits.resize(scored ? static_cast<size_t>(n * vocab) : 0);
      TM_RETURN_IF_ERROR(forward_.Run({builder.token_ids(), builder.batch(), builder.logit_rows()},
                                      storage_.view(), logits));
      builder.Clear();
      for (int64_t p = std::max(begin, first_scored); scored && p < begin + n; ++p) {
        on_logits(text_index(p), p,
                  std::span<const float>(logits).subspan((p - begin) * vocab, vocab));
      }
    }
  }
  return num_evicted;
}

}  // namespace tokenmill::cli
