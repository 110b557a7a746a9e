#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>

#include "common/byte_size.h"

namespace tokenmill {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;               // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 8;

// Bytes a value of this type takes at least; bounds element counts by the file size.
uint64_t MinEncodedSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    case GgufValueType::kString: return 8;       // the length
    case GgufValueType::kArray: return 4 + 8;    // element type + count
  }
  return 1;
}

bool IsValidValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kF64); }

std::string Quote(std::string_view s) {
  std::string out(1, '\'');  // built by append: GCC 12 -O3 warns wrongly on "'" + s + "'"
  out.append(s).push_back('\'');
  return out;
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8: return "uint8";
    case GgufValueType::kI8: return "int8";
    case GgufValueType::kU16: return "uint16";
    case GgufValueType::kI16: return "int16";
    case GgufValueType::kU32: return "uint32";
    case GgufValueType::kI32: return "int32";
    case GgufValueType::kF32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kU64: return "uint64";
    case GgufValueType::kI64: return "int64";
    case GgufValueType::kF64: return "float64";
  }
  return "unknown";
}

std::string GgufValue::ToString() const {
  std::ostringstream out;
  if (type_ == GgufValueType::kArray) {
    out << "[";
    const size_t shown = std::min<size_t>(items_.size(), 8);
    for (size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << items_[i].ToString();
    if (shown < items_.size()) out << ", ... (" << items_.size() << " items)";
    out << "]";
    return out.str();
  }
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string_view>) {
          out << Quote(v.size() > 80 ? std::string(v.substr(0, 80)) + "..." : std::string(v));
        } else if constexpr (std::is_same_v<V, bool>) {
          out << (v ? "true" : "false");
        } else {
          out << v;
        }
      },
      scalar_);
  return out.str();
}

// ---------------------------------------------------------------- mapping

class GgufFile::Mapping {
 public:
  static StatusOr<std::unique_ptr<Mapping>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return NotFoundError("cannot open model file '" + path + "': " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return InvalidArgumentError("'" + path + "' is not a regular file");
    }
    if (st.st_size == 0) {
      ::close(fd);
      return InvalidArgumentError("'" + path + "' is empty, not a GGUF file");
    }
    void* addr = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);  // the mapping keeps the file alive
    if (addr == MAP_FAILED) {
      return InternalError("cannot map '" + path + "': " + std::strerror(errno));
    }
    return std::unique_ptr<Mapping>(new Mapping(addr, static_cast<size_t>(st.st_size)));
  }
  ~Mapping() { ::munmap(addr_, size_); }
  void Release(const uint8_t* data, size_t n) const {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(data) + n) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(addr_), size_}; }

 private:
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  void* addr_;
  size_t size_;
};

// ---------------------------------------------------------------- parser

