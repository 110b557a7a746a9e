// Matmuls against llama.cpp's own CPU code, bit for bit: ggml's quantize_row_q8_1 /
// quantize_row_q8_0 / quantize_row_q8_K, quantize_row_q4_0 (a q4_0 KV row) and
// ggml_vec_dot_{q4_1_q8_1, q4_0_q8_0, q8_0_q8_0, q5_0_q8_0, q5_1_q8_1, iq4_nl_q8_0,
// mxfp4_q8_0, q2_K..q6_K_q8_K, iq4_xs_q8_K, f32}, taken from the
// libggml-cpu.so that llama-cpp-python ships (found by CMake in the project's .venv, or named by
// TOKENMILL_GGML_CPU_LIB), through its public ggml_get_type_traits_cpu. That library is built
// for AVX2 (scripts/setup), so its vec_dot functions run their AVX2 paths: the order our
// kernels follow. (Its repacked interleaved tiles, which a llama.cpp model may use instead, are
// not what vec_dot runs.)
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/dequantize_k_quants.h"
#include "kernels/half.h"
#include "kernels/tensor_type.h"

namespace tokenmill {
namespace {

// ggml's public C types (ggml-cpu.h), declared here so the test needs no ggml headers.
using GgmlFromFloat = void (*)(const float* x, void* y, int64_t k);
using GgmlVecDot = void (*)(int n, float* s, size_t bs, const void* x, size_t bx, const void* y,
                            size_t by, int nrc);
struct GgmlTypeTraitsCpu {
  GgmlFromFloat from_float;
  GgmlVecDot vec_dot;
  int vec_dot_type;
  int64_t nrows;
};
constexpr int kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ8_0 = 8, kGgmlQ8_1 = 9, kGgmlQ8_K = 15;
constexpr int kGgmlQ5_0 = 6, kGgmlQ5_1 = 7, kGgmlIq4Nl = 20, kGgmlMxfp4 = 39, kGgmlF32 = 0;

class Ggml {
 public:
  Ggml() {
    const char* env = std::getenv("TOKENMILL_GGML_CPU_LIB");
    const std::string path = env != nullptr ? env : TOKENMILL_GGML_CPU_LIB;
    if (path.empty()) return;
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) return;
    auto init = reinterpret_cast<void (*)()>(dlsym(handle_, "ggml_cpu_init"));
    traits_ = reinterpret_cast<const GgmlTypeTraitsCpu* (*)(int)>(
        dlsym(handle_, "ggml_get_type_traits_cpu"));
    if (init != nullptr) init();
  }
  ~Ggml() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Ggml(const Ggml&) = delete;
  Ggml& operator=(const Ggml&) = delete;
  bool loaded() const { return traits_ != nullptr; }
  const GgmlTypeTraitsCpu& traits(int type) const { return *traits_(type); }
  // An exported function of libggml-cpu.so, or nullptr.
  template <typename Function>
  Function function(const char* name) const {
    return handle_ != nullptr ? reinterpret_cast<Function>(dlsym(handle_, name)) : nullptr;
  }

 private:
  void* handle_ = nullptr;
  const GgmlTypeTraitsCpu* (*traits_)(int) = nullptr;
};

std::vector<CpuIsa> SupportedIsas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (CpuSupports(isa)) isas.push_back(isa);
  }
  return isas;
}

