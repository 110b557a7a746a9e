#include "model/cuda/cuda_weights.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/mmvq_kquant_math.h"
#include "kernels/cuda/weight_upload.h"

namespace tokenmill::cuda {
namespace {

StatusOr<DeviceVector> UploadVector(std::span<const float> host, int64_t& bytes) {
  DeviceVector v;
  if (host.empty()) return v;
  TM_ASSIGN_OR_RETURN(v.buffer, DeviceBuffer::CopyOf(host));
  bytes += v.buffer.bytes();
  return v;
}

StatusOr<DeviceMatrix> UploadMatrix(const WeightMatrix& w, bool with_bf16, int64_t& bytes) {
  if (w.rows == 0) return DeviceMatrix{};  // a tensor the family does not have
  // The device kernels know the float types, the block-32 quantized ones (IsQuantized of
  // kernel_math.h: Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL) and Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS
  // (mmvq_kquant_math.h); the CPU runs more (CpuComputesWith), so a
  // model the CPU loads may still be one the GPU cannot run.
  const auto type = static_cast<uint32_t>(w.type);
  if (!TakesQ8_1(type) && type != kWF32 && type != kWF16 && type != kWBF16) {
    return UnimplementedError("the CUDA forward pass does not run " + std::string(NameOf(w.type)) +
                              " weights yet (it runs f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                              "iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs): serve this model on "
                              "the CPU");
  }
  if (w.layout != WeightLayout::kRows) {
    return InternalError("the CUDA forward pass reads weights in the file's row layout");
  }
  DeviceMatrix m;
  TM_ASSIGN_OR_RETURN(UploadedWeight u, UploadWeight(type, w.data, w.rows, w.cols, w.row_bytes));
  m.raw = std::move(u.buffer);
  m.view = u.view;
  bytes += m.raw.bytes();
  if (with_bf16) {
    TM_ASSIGN_OR_RETURN(m.bf16, DeviceBuffer::Allocate(w.rows * w.cols * 2));
    TM_CUDA_RETURN_IF_ERROR(DequantizeToBf16(m.view, m.bf16.as<uint16_t>(), nullptr),
                            "dequantizing a weight to bf16");
    m.view.bf16 = m.bf16.as<const uint16_t>();
    bytes += m.bf16.bytes();
  }
  return m;
}

// n_expert matrices of one shape (experts[e]) stacked on the device (a mixture's experts, or
// multi-head latent attention's per-head matrices).
StatusOr<DeviceMatrix> UploadExpertMatrices(const std::vector<WeightMatrix>& experts,
                                            int64_t& bytes) {
  if (experts.empty()) return InternalError("a mixture-of-experts layer without experts");
  const WeightMatrix& first = experts.front();
  const auto type = static_cast<uint32_t>(first.type);
  if (!TakesQ8_1(type) && type != kWF32 && type != kWF16 && type != kWBF16) {
    return UnimplementedError("the CUDA forward pass does not run " +
                              std::string(NameOf(first.type)) + " experts yet: serve this "
                              "model on the CPU");
  }
  std::vector<const uint8_t*> data;
  for (const WeightMatrix& e : experts) {
    if (e.type != first.type || e.rows != first.rows || e.cols != first.cols ||
        e.row_bytes != first.row_bytes || e.layout != WeightLayout::kRows) {
      return InternalError("a mixture's experts differ in type, shape or layout");
    }
    data.push_back(e.data);
  }
  TM_ASSIGN_OR_RETURN(UploadedWeight u, UploadExperts(type, data, first.rows, first.cols,
                                                      first.row_bytes));
  DeviceMatrix m;
  m.raw = std::move(u.buffer);
  m.view = u.view;
  bytes += m.raw.bytes();
  return m;
}

StatusOr<DeviceMoeWeights> UploadMoe(const MoeWeights& w, bool with_bf16, int64_t& bytes) {
  if (!w.router_bias.empty() || !w.gate_bias.empty() || !w.up_bias.empty() ||
      !w.down_bias.empty()) {
    return UnimplementedError("the CUDA forward pass has no expert or router biases: serve this "
                              "model on the CPU");
  }
  DeviceMoeWeights d;
  TM_ASSIGN_OR_RETURN(d.router, UploadMatrix(w.router, with_bf16, bytes));
  TM_ASSIGN_OR_RETURN(d.gate, UploadExpertMatrices(w.gate, bytes));
  TM_ASSIGN_OR_RETURN(d.up, UploadExpertMatrices(w.up, bytes));
  TM_ASSIGN_OR_RETURN(d.down, UploadExpertMatrices(w.down, bytes));
  if (w.shared_gate.rows > 0) {
    TM_ASSIGN_OR_RETURN(d.shared_gate, UploadMatrix(w.shared_gate, with_bf16, bytes));
    TM_ASSIGN_OR_RETURN(d.shared_up, UploadMatrix(w.shared_up, with_bf16, bytes));
    TM_ASSIGN_OR_RETURN(d.shared_down, UploadMatrix(w.shared_down, with_bf16, bytes));
    // None for deepseek2's shared experts (added as they are).
    TM_ASSIGN_OR_RETURN(d.shared_gate_inp, UploadMatrix(w.shared_gate_inp, with_bf16, bytes));
  }
  TM_ASSIGN_OR_RETURN(d.selection_bias, UploadVector(w.selection_bias, bytes));
  return d;
}

StatusOr<DeviceLatentAttentionWeights> UploadLatentAttention(const LatentAttentionWeights& w,
                                                             bool with_bf16, int64_t& bytes) {
  DeviceLatentAttentionWeights d;
  TM_ASSIGN_OR_RETURN(d.q_a, UploadMatrix(w.q_a, with_bf16, bytes));
  TM_ASSIGN_OR_RETURN(d.q_b, UploadMatrix(w.q_b, with_bf16, bytes));
  TM_ASSIGN_OR_RETURN(d.q, UploadMatrix(w.q, with_bf16, bytes));
  TM_ASSIGN_OR_RETURN(d.kv_a, UploadMatrix(w.kv_a, with_bf16, bytes));
  TM_ASSIGN_OR_RETURN(d.q_a_norm, UploadVector(w.q_a_norm, bytes));
  TM_ASSIGN_OR_RETURN(d.kv_a_norm, UploadVector(w.kv_a_norm, bytes));
  // Per head, in the grouped GEMV's stacked layout (no bf16 copies: cuBLAS does not take them).
  TM_ASSIGN_OR_RETURN(d.k_b, UploadExpertMatrices(w.k_b, bytes));
  TM_ASSIGN_OR_RETURN(d.v_b, UploadExpertMatrices(w.v_b, bytes));
  return d;
}

}  // namespace

