// Pools an embedding's final hidden states (ForwardInput::hidden_rows) over its prompt as
// llama.cpp does: mean, their average; cls, the first token's; last, the last token's. Then,
// unless raw, scales the vector to unit Euclidean length (llama.cpp's embd_normalize 2, as
// OpenAI's embeddings are). A reranker's score (classify) takes the cls or last row through
// the model's classification head instead. The rows come a step at a time; a recompute after
// preemption starts again at position 0.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "model/config.h"
#include "scheduler/request.h"

namespace tokenmill {

// What an embedding asks for (GenerateRequest::embedding).
struct EmbeddingParams {
  Pooling pooling = Pooling::kMean;  // kMean, kCls or kLast
  bool normalize = true;
  // Rank pooling: the pooled row through the model's classification head (model/classifier.h),
  // its outputs as they are (normalize ignored).
  bool classify = false;
};

// The prompt rows a pooling reads: every one, or the last alone.
PromptUse PromptUseOf(Pooling pooling);

class EmbeddingPooler {
 public:
  // The model's classification head (model/classifier.h), for classify.
  using Head = std::function<std::vector<float>(std::span<const float> pooled)>;

  EmbeddingPooler(EmbeddingParams params, int n_embd, Head head = {});

  // The rows of one step (n_embd floats each), the first at prompt position first_position:
  // every row it computed for kEmbedEveryRow, the prompt's last one for kEmbedLastRow.
  void Add(int first_position, std::span<const float> rows);
  // The pooled (and normalized, or classified) vector; empty when no row came.
  std::vector<float> Result() const;

 private:
  EmbeddingParams params_;
  int n_embd_;
  Head head_;
  std::vector<double> sum_;  // of the rows pooled so far
  int num_rows_ = 0;
};

}  // namespace tokenmill
