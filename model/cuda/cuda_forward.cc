#include "model/cuda/cuda_forward.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <optional>
#include <string>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernel_math.h"
#include "kernels/kv_type.h"

namespace tokenmill::cuda {
namespace {

// Appends `values` to `staging` at an 8-byte boundary; returns their offset.
template <typename T>
size_t Stage(std::vector<uint8_t>& staging, std::span<const T> values) {
  const size_t offset = (staging.size() + 7) / 8 * 8;
  staging.resize(offset + values.size_bytes());
  if (!values.empty()) std::memcpy(staging.data() + offset, values.data(), values.size_bytes());
  return offset;
}

}  // namespace

CudaForwardPass::CudaForwardPass(const Model& model, CudaForwardOptions options,
                                 CudaGraphPlan plan)
    : model_(model), options_(options), plan_(std::move(plan)) {}

CudaForwardPass::~CudaForwardPass() {
  for (auto& [key, graph] : graphs_) {
    if (graph.exec != nullptr) cudaGraphExecDestroy(graph.exec);
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

StatusOr<std::unique_ptr<CudaForwardPass>> CudaForwardPass::Create(const Model& model,
                                                                   CudaForwardOptions options) {
  if (CountDevices() == 0) {
    return FailedPreconditionError("no usable CUDA device (or no driver): use --device cpu");
  }
  const ModelConfig& c = model.config();
  // The family's own graph, refused by the blocks CUDA has no kernel for.
  TM_ASSIGN_OR_RETURN(CudaGraphPlan plan, PlanCudaGraph(model.family(), c, model.weights()));
  if (c.HasLatentKv()) {
    // Multi-head latent attention: one latent row a token (multi-query), V within K.
    if (c.n_kv_heads != 1 ||
        !AttentionShapeFits(c.head_dim, c.n_heads, true, c.mla.kv_lora_rank)) {
      return InvalidArgumentError(
          "the CUDA attention kernel takes latent rows (kv_lora_rank + rope) of up to " +
          std::to_string(kMaxLatentHeadDim) + " values and up to " + std::to_string(kMaxGroup) +
          " query heads or a multiple of " + std::to_string(kMaxTilePairs) +
          "; this model has rows of " + std::to_string(c.head_dim) + " and " +
          std::to_string(c.n_heads) + " heads: use --device cpu");
    }
  } else if (c.n_heads % c.n_kv_heads != 0 ||
             !AttentionShapeFits(c.head_dim, c.n_heads / c.n_kv_heads, false, 0)) {
    return InvalidArgumentError("the CUDA attention kernel takes head_dim <= " +
                                std::to_string(kMaxHeadDim) + " and <= " +
                                std::to_string(kMaxGroup) +
                                " query heads per KV head; this model has head_dim " +
                                std::to_string(c.head_dim) + ": use --device cpu");
  }
  std::unique_ptr<CudaForwardPass> pass(new CudaForwardPass(model, options, std::move(plan)));
  TM_RETURN_IF_ERROR(pass->Init());
  return pass;
}

Status CudaForwardPass::Init() {
  TM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                          "creating a CUDA stream");
  TM_ASSIGN_OR_RETURN(weights_, UploadWeights(model_, options_.cublas_min_tokens > 0));
  if (options_.cublas_min_tokens > 0) TM_RETURN_IF_ERROR(gemm_.Init(stream_));
  const ModelConfig& c = model_.config();
  blocks_ = std::make_unique<CudaForwardBlocks>(c, plan_, weights_,
                                                IndexWeights(model_.weights(), weights_), stream_,
                                                gemm_, options_.cublas_min_tokens, loras_);
  TM_RETURN_IF_ERROR(blocks_->Init());
  if (options_.max_step_tokens > 0) {
    // The split-K workspace of the widest split a step can take, and cuBLAS's activations.
    TM_RETURN_IF_ERROR(
        blocks_->GrowScratch(options_.max_step_tokens,
                             std::min(options_.max_logit_rows, options_.max_step_tokens),
                             kMaxSplits));
    if (options_.cublas_min_tokens > 0) {
      TM_RETURN_IF_ERROR(gemm_.ReserveActivations(options_.max_step_tokens *
                                                  std::max({c.n_embd, c.n_ff,
                                                            c.experts.n_ff_shexp,
                                                            c.n_heads * c.head_dim})));
    }
  }
  return OkStatus();
}

Status CudaForwardPass::UploadStep(const ForwardInput& in) {
  const RaggedBatch& b = in.batch;
  std::vector<int32_t> seq_of(static_cast<size_t>(b.num_tokens()));
  for (int64_t s = 0; s < b.num_seqs(); ++s) {
    for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; ++t) {
      seq_of[static_cast<size_t>(t)] = static_cast<int32_t>(s);
    }
  }
  staging_.clear();
  const size_t ids = Stage(staging_, in.token_ids);
  const size_t rows = Stage(staging_, in.logit_rows);
  const size_t positions = Stage(staging_, b.positions);
  const size_t seqs = Stage(staging_, std::span<const int32_t>(seq_of));
  // Per KV group: the offsets of its slot_mapping, kv_indptr and kv_indices.
  std::vector<std::array<size_t, 3>> tables(b.block_tables.size());
  for (size_t g = 0; g < tables.size(); ++g) {
    tables[g][0] = Stage(staging_, b.block_tables[g].slot_mapping);
    tables[g][1] = Stage(staging_, b.block_tables[g].kv_indptr);
  }
  const ModelConfig& c = model_.config();
  const std::vector<int32_t> tiles =
      BuildAttentionTiles(b.positions, b.cu_seqlens, c.n_heads / c.n_kv_heads);
  const size_t tile_offset = Stage(staging_, std::span<const int32_t>(tiles));
  // With adapters loaded, each token's and each logit row's adapter slot (-1: none), even in a
  // step without one: a captured graph's LoRA launches then hold for every step of its shape.
  std::optional<std::array<size_t, 2>> lora_offsets;
  if (loras_.empty() &&
      std::ranges::any_of(in.seq_loras, [](const LoraAdapter* a) { return a != nullptr; })) {
    return InternalError("a LoRA adapter the CUDA pass was not given (AddLora)");
  }
  if (!loras_.empty()) {
    std::vector<int32_t> token_slots(seq_of.size()), row_slots(in.logit_rows.size());
    for (size_t t = 0; t < token_slots.size(); ++t) {
      const LoraAdapter* adapter =
          in.seq_loras.empty() ? nullptr : in.seq_loras[static_cast<size_t>(seq_of[t])];
      TM_ASSIGN_OR_RETURN(token_slots[t], loras_.SlotOf(adapter));
    }
    for (size_t r = 0; r < row_slots.size(); ++r) {
      row_slots[r] = token_slots[static_cast<size_t>(in.logit_rows[r])];
    }
    lora_offsets = {Stage(staging_, std::span<const int32_t>(token_slots)),
                    Stage(staging_, std::span<const int32_t>(row_slots))};
  }
  // Last, the only arrays whose length is not a function of the token count: each group's
  // kv_indices at a stride that only grows, by powers of two, in a buffer that grows the same
  // way. A decode step's pointers then stay put while its sequences grow, and its CUDA graph
  // is replayed rather than captured again (LaunchDecodeGraph).
  size_t longest = 0;
  for (const KvBlockTable& table : b.block_tables) {
    longest = std::max(longest, table.kv_indices.size());
  }
  indices_stride_ = std::max(indices_stride_, std::bit_ceil(std::max<size_t>(longest, 1024)));
  const size_t indices = (staging_.size() + 7) / 8 * 8;
  staging_.resize(indices + tables.size() * indices_stride_ * sizeof(int32_t));
  for (size_t g = 0; g < tables.size(); ++g) {
    tables[g][2] = indices + g * indices_stride_ * sizeof(int32_t);
    const std::span<const int32_t> group = b.block_tables[g].kv_indices;
    if (!group.empty()) {
      std::memcpy(staging_.data() + tables[g][2], group.data(), group.size_bytes());
    }
  }
  TM_RETURN_IF_ERROR(
      Grow(step_, static_cast<int64_t>(std::bit_ceil(std::max<size_t>(staging_.size(), 4096)))));
  TM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(step_.data(), staging_.data(), staging_.size(),
                                          cudaMemcpyHostToDevice, stream_),
                          "copying the step's inputs to the device");
  const uint8_t* base = step_.as<const uint8_t>();
  d_step_.token_ids = reinterpret_cast<const int32_t*>(base + ids);
  d_step_.logit_rows = reinterpret_cast<const int32_t*>(base + rows);
  d_batch_.positions = reinterpret_cast<const int32_t*>(base + positions);
  d_batch_.seq_of_token = reinterpret_cast<const int32_t*>(base + seqs);
  d_batch_.n_tokens = b.num_tokens();
  decode_only_ = b.num_seqs() == b.num_tokens();
  // A graph is replayed whatever the context: its split grid is the largest there is (blocks
  // past a token's own splits leave at once; the partition and results do not change).
  d_batch_.max_splits = decode_only_ && options_.cuda_graphs
                            ? kMaxSplits
                            : MaxSplits(b.positions.data(), b.num_tokens());
  d_step_.lora_slots = nullptr;
  d_step_.logit_lora_slots = nullptr;
  if (lora_offsets.has_value()) {
    d_step_.lora_slots = reinterpret_cast<const int32_t*>(base + (*lora_offsets)[0]);
    d_step_.logit_lora_slots = reinterpret_cast<const int32_t*>(base + (*lora_offsets)[1]);
  }
  d_batch_.tiles = reinterpret_cast<const int32_t*>(base + tile_offset);
  d_batch_.n_tiles = static_cast<int64_t>(tiles.size() / 2);
  d_tables_.resize(tables.size());
  for (size_t g = 0; g < tables.size(); ++g) {
    d_tables_[g] = DeviceBlockTable{reinterpret_cast<const int64_t*>(base + tables[g][0]),
                                    reinterpret_cast<const int32_t*>(base + tables[g][1]),
                                    reinterpret_cast<const int32_t*>(base + tables[g][2])};
  }
  return OkStatus();
}

