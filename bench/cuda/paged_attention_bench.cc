// Paged decode attention on the GPU: achieved bandwidth (K and V bytes read per call / time)
// against the device's peak, at contexts 1k/4k/16k and batches 1/32. One query token per
// sequence (decode), f16 KV in shuffled blocks of 16, split-K as kernel_math.h partitions,
// Llama-3-8B's attention shape (32 query heads over 8 KV heads of 128), SmolLM2-135M's (9
// over 3 of 64) and DeepSeek-V2-Lite's multi-head latent attention (16 query heads over one
// latent row of 576, V its first 512: K alone is read). Consecutive calls read different copies of the KV (block tables into disjoint
// blocks of one pool) rotating over more than twice the L2, so HBM, not L2, is measured.
// Usage: tokenmill_cuda_attention_bench [peak GB/s, default 4800 (H200)]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/ops.h"

namespace tokenmill::cuda {
namespace {

struct Shape {
  const char* name;
  int n_heads, n_kv_heads, head_dim;
  // > 0: multi-head latent attention (KvCacheView::v_in_k): K alone, V its first value_dim.
  int value_dim = 0;
};

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host) {
  StatusOr<DeviceBuffer> b = DeviceBuffer::CopyOf(std::span<const T>(host));
  if (!b.ok()) {
    std::fprintf(stderr, "%s\n", b.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*b);
}

DeviceBuffer Allocate(int64_t bytes) {
  StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(bytes);
  if (!b.ok()) {
    std::fprintf(stderr, "%s\n", b.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*b);
}

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

void Run(const Shape& s, int batch, int context, double peak_gbps, int64_t l2_bytes) {
  const int block_size = 16;
  const int blocks_per_seq = (context + block_size - 1) / block_size;
  const int64_t row = static_cast<int64_t>(s.n_kv_heads) * s.head_dim;
  const bool latent = s.value_dim > 0;
  const int out_dim = latent ? s.value_dim : s.head_dim;
  // K and V (K alone for a latent cache), f16, read per call.
  const double bytes = (latent ? 1.0 : 2.0) * batch * context * row * 2;
  const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(2.5 * l2_bytes / bytes) + 1);
  const int64_t blocks_per_copy = static_cast<int64_t>(batch) * blocks_per_seq;
  const int64_t num_blocks = copies * blocks_per_copy;
  std::vector<int32_t> indices(static_cast<size_t>(num_blocks));
  std::iota(indices.begin(), indices.end(), 0);
  std::shuffle(indices.begin(), indices.end(), std::mt19937(5));
  std::vector<int32_t> indptr, positions, seq_of, tiles;
  std::vector<int64_t> slots;
  for (int b = 0; b <= batch; ++b) indptr.push_back(b * blocks_per_seq);
  const int32_t pos = context - 1;
  for (int b = 0; b < batch; ++b) {
    positions.push_back(pos);
    seq_of.push_back(b);
    tiles.push_back(b);  // decode: a tile of one token per sequence
    tiles.push_back(1);
  }
  for (int64_t c = 0; c < copies; ++c) {
    for (int b = 0; b < batch; ++b) {
      const int64_t block = c * blocks_per_copy + int64_t{b} * blocks_per_seq + pos / block_size;
      slots.push_back(int64_t{indices[static_cast<size_t>(block)]} * block_size +
                      pos % block_size);
    }
  }
  const int64_t cache_bytes = num_blocks * block_size * row * 2;
  DeviceBuffer k = Allocate(cache_bytes), v = Allocate(latent ? 16 : cache_bytes);
  Check(cudaMemset(k.data(), 0, static_cast<size_t>(cache_bytes)), "memset");
  Check(cudaMemset(v.data(), 0, static_cast<size_t>(v.bytes())), "memset");
  DeviceBuffer d_indices = Upload(indices), d_indptr = Upload(indptr),
               d_positions = Upload(positions), d_seq = Upload(seq_of), d_slots = Upload(slots),
               d_tiles = Upload(tiles);
  std::vector<float> q_host(static_cast<size_t>(batch) * s.n_heads * s.head_dim, 0.01f);
  DeviceBuffer q = Upload(q_host);
  DeviceBuffer out = Allocate(int64_t{batch} * s.n_heads * out_dim * 4);
  DeviceBuffer ws =
      Allocate(AttentionWorkspaceFloats(batch, s.n_heads, out_dim, NumSplits(context)) * 4);
  KvCacheView kv{KvType::kF16, k.data(),     latent ? k.data() : v.data(), num_blocks,
                 block_size,    s.n_kv_heads, s.head_dim};
  kv.v_in_k = latent;
  const DeviceAttentionVariant variant{.value_dim = s.value_dim};
  const DeviceBatch db{d_positions.as<int32_t>(), d_seq.as<int32_t>(), batch, NumSplits(context),
                       d_tiles.as<int32_t>(), batch};
  int64_t copy = 0;
  auto call = [&] {
    const DeviceBlockTable table{d_slots.as<int64_t>() + copy * batch, d_indptr.as<int32_t>(),
                                 d_indices.as<int32_t>() + copy * blocks_per_copy};
    copy = (copy + 1) % copies;
    Check(PagedAttention(kv, db, table, q.as<float>(), s.n_heads, 0.088f, ws.as<float>(),
                         out.as<float>(), nullptr, variant),
          "attention");
  };
  for (int i = 0; i < 5; ++i) call();
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  const int iterations = context >= 16384 && batch >= 32 ? 20 : 100;
  Check(cudaEventRecord(start), "event");
  for (int i = 0; i < iterations; ++i) call();
  Check(cudaEventRecord(stop), "event");
  Check(cudaEventSynchronize(stop), "event");
  float ms = 0.0f;
  Check(cudaEventElapsedTime(&ms, start, stop), "event");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const double seconds = ms / 1000.0 / iterations;
  const double gbps = bytes / seconds / 1e9;
  std::printf("| %s | %d | %d | %lld | %.1f | %.0f | %.1f%% |\n", s.name, batch, context,
              static_cast<long long>(copies), seconds * 1e6, gbps, 100.0 * gbps / peak_gbps);
}

}  // namespace
}  // namespace tokenmill::cuda

int main(int argc, char** argv) {
  using namespace tokenmill::cuda;
  if (CountDevices() == 0) {
    std::fprintf(stderr, "no CUDA device here\n");
    return 1;
  }
  const double peak = argc > 1 ? std::atof(argv[1]) : 4800.0;
  int l2_bytes = 0;
  Check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0), "L2 size");
  std::printf("device: %s; L2 %.0f MiB; peak %.0f GB/s\n\n", DescribeDevice(0).c_str(),
              l2_bytes / 1048576.0, peak);
  std::printf("| shape | batch | context | KV copies rotated | us/call | GB/s | of peak |\n"
              "|---|---|---|---|---|---|---|\n");
  const Shape shapes[] = {{"llama3-8b (32/8 x 128)", 32, 8, 128},
                          {"smollm2 (9/3 x 64)", 9, 3, 64},
                          {"deepseek-v2-lite latent (16/1 x 576, V 512)", 16, 1, 576, 512}};
  for (const Shape& s : shapes) {
    for (int batch : {1, 32}) {
      for (int context : {1024, 4096, 16384}) Run(s, batch, context, peak, l2_bytes);
    }
  }
  return 0;
}