// Weights as llama.cpp's quantizer would write them: scales of real magnitudes, all
// quant values (Q8_0 in [-127, 127]; every nibble and fifth bit of the others). MXFP4's
// exponent byte: 2^-14..2^-3 and, in every 13th block, the subnormal 0 or 1.
std::vector<uint8_t> RandomBlocks(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const GgmlTypeLayout& layout = LayoutOf(type);
  const int64_t blocks = rows * cols / 32;
  std::vector<uint8_t> data(static_cast<size_t>(blocks * layout.type_size));
  std::uniform_int_distribution<int> byte(0, 255), q8(-127, 127);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  auto put16 = [&](size_t at, uint16_t v) { std::memcpy(&data[at], &v, 2); };
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t at = static_cast<size_t>(b * layout.type_size);
    if (type == TensorType::kMXFP4) {
      data[at] = static_cast<uint8_t>(b % 13 == 0 ? b % 2 : 114 + byte(rng) % 12);
      for (size_t i = 1; i < static_cast<size_t>(layout.type_size); ++i) {
        data[at + i] = static_cast<uint8_t>(byte(rng));
      }
      continue;
    }
    put16(at, FloatToHalf(scale(rng)));
    const bool has_min = type == TensorType::kQ4_1 || type == TensorType::kQ5_1;
    if (has_min) put16(at + 2, FloatToHalf(-8.0f * scale(rng)));
    const size_t first = has_min ? 4 : 2;
    for (size_t i = first; i < static_cast<size_t>(layout.type_size); ++i) {
      data[at + i] = static_cast<uint8_t>(type == TensorType::kQ8_0 ? q8(rng) : byte(rng));
    }
  }
  return data;
}

// Weights of a 256-element block type: every other row from ggml's own quantizer (its
// quantize_row_* through from_float, on rows of varied magnitude), the others random bytes
// with finite f16 scales (every quant and scale value, which the quantizer may never write).
std::vector<uint8_t> RandomKQuantBlocks(const Ggml& ggml, TensorType type, int64_t rows,
                                        int64_t cols, std::mt19937& rng) {
  const GgmlTypeLayout& layout = LayoutOf(type);
  const int64_t row_bytes = cols / 256 * layout.type_size;
  std::vector<uint8_t> data(static_cast<size_t>(rows * row_bytes));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0005f, 0.02f);
  const std::vector<int> f16_fields = KQuantF16Offsets(type);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* out = data.data() + r * row_bytes;
    if (r % 2 == 0) {
      const float magnitude = 0.01f * static_cast<float>(1 + r % 7);
      for (float& v : row) v = magnitude * normal(rng);
      ggml.traits(static_cast<int>(type)).from_float(row.data(), out, cols);
      continue;
    }
    for (int64_t i = 0; i < row_bytes; ++i) out[i] = static_cast<uint8_t>(byte(rng));
    for (int64_t b = 0; b < cols / 256; ++b) {
      for (int at : f16_fields) {
        const uint16_t h = FloatToHalf(scale(rng));
        std::memcpy(out + b * layout.type_size + at, &h, 2);
      }
    }
  }
  return data;
}

// block_q8_K: {float d, int8 qs[256], int16 bsums[16]}, as Q8KActivationBlock.
static_assert(sizeof(Q8KActivationBlock) == 292);

TEST(GgmlParityTest, QuantizedActivationsEqualGgmlQ8_K) {
  Ggml ggml;
  if (!ggml.loaded()) GTEST_SKIP() << "llama-cpp-python's libggml-cpu.so not found";
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(256 * 12);
  for (float& v : x) v = normal(rng) * 2.0f;
  std::fill(x.begin(), x.begin() + 256, 0.0f);                                // all zero
  for (int i = 0; i < 256; ++i) x[256 + i] = 0.25f * static_cast<float>(i - 128);  // ties
  for (int i = 0; i < 256; ++i) x[512 + i] = -std::fabs(x[512 + i]);         // max negative
  x[768 + 5] = 1e-30f;                                                        // one tiny value
  x[1024 + 13] = -50.0f;  // the largest |x| twice: the first one's sign sets the scale
  x[1024 + 200] = 50.0f;
  const int64_t n = static_cast<int64_t>(x.size());
  // Zeroed first: ggml leaves an all-zero block's sums unset.
  std::vector<Q8KActivationBlock> expected(static_cast<size_t>(n / 256));
  std::memset(expected.data(), 0, expected.size() * sizeof(Q8KActivationBlock));
  ggml.traits(kGgmlQ8_K).from_float(x.data(), expected.data(), n);
  for (CpuIsa isa : SupportedIsas()) {
    std::vector<Q8KActivationBlock> ours(expected.size());
    KernelTable(isa).quantize_q8k(x.data(), n, ours.data());
    for (size_t b = 0; b < ours.size(); ++b) {
      EXPECT_EQ(std::bit_cast<uint32_t>(ours[b].d), std::bit_cast<uint32_t>(expected[b].d))
          << IsaName(isa) << " block " << b;
      EXPECT_EQ(0, std::memcmp(ours[b].q, expected[b].q, sizeof(ours[b].q)))
          << IsaName(isa) << " block " << b;
      EXPECT_EQ(0, std::memcmp(ours[b].bsums, expected[b].bsums, sizeof(ours[b].bsums)))
          << IsaName(isa) << " block " << b;
    }
  }
}

