// A mixture of experts' steps around its grouped GEMVs (gemv.cu): routing, the grouping of the
// step's (token, choice) pairs by expert and each token's weighted sum of its experts, all on
// the device so a decode step stays one CUDA graph (no copy to the host per layer). Their
// arithmetic is moe_math.h's, which the host emulates bit for bit.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_math.h"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

constexpr int kRouteThreads = 64;
constexpr int kGroupThreads = 256;

__global__ void RouteTokensKernel(DeviceRouting r, float* logits, int64_t n_tokens,
                                  int32_t* experts, float* weights) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < n_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    RouteTokenOnDevice(r, logits + t * r.n_expert, experts + t * r.n_used,
                       weights + t * r.n_used);
  }
}

// One block: a thread an expert counts its pairs, one thread scans, each expert places its own.
__global__ void __launch_bounds__(kGroupThreads)
    GroupExpertPairsKernel(const int32_t* experts, DeviceExpertGroups g) {
  const int64_t n_pairs = g.n_tokens * g.n_used;
  for (int32_t e = threadIdx.x; e < g.n_expert; e += blockDim.x) {
    g.begin[e + 1] = CountExpertPairs(experts, n_pairs, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) ScanExpertCounts(g.begin, g.n_expert);
  __syncthreads();
  for (int32_t e = threadIdx.x; e < g.n_expert; e += blockDim.x) {
    PlaceExpertPairs(experts, n_pairs, e, g.begin[e], g.order, g.slot_of_pair);
  }
}

__global__ void UniformGroupsKernel(DeviceExpertGroups g) {
  for (int32_t e = blockIdx.x * blockDim.x + threadIdx.x; e <= g.n_expert;
       e += gridDim.x * blockDim.x) {
    g.begin[e] = static_cast<int32_t>(e * g.n_tokens);
  }
}

__global__ void CombineKernel(const float* expert_out, const float* weights,
                              const int32_t* slot_of_pair, int64_t n_tokens, int n_used,
                              int64_t d, const float* shared_out, const float* shared_gate,
                              float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n_tokens * d; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / d, j = i % d;
    float v = CombineExperts(expert_out, weights, slot_of_pair, t, n_used, d, j);
    if (shared_gate != nullptr) {
      v = v + MulRounded(shared_out[i], SharedExpertGate(shared_gate[t]));
    } else if (shared_out != nullptr) {
      v = v + shared_out[i];  // deepseek2's ungated shared experts: ggml_add(moe_out, ffn_shexp)
    }
    out[i] = v;
  }
}

}  // namespace

cudaError_t RouteTokens(const DeviceRouting& r, float* logits, int64_t n_tokens, int32_t* experts,
                        float* weights, cudaStream_t stream) {
  if (r.n_used < 1 || r.n_used > r.n_expert) return cudaErrorInvalidValue;
  if (r.n_groups > 1 && (r.n_groups > kMaxRoutingGroups || r.n_expert % r.n_groups != 0 ||
                         r.n_groups_used < 1 || r.n_groups_used > r.n_groups)) {
    return cudaErrorInvalidValue;
  }
  if (n_tokens == 0) return cudaSuccess;
  RouteTokensKernel<<<internal::GridStrideBlocks(n_tokens, kRouteThreads), kRouteThreads, 0,
                      stream>>>(r, logits, n_tokens, experts, weights);
  return internal::LaunchStatus();
}

cudaError_t GroupExpertPairs(const int32_t* experts, const DeviceExpertGroups& g,
                             cudaStream_t stream) {
  if (g.n_expert < 1 || g.n_used < 1 || g.n_used > g.n_expert) return cudaErrorInvalidValue;
  GroupExpertPairsKernel<<<1, kGroupThreads, 0, stream>>>(experts, g);
  return internal::LaunchStatus();
}

cudaError_t UniformExpertGroups(const DeviceExpertGroups& g, cudaStream_t stream) {
  if (g.n_expert < 1 || g.begin == nullptr) return cudaErrorInvalidValue;
  UniformGroupsKernel<<<internal::GridStrideBlocks(g.n_expert + 1, 128), 128, 0, stream>>>(g);
  return internal::LaunchStatus();
}

cudaError_t CombineExpertOutputs(const float* expert_out, const float* weights,
                                 const int32_t* slot_of_pair, int64_t n_tokens, int n_used,
                                 int64_t d, const float* shared_out, const float* shared_gate,
                                 float* out, cudaStream_t stream) {
  if (shared_out == nullptr && shared_gate != nullptr) return cudaErrorInvalidValue;
  if (n_tokens * d == 0) return cudaSuccess;
  CombineKernel<<<internal::GridStrideBlocks(n_tokens * d, 256), 256, 0, stream>>>(
      expert_out, weights, slot_of_pair, n_tokens, n_used, d, shared_out, shared_gate, out);
  return internal::LaunchStatus();
}

}  // namespace tokenmill::cuda
