// GGUF v2/v3 reader over a read-only memory map. Every count, length and offset
// is checked against the file before use, so a malformed file yields a Status
// naming the problem, never a crash or an absurd allocation.
// Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/status.h"
#include "kernels/tensor_type.h"

namespace tokenmill {

enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6,
  kBool = 7, kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType type);

// One metadata value. Integers keep their sign class; strings view the file.
class GgufValue {
 public:
  using Scalar = std::variant<uint64_t, int64_t, double, bool, std::string_view>;

  GgufValue(GgufValueType type, Scalar scalar) : type_(type), scalar_(scalar) {}
  GgufValue(GgufValueType element_type, std::vector<GgufValue> items)
      : type_(GgufValueType::kArray), element_type_(element_type), items_(std::move(items)) {}

  GgufValueType type() const { return type_; }
  const Scalar& scalar() const { return scalar_; }
  // Arrays only.
  GgufValueType element_type() const { return element_type_; }
  const std::vector<GgufValue>& items() const { return items_; }

  // A short rendering for logs and `tokenmill info`; long arrays are elided.
  std::string ToString() const;

 private:
  GgufValueType type_;
  Scalar scalar_{false};
  GgufValueType element_type_ = GgufValueType::kU8;
  std::vector<GgufValue> items_;
};

struct GgufTensor {
  std::string_view name;
  uint32_t ggml_type;          // see FindGgmlType / ToTensorType
  std::vector<int64_t> shape;  // ggml order: shape[0] is the contiguous (row) dimension
  int64_t num_elements;
  int64_t num_bytes;
  uint64_t offset;             // from the start of the data section
  const uint8_t* data;         // inside the file's bytes
};

class GgufFile {
 public:
  // Maps the file read-only and parses it.
  static StatusOr<GgufFile> Open(const std::string& path);
  // Parses bytes that the caller keeps alive as long as the result.
  static StatusOr<GgufFile> Parse(std::span<const uint8_t> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  std::span<const uint8_t> bytes() const { return bytes_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string_view, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed accessors. Integers of any width convert when the value fits; a
  // missing key or a value of another type is an error naming the key.
  StatusOr<uint32_t> GetU32(std::string_view key) const;
  StatusOr<uint64_t> GetU64(std::string_view key) const;
  StatusOr<int32_t> GetI32(std::string_view key) const;
  StatusOr<float> GetF32(std::string_view key) const;
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::string_view> GetString(std::string_view key) const;
  StatusOr<std::vector<std::string_view>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<float>> GetF32Array(std::string_view key) const;
  StatusOr<std::vector<int32_t>> GetI32Array(std::string_view key) const;

  // Says that bytes [data, data + n) of the mapped file will not be read again soon: their
  // whole pages leave this process's resident memory (they stay in the page cache, clean, and
  // a later read maps them back). For weights copied into another layout at load. No-op for
  // parsed caller-owned bytes.
  void ReleasePages(const uint8_t* data, size_t n) const;

  // Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;

 private:
  class Mapping;
  class Parser;
  GgufFile() = default;

  std::unique_ptr<Mapping> mapping_;  // null when parsing caller-owned bytes
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string_view, GgufValue>> metadata_;
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// The tensors and bytes of one ggml type in a file.
struct GgufTypeTotal {
  std::string_view type;  // ggml's name: "q4_k", "f32", ...
  int64_t tensors = 0;
  int64_t bytes = 0;
};

// The file's type mix (`tokenmill info`, the startup log): a total per type it holds, most
// bytes first.
std::vector<GgufTypeTotal> TypeMix(const GgufFile& file);

// "q4_1: 168 tensors, 64.1 MiB; f32: 61 tensors, 114.0 KiB".
std::string FormatTypeMix(const std::vector<GgufTypeTotal>& mix);

}  // namespace tokenmill