Status CudaForwardPass::Forward(const ForwardInput& in, const KvCacheView& kv) {
  if (KvRowScaleBytes(kv.type, kv.head_dim) > 0 &&
      (kv.k_scale == nullptr || kv.v_scale == nullptr)) {
    return InvalidArgumentError(std::string(KvTypeName(kv.type)) +
                                " KV needs its scale arrays (CudaKvCache allocates them)");
  }
  const int64_t n = static_cast<int64_t>(in.token_ids.size());
  const int64_t n_logits = static_cast<int64_t>(in.logit_rows.size());
  TM_RETURN_IF_ERROR(UploadStep(in));
  TM_RETURN_IF_ERROR(blocks_->GrowScratch(n, n_logits, d_batch_.max_splits));

  if (!options_.cuda_graphs || !decode_only_ ||
      (options_.cublas_min_tokens > 0 && n >= options_.cublas_min_tokens)) {
    return EnqueueStep(kv, n, n_logits);
  }
  return LaunchDecodeGraph(kv, n, n_logits);
}

Status CudaForwardPass::EnqueueStep(const KvCacheView& kv, int64_t n, int64_t n_logits) {
  d_step_.batch = &d_batch_;
  d_step_.tables = d_tables_;
  d_step_.kv = &kv;
  d_step_.n_tokens = n;
  d_step_.n_logits = n_logits;
  blocks_->BeginStep(d_step_);
  model_.family().forward(model_.config(), model_.weights(), *blocks_);
  return blocks_->FinishStep();
}