StatusOr<DeviceModelWeights> UploadWeights(const Model& model, bool with_bf16) {
  const ModelWeights& w = model.weights();
  DeviceModelWeights d;
  int64_t& bytes = d.bytes;
  TM_ASSIGN_OR_RETURN(d.token_embd, UploadMatrix(w.token_embd, with_bf16, bytes));
  if (w.output.data == w.token_embd.data) {
    d.output.view = d.token_embd.view;  // tied: one copy
  } else {
    TM_ASSIGN_OR_RETURN(d.output, UploadMatrix(w.output, with_bf16, bytes));
  }
  TM_ASSIGN_OR_RETURN(d.output_norm, UploadVector(w.output_norm, bytes));
  TM_ASSIGN_OR_RETURN(d.rope_factors, UploadVector(w.rope_freqs, bytes));
  for (const LayerWeights& l : w.layers) {
    DeviceLayerWeights dl;
    TM_ASSIGN_OR_RETURN(dl.attn_norm, UploadVector(l.attn_norm, bytes));
    TM_ASSIGN_OR_RETURN(dl.ffn_norm, UploadVector(l.ffn_norm, bytes));
    TM_ASSIGN_OR_RETURN(dl.q_bias, UploadVector(l.q_bias, bytes));
    TM_ASSIGN_OR_RETURN(dl.k_bias, UploadVector(l.k_bias, bytes));
    TM_ASSIGN_OR_RETURN(dl.v_bias, UploadVector(l.v_bias, bytes));
    TM_ASSIGN_OR_RETURN(dl.q_norm, UploadVector(l.q_norm, bytes));
    TM_ASSIGN_OR_RETURN(dl.k_norm, UploadVector(l.k_norm, bytes));
    TM_ASSIGN_OR_RETURN(dl.attn_post_norm, UploadVector(l.attn_post_norm, bytes));
    TM_ASSIGN_OR_RETURN(dl.ffn_post_norm, UploadVector(l.ffn_post_norm, bytes));
    TM_ASSIGN_OR_RETURN(dl.q, UploadMatrix(l.q, with_bf16, bytes));
    TM_ASSIGN_OR_RETURN(dl.k, UploadMatrix(l.k, with_bf16, bytes));
    TM_ASSIGN_OR_RETURN(dl.v, UploadMatrix(l.v, with_bf16, bytes));
    TM_ASSIGN_OR_RETURN(dl.o, UploadMatrix(l.o, with_bf16, bytes));
    if (l.mla.kv_a.rows > 0) {
      TM_ASSIGN_OR_RETURN(dl.mla, UploadLatentAttention(l.mla, with_bf16, bytes));
    }
    if (model.config().HasExperts(static_cast<int>(d.layers.size()))) {
      TM_ASSIGN_OR_RETURN(dl.moe, UploadMoe(l.moe, with_bf16, bytes));
    } else {
      TM_ASSIGN_OR_RETURN(dl.gate, UploadMatrix(l.gate, with_bf16, bytes));
      TM_ASSIGN_OR_RETURN(dl.up, UploadMatrix(l.up, with_bf16, bytes));
      TM_ASSIGN_OR_RETURN(dl.down, UploadMatrix(l.down, with_bf16, bytes));
    }
    d.layers.push_back(std::move(dl));
  }
  TM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "uploading the weights");
  return d;
}