TEST(GgmlParityTest, QuantizedActivationsEqualGgmlQ8_1AndQ8_0) {
  Ggml ggml;
  if (!ggml.loaded()) GTEST_SKIP() << "llama-cpp-python's libggml-cpu.so not found";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(32 * 64);
  for (float& v : x) v = normal(rng) * 3.0f;
  std::fill(x.begin(), x.begin() + 32, 0.0f);                               // all zero
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.5f * static_cast<float>(i - 16);  // exact ties
  const int64_t n = static_cast<int64_t>(x.size());
  // block_q8_1 = {f16 d, f16 s, int8 qs[32]}; block_q8_0 = {f16 d, int8 qs[32]}.
  std::vector<uint8_t> q8_1(static_cast<size_t>(n / 32 * 36)), q8_0(static_cast<size_t>(n / 32 * 34));
  ggml.traits(kGgmlQ8_1).from_float(x.data(), q8_1.data(), n);
  ggml.traits(kGgmlQ8_0).from_float(x.data(), q8_0.data(), n);
  for (CpuIsa isa : SupportedIsas()) {
    std::vector<Q8ActivationBlock> ours(static_cast<size_t>(n / 32));
    KernelTable(isa).quantize(x.data(), n, ours.data());
    for (size_t b = 0; b < ours.size(); ++b) {
      uint16_t d1, s1, d0;
      std::memcpy(&d1, &q8_1[b * 36], 2);
      std::memcpy(&s1, &q8_1[b * 36 + 2], 2);
      std::memcpy(&d0, &q8_0[b * 34], 2);
      EXPECT_EQ(ours[b].d, HalfToFloat(d1)) << IsaName(isa) << " block " << b;
      EXPECT_EQ(ours[b].d, HalfToFloat(d0)) << IsaName(isa) << " block " << b;
      EXPECT_EQ(ours[b].scaled_sum, HalfToFloat(s1)) << IsaName(isa) << " block " << b;
      EXPECT_EQ(0, std::memcmp(ours[b].q, &q8_1[b * 36 + 4], 32)) << IsaName(isa) << " " << b;
      EXPECT_EQ(0, std::memcmp(ours[b].q, &q8_0[b * 34 + 2], 32)) << IsaName(isa) << " " << b;
    }
  }
}

