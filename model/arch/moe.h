// A mixture-of-experts feed-forward's two steps that are not matmuls, each testable alone:
// routing (llama.cpp's build_moe_ffn up to ffn_moe_weights: which experts a token goes to
// and with which weights) and the grouping of a step's tokens by expert, so that each
// routed expert multiplies all its tokens at once and no other expert is read.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "model/config.h"

namespace tokenmill {

// The experts one token goes to and their weights, from its router logits (n_expert of them,
// the router's bias already added), each as llama.cpp computes it:
//  - probs: SoftmaxLikeGgml's arithmetic over the logits as ggml's soft_max runs it (full
//    8-float vectors with GgmlVectorExpf, the rest with expf, summed in double), or the sigmoid
//    1 / (1 + expf(-x)), or the logits themselves (kSoftmaxSelected);
//  - the n_used largest probs: ggml's argsort (std::sort of the indices under "greater
//    prob"), its first n_used, so ties fall as llama.cpp's do; chosen by the probs plus
//    `selection_bias` where given (DeepSeek-V3's exp_probs_b), among the experts of the
//    best groups where c.n_groups > 1 (each group scored by its two best such sums);
//  - weights: those probs (kSoftmaxSelected: their softmax), divided by their sum (in double,
//    clamped below to 6.1035e-5) when `normalize`, times `scale` unless it is 0 or 1.
// `logits` is overwritten by the probs; experts and weights take n_used entries.
void RouteToken(const ExpertConfig& c, std::span<float> logits, std::span<int32_t> experts,
                std::span<float> weights, std::span<const float> selection_bias = {});

// ggml's soft_max of one row (ggml_vec_soft_max_f32, AVX2 build) in place.
void SoftmaxRowLikeGgml(std::span<float> x);

// A step's (token, choice) pairs grouped by expert: the pairs of expert e are
// order[begin[e], begin[e + 1]), in token order. Pair p = token * n_used + choice.
struct ExpertGroups {
  std::vector<int32_t> begin;  // n_expert + 1
  std::vector<int32_t> order;  // n_tokens * n_used pairs

  int32_t size(int expert) const { return begin[expert + 1] - begin[expert]; }
  // Grouping of `experts` (n_tokens × n_used chosen experts, as RouteToken wrote them).
  void Build(std::span<const int32_t> experts, int n_expert);
};

}  // namespace tokenmill
