// Writes GGUF bytes in memory, so tests can build valid files and break them
// in exactly one place.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tokenmill::testing {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  template <typename T>
  static void Put(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  static void PutString(std::vector<uint8_t>& out, const std::string& s) {
    Put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }

  // A key with a raw encoded value (type id followed by the value's bytes).
  GgufBuilder& KeyRaw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
    PutString(kv_, key);
    Put<uint32_t>(kv_, type);
    kv_.insert(kv_.end(), value.begin(), value.end());
    ++kv_count_;
    return *this;
  }
  GgufBuilder& KeyU32(const std::string& key, uint32_t v) { return KeyRaw(key, 4, Bytes(v)); }
  GgufBuilder& KeyI32(const std::string& key, int32_t v) { return KeyRaw(key, 5, Bytes(v)); }
  GgufBuilder& KeyF32(const std::string& key, float v) { return KeyRaw(key, 6, Bytes(v)); }
  GgufBuilder& KeyBool(const std::string& key, bool v) { return KeyRaw(key, 7, {uint8_t(v)}); }
  GgufBuilder& KeyString(const std::string& key, const std::string& v) {
    std::vector<uint8_t> value;
    PutString(value, v);
    return KeyRaw(key, 8, value);
  }
  GgufBuilder& KeyStrings(const std::string& key, const std::vector<std::string>& items) {
    std::vector<uint8_t> value;
    Put<uint32_t>(value, 8);
    Put<uint64_t>(value, items.size());
    for (const auto& s : items) PutString(value, s);
    return KeyRaw(key, 9, value);
  }

  // A tensor of `type` with `shape`; its data is `data` placed at `offset`
  // (default: right after the previous tensor, aligned).
  GgufBuilder& Tensor(const std::string& name, uint32_t type, std::vector<uint64_t> shape,
                      std::vector<uint8_t> data, int64_t offset = -1) {
    if (offset < 0) offset = static_cast<int64_t>((data_.size() + 31) / 32 * 32);
    PutString(infos_, name);
    Put<uint32_t>(infos_, static_cast<uint32_t>(shape.size()));
    for (uint64_t d : shape) Put<uint64_t>(infos_, d);
    Put<uint32_t>(infos_, type);
    Put<uint64_t>(infos_, static_cast<uint64_t>(offset));
    if (data_.size() < offset + data.size()) data_.resize(offset + data.size());
    // memcpy from an empty vector's null data() is undefined even for 0 bytes (UBSan).
    if (!data.empty()) std::memcpy(data_.data() + offset, data.data(), data.size());
    ++tensor_count_;
    return *this;
  }

  std::vector<uint8_t> Build(uint32_t alignment = 32) const {
    std::vector<uint8_t> out;
    Put<uint32_t>(out, 0x46554747);
    Put<uint32_t>(out, version_);
    Put<uint64_t>(out, tensor_count_);
    Put<uint64_t>(out, kv_count_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    out.resize((out.size() + alignment - 1) / alignment * alignment);
    out.insert(out.end(), data_.begin(), data_.end());
    return out;
  }

  template <typename T>
  static std::vector<uint8_t> Bytes(T v) {
    std::vector<uint8_t> out;
    Put(out, v);
    return out;
  }

 private:
  uint32_t version_;
  uint64_t kv_count_ = 0;
  uint64_t tensor_count_ = 0;
  std::vector<uint8_t> kv_;
  std::vector<uint8_t> infos_;
  std::vector<uint8_t> data_;
};

}  // namespace tokenmill::testing