Status CudaForwardPass::Grow(DeviceBuffer& buffer, int64_t bytes) {
  if (bytes <= buffer.bytes()) return OkStatus();
  ++buffer_generation_;  // captured graphs point at the old memory
  return buffer.Reserve(bytes);
}

namespace {

// Every field of a KV view that a captured step's kernels hold by value (its pointers, each
// layer's offsets): a view that differs in any of them, even one allocated where an earlier
// cache's K was, needs a new capture.
std::vector<int64_t> CapturedKvFields(const KvCacheView& kv) {
  std::vector<int64_t> fields = {static_cast<int64_t>(kv.type),
                                 reinterpret_cast<intptr_t>(kv.k),
                                 reinterpret_cast<intptr_t>(kv.v),
                                 reinterpret_cast<intptr_t>(kv.k_scale),
                                 reinterpret_cast<intptr_t>(kv.v_scale),
                                 kv.num_blocks,
                                 kv.block_size,
                                 kv.n_kv_heads,
                                 kv.head_dim,
                                 kv.n_layers,
                                 kv.v_in_k ? 1 : 0};
  if (kv.layer_blocks != nullptr) {
    fields.insert(fields.end(), kv.layer_blocks, kv.layer_blocks + kv.n_layers + 1);
  }
  return fields;
}

}  // namespace

