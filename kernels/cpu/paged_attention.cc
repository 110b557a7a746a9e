#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/half.h"

namespace tokenmill {

float QuantizeKvRowInt8(const float* x, int64_t n, int8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    // x * inv is within [-127, 127] up to rounding; the clamp keeps that exact.
    const float r = std::nearbyint(x[i] * inv);
    q[i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
  }
  return scale;
}

void QuantizeKvRowQ4_0(const float* x, int64_t n, uint8_t* codes, uint16_t* scales) {
  constexpr int64_t kHalf = kKvQ4Block / 2;
  for (int64_t b = 0; b < n / kKvQ4Block; ++b) {
    const float* block = x + b * kKvQ4Block;
    float amax = 0.0f, max = 0.0f;
    for (int64_t j = 0; j < kKvQ4Block; ++j) {
      if (amax < std::fabs(block[j])) {
        amax = std::fabs(block[j]);
        max = block[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    scales[b] = FloatToHalf(d);
    // x · id lies in [-8, 8], so + 8.5 is positive and the cast truncates as ggml's does;
    // clamped before the cast, where ggml clamps after, so that a NaN (a broken model's K)
    // becomes code 15 instead of an undefined conversion.
    auto code = [&](float value) {
      return static_cast<int>(std::min(15.0f, value * id + 8.5f));
    };
    for (int64_t j = 0; j < kHalf; ++j) {
      codes[b * kHalf + j] = static_cast<uint8_t>(code(block[j]) | (code(block[j + kHalf]) << 4));
    }
  }
}

void QuantizeKvRowInt4(const float* x, int64_t n, uint8_t* codes, uint16_t* scales) {
  constexpr int64_t group = kKvInt4Group;
  constexpr int64_t kHalf = kKvQ4Block / 2;
  for (int64_t g = 0; g < n / group; ++g) {
    const float* v = x + g * group;
    float lo = v[0], hi = v[0];
    for (int64_t j = 1; j < group; ++j) {
      lo = std::min(lo, v[j]);
      hi = std::max(hi, v[j]);
    }
    const uint16_t scale_h = FloatToHalf((hi - lo) / 15.0f);
    const uint16_t zero_h = FloatToHalf(lo);
    scales[2 * g] = scale_h;
    scales[2 * g + 1] = zero_h;
    const float scale = HalfToFloat(scale_h), zero = HalfToFloat(zero_h);
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    // Clamped in float before the cast (std::max(0, NaN) is 0): a NaN becomes code 0, never an
    // undefined conversion.
    auto code = [&](float e) {
      return static_cast<int>(std::min(15.0f, std::max(0.0f, std::nearbyint((e - zero) * inv))));
    };
    for (int64_t b = 0; b < group / kKvQ4Block; ++b) {
      const float* block = v + b * kKvQ4Block;
      uint8_t* out = codes + (g * group + b * kKvQ4Block) / 2;
      for (int64_t j = 0; j < kHalf; ++j) {
        out[j] = static_cast<uint8_t>(code(block[j]) | (code(block[j + kHalf]) << 4));
      }
    }
  }
}

KvRotation KvRotationOf(KvType k_type, KvType v_type, int head_dim) {
  const auto four_bit = [](KvType t) { return t == KvType::kQ4_0 || t == KvType::kInt4; };
  if (head_dim % 64 != 0) return {};
  int keys = 64;
  while (head_dim % (2 * keys) == 0) keys *= 2;
  return {.keys = four_bit(k_type) ? keys : 0, .values = four_bit(v_type) ? 64 : 0};
}

void HadamardRotate(float* x, int64_t len, int n) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (float* block = x; block < x + len; block += n) {
    for (int h = 1; h < n; h *= 2) {
      for (int i = 0; i < n; i += 2 * h) {
        for (int j = i; j < i + h; ++j) {
          const float a = block[j], b = block[j + h];
          block[j] = a + b;
          block[j + h] = a - b;
        }
      }
    }
    for (int i = 0; i < n; ++i) block[i] *= norm;
  }
}

namespace {

// Writes row x (n_kv_heads * head_dim floats) of one token as `type` at element offset dst
// of `data` (int8: one scale per KV head at `slot` * n_kv_heads + head of `scales`; 4-bit:
// codes at byte dst / 2, q4_0's scales at f16 dst / 32, int4's pairs at f16 2 · dst / group).
void StoreKvRow(const KvCacheView& kv, KvType type, const float* x, int64_t slot, int64_t dst,
                void* data, void* scales) {
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  switch (type) {
    case KvType::kInt8:
      TM_CHECK(scales != nullptr) << "int8 KV needs scale arrays";
      for (int h = 0; h < kv.n_kv_heads; ++h) {
        const int64_t off = static_cast<int64_t>(h) * kv.head_dim;
        static_cast<float*>(scales)[slot * kv.n_kv_heads + h] =
            QuantizeKvRowInt8(x + off, kv.head_dim, static_cast<int8_t*>(data) + dst + off);
      }
      return;
    case KvType::kQ4_0:
    case KvType::kInt4: {
      TM_CHECK(scales != nullptr) << "4-bit KV needs scale arrays";
      TM_CHECK(CheckKvTypeFits(type, kv.head_dim).ok()) << "4-bit KV needs whole groups";
      auto* codes = static_cast<uint8_t*>(data) + dst / 2;
      if (type == KvType::kQ4_0) {
        QuantizeKvRowQ4_0(x, row, codes, static_cast<uint16_t*>(scales) + dst / kKvQ4Block);
      } else {
        QuantizeKvRowInt4(x, row, codes, static_cast<uint16_t*>(scales) + 2 * dst / kKvInt4Group);
      }
      return;
    }
    case KvType::kF16: {
      auto* out = static_cast<uint16_t*>(data) + dst;
      for (int64_t i = 0; i < row; ++i) out[i] = FloatToHalf(x[i]);
      return;
    }
    default:
      std::copy(x, x + row, static_cast<float*>(data) + dst);
  }
}

}  // namespace

void StoreKv(const KvCacheView& kv, std::span<const int64_t> slot_mapping, const float* k,
             const float* v) {
  TM_CHECK(KvTypeOnCpu(kv.type) && KvTypeOnCpu(kv.v_type))
      << "the CPU kernels do not write " << KvTypeName(kv.type) << " / " << KvTypeName(kv.v_type);
  const int64_t row = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  const KvRotation rotation = KvRotationOf(kv.type, kv.v_type, kv.head_dim);
  std::vector<float> rotated;  // 4-bit types: the token's row, rotated
  const auto rotate = [&](const float* x, int n) {
    if (n == 0) return x;
    rotated.assign(x, x + row);
    HadamardRotate(rotated.data(), row, n);
    return static_cast<const float*>(rotated.data());
  };
  for (size_t t = 0; t < slot_mapping.size(); ++t) {
    const int64_t slot = slot_mapping[t];
    const int64_t dst = slot * row;
    StoreKvRow(kv, kv.type, rotate(k + static_cast<int64_t>(t) * row, rotation.keys), slot, dst,
               kv.k, kv.k_scale);
    if (kv.v_in_k) continue;  // V is K's row (MLA's latent)
    StoreKvRow(kv, kv.v_type, rotate(v + static_cast<int64_t>(t) * row, rotation.values), slot,
               dst, kv.v, kv.v_scale);
  }
}

namespace {

// Sequence index of every token.
std::vector<int32_t> SequenceOfTokens(const RaggedBatch& b) {
  std::vector<int32_t> seq(static_cast<size_t>(b.num_tokens()));
  for (int64_t s = 0; s < b.num_seqs(); ++s) {
    for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; ++t) seq[t] = static_cast<int32_t>(s);
  }
  return seq;
}

inline float RoundToHalf(float x) { return HalfToFloat(FloatToHalf(x)); }

// One past the last position token t attends to: its own, or with bidirectional attention the
// last its sequence has in the batch.
inline int32_t VisibleEnd(const AttentionVariant& variant, const RaggedBatch& b,
                          std::span<const int32_t> seq_of, int64_t t) {
  if (variant.causal) return b.positions[t] + 1;
  return b.positions[b.cu_seqlens[seq_of[t] + 1] - 1] + 1;
}

// The first position a token at `pos` attends to.
inline int32_t FirstVisible(const AttentionVariant& variant, int32_t pos) {
  return variant.sliding_window > 0 ? std::max(0, pos - variant.sliding_window + 1) : 0;
}

// Element offset of (position, kv head) in a sequence's blocks.
inline int64_t KvOffset(const KvCacheView& kv, const int32_t* blocks, int32_t pos, int head) {
  const int64_t slot = static_cast<int64_t>(blocks[pos / kv.block_size]) * kv.block_size +
                       pos % kv.block_size;
  return (slot * kv.n_kv_heads + head) * kv.head_dim;
}

// Runs attend(q) with q rotated as kv's keys are (KvRotationOf), then rotates its output back.
template <typename Attend>
void WithKvRotation(const KvCacheView& kv, const RaggedBatch& b, int n_heads, const float* q,
                    float* out, const Attend& attend) {
  KvRotation rotation = KvRotationOf(kv.type, kv.v_type, kv.head_dim);
  // V read from K's rows (MLA) was rotated as the keys were.
  if (kv.v_in_k) rotation.values = rotation.keys;
  const int64_t size = b.num_tokens() * n_heads * kv.head_dim;
  std::vector<float> q_rotated;
  if (rotation.keys > 0) {
    q_rotated.assign(q, q + size);
    HadamardRotate(q_rotated.data(), size, rotation.keys);
    q = q_rotated.data();
  }
  attend(q);
  if (rotation.values > 0) HadamardRotate(out, size, rotation.values);
}

// PagedAttention over a query already rotated as the keys are.
void AttendAll(const CpuContext& ctx, const KvCacheView& kv, const RaggedBatch& b,
               const KvBlockTable& table, const float* q, int n_heads, float scale, float* out,
               const AttentionVariant& variant) {
  TM_CHECK(KvTypeOnCpu(kv.type) && KvTypeOnCpu(kv.v_type))
      << "the CPU kernels do not read " << KvTypeName(kv.type) << " / " << KvTypeName(kv.v_type);
  TM_CHECK(variant.sinks.empty() || std::ssize(variant.sinks) == n_heads) << "one sink per head";
  const std::vector<int32_t> seq_of = SequenceOfTokens(b);
  const int group = n_heads / kv.n_kv_heads;
  const int64_t d = kv.head_dim;
  const CpuKernelTable& k = *ctx.kernels;
  // Runs of up to `per_run` consecutive tokens of a sequence: a run's query heads read each
  // K/V row once (a prefill chunk's, or the tokens a draft is verified with).
  const int64_t per_run = k.attend_run_tokens(group, kv.head_dim);
  std::vector<int64_t> run_starts;
  for (size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s) {
    for (int64_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; t += per_run) {
      run_starts.push_back(t);
    }
  }
  run_starts.push_back(b.num_tokens());
  const int64_t units = (std::ssize(run_starts) - 1) * kv.n_kv_heads;
  // Small chunks taken dynamically: a causal prefill's late tokens attend over more
  // positions, so fixed equal ranges would leave threads idle.
  ParallelFor(ctx.pool, units, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, q_rounded;  // the run's units', one after another
    std::vector<AttendArgs> run;
    AttendScratch scratch;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t r = u / kv.n_kv_heads;
      const int kv_head = static_cast<int>(u % kv.n_kv_heads);
      const int64_t first_token = run_starts[r], tokens = run_starts[r + 1] - first_token;
      if (kv.type == KvType::kF16) q_rounded.resize(static_cast<size_t>(tokens * group * d));
      // What the run's units share; each token's window, query, scores and output below.
      const int32_t* blocks = table.kv_indices.data() + table.kv_indptr[seq_of[first_token]];
      const float* sinks = variant.sinks.empty() ? nullptr : variant.sinks.data() + kv_head * group;
      AttendArgs unit{.k = kv.k,
                      .v = kv.v,
                      .k_type = kv.type,
                      .v_type = kv.v_type,
                      .k_scale = kv.k_scale,
                      .v_scale = kv.v_scale,
                      .block_size = kv.block_size,
                      .n_kv_heads = kv.n_kv_heads,
                      .head_dim = kv.head_dim,
                      .blocks = blocks,
                      .kv_head = kv_head,
                      .group = group,
                      .scale = scale,
                      .softcap = variant.softcap,
                      .sinks = sinks};
      run.clear();
      for (int64_t i = 0; i < tokens; ++i) {
        const int64_t t = first_token + i;
        unit.begin = FirstVisible(variant, b.positions[t]);
        unit.len = VisibleEnd(variant, b, seq_of, t);
        unit.q_group = q + (t * n_heads + kv_head * group) * d;
        if (kv.type == KvType::kF16) {  // K's
          float* rounded = q_rounded.data() + i * group * d;
          for (int64_t e = 0; e < group * d; ++e) rounded[e] = RoundToHalf(unit.q_group[e]);
          unit.q_group = rounded;
        }
        unit.out_group = out + (t * n_heads + kv_head * group) * d;
        run.push_back(unit);
      }
      int64_t scores_size = 0;
      for (const AttendArgs& a : run) scores_size += group * (a.len - ScoresBase(a.begin));
      scores.resize(static_cast<size_t>(scores_size));
      float* next_scores = scores.data();
      for (AttendArgs& a : run) {
        a.scores = next_scores;
        next_scores += group * (a.len - ScoresBase(a.begin));
      }
      k.attend(run, scratch);
    }
  });
}

}  // namespace

