// End-to-end decode on the GPU: `batch` sequences each prefill a random prompt, then decode
// `steps` greedy tokens together (one forward step per token, argmax on the device); reports
// decode tokens/s and ms per step, with and without CUDA graphs. Times only the decode steps.
// A step reads every weight once (the embedding table but one row per token): those bytes per
// step time are its weight bandwidth, as a fraction of the device's peak.
// Usage: tokenmill_cuda_decode_bench MODEL.gguf [prompt_len=128] [steps=128] [batches=1,8,32]
//        [peak GB/s=4800 (H200)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "model/cuda/cuda_forward.h"
#include "model/cuda/cuda_kv_cache.h"
#include "model/kv_cache.h"

namespace tokenmill::cuda {
namespace {

void Fail(const Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  std::exit(1);
}

// Bytes of device weights a decode step streams.
double StepWeightBytes(const Model& model, const CudaForwardPass& forward) {
  const WeightMatrix& embd = model.weights().token_embd;
  const bool tied = model.weights().output.data == embd.data;
  return static_cast<double>(forward.weight_bytes() - (tied ? 0 : embd.rows * embd.row_bytes));
}

void RunBatch(const Model& model, CudaForwardPass& forward, bool graphs, int batch, int prompt_len,
              int steps, double peak_gbps) {
  const ModelConfig& c = model.config();
  const int block_size = 16;
  const int64_t blocks = static_cast<int64_t>(batch) * ((prompt_len + steps) / block_size + 2);
  StatusOr<CudaKvCache> kv = CudaKvCache::Create(c, KvType::kF16, blocks, block_size);
  if (!kv.ok()) Fail(kv.status());
  BatchBuilder builder(block_size, blocks);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> token(3, c.n_vocab - 1);
  std::vector<std::vector<int32_t>> next(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    const int seq = builder.AddSequence();
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int32_t& t : prompt) t = token(rng);
    if (Status s = builder.Append(seq, prompt, BatchBuilder::Logits::kLast); !s.ok()) Fail(s);
    std::vector<int32_t> ids(1);
    const ForwardInput in{builder.token_ids(), builder.batch(), builder.logit_rows()};
    if (Status s = forward.RunGreedy(in, kv->view(), ids); !s.ok()) Fail(s);
    builder.Clear();
    next[static_cast<size_t>(b)] = ids;
  }
  std::vector<int32_t> ids(static_cast<size_t>(batch));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    for (int b = 0; b < batch; ++b) {
      if (Status s = builder.Append(b, next[static_cast<size_t>(b)], BatchBuilder::Logits::kLast);
          !s.ok()) {
        Fail(s);
      }
    }
    const ForwardInput in{builder.token_ids(), builder.batch(), builder.logit_rows()};
    if (Status s = forward.RunGreedy(in, kv->view(), ids); !s.ok()) Fail(s);
    builder.Clear();
    for (int b = 0; b < batch; ++b) next[static_cast<size_t>(b)] = {ids[static_cast<size_t>(b)]};
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double gbps = StepWeightBytes(model, forward) * steps / seconds / 1e9;
  std::printf("| %s | %d | %d | %d | %.2f | %.0f | %.0f | %.1f%% |\n", graphs ? "on" : "off",
              batch, prompt_len, steps, 1000.0 * seconds / steps, batch * steps / seconds, gbps,
              100.0 * gbps / peak_gbps);
}

}  // namespace
}  // namespace tokenmill::cuda

int main(int argc, char** argv) {
  using namespace tokenmill;
  using namespace tokenmill::cuda;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [prompt_len] [steps] [batches] [peak GB/s]\n",
                 argv[0]);
    return 2;
  }
  if (CountDevices() == 0) {
    std::fprintf(stderr, "no CUDA device here\n");
    return 1;
  }
  const int prompt_len = argc > 2 ? std::atoi(argv[2]) : 128;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 128;
  std::vector<int> batches;
  std::stringstream list(argc > 4 ? argv[4] : "1,8,32");
  for (std::string item; std::getline(list, item, ',');) batches.push_back(std::stoi(item));
  const double peak = argc > 5 ? std::atof(argv[5]) : 4800.0;
  StatusOr<std::unique_ptr<Model>> model = Model::Load(argv[1]);
  if (!model.ok()) Fail(model.status());
  StatusOr<std::unique_ptr<CudaForwardPass>> forward = CudaForwardPass::Create(**model);
  if (!forward.ok()) Fail(forward.status());
  StatusOr<std::unique_ptr<CudaForwardPass>> no_graphs =
      CudaForwardPass::Create(**model, CudaForwardOptions{.cuda_graphs = false});
  if (!no_graphs.ok()) Fail(no_graphs.status());
  std::printf("device: %s; model %s (weights %.1f MiB on the device)\n\n",
              DescribeDevice(0).c_str(), argv[1], (*forward)->weight_bytes() / 1048576.0);
  std::printf("| CUDA graphs | batch | prompt | decode steps | ms/step | decode tok/s | weight GB/s "
              "| of %.0f GB/s |\n|---|---|---|---|---|---|---|---|\n", peak);
  for (int batch : batches) {
    RunBatch(**model, **forward, true, batch, prompt_len, steps, peak);
    RunBatch(**model, **no_graphs, false, batch, prompt_len, steps, peak);
  }
  return 0;
}
