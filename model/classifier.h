// A reranker's classification head (pooling rank) over a pooled hidden state, as llama.cpp's
// rank pooling computes it: dense, its bias and tanh; then out and its bias; a softmax over
// the outputs where the family asks for one (ModelConfig::rank_softmax: qwen3's rerankers).
// On the host, row by row: one vector per request, not a step's batch.
#pragma once

#include <span>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace tokenmill {

// The head's outputs (out's rows, or n_embd values without out); `pooled` has n_embd values.
std::vector<float> Classify(const ModelConfig& config, const ClassifierWeights& head,
                            std::span<const float> pooled);

}  // namespace tokenmill