// A q4_0 KV row is what llama.cpp's cache holds with -ctk/-ctv q4_0 (its set_rows quantizes
// through from_float), bit for bit: block_q4_0 = {f16 d, uint8 qs[16]}; our codes and scales
// keep the same bytes in arrays of their own.
TEST(GgmlParityTest, Q4_0KvRowsEqualGgmlQ4_0) {
  Ggml ggml;
  if (!ggml.loaded()) GTEST_SKIP() << "llama-cpp-python's libggml-cpu.so not found";
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int64_t kRow = 128;
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < 200; ++r) {  // magnitudes 1e-3 to 1e2, a row of K or V each
    std::vector<float> row(kRow);
    const float magnitude = std::pow(10.0f, static_cast<float>(r % 6) - 3.0f);
    for (float& v : row) v = magnitude * normal(rng);
    rows.push_back(row);
  }
  std::vector<float> special(kRow, 0.0f);  // block 0 zero
  for (int i = 0; i < 32; ++i) special[32 + i] = 0.25f * static_cast<float>(i - 16);  // ties
  special[64] = 3.0f;  // block 2: +3 before -3, the first largest magnitude wins
  special[70] = -3.0f;
  for (int i = 96; i < 128; ++i) special[i] = 1e-7f * static_cast<float>(i - 100);  // subnormal d
  rows.push_back(special);
  std::vector<float> huge(kRow);
  for (float& v : huge) v = 1e6f * normal(rng);  // d past f16's range: inf, as ggml stores it
  rows.push_back(huge);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<uint8_t> ggml_blocks(kRow / 32 * 18);
    ggml.traits(kGgmlQ4_0).from_float(rows[r].data(), ggml_blocks.data(), kRow);
    std::vector<uint8_t> codes(kRow / 2);
    std::vector<uint16_t> scales(kRow / 32);
    QuantizeKvRowQ4_0(rows[r].data(), kRow, codes.data(), scales.data());
    for (size_t b = 0; b < scales.size(); ++b) {
      uint16_t d;
      std::memcpy(&d, &ggml_blocks[b * 18], 2);
      EXPECT_EQ(scales[b], d) << "row " << r << " block " << b;
      EXPECT_EQ(0, std::memcmp(&codes[b * 16], &ggml_blocks[b * 18 + 2], 16))
          << "row " << r << " block " << b;
    }
  }
}

struct ParityCase {
  TensorType type;
  int ggml_type;
};

class GgmlMatmulParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(GgmlMatmulParityTest, EveryOutputEqualsGgmlVecDot) {
  Ggml ggml;
  if (!ggml.loaded()) GTEST_SKIP() << "llama-cpp-python's libggml-cpu.so not found";
  const ParityCase c = GetParam();
  const GgmlTypeTraitsCpu& traits = ggml.traits(c.ggml_type);
  const int act_type = traits.vec_dot_type;
  const int64_t block = LayoutOf(c.type).block_size;
  const int64_t act_block = act_type == kGgmlQ8_K ? 256 : 32;
  const size_t act_block_bytes = act_type == kGgmlQ8_K ? 292 : act_type == kGgmlQ8_1 ? 36 : 34;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Token counts around the kernels' groups and tiles (pairs of full groups, partial groups of
  // even and odd size); the model's column counts, and odd block counts (IQ4_NL's last block).
  // (The 256-element block types take these column counts rounded up to 256.)
  for (auto [rows, cols, tokens] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {7, 576, 1}, {9, 1536, 3}, {5, 576, 8}, {11, 192, 13}, {3, 64, 17}, {4, 192, 2},
           {5, 576, 22}, {3, 64, 31}, {6, 96, 1}, {5, 160, 9}, {3, 32, 16}, {4, 224, 3}}) {
    cols = (cols + block - 1) / block * block;
    const std::vector<uint8_t> w = block == 256 ? RandomKQuantBlocks(ggml, c.type, rows, cols, rng)
                                                : RandomBlocks(c.type, rows, cols, rng);
    const int64_t row_bytes = cols / block * LayoutOf(c.type).type_size;
    std::vector<float> x(static_cast<size_t>(tokens * cols));
    for (float& v : x) v = normal(rng);
    std::vector<float> expected(static_cast<size_t>(tokens * rows));
    std::vector<uint8_t> act(static_cast<size_t>(cols / act_block) * act_block_bytes);
    for (int64_t t = 0; t < tokens; ++t) {
      ggml.traits(act_type).from_float(x.data() + t * cols, act.data(), cols);
      for (int64_t r = 0; r < rows; ++r) {
        traits.vec_dot(static_cast<int>(cols), &expected[static_cast<size_t>(t * rows + r)], 0,
                       w.data() + r * row_bytes, 0, act.data(), 0, 1);
      }
    }
    const WeightMatrix matrix{c.type, w.data(), rows, cols, row_bytes};
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> y(expected.size(), NAN);
      Matmul(CpuContext{&KernelTable(isa), nullptr}, matrix, x.data(), tokens, y.data());
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(y[i], expected[i]) << IsaName(isa) << " " << NameOf(c.type) << " rows " << rows
                                     << " cols " << cols << " tokens " << tokens << " at " << i;
      }
    }
  }
}