// Reads the file front to back; every read is bounds checked.
class GgufFile::Parser {
 public:
  explicit Parser(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  Status Run(GgufFile& file) {
    uint32_t magic = 0;
    TM_RETURN_IF_ERROR(Read(magic, "magic"));
    if (magic != kMagic) {
      return InvalidArgumentError("not a GGUF file: the first 4 bytes are not 'GGUF'");
    }
    TM_RETURN_IF_ERROR(Read(file.version_, "version"));
    if (file.version_ != 2 && file.version_ != 3) {
      if (file.version_ == 1) {
        return InvalidArgumentError("GGUF version 1 is not supported: convert the model anew");
      }
      if (__builtin_bswap32(file.version_) <= 3) {
        return InvalidArgumentError("big-endian GGUF files are not supported");
      }
      return InvalidArgumentError("unknown GGUF version " + std::to_string(file.version_) +
                                  " (supported: 2 and 3)");
    }
    uint64_t tensor_count = 0;
    uint64_t kv_count = 0;
    TM_RETURN_IF_ERROR(Read(tensor_count, "tensor count"));
    TM_RETURN_IF_ERROR(Read(kv_count, "metadata count"));
    // A key-value pair takes at least 13 bytes and a tensor info 24: bound both
    // counts by the file size before reserving anything.
    if (kv_count > Remaining() / 13) {
      return InvalidArgumentError("metadata count " + std::to_string(kv_count) +
                                  " does not fit in the file");
    }
    if (tensor_count > Remaining() / 24) {
      return InvalidArgumentError("tensor count " + std::to_string(tensor_count) +
                                  " does not fit in the file");
    }

    file.metadata_.reserve(kv_count);
    for (uint64_t i = 0; i < kv_count; ++i) {
      std::string_view key;
      TM_RETURN_IF_ERROR(ReadString(key, "metadata key " + std::to_string(i)));
      uint32_t type = 0;
      TM_RETURN_IF_ERROR(Read(type, "type of " + Quote(key)));
      TM_ASSIGN_OR_RETURN(GgufValue value, ReadValue(type, key, 0));
      if (!file.metadata_index_.emplace(key, file.metadata_.size()).second) {
        return InvalidArgumentError("metadata key " + Quote(key) + " appears twice");
      }
      file.metadata_.emplace_back(key, std::move(value));
    }
    TM_RETURN_IF_ERROR(ReadAlignment(file));

    file.tensors_.reserve(tensor_count);
    for (uint64_t i = 0; i < tensor_count; ++i) {
      TM_ASSIGN_OR_RETURN(GgufTensor tensor, ReadTensorInfo(i));
      if (!file.tensor_index_.emplace(tensor.name, file.tensors_.size()).second) {
        return InvalidArgumentError("tensor " + Quote(tensor.name) + " appears twice");
      }
      file.tensors_.push_back(std::move(tensor));
    }
    return PlaceTensorData(file);
  }

 private:
  size_t Remaining() const { return bytes_.size() - pos_; }

  Status Truncated(const std::string& what) const {
    return InvalidArgumentError("truncated GGUF file: it ends inside the " + what + " at byte " +
                                std::to_string(pos_));
  }

  template <typename T>
  Status Read(T& out, const std::string& what) {
    if (Remaining() < sizeof(T)) return Truncated(what);
    std::memcpy(&out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }

  Status ReadString(std::string_view& out, const std::string& what) {
    uint64_t length = 0;
    TM_RETURN_IF_ERROR(Read(length, what));
    if (length > Remaining()) {
      return InvalidArgumentError("the " + what + " claims " + std::to_string(length) +
                                  " bytes but the file ends first");
    }
    out = {reinterpret_cast<const char*>(bytes_.data() + pos_), length};
    pos_ += length;
    return OkStatus();
  }

  StatusOr<GgufValue> ReadValue(uint32_t raw_type, std::string_view key, int depth) {
    if (!IsValidValueType(raw_type)) {
      return InvalidArgumentError("metadata " + Quote(key) + " has unknown value type " +
                                  std::to_string(raw_type));
    }
    const auto type = static_cast<GgufValueType>(raw_type);
    const std::string what = "value of " + Quote(key);
    switch (type) {
      case GgufValueType::kU8: return ReadScalar<uint8_t, uint64_t>(type, what);
      case GgufValueType::kI8: return ReadScalar<int8_t, int64_t>(type, what);
      case GgufValueType::kU16: return ReadScalar<uint16_t, uint64_t>(type, what);
      case GgufValueType::kI16: return ReadScalar<int16_t, int64_t>(type, what);
      case GgufValueType::kU32: return ReadScalar<uint32_t, uint64_t>(type, what);
      case GgufValueType::kI32: return ReadScalar<int32_t, int64_t>(type, what);
      case GgufValueType::kU64: return ReadScalar<uint64_t, uint64_t>(type, what);
      case GgufValueType::kI64: return ReadScalar<int64_t, int64_t>(type, what);
      case GgufValueType::kF32: return ReadScalar<float, double>(type, what);
      case GgufValueType::kF64: return ReadScalar<double, double>(type, what);
      case GgufValueType::kBool: {
        uint8_t b = 0;
        TM_RETURN_IF_ERROR(Read(b, what));
        if (b > 1) return InvalidArgumentError("metadata " + Quote(key) + " is a bool of value " +
                                               std::to_string(b));
        return GgufValue(type, b == 1);
      }
      case GgufValueType::kString: {
        std::string_view s;
        TM_RETURN_IF_ERROR(ReadString(s, what));
        return GgufValue(type, s);
      }
      case GgufValueType::kArray: return ReadArray(key, depth);
    }
    return InternalError("unreachable value type");
  }

  template <typename Stored, typename Held>
  StatusOr<GgufValue> ReadScalar(GgufValueType type, const std::string& what) {
    Stored v{};
    TM_RETURN_IF_ERROR(Read(v, what));
    return GgufValue(type, static_cast<Held>(v));
  }

  StatusOr<GgufValue> ReadArray(std::string_view key, int depth) {
    if (depth >= kMaxArrayNesting) {
      return InvalidArgumentError("metadata " + Quote(key) + " nests arrays too deeply");
    }
    uint32_t element_type = 0;
    uint64_t count = 0;
    TM_RETURN_IF_ERROR(Read(element_type, "array type of " + Quote(key)));
    TM_RETURN_IF_ERROR(Read(count, "array length of " + Quote(key)));
    if (!IsValidValueType(element_type)) {
      return InvalidArgumentError("metadata " + Quote(key) + " is an array of unknown type " +
                                  std::to_string(element_type));
    }
    if (count > Remaining() / MinEncodedSize(static_cast<GgufValueType>(element_type))) {
      return InvalidArgumentError("metadata " + Quote(key) + " claims " + std::to_string(count) +
                                  " array items, more than the file holds");
    }
    std::vector<GgufValue> items;
    items.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      TM_ASSIGN_OR_RETURN(GgufValue item, ReadValue(element_type, key, depth + 1));
      items.push_back(std::move(item));
    }
    return GgufValue(static_cast<GgufValueType>(element_type), std::move(items));
  }

  Status ReadAlignment(GgufFile& file) {
    if (!file.Has("general.alignment")) return OkStatus();
    TM_ASSIGN_OR_RETURN(const uint32_t alignment, file.GetU32("general.alignment"));
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      return InvalidArgumentError("general.alignment is " + std::to_string(alignment) +
                                  ", not a power of two");
    }
    file.alignment_ = alignment;
    return OkStatus();
  }

