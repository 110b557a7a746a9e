// Decode GEMV bandwidth on the GPU: weight bytes read per GEMV / its time, against the peak,
// for a model's FFN matrices (the synthetic Llama-3-8B's ffn_up 14336 x 4096 and ffn_down
// 4096 x 14336) at 1..8 tokens. A timed pass is a CUDA graph of one GEMV per layer, each over
// that layer's matrix, so consecutive launches read different weights: 32 layers of 33 MB
// (Q4_0) rotate over far more than twice the L2 (60 MB on an H200), so HBM, not L2, is what
// is measured. Activations (tokens x cols, L2-resident; quantized to q8_1 once, outside the
// timing) are not counted; the bytes are the device layout's (weight_upload.h).
// Usage: tokenmill_cuda_gemv_bench MODEL.gguf [peak GB/s, default 4800 (H200)]
//        tokenmill_cuda_gemv_bench --type q4_k [peak GB/s]: no model; 8 copies of random
//        ffn_up and ffn_down matrices of that type (any GemvQ8_1 type: q4_0 q4_1 q8_0 q2_k q3_k
//        q4_k q5_k q6_k iq4_xs), 270 MiB and more rotated for Q4_K.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/mmvq_kquant_math.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/weight_upload.h"
#include "kernels/dequantize_k_quants.h"
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

// `copies` device copies of one random rows x cols matrix of `type` (random quants, small f16
// scales: the kernels' cost does not depend on the values), packed once.
Uploaded RandomCopies(TensorType type, int64_t rows, int64_t cols, int copies) {
  const GgmlTypeLayout& layout = LayoutOf(type);
  const int64_t row_bytes = cols / layout.block_size * layout.type_size;
  std::vector<uint8_t> file(static_cast<size_t>(rows * row_bytes));
  uint32_t bits = 1;
  for (auto& v : file) {  // xorshift
    bits ^= bits << 13, bits ^= bits >> 17, bits ^= bits << 5;
    v = static_cast<uint8_t>(bits);
  }
  std::vector<int> f16_fields = {0};
  if (type == TensorType::kQ4_1) f16_fields = {0, 2};
  if (layout.block_size == 256) f16_fields = KQuantF16Offsets(type);
  const uint16_t scale = 0x2000;  // about 0.0078
  for (int64_t b = 0; b < rows * cols / layout.block_size; ++b) {
    for (int at : f16_fields) {
      std::memcpy(&file[static_cast<size_t>(b * layout.type_size + at)], &scale, 2);
    }
  }
  const auto id = static_cast<uint32_t>(type);
  const std::vector<uint8_t> packed = DeviceLayout(id, file.data(), rows, cols, row_bytes);
  Uploaded u;
  for (int i = 0; i < copies; ++i) {
    DeviceBuffer b =
        OrDie(DeviceBuffer::CopyOf(packed.data(), static_cast<int64_t>(packed.size())));
    u.bytes += static_cast<double>(b.bytes());
    u.views.push_back(DeviceWeight{id, b.as<const uint8_t>(), rows, cols,
                                   DeviceRowBytes(id, cols, row_bytes), nullptr});
    u.buffers.push_back(std::move(b));
  }
  return u;
}

void Run(const char* name, const Uploaded& m, int tokens, double peak_gbps, int64_t l2_bytes) {
  const DeviceWeight& first = m.views.front();
  DeviceBuffer x = OrDie(DeviceBuffer::Allocate(tokens * first.cols * 4));
  DeviceBuffer y = OrDie(DeviceBuffer::Allocate(tokens * first.rows * 4));
  Check(cudaMemset(x.data(), 0, static_cast<size_t>(x.bytes())), "memset");
  DeviceBuffer x_q8 = OrDie(DeviceBuffer::Allocate(Q8_1Bytes(tokens, first.cols)));
  const bool quantized = TakesQ8_1(first.type);
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
  const bool synthetic = argc > 2 && std::string(argv[1]) == "--type";
  if (argc < 2 || (std::string(argv[1]) == "--type" && !synthetic)) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [peak GB/s]\n       %s --type q4_k [peak GB/s]\n",
                 argv[0], argv[0]);
    return 2;
  }
  TensorType type = TensorType::kF32;
  if (synthetic) {
    bool found = false;
    for (const TensorType t : AllTensorTypes()) {
      if (NameOf(t) == argv[2] && TakesQ8_1(static_cast<uint32_t>(t))) {
        type = t;
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "--type %s: not a type the GPU's GEMV takes (q4_0 q4_1 q8_0 q2_k q3_k "
                   "q4_k q5_k q6_k iq4_xs)\n", argv[2]);
      return 2;
    }
  }
  if (CountDevices() == 0) {
    std::fprintf(stderr, "no CUDA device here\n");
    return 1;
  }
  const int peak_arg = synthetic ? 3 : 2;
  const double peak = argc > peak_arg ? std::atof(argv[peak_arg]) : 4800.0;
  int l2_bytes = 0;
  Check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0), "L2 size");
  std::unique_ptr<Model> model;
  Uploaded up, down;
  if (synthetic) {  // Llama-3-8B's FFN shapes
    up = RandomCopies(type, 14336, 4096, 8);
    down = RandomCopies(type, 4096, 14336, 8);
  } else {
    model = OrDie(Model::Load(argv[1]));
    up = Upload(*model, &LayerWeights::up);
    down = Upload(*model, &LayerWeights::down);
  }
  std::printf("device: %s; L2 %.0f MiB; peak %.0f GB/s; %s %s: %zu layers, rotating over "
              "%.0f MiB (ffn_up) and %.0f MiB (ffn_down)\n\n",
              DescribeDevice(0).c_str(), l2_bytes / 1048576.0, peak,
              synthetic ? "random" : "model", argv[synthetic ? 2 : 1], up.views.size(),
              up.bytes / 1048576.0, down.bytes / 1048576.0);
  std::printf("| matrix (rows x cols) | type | tokens | us/call | GB/s | of peak |\n"
              "|---|---|---|---|---|---|\n");
  for (int tokens : {1, 2, 4, 8}) {
    Run("ffn_up", up, tokens, peak, l2_bytes);
    Run("ffn_down", down, tokens, peak, l2_bytes);
  }
  return 0;
}