// SwiGlu of every ISA against ggml_vec_swiglu_f32, bit for bit, on
// rows of the model's sizes, with gates from the usual range out to where e^-g leaves
// float's normal range (|n| > 126) and overflows (|n| > 192).
TEST(GgmlParityTest, SwiGluEqualsGgmlVecSwiglu) {
  Ggml ggml;
  using GgmlVecSwiglu = void (*)(int n, float* y, const float* x, const float* g);
  const auto swiglu = ggml.function<GgmlVecSwiglu>("ggml_vec_swiglu_f32");
  if (swiglu == nullptr) GTEST_SKIP() << "libggml-cpu.so's ggml_vec_swiglu_f32 not found";
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> wide(-200.0f, 200.0f);
  for (const int64_t n : {1536, 576, 64}) {
    const int64_t rows = 7;
    std::vector<float> gate(static_cast<size_t>(rows * n)), up(gate.size());
    for (size_t i = 0; i < gate.size(); ++i) {
      gate[i] = i % 5 == 0 ? wide(rng) : normal(rng);
      up[i] = normal(rng);
    }
    std::vector<float> expected(gate.size()), out(gate.size(), NAN);
    for (int64_t r = 0; r < rows; ++r) {
      swiglu(static_cast<int>(n), expected.data() + r * n, gate.data() + r * n, up.data() + r * n);
    }
    for (CpuIsa isa : SupportedIsas()) {
      SwiGlu(CpuContext{&KernelTable(isa)}, gate.data(), up.data(), rows, n, out.data());
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(expected[i]))
            << IsaName(isa) << " n " << n << " at " << i << " gate " << gate[i] << ": "
            << out[i] << " vs " << expected[i];
      }
    }
  }
}

TEST(GgmlParityTest, F32MatmulEqualsGgmlVecDotF32) {
  Ggml ggml;
  if (!ggml.loaded()) GTEST_SKIP() << "llama-cpp-python's libggml-cpu.so not found";
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Multiples of 32 columns only: how ggml adds the elements past the last full 32 is not
  // matched yet (float fma, float mul + add, double: none equals it on every input).
  for (const auto& [rows, cols, tokens] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {5, 64, 1}, {7, 96, 3}, {3, 288, 6}, {4, 32, 2}, {9, 768, 9}}) {
    std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(tokens * cols));
    for (float& v : w) v = 0.1f * normal(rng);
    for (float& v : x) v = normal(rng);
    std::vector<float> expected(static_cast<size_t>(tokens * rows));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        ggml.traits(kGgmlF32).vec_dot(static_cast<int>(cols),
                                      &expected[static_cast<size_t>(t * rows + r)], 0,
                                      w.data() + r * cols, 0, x.data() + t * cols, 0, 1);
      }
    }
    const WeightMatrix matrix{TensorType::kF32, reinterpret_cast<const uint8_t*>(w.data()), rows,
                              cols, cols * 4};
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> y(expected.size(), NAN);
      Matmul(CpuContext{&KernelTable(isa), nullptr}, matrix, x.data(), tokens, y.data());
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(y[i], expected[i]) << IsaName(isa) << " f32 rows " << rows << " cols " << cols
                                     << " tokens " << tokens << " at " << i;
      }
    }
  }
}

