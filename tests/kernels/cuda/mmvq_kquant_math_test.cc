// The K-quant decode GEMV's arithmetic (kernels/cuda/mmvq_kquant_math.h) on the CPU: the
// packed layout against the reference dequantization, and KMmvqDot (the emulation of the GPU
// kernel) against the exact value of its own terms and against the CPU's Matmul (Q8_K
// activations) within a derived bound. Random blocks, and llama.cpp's own blocks: the rows of
// the Gemma 3 270M Q4_K_M file's Q4_K and Q6_K tensors and of the requantized SmolLM2 Q2_K
// file's Q2_K ffn_down (skipped when models/ lacks them). No GPU needed (cuda_kernels_test
// checks KMmvqDot against the kernel).
#include "kernels/cuda/mmvq_kquant_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/mmvq_math.h"
#include "kernels/dequantize.h"
#include "kernels/dequantize_k_quants.h"
#include "kernels/half.h"
#include "kernels/tensor_type.h"
#include "tests/test_paths.h"

namespace tokenmill::cuda {
namespace {

struct Rows {
  std::vector<uint8_t> gguf;  // rows x cols in the file's layout
  int64_t rows = 0, cols = 0;
  std::string what;
};

// Every byte random (every quant, scale and minimum), the f16 fields normal halves.
Rows RandomRows(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const uint32_t id = static_cast<uint32_t>(type);
  Rows r{std::vector<uint8_t>(static_cast<size_t>(rows * cols / kKBlock * KBlockBytes(id))), rows,
         cols, "random " + std::to_string(cols)};
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> scale(0.0f, 0.002f);
  for (uint8_t& b : r.gguf) b = static_cast<uint8_t>(byte(rng));
  for (size_t at = 0; at < r.gguf.size(); at += static_cast<size_t>(KBlockBytes(id))) {
    for (const int f16 : KQuantF16Offsets(type)) {
      const uint16_t h = FloatToHalf(scale(rng));
      std::memcpy(r.gguf.data() + at + f16, &h, 2);
    }
  }
  return r;
}

// Up to `rows` rows of the first tensor of `type` in `stem`.gguf under models/: blocks as
// llama.cpp's quantizer shapes them. Empty when the file is not there.
Rows FileRows(const std::string& stem, TensorType type, int64_t rows) {
  const std::string path = TestModelsDir() + "/" + stem + ".gguf";
  StatusOr<GgufFile> file = GgufFile::Open(path);
  if (!file.ok()) return {};
  for (const GgufTensor& t : file->tensors()) {
    if (t.ggml_type != static_cast<uint32_t>(type)) continue;
    const int64_t cols = t.shape[0];
    const int64_t n = std::min(rows, t.num_elements / cols);
    const int64_t bytes = n * cols / kKBlock * KBlockBytes(static_cast<uint32_t>(type));
    return Rows{std::vector<uint8_t>(t.data, t.data + bytes), n, cols,
                stem + " " + std::string(t.name)};
  }
  return {};
}

std::vector<uint8_t> Pack(uint32_t type, const Rows& r) {
  const int64_t gguf_row = r.cols / kKBlock * KBlockBytes(type);
  std::vector<uint8_t> packed(static_cast<size_t>(r.rows * KPackedRowBytes(type, r.cols)));
  for (int64_t i = 0; i < r.rows; ++i) {
    KPackRow(type, r.gguf.data() + i * gguf_row, r.cols,
             packed.data() + i * KPackedRowBytes(type, r.cols));
  }
  return packed;
}

std::vector<uint8_t> QuantizeTokens(const std::vector<float>& x, int64_t n_tokens, int64_t cols) {
  std::vector<uint8_t> out(static_cast<size_t>(n_tokens * Q8_1TokenBytes(cols)));
  for (int64_t t = 0; t < n_tokens; ++t) {
    uint8_t* token = out.data() + t * Q8_1TokenBytes(cols);
    for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
      float ds[2];
      QuantizeQ8_1Block(x.data() + t * cols + b * kQuantBlock,
                        reinterpret_cast<int8_t*>(token + b * kQuantBlock), ds);
      std::memcpy(token + cols + 8 * b, ds, sizeof ds);
    }
  }
  return out;
}

class KQuantMathTest : public ::testing::TestWithParam<TensorType> {
 protected:
  std::vector<Rows> Cases() {
    std::mt19937 rng(7);
    std::vector<Rows> cases;
    for (const int64_t cols : {256, 1280, 4096, 14336}) {
      cases.push_back(RandomRows(GetParam(), 5, cols, rng));
    }
    // Gemma's file holds Q4_K and Q6_K; the requantized SmolLM2 Q2_K file's ffn_down (1536
    // columns) is Q2_K (its 576-column tensors fell back to Q4_0).
    const bool q2_k = GetParam() == TensorType::kQ2_K;
    const std::string stem = q2_k ? "requantized/SmolLM2-135M-Instruct.Q2_K"
                                  : "gemma-3-270m-q4_k_m";
    Rows real = FileRows(stem, GetParam(), 6);
    if (real.rows > 0) {
      cases.push_back(std::move(real));
    } else if (q2_k || GetParam() == TensorType::kQ4_K || GetParam() == TensorType::kQ6_K) {
      std::cout << "[ note ] no " << stem << ".gguf in " << TestModelsDir()
                << " (scripts/setup makes it): random blocks only\n";
    }
    return cases;
  }
};

// Every element of the packed row, read by KPackedElement and by the kernel's own accessors
// (KWordQuant, KWordScales), equals the reference dequantization of the GGUF row.
TEST_P(KQuantMathTest, PackedRowsHoldTheReferenceElements) {
  const TensorType type = GetParam();
  const uint32_t id = static_cast<uint32_t>(type);
  for (const Rows& r : Cases()) {
    const std::vector<uint8_t> packed = Pack(id, r);
    const int64_t bytes = KPackedRowBytes(id, r.cols);
    ASSERT_EQ(bytes % kKWordBytes, 0);
    ASSERT_EQ(KLayoutOf(id, r.cols).high % kKWordBytes, 0);
    std::vector<float> want(static_cast<size_t>(r.cols));
    for (int64_t i = 0; i < r.rows; ++i) {
      DequantizeReference(type, r.gguf.data() + i * r.cols / kKBlock * KBlockBytes(id), want);
      const uint8_t* row = packed.data() + i * bytes;
      for (int64_t c = 0; c < r.cols; ++c) {
        ASSERT_EQ(KPackedElement(id, row, r.cols, c), want[static_cast<size_t>(c)])
            << r.what << " row " << i << " col " << c;
        ASSERT_EQ(DeviceElement(id, row, r.cols, c), want[static_cast<size_t>(c)]);
        float d_w, m_w;
        int sub[4];
        KWordScales(id, row, r.cols, c / kKSub, &d_w, &m_w, sub);
        const int k = static_cast<int>(c % kKSub);
        const int q = KWordQuant(id, row, r.cols, c / kKSub, k);
        float mine = KHasMin(id) ? d_w * static_cast<float>(q) - m_w
                                 : d_w * static_cast<float>(sub[k / 16]) * static_cast<float>(q);
        if (KHasMin16(id)) mine -= m_w * static_cast<float>(sub[2 + k / 16]);
        ASSERT_EQ(mine, want[static_cast<size_t>(c)]) << r.what << " word " << c / kKSub;
      }
    }
  }
}

// The kernel's word dot product (its bit tricks: the high bits ORed into the bytes, Q6_K's
// offset, IQ4_XS's level lookup, through the host stand-ins of __dp4a, __vsub4, __byte_perm)
// equals the sum of KWordQuant's quants times the activations, and KWordMinDot Q2_K's
// minimums times the activations (0 for the others), on every sub-block, against random
// activations of every magnitude.
TEST_P(KQuantMathTest, WordDotEqualsTheElementSums) {
  const uint32_t id = static_cast<uint32_t>(GetParam());
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> activation(-128, 127);
  for (const Rows& r : Cases()) {
    const std::vector<uint8_t> packed = Pack(id, r);
    const KRowLayout L = KLayoutOf(id, r.cols);
    for (int64_t i = 0; i < r.rows; ++i) {
      const uint8_t* row = packed.data() + i * L.bytes;
      for (int64_t s = 0; s < r.cols / kKSub; ++s) {
        int8_t qa[kKSub];
        for (int8_t& a : qa) a = static_cast<int8_t>(activation(rng));
        uint32_t q[4], high[2] = {0, 0};
        int32_t act[8];
        std::memcpy(q, row + s * kKWordBytes, sizeof q);
        std::memcpy(high, row + L.high + s * KHighBytes(id), static_cast<size_t>(KHighBytes(id)));
        std::memcpy(act, qa, sizeof act);
        float d_w, m_w;
        int sub[4];
        KWordScales(id, row, r.cols, s, &d_w, &m_w, sub);
        int32_t want = 0, want_min = 0;
        for (int k = 0; k < kKSub; ++k) {
          want += sub[k / 16] * KWordQuant(id, row, r.cols, s, k) * qa[k];
          want_min += sub[2 + k / 16] * qa[k];
        }
        ASSERT_EQ(KWordDot(id, q, high, act, sub), want) << r.what << " row " << i << " word " << s;
        ASSERT_EQ(KWordMinDot(id, act, sub), want_min) << r.what << " row " << i << " word " << s;
      }
    }
  }
}

// The exact weights of a GGUF row (d · scale · q - dmin · min, per 32 or (Q2_K) 16 elements,
// d · scale · (q - 32), d · scale · (q - 4) or d · scale · level: exact in double), from the
// file's bytes alone, in the two parts whose magnitudes the CPU's two sums take their terms
// from.
struct ExactWeight {
  double part, min_part;  // the weight is part - min_part
};
std::vector<ExactWeight> ExactWeights(uint32_t type, const uint8_t* gguf, int64_t cols) {
  std::vector<ExactWeight> w(static_cast<size_t>(cols));
  for (int64_t blk = 0; blk < cols / kKBlock; ++blk) {
    const uint8_t* in = gguf + blk * KBlockBytes(type);
    uint8_t q[kKBlock];
    int scale[16], min[16];
    KUnpackBlock(type, in, q, scale, min);
    for (int e = 0; e < kKBlock; ++e) {
      ExactWeight v;
      if (type == kWQ2_K) {
        v = ExactWeight{double{HalfToFloat(LoadU16(in + 80))} * scale[e / 16] * q[e],
                        double{HalfToFloat(LoadU16(in + 82))} * min[e / 16]};
      } else if (type == kWQ6_K) {
        v = ExactWeight{double{HalfToFloat(LoadU16(in + 208))} * scale[e / 16] * (q[e] - 32), 0.0};
      } else if (type == kWQ3_K) {
        v = ExactWeight{double{HalfToFloat(LoadU16(in + 108))} * scale[e / 16] * (q[e] - 4), 0.0};
      } else if (type == kWIQ4_XS) {
        v = ExactWeight{double{HalfToFloat(LoadU16(in))} * scale[e / 32] * kIq4NlLevels[q[e]], 0.0};
      } else {
        v = ExactWeight{double{HalfToFloat(LoadU16(in))} * scale[e / 32] * q[e],
                        double{HalfToFloat(LoadU16(in + 2))} * min[e / 32]};
      }
      w[static_cast<size_t>(blk * kKBlock + e)] = v;
    }
  }
  return w;
}

double Gamma(double n) { return n * 0x1p-24 / (1.0 - n * 0x1p-24); }

// What KMmvqDot adds: per word the exact term d_w · d_a · sumi (the product of an f16, 6 bits,
// an f16-rounded d_a and an integer under 2^24: exact in double) and -m_w · (d_a Σq_a)_f16
// (Q2_K: -dmin · d_a · summ, exact likewise).
// E1 = their exact sum, T1 = Σ of their |values|. A lane's chain has 1 rounding of d_w · d_a,
// 2 fmas a word and 5 butterfly adds: n1 = 2 ceil(S / 32) + 6 for S sub-blocks, so
// |KMmvqDot - E1| <= gamma(n1) T1.
//
// The CPU adds, per 256-block and lane, (d_a · d)_f32 · Σ sc q q_a and (-d_a · dmin)_f32 ·
// Σ min Σq_a over its Q8_K activations (one scale a 256-block): exact sum EK = Σ_e w_e ·
// d_a · q_a (w_e exact); its chains: a rounded product, one fma a block, then 3 lane adds and
// 3 for the minimum lanes and the total: nK = B + 8 for B blocks (Q2_K: the minimum and the
// scale fmas into the same 8 lanes, 2 a block: nK = 2B + 8); its terms' |values| are at
// most TK = Σ_e |d · sc · q · d_a q_a| + Σ_sub |dmin · min · d_a Σq_a|.
// So |KMmvqDot - CPU| <= gamma(n1) T1 + gamma(nK) TK + |E1 - EK|, the last the one difference
// that is not rounding: the two quantizations of the activations (computed exactly, in double,
// from the file's bytes, with 2^-50 of T1 + TK for the double sums themselves).
TEST_P(KQuantMathTest, DotIsWithinTheRoundingBoundOfItsTermsAndOfTheCpuMatmul) {
  const TensorType type = GetParam();
  const uint32_t id = static_cast<uint32_t>(type);
  std::mt19937 rng(11);
  std::normal_distribution<float> value(0.0f, 1.0f);
  for (const Rows& r : Cases()) {
    const int64_t cols = r.cols, n_tokens = 3, subs = cols / kKSub;
    const std::vector<uint8_t> packed = Pack(id, r);
    std::vector<float> x(static_cast<size_t>(n_tokens * cols));
    for (float& v : x) v = value(rng);
    x[40] = 30.0f;  // an outlier: the Q8_K scale of its 256 elements is much coarser
    const std::vector<uint8_t> x_q8 = QuantizeTokens(x, n_tokens, cols);
    const int64_t gguf_row = cols / kKBlock * KBlockBytes(id);
    const WeightMatrix w{type, r.gguf.data(), r.rows, cols, gguf_row};
    for (const CpuIsa isa : {CpuIsa::kScalar, BestCpuIsa()}) {
      std::vector<float> cpu(static_cast<size_t>(r.rows * n_tokens));
      Matmul(CpuContext{&KernelTable(isa)}, w, x.data(), n_tokens, cpu.data());
      std::vector<Q8KActivationBlock> xk(static_cast<size_t>(cols / kKBlock));
      const double n1 = 2.0 * static_cast<double>(CeilDiv(subs, 32)) + 6.0;
      const double nk = static_cast<double>((KHasMin16(id) ? 2 : 1) * (cols / kKBlock)) + 8.0;
      for (int64_t t = 0; t < n_tokens; ++t) {
        QuantizeActivationsQ8K(x.data() + t * cols, cols, xk.data());
        const uint8_t* token = x_q8.data() + t * Q8_1TokenBytes(cols);
        const int8_t* qa = reinterpret_cast<const int8_t*>(token);
        const float* ds = reinterpret_cast<const float*>(token + cols);
        for (int64_t i = 0; i < r.rows; ++i) {
          const uint8_t* row = packed.data() + i * KPackedRowBytes(id, cols);
          double e1 = 0, t1 = 0;
          for (int64_t s = 0; s < subs; ++s) {
            float d_w, m_w;
            int sub[4];
            KWordScales(id, row, cols, s, &d_w, &m_w, sub);
            int64_t sumi = 0, summ = 0;
            for (int k = 0; k < kKSub; ++k) {
              sumi += int64_t{sub[k / 16]} * KWordQuant(id, row, cols, s, k) * qa[s * kKSub + k];
              summ += int64_t{sub[2 + k / 16]} * qa[s * kKSub + k];
            }
            const double term = double{d_w} * ds[2 * s] * static_cast<double>(sumi);
            const double min_term = KHasMin16(id)
                                        ? -double{m_w} * ds[2 * s] * static_cast<double>(summ)
                                        : -double{m_w} * ds[2 * s + 1];
            e1 += term + min_term;
            t1 += std::fabs(term) + std::fabs(min_term);
          }
          const std::vector<ExactWeight> exact =
              ExactWeights(id, r.gguf.data() + i * gguf_row, cols);
          // E1 again, from the file's bytes instead of the packed row (so that a packing
          // error the emulation reads consistently still shows against the CPU), and EK.
          double e1_file = 0, ek = 0, tk = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const ExactWeight& we = exact[static_cast<size_t>(c)];
            const Q8KActivationBlock& b = xk[static_cast<size_t>(c / kKBlock)];
            const double a = double{b.d} * b.q[c % kKBlock];
            ek += (we.part - we.min_part) * a;
            tk += (std::fabs(we.part) + std::fabs(we.min_part)) * std::fabs(a);
            e1_file += we.part * ds[2 * (c / kKSub)] * qa[c];
            if (KHasMin16(id)) {
              e1_file -= we.min_part * ds[2 * (c / kKSub)] * qa[c];
            } else if (c % kKSub == 0) {
              e1_file -= we.min_part * ds[2 * (c / kKSub) + 1];
            }
          }
          const float got = KMmvqDot(id, row, token, cols);
          const double slack = 0x1p-50 * (t1 + tk);
          ASSERT_LE(std::fabs(got - e1), Gamma(n1) * t1 + slack)
              << r.what << " token " << t << " row " << i;
          const float want = cpu[static_cast<size_t>(t * r.rows + i)];
          const double bound = Gamma(n1) * t1 + Gamma(nk) * tk + std::fabs(e1_file - ek) + slack;
          ASSERT_LE(std::fabs(static_cast<double>(got) - want), bound)
              << NameOf(type) << " " << r.what << " (" << IsaName(isa) << ") token "
              << t << " row " << i << ": " << got << " vs " << want;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KQuants, KQuantMathTest,
                         ::testing::Values(TensorType::kQ2_K, TensorType::kQ3_K,
                                           TensorType::kQ4_K, TensorType::kQ5_K,
                                           TensorType::kQ6_K, TensorType::kIQ4_XS),
                         [](const ::testing::TestParamInfo<TensorType>& type) {
                           return std::string(NameOf(type.param));
                         });

TEST(Iq4NlLevelTest, IsTheReferenceTable) {
  for (int i = 0; i < 16; ++i) EXPECT_EQ(Iq4NlLevel(i), kIq4NlLevels[i]) << i;
}

}  // namespace
}  // namespace tokenmill::cuda
