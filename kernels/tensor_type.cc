#include "kernels/tensor_type.h"

#include <array>

#include "common/check.h"

namespace tokenmill {
namespace {

// From ggml's type_traits (the same numbers as the gguf package's GGML_QUANT_SIZES).
constexpr std::array<GgmlTypeLayout, 34> kLayouts = {{
    {0, "f32", 1, 4},         {1, "f16", 1, 2},         {2, "q4_0", 32, 18},
    {3, "q4_1", 32, 20},      {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},
    {8, "q8_0", 32, 34},      {9, "q8_1", 32, 40},      {10, "q2_k", 256, 84},
    {11, "q3_k", 256, 110},   {12, "q4_k", 256, 144},   {13, "q5_k", 256, 176},
    {14, "q6_k", 256, 210},   {15, "q8_k", 256, 292},   {16, "iq2_xxs", 256, 66},
    {17, "iq2_xs", 256, 74},  {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},
    {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},  {22, "iq2_s", 256, 82},
    {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},         {25, "i16", 1, 2},
    {26, "i32", 1, 4},        {27, "i64", 1, 8},        {28, "f64", 1, 8},
    {29, "iq1_m", 256, 56},   {30, "bf16", 1, 2},       {34, "tq1_0", 256, 54},
    {35, "tq2_0", 256, 66},   {39, "mxfp4", 32, 17},    {40, "nvfp4", 64, 36},
    {41, "q1_0", 128, 18},
}};

constexpr std::array<TensorType, 16> kTensorTypes = {
    TensorType::kF32,  TensorType::kF16,    TensorType::kQ4_0,  TensorType::kQ4_1,
    TensorType::kQ5_0, TensorType::kQ5_1,   TensorType::kQ8_0,  TensorType::kQ2_K,
    TensorType::kQ3_K, TensorType::kQ4_K,   TensorType::kQ5_K,  TensorType::kQ6_K,
    TensorType::kIQ4_NL, TensorType::kIQ4_XS, TensorType::kBF16, TensorType::kMXFP4,
};

}  // namespace

std::optional<GgmlTypeLayout> FindGgmlType(uint32_t id) {
  for (const GgmlTypeLayout& layout : kLayouts) {
    if (layout.id == id) return layout;
  }
  return std::nullopt;
}

std::optional<TensorType> ToTensorType(uint32_t id) {
  for (TensorType type : kTensorTypes) {
    if (static_cast<uint32_t>(type) == id) return type;
  }
  return std::nullopt;
}

std::span<const TensorType> AllTensorTypes() { return kTensorTypes; }

const GgmlTypeLayout& LayoutOf(TensorType type) {
  for (const GgmlTypeLayout& layout : kLayouts) {
    if (layout.id == static_cast<uint32_t>(type)) return layout;
  }
  TM_CHECK(false) << "no layout for TensorType " << static_cast<uint32_t>(type);
  __builtin_unreachable();
}

std::string_view NameOf(TensorType type) { return LayoutOf(type).name; }

}  // namespace tokenmill
