#include "bench/synthetic/synthetic_model.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <variant>
#include <string_view>

#include "gguf/gguf.h"
#include "kernels/dequantize_k_quants.h"
#include "kernels/half.h"

namespace tokenmill::bench {
namespace {

constexpr uint32_t kAlignment = 32;  // GGUF's default general.alignment
constexpr float kWeightStd = 0.02f;  // a trained Llama's matrices, roughly

// splitmix64: fast, and one seed per tensor makes each tensor's bytes independent of the others.
struct SplitMix {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// GGUF metadata and tensor infos, little-endian as the format is.
class HeaderWriter {
 public:
  template <typename T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof v);
  }
  void PutString(std::string_view s) {
    Put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void KeyU32(std::string_view key, uint32_t v) { Key(key, 4), Put(v); }
  void KeyF32(std::string_view key, float v) { Key(key, 6), Put(v); }
  void KeyU64(std::string_view key, uint64_t v) { Key(key, 10), Put(v); }
  void KeyString(std::string_view key, std::string_view v) { Key(key, 8), PutString(v); }
  // Any value read from another GGUF (GgufFile), written back as it was.
  void KeyValue(std::string_view key, const GgufValue& v) {
    Key(key, static_cast<uint32_t>(v.type()));
    Payload(v);
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  void Key(std::string_view key, uint32_t type) {
    PutString(key);
    Put(type);
  }
  void Payload(const GgufValue& v) {
    const GgufValue::Scalar& x = v.scalar();
    const auto integer = [&] {
      return std::holds_alternative<uint64_t>(x) ? std::get<uint64_t>(x)
                                                 : static_cast<uint64_t>(std::get<int64_t>(x));
    };
    switch (v.type()) {
      case GgufValueType::kU8:
      case GgufValueType::kI8: Put(static_cast<uint8_t>(integer())); break;
      case GgufValueType::kU16:
      case GgufValueType::kI16: Put(static_cast<uint16_t>(integer())); break;
      case GgufValueType::kU32:
      case GgufValueType::kI32: Put(static_cast<uint32_t>(integer())); break;
      case GgufValueType::kU64:
      case GgufValueType::kI64: Put(integer()); break;
      case GgufValueType::kF32: Put(static_cast<float>(std::get<double>(x))); break;
      case GgufValueType::kF64: Put(std::get<double>(x)); break;
      case GgufValueType::kBool: Put(static_cast<uint8_t>(std::get<bool>(x))); break;
      case GgufValueType::kString: PutString(std::get<std::string_view>(x)); break;
      case GgufValueType::kArray:
        Put(static_cast<uint32_t>(v.element_type()));
        Put<uint64_t>(v.items().size());
        for (const GgufValue& item : v.items()) Payload(item);
        break;
    }
  }
  std::vector<uint8_t> bytes_;
};

uint64_t AlignUp(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// The block types written here: elements and bytes a block, bytes of f16 scales leading it (d,
// or d and the minimum m), and the std of the values the random quants decode to before the
// scale: Q4_0's nibbles -8..7 (~4.6), Q5_0's q - 16 and Q5_1's q in 0..31 (~9.2; Q5_1's
// m = -15.5 d centres it), IQ4_NL's levels (rms ~67), Q8_0's int8 in -127..127 (~73), Q4_K's
// sc · q - 7.5 · m for random 6-bit sub-block scales sc and minimums m and nibbles q (~258; its
// dmin = 7.5 d centres it), Q6_K's sc · (q - 32) for random int8 sub-block scales and 6-bit q
// (~1366). The 256-element types keep their f16 scales where KQuantF16Offsets says.
struct BlockKind {
  TensorType type;
  size_t elements;
  size_t bytes;
  size_t scale_bytes;
  float value_std;
};
constexpr BlockKind kBlockKinds[] = {
    {TensorType::kQ4_0, 32, 18, 2, 4.61f},   {TensorType::kQ5_0, 32, 22, 2, 9.23f},
    {TensorType::kQ5_1, 32, 24, 4, 9.23f},   {TensorType::kIQ4_NL, 32, 18, 2, 67.4f},
    {TensorType::kQ8_0, 32, 34, 2, 73.3f},   {TensorType::kQ4_K, 256, 144, 4, 258.3f},
    {TensorType::kQ6_K, 256, 210, 0, 1366.0f},
};
const BlockKind* FindBlockKind(TensorType type) {
  for (const BlockKind& k : kBlockKinds) {
    if (k.type == type) return &k;
  }
  return nullptr;
}

// One row of random blocks: random quants after the scales. The scale is jittered by +-50% per
// block, so the per-block scales the kernels read are not all equal.
void FillRow(TensorType type, SplitMix& rng, std::vector<uint8_t>& row) {
  const BlockKind& kind = *FindBlockKind(type);
  const bool q8 = type == TensorType::kQ8_0;
  const size_t block_bytes = kind.bytes;
  for (size_t b = 0; b + block_bytes <= row.size(); b += block_bytes) {
    uint8_t* block = row.data() + b;
    const float jitter = 0.5f + static_cast<float>(rng.Next() >> 40) / static_cast<float>(1 << 24);
    const float scale = kWeightStd / kind.value_std * jitter;
    const uint16_t d = FloatToHalf(scale);
    if (type == TensorType::kQ6_K) {
      for (size_t i = 0; i < block_bytes; i += 8) {
        const uint64_t r = rng.Next();
        std::memcpy(block + i, &r, std::min<size_t>(8, block_bytes - i));
      }
      std::memcpy(block + KQuantF16Offsets(type)[0], &d, 2);
      continue;
    }
    std::memcpy(block, &d, 2);
    if (type == TensorType::kQ5_1 || type == TensorType::kQ4_K) {
      const uint16_t m = FloatToHalf(type == TensorType::kQ5_1 ? -15.5f * scale : 7.5f * scale);
      std::memcpy(block + 2, &m, 2);
    }
    for (size_t i = kind.scale_bytes; i < block_bytes; i += 8) {
      uint64_t r = rng.Next();
      if (q8) {
        // int8 -128 is outside llama.cpp's quantizer's range: map it to -127.
        for (int k = 0; k < 8; ++k) {
          if (static_cast<uint8_t>(r >> (8 * k)) == 0x80) r ^= uint64_t{1} << (8 * k);
        }
      }
      std::memcpy(block + i, &r, std::min<size_t>(8, block_bytes - i));
    }
  }
}

Status CheckSpec(const SyntheticModelSpec& spec) {
  const SyntheticShape& s = spec.shape;
  if (FindBlockKind(spec.matrix_type) == nullptr || spec.matrix_type == TensorType::kQ6_K) {
    return InvalidArgumentError("synthetic model: --type must be q4_0, q5_0, q5_1, iq4_nl, "
                                "q8_0 or q4_k");
  }
  const int block = static_cast<int>(FindBlockKind(spec.matrix_type)->elements);
  if (s.n_layers <= 0 || s.n_embd <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.n_ff <= 0 ||
      s.n_vocab <= 0 || s.context_length <= 0) {
    return InvalidArgumentError("synthetic model: every dimension must be positive");
  }
  if (s.n_embd % block != 0 || s.n_ff % block != 0) {
    return InvalidArgumentError("synthetic model: --embd and --ff must be multiples of " +
                                std::to_string(block) + " (the quantization block)");
  }
  if (s.n_embd % s.n_heads != 0 || s.n_heads % s.n_kv_heads != 0) {
    return InvalidArgumentError("synthetic model: --heads must divide --embd and --kv-heads "
                                "must divide --heads");
  }
  if ((s.n_embd / s.n_heads) % 2 != 0) {
    return InvalidArgumentError("synthetic model: the head width (--embd / --heads) must be even");
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<SyntheticTensor>> SyntheticTensors(const SyntheticModelSpec& spec) {
  TM_RETURN_IF_ERROR(CheckSpec(spec));
  const SyntheticShape& s = spec.shape;
  const uint64_t embd = s.n_embd, ff = s.n_ff, vocab = s.n_vocab;
  const uint64_t kv = embd / s.n_heads * s.n_kv_heads;
  std::vector<SyntheticTensor> tensors;
  auto add = [&](std::string name, TensorType type, uint64_t cols, uint64_t rows) {
    const GgmlTypeLayout layout = *FindGgmlType(static_cast<uint32_t>(type));
    const uint64_t bytes = cols * rows / layout.block_size * layout.type_size;
    std::vector<uint64_t> shape = {cols};
    if (rows > 1) shape.push_back(rows);
    tensors.push_back({std::move(name), type, std::move(shape), bytes});
  };
  const TensorType m = spec.matrix_type;
  add("token_embd.weight", m, embd, vocab);
  add("output_norm.weight", TensorType::kF32, embd, 1);
  // llama.cpp's Q4_K_M keeps the output in Q6_K; the block-32 types' files keep it in Q8_0.
  add("output.weight", m == TensorType::kQ4_K ? TensorType::kQ6_K : TensorType::kQ8_0, embd, vocab);
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", TensorType::kF32, embd, 1);
    add(p + "attn_q.weight", m, embd, embd);
    add(p + "attn_k.weight", m, embd, kv);
    add(p + "attn_v.weight", m, embd, kv);
    add(p + "attn_output.weight", m, embd, embd);
    add(p + "ffn_norm.weight", TensorType::kF32, embd, 1);
    add(p + "ffn_gate.weight", m, embd, ff);
    add(p + "ffn_up.weight", m, embd, ff);
    add(p + "ffn_down.weight", m, ff, embd);
  }
  return tensors;
}

Status WriteSyntheticModel(const SyntheticModelSpec& spec, const std::string& path) {
  TM_ASSIGN_OR_RETURN(const std::vector<SyntheticTensor> tensors, SyntheticTensors(spec));
  const SyntheticShape& s = spec.shape;
  // The vocabulary's tokenizer.* keys, taken as they are.
  std::optional<GgufFile> vocab;
  std::vector<std::pair<std::string_view, const GgufValue*>> vocab_keys;
  if (!spec.vocab_from.empty()) {
    TM_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(spec.vocab_from));
    vocab.emplace(std::move(file));
    for (const auto& [key, value] : vocab->metadata()) {
      if (key.starts_with("tokenizer.")) vocab_keys.emplace_back(key, &value);
    }
    TM_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens,
                        vocab->GetStringArray("tokenizer.ggml.tokens"));
    if (static_cast<int64_t>(tokens.size()) != s.n_vocab) {
      return InvalidArgumentError("synthetic model: " + spec.vocab_from + " has " +
                                  std::to_string(tokens.size()) + " tokens; give --vocab " +
                                  std::to_string(tokens.size()));
    }
  }
  HeaderWriter h;
  h.Put<uint32_t>(0x46554747);  // "GGUF"
  h.Put<uint32_t>(3);
  h.Put<uint64_t>(tensors.size());
  h.Put<uint64_t>(11 + vocab_keys.size());  // metadata keys below
  h.KeyString("general.architecture", "llama");
  h.KeyString("general.name", "synthetic (random weights)");
  h.KeyU64("general.seed", spec.seed);
  h.KeyU32("llama.block_count", static_cast<uint32_t>(s.n_layers));
  h.KeyU32("llama.embedding_length", static_cast<uint32_t>(s.n_embd));
  h.KeyU32("llama.attention.head_count", static_cast<uint32_t>(s.n_heads));
  h.KeyU32("llama.attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  h.KeyU32("llama.feed_forward_length", static_cast<uint32_t>(s.n_ff));
  h.KeyU32("llama.context_length", static_cast<uint32_t>(s.context_length));
  h.KeyF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  h.KeyF32("llama.rope.freq_base", 500000.0f);
  for (const auto& [key, value] : vocab_keys) h.KeyValue(key, *value);
  uint64_t offset = 0;
  for (const SyntheticTensor& t : tensors) {
    h.PutString(t.name);
    h.Put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) h.Put(d);
    h.Put(static_cast<uint32_t>(t.type));
    h.Put(offset);
    offset = AlignUp(offset + t.bytes);
  }
  h.bytes().resize(AlignUp(h.bytes().size()));

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!out) return InvalidArgumentError("cannot create " + path + ": " + std::strerror(errno));
  auto write = [&](const void* data, size_t n) {
    return std::fwrite(data, 1, n, out.get()) == n
               ? OkStatus()
               : InternalError("writing " + path + ": " + std::strerror(errno));
  };
  TM_RETURN_IF_ERROR(write(h.bytes().data(), h.bytes().size()));
  const uint8_t zeros[kAlignment] = {};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SyntheticTensor& t = tensors[i];
    if (t.type == TensorType::kF32) {
      const std::vector<float> ones(t.shape[0], 1.0f);  // RMSNorm gains
      TM_RETURN_IF_ERROR(write(ones.data(), t.bytes));
    } else {
      SplitMix rng{spec.seed * 0x100000001b3ull + i};
      std::vector<uint8_t> row(t.bytes / t.shape[1]);
      for (uint64_t r = 0; r < t.shape[1]; ++r) {
        FillRow(t.type, rng, row);
        TM_RETURN_IF_ERROR(write(row.data(), row.size()));
      }
    }
    TM_RETURN_IF_ERROR(write(zeros, AlignUp(t.bytes) - t.bytes));
  }
  if (std::fclose(out.release()) != 0) {
    return InternalError("writing " + path + ": " + std::strerror(errno));
  }
  return OkStatus();
}

}  // namespace tokenmill::bench