Status CudaForwardPass::LaunchDecodeGraph(const KvCacheView& kv, int64_t n, int64_t n_logits) {
  const std::pair<int64_t, int64_t> key(n, n_logits);
  DecodeGraph& g = graphs_[key];
  std::vector<const int32_t*> step_arrays = {d_step_.lora_slots, d_step_.logit_lora_slots};
  for (const DeviceBlockTable& table : d_tables_) step_arrays.push_back(table.kv_indices);
  std::vector<int64_t> kv_fields = CapturedKvFields(kv);
  if (g.exec == nullptr || g.generation != BufferGeneration() || g.kv != kv_fields ||
      g.step_arrays != step_arrays) {
    TM_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                            "capturing a decode step");
    const Status enqueued = EnqueueStep(kv, n, n_logits);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    TM_RETURN_IF_ERROR(enqueued);
    TM_CUDA_RETURN_IF_ERROR(ended, "capturing a decode step");
    ++num_graph_captures_;
    // The same kernels with other pointers: update the executable graph in place, and
    // instantiate a new one only when CUDA cannot.
    cudaGraphExecUpdateResultInfo update_info{};
    if (g.exec == nullptr || cudaGraphExecUpdate(g.exec, graph, &update_info) != cudaSuccess) {
      cudaGetLastError();  // a failed update is not sticky
      if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
      g.exec = nullptr;
      const cudaError_t made = cudaGraphInstantiate(&g.exec, graph, 0);
      cudaGraphDestroy(graph);
      TM_CUDA_RETURN_IF_ERROR(made, "instantiating a decode step's graph");
    } else {
      cudaGraphDestroy(graph);
    }
    g.generation = BufferGeneration();
    g.kv = std::move(kv_fields);
    g.step_arrays = std::move(step_arrays);
  }
  return CudaStatus(cudaGraphLaunch(g.exec, stream_), "launching a decode step's graph");
}

Status CudaForwardPass::QueueHiddenRows(const ForwardInput& in) {
  const size_t d = static_cast<size_t>(model_.config().n_embd);
  for (size_t i = 0; i < in.hidden_rows.size(); ++i) {
    TM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(in.hidden_out.data() + i * d,
                        blocks_->residual() + static_cast<size_t>(in.hidden_rows[i]) * d,
                        d * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "copying hidden states to the host");
  }
  return OkStatus();
}

void CudaForwardPass::NormHiddenRows(const ForwardInput& in) const {
  // On the host: a few rows a step, for embeddings only (no kernel for so little).
  const ModelConfig& c = model_.config();
  if (model_.weights().output_norm.empty()) return;  // an encoder's rows are x's
  for (size_t i = 0; i < in.hidden_rows.size(); ++i) {
    float* row = in.hidden_out.data() + i * static_cast<size_t>(c.n_embd);
    tokenmill::RmsNorm(row, model_.weights().output_norm, c.rms_eps, 1, row);
  }
}

Status CudaForwardPass::Run(const ForwardInput& in, const KvCacheView& kv,
                            std::span<float> logits) {
  TM_RETURN_IF_ERROR(ValidateForwardInput(model_.config(), in, kv, logits.size()));
  TM_RETURN_IF_ERROR(Forward(in, kv));
  if (!logits.empty()) {
    TM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits.data(), blocks_->logits(), logits.size_bytes(),
                                            cudaMemcpyDeviceToHost, stream_),
                            "copying logits to the host");
  }
  TM_RETURN_IF_ERROR(QueueHiddenRows(in));
  TM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "running the forward pass");
  NormHiddenRows(in);
  return OkStatus();
}

Status CudaForwardPass::RunGreedy(const ForwardInput& in, const KvCacheView& kv,
                                  std::span<int32_t> token_ids) {
  const ModelConfig& c = model_.config();
  if (token_ids.size() != in.logit_rows.size()) {
    return InvalidArgumentError("RunGreedy needs one output id per logit row");
  }
  TM_RETURN_IF_ERROR(ValidateForwardInput(c, in, kv, in.logit_rows.size() *
                                                         static_cast<size_t>(c.n_vocab)));
  TM_RETURN_IF_ERROR(Forward(in, kv));
  const int64_t n_rows = static_cast<int64_t>(token_ids.size());
  TM_RETURN_IF_ERROR(Grow(argmax_, std::max<int64_t>(1, n_rows) * 4));
  TM_CUDA_RETURN_IF_ERROR(
      ArgmaxRows(blocks_->logits(), n_rows, c.n_vocab, argmax_.as<int32_t>(), stream_),
      "argmax");
  if (n_rows > 0) {
    TM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(token_ids.data(), argmax_.data(),
                                            token_ids.size_bytes(), cudaMemcpyDeviceToHost,
                                            stream_),
                            "copying token ids to the host");
  }
  TM_RETURN_IF_ERROR(QueueHiddenRows(in));
  TM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "running the forward pass");
  NormHiddenRows(in);
  return OkStatus();
}

}  // namespace tokenmill::cuda
