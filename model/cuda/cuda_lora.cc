#include "model/cuda/cuda_lora.h"

#include <algorithm>
#include <span>
#include <utility>

#include "kernels/dequantize.h"
#include "kernels/half.h"

namespace tokenmill::cuda {
namespace {

// A pair's A (rank rows of the base matrix's inputs) as f32, whatever LoraWeights kept it in.
StatusOr<std::vector<float>> AsFloats(const WeightMatrix& a) {
  std::vector<float> values(static_cast<size_t>(a.rows * a.cols));
  if (!HasReferenceDequantization(a.type) || a.layout != WeightLayout::kRows) {
    return UnimplementedError("these LoRA weights do not run on CUDA: use f32 LoRA weights");
  }
  for (int64_t r = 0; r < a.rows; ++r) {
    DequantizeReference(a.type, a.data + r * a.row_bytes,
                        std::span<float>(values).subspan(static_cast<size_t>(r * a.cols),
                                                         static_cast<size_t>(a.cols)));
  }
  return values;
}

}  // namespace

Status CudaLoras::Add(const LoraAdapter& adapter) {
  if (adapters_.contains(&adapter)) {
    // One copy for two ids would be freed by the first one's removal.
    return InternalError("a LoRA adapter given to the CUDA pass twice");
  }
  Copy copy;
  // The lowest free slot.
  std::vector<bool> taken;
  for (const auto& [added, other] : adapters_) {
    if (static_cast<size_t>(other.slot) >= taken.size()) taken.resize(other.slot + 1);
    taken[static_cast<size_t>(other.slot)] = true;
  }
  copy.slot = static_cast<int32_t>(std::find(taken.begin(), taken.end(), false) - taken.begin());
  // A pair is listed once per layout of its base matrix: upload each once.
  std::map<const void*, DeviceLoraPair> uploaded;  // by the host Bᵀ
  for (const auto& [base, pair] : adapter.pairs_by_base()) {
    DeviceLoraPair& device = uploaded[pair.b_data()];
    if (device.a == nullptr) {
      TM_ASSIGN_OR_RETURN(const std::vector<float> a, AsFloats(pair.a));
      TM_ASSIGN_OR_RETURN(DeviceBuffer a_copy, DeviceBuffer::CopyOf(std::span<const float>(a)));
      // Bᵀ in f32 on the device (f16 widens exactly).
      std::vector<float> bt(pair.b_transposed.begin(), pair.b_transposed.end());
      for (const uint16_t half : pair.b_transposed_f16) bt.push_back(HalfToFloat(half));
      TM_ASSIGN_OR_RETURN(DeviceBuffer bt_copy, DeviceBuffer::CopyOf(std::span<const float>(bt)));
      device = {.a = a_copy.as<const float>(),
                .b_transposed = bt_copy.as<const float>(),
                .rank = static_cast<int32_t>(pair.rank),
                .scale = pair.scale};
      copy.buffers.push_back(std::move(a_copy));
      copy.buffers.push_back(std::move(bt_copy));
    }
    copy.pairs[base] = device;
  }
  adapters_.emplace(&adapter, std::move(copy));
  if (Status rebuilt = Rebuild(); !rebuilt.ok()) {
    adapters_.erase(&adapter);  // not held: the caller lets it go
    return rebuilt;
  }
  return OkStatus();
}

void CudaLoras::Remove(const LoraAdapter& adapter) {
  if (adapters_.erase(&adapter) == 0) return;
  // Rebuilding smaller tables allocates less than it frees; an error keeps the old tables,
  // whose removed slot no token names any more.
  (void)Rebuild();
}

StatusOr<int32_t> CudaLoras::SlotOf(const LoraAdapter* adapter) const {
  if (adapter == nullptr) return -1;
  const auto it = adapters_.find(adapter);
  if (it == adapters_.end()) return InternalError("a LoRA adapter the CUDA pass was not given");
  return it->second.slot;
}

std::optional<CudaLoras::Table> CudaLoras::Find(const uint8_t* base) const {
  const auto it = tables_.find(base);
  if (it == tables_.end()) return std::nullopt;
  return Table{it->second.pairs.as<const DeviceLoraPair>(), it->second.max_rank};
}

Status CudaLoras::Rebuild() {
  int32_t slots = 0;
  for (const auto& [adapter, copy] : adapters_) slots = std::max(slots, copy.slot + 1);
  std::unordered_map<const uint8_t*, std::vector<DeviceLoraPair>> host;
  for (const auto& [adapter, copy] : adapters_) {
    for (const auto& [base, pair] : copy.pairs) {
      std::vector<DeviceLoraPair>& table = host[base];
      table.resize(static_cast<size_t>(slots));  // rank 0: the slot leaves the matrix alone
      table[static_cast<size_t>(copy.slot)] = pair;
    }
  }
  std::unordered_map<const uint8_t*, DeviceTable> tables;
  int max_rank = 0;
  for (const auto& [base, pairs] : host) {
    DeviceTable& table = tables[base];
    TM_ASSIGN_OR_RETURN(table.pairs,
                        DeviceBuffer::CopyOf(std::span<const DeviceLoraPair>(pairs)));
    for (const DeviceLoraPair& pair : pairs) table.max_rank = std::max(table.max_rank, pair.rank);
    max_rank = std::max(max_rank, table.max_rank);
  }
  tables_ = std::move(tables);
  max_rank_ = max_rank;
  ++generation_;
  return OkStatus();
}

}  // namespace tokenmill::cuda
