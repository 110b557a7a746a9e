// The forward pass on the CPU, over a ragged batch of several sequences and a paged KV cache
// (docs/design.md, "Batch inputs"): the model's family composes the graph from the shared
// blocks (model/arch/forward_blocks.h), here the CPU's (CpuForwardBlocks), which write the new
// tokens' K/V into their slots and return logits only for the rows asked for.
#pragma once

#include <span>
#include <utility>

#include "common/status.h"
#include "kernels/cpu/matmul.h"
#include "model/arch/cpu_blocks.h"
#include "model/forward_input.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace tokenmill {

// Holds scratch activations: one Run at a time (the engine thread owns it).
class ForwardPass {
 public:
  // mode: which kernels compute (KernelMode, model/arch/cpu_blocks.h).
  ForwardPass(const Model& model, CpuContext ctx, KernelMode mode = KernelMode::kFast);

  // logits receives logit_rows.size() rows of n_vocab floats.
  Status Run(const ForwardInput& input, const KvCacheView& kv, std::span<float> logits);

  // Debugging aid: when set, Run shows each intermediate activation (named as llama.cpp's
  // graph names them: attn_norm, Qcur, Kcur, Vcur, kqv_out, ffn_inp, ffn_norm, ffn_swiglu,
  // ffn_out, l_out, result_norm; Qraw and Kraw before RoPE), n_rows rows of row_size
  // floats, to the tap, which may overwrite them (to feed each op another engine's inputs).
  using Tap = ActivationTap;
  void set_tap(Tap tap) { blocks_.set_tap(std::move(tap)); }

 private:
  const Model& model_;
  KernelMode mode_;
  CpuForwardBlocks blocks_;
};

}  // namespace tokenmill
