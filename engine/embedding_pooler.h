// Pools an embedding's final hidden states (ForwardInput::hidden_rows) over its prompt as
// llama.cpp does: mean, their average; cls, the first token's; last, the last token's. Then,
// unless raw, scales the vector to unit Euclidean length (llama.cpp's embd_normalize 2, as
// OpenAI's embeddings are). The rows come a step at a time; a recompute after preemption
// starts again at position 0.
#pragma once

#include <span>
#include <vector>

#include "model/config.h"
#include "scheduler/request.h"

namespace tokenmill {

// What an embedding asks for (GenerateRequest::embedding).
struct EmbeddingParams {
  Pooling pooling = Pooling::kMean;  // kMean, kCls or kLast
  bool normalize = true;
};

// The prompt rows a pooling reads: every one, or the last alone.
PromptUse PromptUseOf(Pooling pooling);

class EmbeddingPooler {
 public:
  EmbeddingPooler(EmbeddingParams params, int n_embd);

  // The rows of one step (n_embd floats each), the first at prompt position first_position:
  // every row it computed for kEmbedEveryRow, the prompt's last one for kEmbedLastRow.
  void Add(int first_position, std::span<const float> rows);
  // The pooled (and normalized) vector; empty when no row came.
  std::vector<float> Result() const;

 private:
  EmbeddingParams params_;
  int n_embd_;
  std::vector<double> sum_;  // of the rows pooled so far
  int num_rows_ = 0;
};

}  // namespace tokenmill
