#include "model/forward.h"

#include <string>

#include "kernels/kv_type.h"
#include "model/arch/family.h"

namespace tokenmill {

ForwardPass::ForwardPass(const Model& model, CpuContext ctx, KernelMode mode)
    : model_(model), mode_(mode), blocks_(model.config(), model.weights().rope_freqs, ctx, mode) {}

Status ForwardPass::Run(const ForwardInput& in, const KvCacheView& kv, std::span<float> logits) {
  const ModelConfig& c = model_.config();
  // The reference kernels dequantize rows as the file lays them out; the fast ones read the
  // model's CPU copy (Q4_1 and Q8_0 regrouped 16 rows at a time).
  const ModelWeights& w =
      mode_ == KernelMode::kReference ? model_.weights() : model_.cpu_weights();
  TM_RETURN_IF_ERROR(ValidateForwardInput(c, in, kv, logits.size()));
  for (const KvType type : {kv.type, kv.v_type}) {
    if (!KvTypeOnCpu(type)) {
      return InvalidArgumentError("the CPU forward pass cannot read " +
                                  std::string(KvTypeName(type)) +
                                  " KV: use f16, f32, int8, q4_0 or int4");
    }
  }
  blocks_.BeginStep(in, kv, logits);
  model_.family().forward(c, w, blocks_);
  return OkStatus();
}

}  // namespace tokenmill
