// Element types of model tensors, numbered as in GGUF (ggml_type), and their
// block layouts: a row of n elements takes n / block_size blocks of type_size bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace tokenmill {

// The types tokenmill has code for. Other ggml types can still be read (their layout is
// known, so a file holding them parses) but a model using them is refused. Whether the CPU
// computes with a type is decided in one place, CpuComputesWith (kernels/cpu/matmul.h).
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
  kMXFP4 = 39,
};

// Layout of any ggml type id, supported or not.
struct GgmlTypeLayout {
  uint32_t id;
  std::string_view name;  // as ggml names it: "q4_0", "f16", ...
  int64_t block_size;     // elements per block
  int64_t type_size;      // bytes per block
};

// The layout of a ggml type id, or nothing for an id ggml never had or retired.
std::optional<GgmlTypeLayout> FindGgmlType(uint32_t id);

// The TensorType of a ggml type id, or nothing when tokenmill has no code for it.
std::optional<TensorType> ToTensorType(uint32_t id);

// Every TensorType, in ggml's numbering order.
std::span<const TensorType> AllTensorTypes();

const GgmlTypeLayout& LayoutOf(TensorType type);
std::string_view NameOf(TensorType type);

}  // namespace tokenmill