  StatusOr<GgufTensor> ReadTensorInfo(uint64_t index) {
    GgufTensor t{};
    TM_RETURN_IF_ERROR(ReadString(t.name, "name of tensor " + std::to_string(index)));
    const std::string what = "tensor " + Quote(t.name);
    uint32_t n_dims = 0;
    TM_RETURN_IF_ERROR(Read(n_dims, "dimension count of " + what));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return InvalidArgumentError(what + " has " + std::to_string(n_dims) +
                                  " dimensions (1 to 4 are valid)");
    }
    t.num_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      TM_RETURN_IF_ERROR(Read(dim, "shape of " + what));
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          static_cast<uint64_t>(t.num_elements) >
              static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim) {
        return InvalidArgumentError(what + " has an invalid shape (dimension " +
                                    std::to_string(dim) + ")");
      }
      t.shape.push_back(static_cast<int64_t>(dim));
      t.num_elements *= static_cast<int64_t>(dim);
    }
    TM_RETURN_IF_ERROR(Read(t.ggml_type, "type of " + what));
    const std::optional<GgmlTypeLayout> layout = FindGgmlType(t.ggml_type);
    if (!layout) {
      return InvalidArgumentError(what + " has unknown tensor type " + std::to_string(t.ggml_type));
    }
    if (t.shape[0] % layout->block_size != 0) {
      return InvalidArgumentError(what + " has rows of " + std::to_string(t.shape[0]) +
                                  " elements, not a multiple of the " + std::string(layout->name) +
                                  " block size " + std::to_string(layout->block_size));
    }
    // Cannot overflow: num_elements / block_size * type_size <= num_elements * 4.5 here,
    // and the data-bounds check below rejects anything larger than the file.
    const int64_t blocks = t.num_elements / layout->block_size;
    if (blocks > std::numeric_limits<int64_t>::max() / layout->type_size) {
      return InvalidArgumentError(what + " is too large");
    }
    t.num_bytes = blocks * layout->type_size;
    TM_RETURN_IF_ERROR(Read(t.offset, "data offset of " + what));
    return t;
  }

  Status PlaceTensorData(GgufFile& file) {
    const uint64_t align = file.alignment_;
    const uint64_t data_start = (pos_ + align - 1) / align * align;
    if (data_start > bytes_.size() && !file.tensors_.empty()) {
      return InvalidArgumentError("truncated GGUF file: the tensor data section is missing");
    }
    const uint64_t data_size = bytes_.size() - std::min<uint64_t>(data_start, bytes_.size());
    std::vector<const GgufTensor*> by_offset;
    for (GgufTensor& t : file.tensors_) {
      const std::string what = "tensor " + Quote(t.name);
      if (t.offset % align != 0) {
        return InvalidArgumentError(what + " starts at offset " + std::to_string(t.offset) +
                                    ", not a multiple of the alignment " + std::to_string(align));
      }
      if (t.offset > data_size || static_cast<uint64_t>(t.num_bytes) > data_size - t.offset) {
        return InvalidArgumentError(what + " lies beyond the end of the file (offset " +
                                    std::to_string(t.offset) + ", " + std::to_string(t.num_bytes) +
                                    " bytes; the data section holds " + std::to_string(data_size) +
                                    ")");
      }
      t.data = bytes_.data() + data_start + t.offset;
      by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const GgufTensor& prev = *by_offset[i - 1];
      if (prev.offset + static_cast<uint64_t>(prev.num_bytes) > by_offset[i]->offset) {
        return InvalidArgumentError("tensors " + Quote(prev.name) + " and " +
                                    Quote(by_offset[i]->name) + " overlap in the file");
      }
    }
    return OkStatus();
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------- GgufFile

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  TM_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> mapping, Mapping::Open(path));
  const std::span<const uint8_t> bytes = mapping->bytes();
  StatusOr<GgufFile> file = Parse(bytes);
  if (!file.ok()) {
    return Status(file.status().code(), "'" + path + "': " + file.status().message());
  }
  file->mapping_ = std::move(mapping);
  return file;
}