void PagedAttention(const CpuContext& ctx, const KvCacheView& kv, const RaggedBatch& b,
                    const KvBlockTable& table, const float* q, int n_heads, float scale,
                    float* out, const AttentionVariant& variant) {
  WithKvRotation(kv, b, n_heads, q, out, [&](const float* q_rotated) {
    AttendAll(ctx, kv, b, table, q_rotated, n_heads, scale, out, variant);
  });
}

namespace {

// The value of an FP8 E4M3 ("e4m3fn") code, for the reference only: the CPU kernels do not
// read fp8; the CUDA tests compare against this, written apart from kernels/cuda's decoder.
double E4M3Value(uint8_t code) {
  const int exponent = (code >> 3) & 15, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return NAN;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, exponent - 10);
  return code & 0x80 ? -magnitude : magnitude;
}

// PagedAttentionReference over a query already rotated as the keys are.
void ReferenceAll(const KvCacheView& kv, const RaggedBatch& b, const KvBlockTable& table,
                  const float* q, int n_heads, float scale, float* out,
                  const AttentionVariant& variant) {
  const std::vector<int32_t> seq_of = SequenceOfTokens(b);
  const int group = n_heads / kv.n_kv_heads;
  const int64_t d = kv.head_dim;
  // Element i of K or V (of type `type`; scales: its scale array), as float.
  auto load = [&](KvType type, const void* base, const void* scales, int64_t i) -> double {
    switch (type) {
      case KvType::kF16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
      case KvType::kF32: return static_cast<const float*>(base)[i];
      case KvType::kInt8:
        return static_cast<double>(static_cast<const int8_t*>(base)[i]) *
               static_cast<const float*>(scales)[i / d];
      case KvType::kFp8:
        return E4M3Value(static_cast<const uint8_t*>(base)[i]) *
               static_cast<const float*>(scales)[i / d];
      case KvType::kQ4_0:
      case KvType::kInt4: {
        // Element j of a block of 32: byte j % 16 of its codes, high nibble from j = 16 on.
        const uint8_t byte = static_cast<const uint8_t*>(base)[i / kKvQ4Block * 16 + i % 16];
        const int code = i % kKvQ4Block < 16 ? byte & 15 : byte >> 4;
        const auto* f16 = static_cast<const uint16_t*>(scales);
        if (type == KvType::kQ4_0) {
          return (code - 8) * static_cast<double>(HalfToFloat(f16[i / kKvQ4Block]));
        }
        const int64_t g = i / kKvInt4Group;
        return code * static_cast<double>(HalfToFloat(f16[2 * g])) + HalfToFloat(f16[2 * g + 1]);
      }
    }
    return 0.0;
  };
  for (int64_t t = 0; t < b.num_tokens(); ++t) {
    const int32_t* blocks = table.kv_indices.data() + table.kv_indptr[seq_of[t]];
    const int32_t len = VisibleEnd(variant, b, seq_of, t);
    const int32_t begin = FirstVisible(variant, b.positions[t]);
    for (int h = 0; h < n_heads; ++h) {
      const int kv_head = h / group;
      std::vector<float> qh(q + (t * n_heads + h) * d, q + (t * n_heads + h + 1) * d);
      if (kv.type == KvType::kF16) {  // K's
        for (float& x : qh) x = RoundToHalf(x);
      }
      // p[j - begin]: position j's score, then its probability.
      std::vector<double> p(static_cast<size_t>(len - begin));
      double max = -INFINITY;
      for (int32_t j = begin; j < len; ++j) {
        const int64_t off = KvOffset(kv, blocks, j, kv_head);
        double dot = 0.0;
        for (int64_t i = 0; i < d; ++i) dot += qh[i] * load(kv.type, kv.k, kv.k_scale, off + i);
        if (variant.softcap > 0.0f) dot = std::tanh(dot / variant.softcap) * variant.softcap;
        p[j - begin] = dot * scale;
        max = std::max(max, p[j - begin]);
      }
      const double sink = variant.sinks.empty() ? -INFINITY : variant.sinks[h];
      max = std::max(max, sink);
      double sum = variant.sinks.empty() ? 0.0 : std::exp(sink - max);
      for (double& v : p) sum += (v = std::exp(v - max));
      for (double& v : p) {
        v /= sum;
        if (kv.v_type == KvType::kF16) v = RoundToHalf(static_cast<float>(v));
      }
      float* o = out + (t * n_heads + h) * d;
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0.0;
        for (int32_t j = begin; j < len; ++j) {
          acc += p[j - begin] *
                 load(kv.v_type, kv.v, kv.v_scale, KvOffset(kv, blocks, j, kv_head) + i);
        }
        o[i] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace

void PagedAttentionReference(const KvCacheView& kv, const RaggedBatch& b,
                             const KvBlockTable& table, const float* q, int n_heads,
                             float scale, float* out, const AttentionVariant& variant) {
  WithKvRotation(kv, b, n_heads, q, out, [&](const float* q_rotated) {
    ReferenceAll(kv, b, table, q_rotated, n_heads, scale, out, variant);
  });
}

}  // namespace tokenmill