DeviceWeightIndex IndexWeights(const ModelWeights& host, const DeviceModelWeights& device) {
  DeviceWeightIndex index;
  auto matrix = [&](const WeightMatrix& h, const DeviceMatrix& d) {
    if (h.rows > 0) index.matrices[&h] = &d.view;
  };
  auto vector = [&](std::span<const float> h, const DeviceVector& d) {
    if (!h.empty()) index.vectors[h.data()] = d.data();
  };
  matrix(host.token_embd, device.token_embd);
  matrix(host.output, device.output);
  vector(host.output_norm, device.output_norm);
  for (size_t i = 0; i < host.layers.size() && i < device.layers.size(); ++i) {
    const LayerWeights& h = host.layers[i];
    const DeviceLayerWeights& d = device.layers[i];
    for (auto [hv, dv] : {std::pair{h.attn_norm, &d.attn_norm}, std::pair{h.ffn_norm, &d.ffn_norm},
                          std::pair{h.q_bias, &d.q_bias}, std::pair{h.k_bias, &d.k_bias},
                          std::pair{h.v_bias, &d.v_bias}, std::pair{h.q_norm, &d.q_norm},
                          std::pair{h.k_norm, &d.k_norm},
                          std::pair{h.attn_post_norm, &d.attn_post_norm},
                          std::pair{h.ffn_post_norm, &d.ffn_post_norm}}) {
      vector(hv, *dv);
    }
    for (auto [hm, dm] : {std::pair{&h.q, &d.q}, std::pair{&h.k, &d.k}, std::pair{&h.v, &d.v},
                          std::pair{&h.o, &d.o}, std::pair{&h.gate, &d.gate},
                          std::pair{&h.up, &d.up}, std::pair{&h.down, &d.down}}) {
      if (dm->view.rows > 0) matrix(*hm, *dm);
    }
    if (d.moe.router.view.rows > 0) {
      index.mixtures[&h.moe] = &d.moe;
      vector(h.moe.selection_bias, d.moe.selection_bias);
    }
    if (d.mla.kv_a.view.rows > 0) {
      index.latent[&h.mla] = &d.mla;
      vector(h.mla.q_a_norm, d.mla.q_a_norm);
      vector(h.mla.kv_a_norm, d.mla.kv_a_norm);
    }
  }
  return index;
}

}  // namespace tokenmill::cuda