StatusOr<GgufFile> GgufFile::Parse(std::span<const uint8_t> bytes) {
  GgufFile file;
  file.bytes_ = bytes;
  TM_RETURN_IF_ERROR(Parser(bytes).Run(file));
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

void GgufFile::ReleasePages(const uint8_t* data, size_t n) const {
  if (mapping_ != nullptr) mapping_->Release(data, n);
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status Missing(std::string_view key) {
  return NotFoundError("the model has no metadata key " + Quote(key));
}

Status WrongType(std::string_view key, const GgufValue& value, std::string_view expected) {
  std::string got(GgufValueTypeName(value.type()));
  if (value.type() == GgufValueType::kArray) {
    got = "array of " + std::string(GgufValueTypeName(value.element_type()));
  }
  return InvalidArgumentError("metadata key " + Quote(key) + " is a " + got + ", expected " +
                              std::string(expected));
}

// The integer in `value` as T, when it is an integer that fits.
template <typename T>
std::optional<T> AsInteger(const GgufValue& value) {
  if (const auto* u = std::get_if<uint64_t>(&value.scalar())) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(*u);
  } else if (const auto* i = std::get_if<int64_t>(&value.scalar())) {
    if (*i >= 0 && static_cast<uint64_t>(*i) <= static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return static_cast<T>(*i);
    }
    if (*i < 0 && std::is_signed_v<T> && *i >= static_cast<int64_t>(std::numeric_limits<T>::min())) {
      return static_cast<T>(*i);
    }
  }
  return std::nullopt;
}

template <typename T>
StatusOr<T> GetInteger(const GgufFile& file, std::string_view key, std::string_view expected) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) return Missing(key);
  if (const std::optional<T> v = AsInteger<T>(*value)) return *v;
  if (value->type() != GgufValueType::kArray &&
      (std::holds_alternative<uint64_t>(value->scalar()) ||
       std::holds_alternative<int64_t>(value->scalar()))) {
    return InvalidArgumentError("metadata key " + Quote(key) + " = " + value->ToString() +
                                " does not fit in " + std::string(expected));
  }
  return WrongType(key, *value, expected);
}

}  // namespace

