// The llama-family forward pass, written once against the CPU kernel ops, over a ragged
// batch of several sequences and a paged KV cache (DESIGN.md section 3). It writes the
// new tokens' K/V into their slots and returns logits only for the rows asked for.
#pragma once

#include <functional>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "model/forward_input.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace tokenmill {

// Which kernels compute: the fast ones of a CpuContext over model.cpu_weights() (Q4_1 and
// Q8_0 regrouped), or the scalar references over model.weights() (float activations, the
// file's rows dequantized: slow, the oracle for tests).
enum class KernelMode { kFast, kReference };

// Holds scratch activations: one Run at a time (the engine thread owns it).
class ForwardPass {
 public:
  ForwardPass(const Model& model, CpuContext ctx, KernelMode mode = KernelMode::kFast);

  // logits receives logit_rows.size() rows of n_vocab floats.
  Status Run(const ForwardInput& input, const KvCacheView& kv, std::span<float> logits);

  // Debugging aid: when set, Run shows each intermediate activation (named as llama.cpp's
  // graph names them: attn_norm, Qcur, Kcur, Vcur, kqv_out, ffn_inp, ffn_norm, ffn_swiglu,
  // ffn_out, l_out, result_norm; Qraw and Kraw before RoPE), n_rows rows of row_size
  // floats, to the tap, which may overwrite them (to feed each op another engine's inputs).
  using Tap = std::function<void(const char* name, int layer, float* data, int64_t n_rows,
                                 int64_t row_size)>;
  void set_tap(Tap tap) { tap_ = std::move(tap); }

 private:
  // fn(begin, end) over token ranges covering [0, n_tokens): spread over the pool when the
  // step has enough tokens to pay for the barrier, else one call on this thread.
  void ForTokens(int64_t n_tokens, const std::function<void(int64_t, int64_t)>& fn);
  void MatmulOp(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);
  // Several matrices over the same input (one parallel pass on the fast path).
  void MatmulOps(std::initializer_list<std::pair<const WeightMatrix*, float*>> outputs,
                 const float* x, int64_t n_tokens);

  const Model& model_;
  CpuContext ctx_;
  KernelMode mode_;
  Tap tap_;
  // Scratch activations, grown to the largest batch seen.
  std::vector<float> x_, h_, q_, k_, v_, attn_, proj_, gate_, up_, final_;
};

}  // namespace tokenmill