// ggml's graph API (ggml.h, ggml-cpu.h), declared here as for the traits above.
struct GgmlInitParams {
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};
struct GgmlGraphApi {
  void* (*init)(GgmlInitParams);
  void (*free)(void*);
  void* (*new_tensor_1d)(void*, int, int64_t);
  void* (*new_tensor_2d)(void*, int, int64_t, int64_t);
  void* (*new_tensor_3d)(void*, int, int64_t, int64_t, int64_t);
  void* (*rope_ext)(void*, void*, void*, void*, int, int, int, float, float, float, float, float,
                    float);
  void* (*soft_max_ext)(void*, void*, void*, float, float);
  void (*soft_max_add_sinks)(void*, void*);
  void* (*swiglu_oai)(void*, void*, void*, float, float);
  void* (*new_graph)(void*);
  void (*build_forward_expand)(void*, void*);
  int (*compute_with_ctx)(void*, void*, int);
  void* (*get_data)(const void*);

  explicit GgmlGraphApi(const Ggml& g)
      : init(g.function<decltype(init)>("ggml_init")),
        free(g.function<decltype(free)>("ggml_free")),
        new_tensor_1d(g.function<decltype(new_tensor_1d)>("ggml_new_tensor_1d")),
        new_tensor_2d(g.function<decltype(new_tensor_2d)>("ggml_new_tensor_2d")),
        new_tensor_3d(g.function<decltype(new_tensor_3d)>("ggml_new_tensor_3d")),
        rope_ext(g.function<decltype(rope_ext)>("ggml_rope_ext")),
        soft_max_ext(g.function<decltype(soft_max_ext)>("ggml_soft_max_ext")),
        soft_max_add_sinks(g.function<decltype(soft_max_add_sinks)>("ggml_soft_max_add_sinks")),
        swiglu_oai(g.function<decltype(swiglu_oai)>("ggml_swiglu_oai")),
        new_graph(g.function<decltype(new_graph)>("ggml_new_graph")),
        build_forward_expand(
            g.function<decltype(build_forward_expand)>("ggml_build_forward_expand")),
        compute_with_ctx(g.function<decltype(compute_with_ctx)>("ggml_graph_compute_with_ctx")),
        get_data(g.function<decltype(get_data)>("ggml_get_data")) {}
  bool loaded() const {
    return init && free && new_tensor_1d && new_tensor_2d && new_tensor_3d && rope_ext &&
           soft_max_ext && soft_max_add_sinks && swiglu_oai && new_graph &&
           build_forward_expand && compute_with_ctx && get_data;
  }
  // Computes `out` (a node of ctx's graph) on one thread and returns its data.
  const float* Compute(void* ctx, void* out) const {
    void* graph = new_graph(ctx);
    build_forward_expand(graph, out);
    if (compute_with_ctx(ctx, graph, 1) != 0) return nullptr;
    return static_cast<const float*>(get_data(out));
  }
};