StatusOr<uint32_t> GgufFile::GetU32(std::string_view key) const {
  return GetInteger<uint32_t>(*this, key, "uint32");
}
StatusOr<uint64_t> GgufFile::GetU64(std::string_view key) const {
  return GetInteger<uint64_t>(*this, key, "uint64");
}
StatusOr<int32_t> GgufFile::GetI32(std::string_view key) const {
  return GetInteger<int32_t>(*this, key, "int32");
}

StatusOr<float> GgufFile::GetF32(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (value->type() != GgufValueType::kArray) {
    if (const auto* d = std::get_if<double>(&value->scalar())) return static_cast<float>(*d);
  }
  return WrongType(key, *value, "float");
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (value->type() == GgufValueType::kBool) return std::get<bool>(value->scalar());
  return WrongType(key, *value, "bool");
}

StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (value->type() == GgufValueType::kString) return std::get<std::string_view>(value->scalar());
  return WrongType(key, *value, "string");
}

StatusOr<std::vector<std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (value->type() != GgufValueType::kArray || value->element_type() != GgufValueType::kString) {
    return WrongType(key, *value, "array of string");
  }
  std::vector<std::string_view> out;
  out.reserve(value->items().size());
  for (const GgufValue& item : value->items()) out.push_back(std::get<std::string_view>(item.scalar()));
  return out;
}

StatusOr<std::vector<float>> GgufFile::GetF32Array(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (value->type() != GgufValueType::kArray ||
      (value->element_type() != GgufValueType::kF32 && value->element_type() != GgufValueType::kF64)) {
    return WrongType(key, *value, "array of float");
  }
  std::vector<float> out;
  out.reserve(value->items().size());
  for (const GgufValue& item : value->items()) out.push_back(static_cast<float>(std::get<double>(item.scalar())));
  return out;
}

StatusOr<std::vector<int32_t>> GgufFile::GetI32Array(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  const GgufValueType e = value->element_type();
  if (value->type() != GgufValueType::kArray || e == GgufValueType::kString ||
      e == GgufValueType::kArray || e == GgufValueType::kF32 || e == GgufValueType::kF64 ||
      e == GgufValueType::kBool) {
    return WrongType(key, *value, "array of integers");
  }
  std::vector<int32_t> out;
  out.reserve(value->items().size());
  for (size_t i = 0; i < value->items().size(); ++i) {
    const std::optional<int32_t> v = AsInteger<int32_t>(value->items()[i]);
    if (!v) {
      return InvalidArgumentError("metadata key " + Quote(key) + " item " + std::to_string(i) +
                                  " does not fit in int32");
    }
    out.push_back(*v);
  }
  return out;
}

std::vector<GgufTypeTotal> TypeMix(const GgufFile& file) {
  std::vector<GgufTypeTotal> mix;
  for (const GgufTensor& t : file.tensors()) {
    const std::string_view type = FindGgmlType(t.ggml_type)->name;  // the parser checked it
    auto it = std::find_if(mix.begin(), mix.end(),
                           [&](const GgufTypeTotal& total) { return total.type == type; });
    if (it == mix.end()) it = mix.insert(mix.end(), GgufTypeTotal{type});
    ++it->tensors;
    it->bytes += t.num_bytes;
  }
  std::stable_sort(mix.begin(), mix.end(), [](const GgufTypeTotal& a, const GgufTypeTotal& b) {
    return a.bytes > b.bytes;
  });
  return mix;
}

std::string FormatTypeMix(const std::vector<GgufTypeTotal>& mix) {
  std::string out;
  for (const GgufTypeTotal& total : mix) {
    if (!out.empty()) out += "; ";
    out += std::string(total.type) + ": " + std::to_string(total.tensors) +
           (total.tensors == 1 ? " tensor, " : " tensors, ") + FormatBytes(total.bytes);
  }
  return out;
}

}  // namespace tokenmill
