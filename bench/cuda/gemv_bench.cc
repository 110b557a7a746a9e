// Decode GEMV bandwidth on the GPU: weight bytes read per GEMV / its time, against the peak,
// for a model's FFN matrices (the synthetic Llama-3-8B's ffn_up 14336 x 4096 and ffn_down
// 4096 x 14336) at 1..8 tokens. A timed pass is a CUDA graph of one GEMV per layer, each over
// that layer's matrix, so consecutive launches read different weights: 32 layers of 33 MB
// (Q4_0) rotate over far more than twice the L2 (60 MB on an H200), so HBM, not L2, is what
// is measured. Activations (tokens x cols, L2-resident; quantized to q8_1 once, outside the
// timing) are not counted; the bytes are the device layout's (weight_upload.h).
// Usage: tokenmill_cuda_gemv_bench MODEL.gguf [peak GB/s, default 4800 (H200)]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/weight_upload.h"
#include "kernels/tensor_type.h"
#include "model/model.h"

namespace tokenmill::cuda {
namespace {

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

template <typename T>
T OrDie(StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*v);
}

struct Uploaded {
  std::vector<DeviceBuffer> buffers;
  std::vector<DeviceWeight> views;
  double bytes = 0;  // of all of them
};

Uploaded Upload(const Model& model, WeightMatrix LayerWeights::*which) {
  Uploaded u;
  for (const LayerWeights& l : model.weights().layers) {
    const WeightMatrix& w = l.*which;
    UploadedWeight uploaded =
        OrDie(UploadWeight(static_cast<uint32_t>(w.type), w.data, w.rows, w.cols, w.row_bytes));
    u.bytes += static_cast<double>(uploaded.buffer.bytes());
    u.views.push_back(uploaded.view);
    u.buffers.push_back(std::move(uploaded.buffer));
  }
  return u;
}

void Run(const char* name, const Uploaded& m, int tokens, double peak_gbps, int64_t l2_bytes) {
  const DeviceWeight& first = m.views.front();
  DeviceBuffer x = OrDie(DeviceBuffer::Allocate(tokens * first.cols * 4));
  DeviceBuffer y = OrDie(DeviceBuffer::Allocate(tokens * first.rows * 4));
  Check(cudaMemset(x.data(), 0, static_cast<size_t>(x.bytes())), "memset");
  DeviceBuffer x_q8 = OrDie(DeviceBuffer::Allocate(Q8_1Bytes(tokens, first.cols)));
  const bool quantized = IsQuantized(first.type);
  if (quantized) {
    Check(QuantizeQ8_1(x.as<float>(), tokens, first.cols, x_q8.as<uint8_t>(), nullptr), "q8_1");
  }
  Check(cudaDeviceSynchronize(), "q8_1");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaGraph_t graph;
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  for (const DeviceWeight& w : m.views) {
    Check(quantized ? GemvQ8_1(w, x_q8.as<const uint8_t>(), tokens, y.as<float>(), stream)
                    : Gemv(w, x.as<float>(), tokens, y.as<float>(), stream),
          "gemv");
  }
  Check(cudaStreamEndCapture(stream, &graph), "capture");
  cudaGraphExec_t exec;
  Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int i = 0; i < 3; ++i) Check(cudaGraphLaunch(exec, stream), "warm-up");
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  const int passes = 20;
  Check(cudaEventRecord(start, stream), "event");
  for (int i = 0; i < passes; ++i) Check(cudaGraphLaunch(exec, stream), "launch");
  Check(cudaEventRecord(stop, stream), "event");
  Check(cudaEventSynchronize(stop), "event");
  float ms = 0.0f;
  Check(cudaEventElapsedTime(&ms, start, stop), "event");
  const double calls = static_cast<double>(passes) * m.views.size();
  const double gbps = m.bytes * passes / (ms / 1000.0) / 1e9;
  std::printf("| %s %lld x %lld | %s | %d | %.1f | %.0f | %.1f%% |%s\n", name,
              static_cast<long long>(first.rows), static_cast<long long>(first.cols),
              std::string(NameOf(static_cast<TensorType>(first.type))).c_str(), tokens,
              1000.0 * ms / calls, gbps, 100.0 * gbps / peak_gbps,
              m.bytes < 2.0 * l2_bytes ? " (rotation under 2x L2: L2, not HBM)" : "");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace tokenmill::cuda

int main(int argc, char** argv) {
  using namespace tokenmill;
  using namespace tokenmill::cuda;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [peak GB/s]\n", argv[0]);
    return 2;
  }
  if (CountDevices() == 0) {
    std::fprintf(stderr, "no CUDA device here\n");
    return 1;
  }
  const double peak = argc > 2 ? std::atof(argv[2]) : 4800.0;
  const std::unique_ptr<Model> model = OrDie(Model::Load(argv[1]));
  int l2_bytes = 0;
  Check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0), "L2 size");
  const Uploaded up = Upload(*model, &LayerWeights::up);
  const Uploaded down = Upload(*model, &LayerWeights::down);
  std::printf("device: %s; L2 %.0f MiB; peak %.0f GB/s; model %s: %zu layers, rotating over "
              "%.0f MiB (ffn_up) and %.0f MiB (ffn_down)\n\n",
              DescribeDevice(0).c_str(), l2_bytes / 1048576.0, peak, argv[1], up.views.size(),
              up.bytes / 1048576.0, down.bytes / 1048576.0);
  std::printf("| matrix (rows x cols) | type | tokens | us/call | GB/s | of peak |\n"
              "|---|---|---|---|---|---|\n");
  for (int tokens : {1, 2, 4, 8}) {
    Run("ffn_up", up, tokens, peak, l2_bytes);
    Run("ffn_down", down, tokens, peak, l2_bytes);
  }
  return 0;
}