// ApplyRope against ggml_rope_ext, bit for bit: plain, Llama 3 frequency factors, linear
// scaling, YaRN (its ramp and magnitude) and LongRoPE factors with an attention factor, for
// both pairings, on a partial rotation (n_rot < head_dim).
TEST(GgmlParityTest, RopeEqualsGgmlRopeExt) {
  Ggml ggml;
  const GgmlGraphApi api(ggml);
  if (!api.loaded()) GTEST_SKIP() << "llama-cpp-python's ggml graph API not found";
  constexpr int kGgmlI32 = 26, kHeadDim = 32, kNRot = 24, kHeads = 3;
  std::vector<int32_t> positions;
  for (int32_t p = 0; p < 300; p += 7) positions.push_back(p);
  const auto n_tokens = static_cast<int64_t>(positions.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_tokens * kHeads * kHeadDim));
  for (float& v : x) v = normal(rng);
  std::vector<float> factors(kNRot / 2);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.37f * static_cast<float>(i);
  struct Case {
    const char* name;
    float scale, ext_factor, attn_factor;
    bool with_factors;
  };
  for (const Case& c : {Case{"plain", 1.0f, 0.0f, 1.0f, false},
                        Case{"rope_freqs", 1.0f, 0.0f, 1.0f, true},
                        Case{"linear", 0.25f, 0.0f, 1.0f, false},
                        Case{"yarn", 0.125f, 1.0f, 0.97f, false},
                        Case{"longrope", 1.0f, 0.0f, 1.19f, true}}) {
    for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeox}) {
      constexpr int kOriginalContext = 32;
      constexpr float kBase = 10000.0f, kBetaFast = 32.0f, kBetaSlow = 1.0f;
      void* ctx = api.init({64 << 20, nullptr, false});
      ASSERT_NE(ctx, nullptr);
      void* a = api.new_tensor_3d(ctx, kGgmlF32, kHeadDim, kHeads, n_tokens);
      void* pos = api.new_tensor_1d(ctx, kGgmlI32, n_tokens);
      void* ff = c.with_factors ? api.new_tensor_1d(ctx, kGgmlF32, kNRot / 2) : nullptr;
      std::memcpy(api.get_data(a), x.data(), x.size() * sizeof(float));
      std::memcpy(api.get_data(pos), positions.data(), positions.size() * sizeof(int32_t));
      if (ff != nullptr) std::memcpy(api.get_data(ff), factors.data(), factors.size() * 4);
      const int mode = style == RopeStyle::kNeox ? 2 : 0;
      void* out = api.rope_ext(ctx, a, pos, ff, kNRot, mode, kOriginalContext, kBase, c.scale,
                               c.ext_factor, c.attn_factor, kBetaFast, kBetaSlow);
      const float* expected = api.Compute(ctx, out);
      ASSERT_NE(expected, nullptr);

      const std::array<float, 2> corr =
          YarnCorrectionDims(kNRot, kOriginalContext, kBase, kBetaFast, kBetaSlow);
      const RopeParams p{.style = style,
                         .head_dim = kHeadDim,
                         .n_rot = kNRot,
                         .freq_base = kBase,
                         .position_scale = c.scale,
                         .freq_factors = c.with_factors ? std::span<const float>(factors)
                                                        : std::span<const float>(),
                         .ext_factor = c.ext_factor,
                         .corr_low = corr[0],
                         .corr_high = corr[1],
                         .attn_factor = c.attn_factor};
      std::vector<float> ours = x;
      ApplyRope(p, positions, kHeads, ours.data());
      for (size_t i = 0; i < ours.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(ours[i]), std::bit_cast<uint32_t>(expected[i]))
            << c.name << " neox " << (mode == 2) << " at " << i << ": " << ours[i] << " vs "
            << expected[i];
      }
      api.free(ctx);
    }
  }
}

// SoftmaxLikeGgml with a sink per row (gpt-oss's attention sinks) against ggml_soft_max_ext
// with ggml_soft_max_add_sinks, bit for bit, every ISA: rows of whole 8-float vectors as
// llama.cpp's padded KV rows, sinks below, among and above the scores, and no sink (-inf).
TEST(GgmlParityTest, SoftmaxWithSinksEqualsGgmlSoftMaxAddSinks) {
  Ggml ggml;
  const GgmlGraphApi api(ggml);
  if (!api.loaded()) GTEST_SKIP() << "llama-cpp-python's ggml graph API not found";
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  constexpr int64_t kHeads = 6;
  const std::array<float, kHeads> sinks = {-30.0f, 0.5f, 2.0f, 25.0f, -INFINITY, 7.25f};
  for (const int64_t n : {8, 64, 256}) {
    std::vector<float> x(static_cast<size_t>(n * kHeads));
    for (float& v : x) v = normal(rng);
    void* ctx = api.init({16 << 20, nullptr, false});
    ASSERT_NE(ctx, nullptr);
    // [n, 1 row, kHeads]: ggml takes sink i02 for head i02.
    void* a = api.new_tensor_3d(ctx, kGgmlF32, n, 1, kHeads);
    void* s = api.new_tensor_1d(ctx, kGgmlF32, kHeads);
    std::memcpy(api.get_data(a), x.data(), x.size() * sizeof(float));
    std::memcpy(api.get_data(s), sinks.data(), sizeof(sinks));
    void* out = api.soft_max_ext(ctx, a, nullptr, 1.0f, 0.0f);
    api.soft_max_add_sinks(out, s);
    const float* expected = api.Compute(ctx, out);
    ASSERT_NE(expected, nullptr);
    for (CpuIsa isa : SupportedIsas()) {
      for (int64_t h = 0; h < kHeads; ++h) {
        std::vector<float> row(x.begin() + h * n, x.begin() + (h + 1) * n);
        SoftmaxLikeGgml(CpuContext{&KernelTable(isa)}, row, sinks[static_cast<size_t>(h)]);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(row[static_cast<size_t>(i)]),
                    std::bit_cast<uint32_t>(expected[h * n + i]))
              << IsaName(isa) << " n " << n << " head " << h << " at " << i;
        }
      }
    }
    api.free(ctx);
  }
}

