// libFuzzer target: any bytes must parse or fail with a Status, never crash; every tensor of a
// type with a reference dequantization (each block type, kernels/dequantize.h) is dequantized
// one row at a time, as the embedding lookup reads it, so the sanitizers see each block read.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/dequantize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tokenmill::GgufFile::Parse({data, size});
  if (file.ok()) {
    // Touch what a loader would read, so the sanitizer sees every view.
    uint64_t sum = 0;
    for (const auto& [key, value] : file->metadata()) sum += key.size() + value.ToString().size();
    std::vector<float> row;
    for (const auto& t : file->tensors()) {
      if (t.num_bytes > 0) sum += t.data[0] + t.data[t.num_bytes - 1];
      const auto type = tokenmill::ToTensorType(t.ggml_type);
      if (!type || !tokenmill::HasReferenceDequantization(*type)) continue;
      const tokenmill::GgmlTypeLayout& layout = tokenmill::LayoutOf(*type);
      const int64_t row_bytes = t.shape[0] / layout.block_size * layout.type_size;
      row.resize(static_cast<size_t>(std::min<int64_t>(t.shape[0], 1 << 16)));
      if (static_cast<int64_t>(row.size()) != t.shape[0]) continue;  // bounded work per input
      for (int64_t r = 0; r < std::min<int64_t>(t.num_elements / t.shape[0], 4); ++r) {
        tokenmill::DequantizeReference(*type, t.data + r * row_bytes, row);
        sum += static_cast<uint64_t>(row.front() != 0.0f) + (row.back() != 0.0f);
      }
    }
    tokenmill::FormatTypeMix(tokenmill::TypeMix(*file));
    volatile uint64_t sink = sum;  // keeps the reads
    (void)sink;
  }
  return 0;
}