// SwiGluOai against ggml_swiglu_oai, bit for bit, with gpt-oss's alpha and limit and another
// pair: gates and ups inside, at and past the clamp on both sides.
TEST(GgmlParityTest, SwiGluOaiEqualsGgmlSwigluOai) {
  Ggml ggml;
  const GgmlGraphApi api(ggml);
  if (!api.loaded()) GTEST_SKIP() << "llama-cpp-python's ggml graph API not found";
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 5.0f);
  constexpr int64_t kCols = 96, kRows = 5;
  std::vector<float> gate(kCols * kRows), up(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    gate[i] = i % 17 == 0 ? 7.0f : i % 19 == 0 ? -7.0f : normal(rng);
    up[i] = i % 23 == 0 ? 7.0f : i % 29 == 0 ? -7.0f : normal(rng);
  }
  for (auto [alpha, limit] : {std::pair{1.702f, 7.0f}, std::pair{1.0f, 2.5f}}) {
    void* ctx = api.init({16 << 20, nullptr, false});
    ASSERT_NE(ctx, nullptr);
    void* g = api.new_tensor_2d(ctx, kGgmlF32, kCols, kRows);
    void* u = api.new_tensor_2d(ctx, kGgmlF32, kCols, kRows);
    std::memcpy(api.get_data(g), gate.data(), gate.size() * sizeof(float));
    std::memcpy(api.get_data(u), up.data(), up.size() * sizeof(float));
    const float* expected = api.Compute(ctx, api.swiglu_oai(ctx, g, u, alpha, limit));
    ASSERT_NE(expected, nullptr);
    std::vector<float> out(gate.size(), NAN);
    SwiGluOai(gate.data(), up.data(), kCols * kRows, alpha, limit, out.data());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(expected[i]))
          << "alpha " << alpha << " at " << i << " gate " << gate[i] << " up " << up[i];
    }
    api.free(ctx);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlMatmulParityTest,
                         ::testing::Values(ParityCase{TensorType::kQ4_1, kGgmlQ4_1},
                                           ParityCase{TensorType::kQ4_0, kGgmlQ4_0},
                                           ParityCase{TensorType::kQ8_0, kGgmlQ8_0},
                                           ParityCase{TensorType::kQ5_0, kGgmlQ5_0},
                                           ParityCase{TensorType::kQ5_1, kGgmlQ5_1},
                                           ParityCase{TensorType::kIQ4_NL, kGgmlIq4Nl},
                                           ParityCase{TensorType::kMXFP4, kGgmlMxfp4},
                                           ParityCase{TensorType::kQ4_K, 12},
                                           ParityCase{TensorType::kQ6_K, 14},
                                           ParityCase{TensorType::kQ5_K, 13},
                                           ParityCase{TensorType::kQ3_K, 11},
                                           ParityCase{TensorType::kQ2_K, 10},
                                           ParityCase{TensorType::kIQ4_XS, 23}),
                         [](const ::testing::TestParamInfo<ParityCase>& param_info) {
                           return std::string(NameOf(param_info.param.type));
                         });

}  // namespace
}  // namespace tokenmill
