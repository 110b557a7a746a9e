// Each CUDA kernel against its CPU counterpart on random inputs (label gpu: skipped where no
// CUDA device is present).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/kernel_math.h"
#include "kernels/cuda/moe_math.h"
#include "kernels/cuda/mmvq_kquant_math.h"
#include "kernels/cuda/mmvq_math.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/weight_upload.h"
#include "kernels/dequantize.h"
#include "kernels/dequantize_k_quants.h"
#include "kernels/half.h"
#include "tests/kernels/cuda/cuda_test.h"
#include "tests/kernels/cuda/rope_bound.h"

namespace tokenmill::cuda {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& host) {
  StatusOr<DeviceBuffer> b = DeviceBuffer::CopyOf(std::span<const T>(host));
  TM_CHECK(b.ok()) << b.status().ToString();
  return std::move(*b);
}

template <typename T>
std::vector<T> ToHost(const DeviceBuffer& device, size_t n) {
  std::vector<T> host(n);
  TM_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  TM_CHECK(cudaMemcpy(host.data(), device.data(), n * sizeof(T), cudaMemcpyDeviceToHost) ==
           cudaSuccess);
  return host;
}

DeviceBuffer Scratch(int64_t bytes) {
  StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(bytes);
  TM_CHECK(b.ok()) << b.status().ToString();
  return std::move(*b);
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float rel,
                const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * (1.0f + std::fabs(want[i]))) << what << " at " << i;
  }
}

class CudaKernelsTest : public CudaTest {
 protected:
  std::mt19937 rng_{1234};
};

// Random rows of a weight type (normal scales so nothing overflows).
std::vector<uint8_t> RandomWeights(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const GgmlTypeLayout& layout = LayoutOf(type);
  const int64_t row_bytes = cols / layout.block_size * layout.type_size;
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> value(-0.1f, 0.1f);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
  auto put = [&](size_t at, uint16_t bits) { std::memcpy(bytes.data() + at, &bits, 2); };
  for (int64_t i = 0; i < rows * cols / layout.block_size; ++i) {
    const size_t at = static_cast<size_t>(i * layout.type_size);
    switch (type) {
      case TensorType::kF32: {
        const float f = value(rng);
        std::memcpy(bytes.data() + at, &f, 4);
        break;
      }
      case TensorType::kF16:
        put(at, FloatToHalf(value(rng)));
        break;
      case TensorType::kBF16:
        put(at, static_cast<uint16_t>(std::bit_cast<uint32_t>(value(rng)) >> 16));
        break;
      case TensorType::kQ2_K:
      case TensorType::kQ3_K:
      case TensorType::kQ4_K:
      case TensorType::kQ5_K:
      case TensorType::kQ6_K:
      case TensorType::kIQ4_XS:  // every quant and sub-block scale random, d (and dmin) small
        for (const int f16 : KQuantF16Offsets(type)) put(at + f16, FloatToHalf(value(rng) * 0.02f));
        break;
      case TensorType::kQ4_1:
      case TensorType::kQ5_1:
        put(at + 2, FloatToHalf(value(rng)));
        [[fallthrough]];
      default:
        put(at, FloatToHalf(value(rng) * 0.1f));
    }
  }
  return bytes;
}

class GemvTest : public CudaKernelsTest, public ::testing::WithParamInterface<TensorType> {};

// Quantized weights: the device's q8_1 activations equal the CPU's QuantizeActivations, and
// every (token, row) of GemvQ8_1 equals MmvqDot (mmvq_math.h; KMmvqDot of mmvq_kquant_math.h
// for Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS) bit for bit, for batches of 1..11 tokens
// (every pass shape of PlanMmvq, so also batch-invariant). 37 blocks a row (the 256-blocks: 5,
// so 40 sub-blocks): lanes with two words and without, rows padded to 16 bytes; 67 rows: a
// warp's second row past the end.
// Float weights: within 1e-4 of the reference, and batch-invariant.
TEST_P(GemvTest, EqualsItsEmulationAndIsBatchInvariant) {
  const TensorType type = GetParam();
  const uint32_t id = static_cast<uint32_t>(type);
  const bool quantized = TakesQ8_1(id);
  const int64_t rows = 67, n_tokens = 11;
  const int64_t cols = IsKQuant(id) ? 5 * kKBlock : quantized ? 37 * kQuantBlock : 256;
  const std::vector<uint8_t> w_host = RandomWeights(type, rows, cols, rng_);
  const std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), rng_);
  const WeightMatrix w{type, w_host.data(), rows, cols,
                       static_cast<int64_t>(w_host.size()) / rows};
  StatusOr<UploadedWeight> uploaded = UploadWeight(id, w.data, rows, cols, w.row_bytes);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status().ToString();
  const DeviceWeight& view = uploaded->view;
  DeviceBuffer dx = ToDevice(x);
  DeviceBuffer dy = Scratch(n_tokens * rows * 4);
  DeviceBuffer dq8 = Scratch(Q8_1Bytes(n_tokens, cols));
  std::vector<float> want(static_cast<size_t>(n_tokens * rows));
  if (quantized) {
    ASSERT_EQ(QuantizeQ8_1(dx.as<float>(), n_tokens, cols, dq8.as<uint8_t>(), nullptr),
              cudaSuccess);
    const std::vector<uint8_t> q8 = ToHost<uint8_t>(dq8, static_cast<size_t>(dq8.bytes()));
    std::vector<Q8ActivationBlock> cpu(static_cast<size_t>(cols / kQuantBlock));
    const std::vector<uint8_t> packed = DeviceLayout(id, w.data, rows, cols, w.row_bytes);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* token = q8.data() + t * Q8_1TokenBytes(cols);
      QuantizeActivations(x.data() + t * cols, cols, cpu.data());
      for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
        ASSERT_EQ(std::memcmp(token + b * kQuantBlock, cpu[b].q, kQuantBlock), 0) << t << "/" << b;
        const float ds[2] = {cpu[b].d, cpu[b].scaled_sum};
        ASSERT_EQ(std::memcmp(token + cols + 8 * b, ds, 8), 0) << "scales " << t << "/" << b;
      }
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = packed.data() + r * view.row_bytes;
        want[static_cast<size_t>(t * rows + r)] =
            IsKQuant(id) ? KMmvqDot(id, row, token, cols) : MmvqDot(id, row, token, cols);
      }
    }
  } else {
    MatmulReference(w, x.data(), n_tokens, want.data());
  }
  for (const int64_t n : {1, 2, 3, 4, 5, 8, 11}) {
    ASSERT_EQ(cudaMemset(dy.data(), 0xff, static_cast<size_t>(dy.bytes())), cudaSuccess);
    ASSERT_EQ(quantized ? GemvQ8_1(view, dq8.as<uint8_t>(), n, dy.as<float>(), nullptr)
                        : Gemv(view, dx.as<float>(), n, dy.as<float>(), nullptr),
              cudaSuccess);
    const std::vector<float> got = ToHost<float>(dy, static_cast<size_t>(n * rows));
    if (quantized) {
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
            << "batch of " << n << ", token " << i / rows << " row " << i % rows << ": "
            << got[i] << " vs " << want[i];
      }
    } else if (n == n_tokens) {
      ExpectNear(got, want, 1e-4f, "gemv");
      want = got;  // the smaller batches must give these bits
    }
  }
  if (!quantized) {  // the batches above ran before `want` held the batch of 11's bits
    for (int64_t t = 0; t < n_tokens; ++t) {
      ASSERT_EQ(Gemv(view, dx.as<float>() + t * cols, 1, dy.as<float>(), nullptr), cudaSuccess);
      const std::vector<float> alone = ToHost<float>(dy, static_cast<size_t>(rows));
      ASSERT_EQ(std::memcmp(alone.data(), want.data() + t * rows, rows * 4), 0) << "token " << t;
    }
  }

  // The bf16 copy (FloatToBf16Bits of the reference's dequantized values) and cuBLAS.
  DeviceBuffer bf16 = Scratch(rows * cols * 2);
  ASSERT_EQ(DequantizeToBf16(view, bf16.as<uint16_t>(), nullptr), cudaSuccess);
  const std::vector<uint16_t> halves = ToHost<uint16_t>(bf16, static_cast<size_t>(rows * cols));
  std::vector<float> w_float(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<float> row(w_float.data() + r * cols, static_cast<size_t>(cols));
    DequantizeReference(type, w_host.data() + r * w.row_bytes, row);
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(halves[static_cast<size_t>(r * cols + c)], FloatToBf16Bits(row[c]));
    }
  }
  DeviceWeight with_bf16 = view;
  with_bf16.bf16 = bf16.as<const uint16_t>();
  CublasGemm gemm;
  ASSERT_TRUE(gemm.Init(nullptr).ok());
  ASSERT_TRUE(gemm.Multiply(with_bf16, dx.as<float>(), n_tokens, dy.as<float>()).ok());
  // Rounding x and w to bf16 moves each product by at most (1 + 2^-9)^2 - 1 < 2^-8 + 2^-17 of
  // |x w| (half an ulp of an 8-bit significand each); the f32 sums of cuBLAS and of the
  // reference add at most cols * 2^-24 of sum |x w| each. So |cuBLAS - reference| <=
  // sum_c |x_c w_c| * (2^-8 + 2^-17 + 2 cols 2^-24).
  const std::vector<float> got = ToHost<float>(dy, want.size());
  std::vector<float> reference(want.size());
  MatmulReference(w, x.data(), n_tokens, reference.data());
  const double per_unit = 0x1p-8 + 0x1p-17 + 2.0 * static_cast<double>(cols) * 0x1p-24;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double abs_sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        abs_sum += std::fabs(static_cast<double>(x[static_cast<size_t>(t * cols + c)]) *
                             w_float[static_cast<size_t>(r * cols + c)]);
      }
      const size_t i = static_cast<size_t>(t * rows + r);
      ASSERT_LE(std::fabs(static_cast<double>(got[i]) - reference[i]), abs_sum * per_unit)
          << "cublas at token " << t << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemvTest,
                         ::testing::Values(TensorType::kF32, TensorType::kF16, TensorType::kBF16,
                                           TensorType::kQ4_0, TensorType::kQ4_1,
                                           TensorType::kQ5_0, TensorType::kQ5_1,
                                           TensorType::kQ8_0, TensorType::kIQ4_NL, TensorType::kQ2_K,
                                           TensorType::kQ3_K, TensorType::kQ4_K,
                                           TensorType::kQ5_K, TensorType::kQ6_K,
                                           TensorType::kIQ4_XS),
                         [](const ::testing::TestParamInfo<TensorType>& type) {
                           return std::string(NameOf(type.param));
                         });

// ---- mixtures of experts ---------------------------------------------------------------------

// Each token's n_used distinct experts, at random.
std::vector<int32_t> RandomChoices(int64_t n_tokens, int n_used, int n_expert, std::mt19937& rng) {
  std::vector<int32_t> all(static_cast<size_t>(n_expert)), choices;
  for (int e = 0; e < n_expert; ++e) all[static_cast<size_t>(e)] = e;
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    choices.insert(choices.end(), all.begin(), all.begin() + n_used);
  }
  return choices;
}

// The device grouping of `choices` (and its buffers), checked against moe_math.h's steps.
struct DeviceGroups {
  DeviceBuffer begin, order, slot_of_pair;
  DeviceExpertGroups view;
  std::vector<int32_t> host_order, host_slot_of_pair;
};
DeviceGroups GroupOnDevice(const std::vector<int32_t>& choices, int64_t n_tokens, int n_used,
                           int n_expert) {
  const int64_t n_pairs = n_tokens * n_used;
  DeviceGroups g{Scratch((n_expert + 1) * 4), Scratch(n_pairs * 4), Scratch(n_pairs * 4), {}, {},
                 {}};
  g.view = DeviceExpertGroups{g.begin.as<int32_t>(), g.order.as<int32_t>(),
                              g.slot_of_pair.as<int32_t>(), n_expert, n_used, n_tokens};
  DeviceBuffer d_choices = ToDevice(choices);
  EXPECT_EQ(GroupExpertPairs(d_choices.as<int32_t>(), g.view, nullptr), cudaSuccess);
  std::vector<int32_t> begin(static_cast<size_t>(n_expert) + 1);
  g.host_order.assign(static_cast<size_t>(n_pairs), 0);
  g.host_slot_of_pair.assign(static_cast<size_t>(n_pairs), 0);
  for (int e = 0; e < n_expert; ++e) {
    begin[static_cast<size_t>(e) + 1] = CountExpertPairs(choices.data(), n_pairs, e);
  }
  ScanExpertCounts(begin.data(), n_expert);
  for (int e = 0; e < n_expert; ++e) {
    PlaceExpertPairs(choices.data(), n_pairs, e, begin[static_cast<size_t>(e)],
                     g.host_order.data(), g.host_slot_of_pair.data());
  }
  EXPECT_EQ(ToHost<int32_t>(g.begin, begin.size()), begin);
  EXPECT_EQ(ToHost<int32_t>(g.order, g.host_order.size()), g.host_order);
  EXPECT_EQ(ToHost<int32_t>(g.slot_of_pair, g.host_slot_of_pair.size()), g.host_slot_of_pair);
  return g;
}

class GroupedGemvTest : public CudaKernelsTest, public ::testing::WithParamInterface<TensorType> {};

// The grouped expert GEMV over stacked experts (UploadExperts): each slot's rows equal, bit for
// bit, the dense GEMV of its expert alone over its activation row alone (GemvQ8_1 / Gemv with
// one token) and, for quantized experts, MmvqDot / KMmvqDot of that expert's packed rows,
// for the gate/up form (activations per token) and the down form (per slot), for steps of 1..11
// tokens (every PlanMmvq shape): a token's result does not depend on who shares its expert.
TEST_P(GroupedGemvTest, EachSlotEqualsItsExpertsGemvAlone) {
  const TensorType type = GetParam();
  const uint32_t id = static_cast<uint32_t>(type);
  const bool quantized = TakesQ8_1(id);
  const int n_expert = 6, n_used = 2;
  const int64_t rows = 67;
  const int64_t cols = IsKQuant(id) ? 2 * kKBlock : quantized ? 9 * kQuantBlock : 96;
  std::vector<std::vector<uint8_t>> host(n_expert);
  std::vector<const uint8_t*> pointers;
  for (auto& e : host) {
    e = RandomWeights(type, rows, cols, rng_);
    pointers.push_back(e.data());
  }
  const int64_t row_bytes = static_cast<int64_t>(host[0].size()) / rows;
  StatusOr<UploadedWeight> experts = UploadExperts(id, pointers, rows, cols, row_bytes);
  ASSERT_TRUE(experts.ok()) << experts.status().ToString();
  const DeviceWeight& w = experts->view;
  ASSERT_EQ(w.n_experts, n_expert);
  std::vector<std::vector<uint8_t>> packed;  // each expert's device layout, for the emulation
  for (const auto& e : host) packed.push_back(DeviceLayout(id, e.data(), rows, cols, row_bytes));
  for (const int64_t n : {1, 2, 3, 5, 8, 11}) {
    const std::vector<int32_t> choices = RandomChoices(n, n_used, n_expert, rng_);
    const DeviceGroups g = GroupOnDevice(choices, n, n_used, n_expert);
    for (const bool per_token : {true, false}) {
      const int64_t x_rows = per_token ? n : n * n_used;
      const std::vector<float> x = Random(static_cast<size_t>(x_rows * cols), rng_);
      DeviceBuffer dx = ToDevice(x);
      DeviceBuffer dq8 = Scratch(Q8_1Bytes(x_rows, cols));
      if (quantized) {
        ASSERT_EQ(QuantizeQ8_1(dx.as<float>(), x_rows, cols, dq8.as<uint8_t>(), nullptr),
                  cudaSuccess);
      }
      DeviceBuffer dy = Scratch(n * n_used * rows * 4);
      ASSERT_EQ(cudaMemset(dy.data(), 0xff, static_cast<size_t>(dy.bytes())), cudaSuccess);
      ASSERT_EQ(quantized ? GroupedGemvQ8_1(w, dq8.as<uint8_t>(), per_token, g.view,
                                            dy.as<float>(), nullptr)
                          : GroupedGemv(w, dx.as<float>(), per_token, g.view, dy.as<float>(),
                                        nullptr),
                cudaSuccess);
      const std::vector<float> got = ToHost<float>(dy, static_cast<size_t>(n * n_used * rows));
      std::vector<uint8_t> q8;
      if (quantized) q8 = ToHost<uint8_t>(dq8, static_cast<size_t>(dq8.bytes()));
      DeviceBuffer alone = Scratch(rows * 4);
      for (int64_t slot = 0; slot < n * n_used; ++slot) {
        const int32_t pair = g.host_order[static_cast<size_t>(slot)];
        const int32_t e = choices[static_cast<size_t>(pair)];
        const int64_t x_row = per_token ? pair / n_used : slot;
        DeviceWeight one = w;
        one.data = w.data + e * w.expert_bytes;
        one.n_experts = 1;
        ASSERT_EQ(quantized ? GemvQ8_1(one, dq8.as<uint8_t>() + x_row * Q8_1TokenBytes(cols), 1,
                                       alone.as<float>(), nullptr)
                            : Gemv(one, dx.as<float>() + x_row * cols, 1, alone.as<float>(),
                                   nullptr),
                  cudaSuccess);
        const std::vector<float> want = ToHost<float>(alone, static_cast<size_t>(rows));
        ASSERT_EQ(std::memcmp(got.data() + slot * rows, want.data(), rows * 4), 0)
            << n << " tokens, slot " << slot << " (expert " << e << "), per_token " << per_token;
        for (int64_t r = 0; quantized && r < rows; ++r) {  // and MmvqDot / KMmvqDot's bits
          const uint8_t* row = packed[static_cast<size_t>(e)].data() + r * w.row_bytes;
          const uint8_t* token = q8.data() + x_row * Q8_1TokenBytes(cols);
          const float emulated =
              IsKQuant(id) ? KMmvqDot(id, row, token, cols) : MmvqDot(id, row, token, cols);
          ASSERT_EQ(std::memcmp(&got[static_cast<size_t>(slot * rows + r)], &emulated, 4), 0)
              << n << " tokens, slot " << slot << " row " << r;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GroupedGemvTest,
                         ::testing::Values(TensorType::kF32, TensorType::kF16, TensorType::kQ4_0,
                                           TensorType::kQ5_1, TensorType::kQ8_0,
                                           TensorType::kQ4_K, TensorType::kQ6_K),
                         [](const ::testing::TestParamInfo<TensorType>& type) {
                           return std::string(NameOf(type.param));
                         });

// Routing and the weighted sum on the device equal their host emulations (moe_math.h, which
// moe_routing_test holds to RouteToken) bit for bit: every gating, a tail past the full
// 8-float vectors (60 experts) and tied logits.
TEST_F(CudaKernelsTest, RoutingAndTheWeightedSumEqualTheirEmulations) {
  const int64_t n_tokens = 37;
  const DeviceRouting routings[] = {{60, 4, RoutingGating::kSoftmax, false, 0.0f},
                                    {16, 3, RoutingGating::kSoftmax, true, 0.0f},
                                    {12, 8, RoutingGating::kSigmoid, true, 2.5f},
                                    {32, 4, RoutingGating::kSoftmaxSelected, false, 0.0f}};
  for (const DeviceRouting& r : routings) {
    std::vector<float> logits = Random(static_cast<size_t>(n_tokens * r.n_expert), rng_, 3.0f);
    for (int64_t i = 0; i + 1 < n_tokens * r.n_expert; i += 5) logits[i + 1] = logits[i];  // ties
    DeviceBuffer d_logits = ToDevice(logits);
    DeviceBuffer d_experts = Scratch(n_tokens * r.n_used * 4);
    DeviceBuffer d_weights = Scratch(n_tokens * r.n_used * 4);
    ASSERT_EQ(RouteTokens(r, d_logits.as<float>(), n_tokens, d_experts.as<int32_t>(),
                          d_weights.as<float>(), nullptr),
              cudaSuccess);
    std::vector<int32_t> experts(static_cast<size_t>(n_tokens * r.n_used));
    std::vector<float> weights(experts.size());
    for (int64_t t = 0; t < n_tokens; ++t) {
      RouteTokenOnDevice(r, logits.data() + t * r.n_expert, experts.data() + t * r.n_used,
                         weights.data() + t * r.n_used);
    }
    ASSERT_EQ(ToHost<int32_t>(d_experts, experts.size()), experts);
    const std::vector<float> got_weights = ToHost<float>(d_weights, weights.size());
    ASSERT_EQ(std::memcmp(got_weights.data(), weights.data(), weights.size() * 4), 0);
    const std::vector<float> got_probs = ToHost<float>(d_logits, logits.size());
    ASSERT_EQ(std::memcmp(got_probs.data(), logits.data(), logits.size() * 4), 0);

    // The weighted sum over these choices, with and without a shared expert.
    const int64_t d = 72;
    const DeviceGroups g = GroupOnDevice(experts, n_tokens, r.n_used, r.n_expert);
    const std::vector<float> expert_out =
        Random(static_cast<size_t>(n_tokens * r.n_used * d), rng_);
    const std::vector<float> shared = Random(static_cast<size_t>(n_tokens * d), rng_);
    const std::vector<float> gate = Random(static_cast<size_t>(n_tokens), rng_, 2.0f);
    DeviceBuffer d_expert_out = ToDevice(expert_out), d_shared = ToDevice(shared);
    DeviceBuffer d_gate = ToDevice(gate), d_out = Scratch(n_tokens * d * 4);
    for (const bool with_shared : {false, true}) {
      ASSERT_EQ(CombineExpertOutputs(d_expert_out.as<float>(), d_weights.as<float>(),
                                     g.view.slot_of_pair, n_tokens, r.n_used, d,
                                     with_shared ? d_shared.as<float>() : nullptr,
                                     with_shared ? d_gate.as<float>() : nullptr,
                                     d_out.as<float>(), nullptr),
                cudaSuccess);
      const std::vector<float> got = ToHost<float>(d_out, static_cast<size_t>(n_tokens * d));
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t j = 0; j < d; ++j) {
          float want = CombineExperts(expert_out.data(), weights.data(),
                                      g.host_slot_of_pair.data(), t, r.n_used, d, j);
          if (with_shared) {
            want = want + MulRounded(shared[t * d + j], SharedExpertGate(gate[t]));
          }
          ASSERT_EQ(std::memcmp(&got[t * d + j], &want, 4), 0) << "token " << t << " at " << j;
        }
      }
    }
  }
}

TEST_F(CudaKernelsTest, EmbeddingDequantizesTheRowsOfTheIds) {
  const int64_t vocab = 40, cols = 64;
  const std::vector<int32_t> ids = {3, 0, 39, 3};
  DeviceBuffer dids = ToDevice(ids), out = Scratch(4 * cols * 4);
  // Packed rows (Q5_x: spread fifth bits) read back as the reference dequantizes the file's.
  for (const TensorType type : {TensorType::kQ8_0, TensorType::kQ5_0, TensorType::kQ5_1,
                                TensorType::kIQ4_NL}) {
    const std::vector<uint8_t> table = RandomWeights(type, vocab, cols, rng_);
    const int64_t row_bytes = static_cast<int64_t>(table.size()) / vocab;
    StatusOr<UploadedWeight> dt =
        UploadWeight(static_cast<uint32_t>(type), table.data(), vocab, cols, row_bytes);
    ASSERT_TRUE(dt.ok()) << dt.status().ToString();
    ASSERT_EQ(Embedding(dt->view, dids.as<int32_t>(), 4, out.as<float>(), nullptr), cudaSuccess);
    const std::vector<float> got = ToHost<float>(out, 4 * cols);
    std::vector<float> want(static_cast<size_t>(cols));
    for (size_t t = 0; t < ids.size(); ++t) {
      DequantizeReference(type, table.data() + ids[t] * row_bytes, want);
      EXPECT_EQ(std::memcmp(got.data() + t * cols, want.data(), cols * 4), 0)
          << NameOf(type) << " id " << t;
    }
  }
}

TEST_F(CudaKernelsTest, RmsNormAddRmsNormSwiGluAndBiasMatchTheCpu) {
  const int64_t rows = 5, n = 576;
  const std::vector<float> x = Random(rows * n, rng_), y = Random(rows * n, rng_);
  const std::vector<float> weight = Random(n, rng_), bias = Random(n, rng_);
  DeviceBuffer dx = ToDevice(x), dy = ToDevice(y), dw = ToDevice(weight), db = ToDevice(bias);
  DeviceBuffer out = Scratch(rows * n * 4);

  std::vector<float> want(x.size());
  tokenmill::RmsNorm(x.data(), weight, 1e-5f, rows, want.data());
  ASSERT_EQ(cuda::RmsNorm(dx.as<float>(), dw.as<float>(), nullptr, rows, n, 1e-5f, out.as<float>(),
                          nullptr),
            cudaSuccess);
  ExpectNear(ToHost<float>(out, x.size()), want, 1e-5f, "rmsnorm");

  // Gathered rows (the final norm over the logit rows only).
  const std::vector<int32_t> pick = {4, 1};
  DeviceBuffer dpick = ToDevice(pick);
  ASSERT_EQ(cuda::RmsNorm(dx.as<float>(), dw.as<float>(), dpick.as<int32_t>(), 2, n, 1e-5f,
                          out.as<float>(), nullptr),
            cudaSuccess);
  const std::vector<float> gathered = ToHost<float>(out, 2 * n);
  for (int i = 0; i < n; ++i) {
    ASSERT_NEAR(gathered[i], want[4 * n + i], 1e-5f * (1 + std::fabs(want[4 * n + i])));
    ASSERT_NEAR(gathered[n + i], want[n + i], 1e-5f * (1 + std::fabs(want[n + i])));
  }

  std::vector<float> sum = x;
  tokenmill::AddInPlace(sum.data(), y.data(), rows * n);
  tokenmill::RmsNorm(sum.data(), weight, 1e-5f, rows, want.data());
  ASSERT_EQ(AddRmsNorm(dx.as<float>(), dy.as<float>(), dw.as<float>(), rows, n, 1e-5f,
                       out.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(ToHost<float>(dx, x.size()), sum);  // the residual stream itself, exactly
  ExpectNear(ToHost<float>(out, x.size()), want, 1e-5f, "add+rmsnorm");

  std::vector<float> swiglu(x.size());
  const tokenmill::CpuContext scalar{&tokenmill::KernelTable(tokenmill::CpuIsa::kScalar)};
  tokenmill::SwiGlu(scalar, x.data(), y.data(), rows * n, swiglu.data());
  DeviceBuffer dx2 = ToDevice(x);
  ASSERT_EQ(cuda::SwiGlu(dx2.as<float>(), dy.as<float>(), rows * n, out.as<float>(), nullptr),
            cudaSuccess);
  ExpectNear(ToHost<float>(out, x.size()), swiglu, 1e-6f, "swiglu");

  std::vector<float> biased = x;
  tokenmill::AddBias(biased.data(), bias, rows);
  ASSERT_EQ(cuda::AddBias(dx2.as<float>(), db.as<float>(), rows, n, nullptr), cudaSuccess);
  EXPECT_EQ(ToHost<float>(dx2, x.size()), biased);
}

// The Gemmas' ops: GELU-tanh gating through the CPU's own table equals the CPU bit for bit
// (gates spread over the table's range and past +-10), the embedding scale is one rounded
// product, and the soft-cap is within tanhf's few ulps of the CPU's std::tanh.
// Four tokens in one launch, each by its own adapter slot: two pairs of other ranks, none
// (slot -1) and a slot whose adapter leaves this matrix alone (rank 0). Each adapted row equals
// LoraUpdateOnHost bit for bit; the others are untouched.
TEST_F(CudaKernelsTest, LoraUpdatesEachTokenByItsOwnAdapter) {
  const int64_t cols = 100, rows = 300;  // a tail of lanes and of expand blocks
  const std::vector<int32_t> ranks = {16, 3, 0};
  const std::vector<int32_t> slots = {0, -1, 1, 2};
  const int max_rank = 16;
  const auto n_tokens = static_cast<int64_t>(slots.size());
  std::vector<std::vector<float>> a, bt;
  std::vector<DeviceBuffer> device_a, device_bt;
  std::vector<DeviceLoraPair> host_pairs, device_pairs;
  for (const int32_t rank : ranks) {
    a.push_back(Random(static_cast<size_t>(std::max(rank, 1) * cols), rng_));
    bt.push_back(Random(static_cast<size_t>(std::max(rank, 1) * rows), rng_));
    device_a.push_back(ToDevice(a.back()));
    device_bt.push_back(ToDevice(bt.back()));
    const float scale = rank > 0 ? 32.0f / static_cast<float>(rank) : 0.0f;
    host_pairs.push_back({a.back().data(), bt.back().data(), rank, scale});
    device_pairs.push_back({device_a.back().as<const float>(), device_bt.back().as<const float>(),
                            rank, scale});
  }
  const std::vector<float> x = Random(static_cast<size_t>(n_tokens * cols), rng_);
  const std::vector<float> y0 = Random(static_cast<size_t>(n_tokens * rows), rng_);
  std::vector<float> want = y0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (slots[t] < 0) continue;
    LoraUpdateOnHost(x.data() + t * cols, host_pairs[static_cast<size_t>(slots[t])], cols, rows,
                     want.data() + t * rows);
  }
  DeviceBuffer dx = ToDevice(x), dy = ToDevice(y0), dslots = ToDevice(slots);
  DeviceBuffer dpairs = ToDevice(device_pairs);
  DeviceBuffer mid = Scratch(n_tokens * max_rank * 4);
  ASSERT_EQ(LoraShrink(dx.as<float>(), n_tokens, cols, dslots.as<int32_t>(),
                       dpairs.as<DeviceLoraPair>(), max_rank, mid.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(LoraExpand(mid.as<float>(), n_tokens, rows, dslots.as<int32_t>(),
                       dpairs.as<DeviceLoraPair>(), max_rank, dy.as<float>(), nullptr),
            cudaSuccess);
  const std::vector<float> got = ToHost<float>(dy, want.size());
  EXPECT_EQ(got, want);
  for (const int64_t untouched : {1, 3}) {
    for (int64_t r = untouched * rows; r < (untouched + 1) * rows; ++r) {
      ASSERT_EQ(got[r], y0[r]) << "a token without an adapter changed at " << r;
    }
  }
}

TEST_F(CudaKernelsTest, GeluGluScaleAndSoftcapMatchTheCpu) {
  const int64_t n = 4096;
  const std::vector<float> gate = Random(n, rng_, 6.0f), up = Random(n, rng_);
  std::vector<float> halves(static_cast<size_t>(kGeluTableSize)), table(halves.size());
  for (size_t h = 0; h < halves.size(); ++h) halves[h] = HalfToFloat(static_cast<uint16_t>(h));
  const std::vector<float> ones(halves.size(), 1.0f);
  tokenmill::GeluTanhGlu(halves.data(), ones.data(), kGeluTableSize, table.data());
  std::vector<float> want(n);
  tokenmill::GeluTanhGlu(gate.data(), up.data(), n, want.data());
  DeviceBuffer dgate = ToDevice(gate), dup = ToDevice(up), dtable = ToDevice(table);
  DeviceBuffer out = Scratch(n * 4);
  ASSERT_EQ(cuda::GeluTanhGlu(dgate.as<float>(), dup.as<float>(), n, dtable.as<float>(),
                              out.as<float>(), nullptr),
            cudaSuccess);
  EXPECT_EQ(ToHost<float>(out, n), want);
  ASSERT_GT(std::count_if(gate.begin(), gate.end(), [](float g) { return std::fabs(g) >= 10; }),
            0);

  std::vector<float> scaled = gate;
  for (float& x : scaled) x *= 8.0f;
  ASSERT_EQ(ScaleInPlace(dgate.as<float>(), n, 8.0f, nullptr), cudaSuccess);
  EXPECT_EQ(ToHost<float>(dgate, n), scaled);

  std::vector<float> capped = scaled;
  for (float& x : capped) x = std::tanh(x * (1.0f / 5.0f)) * 5.0f;
  ASSERT_EQ(SoftcapInPlace(dgate.as<float>(), n, 5.0f, nullptr), cudaSuccess);
  ExpectNear(ToHost<float>(dgate, n), capped, 1e-6f, "softcap");
}

TEST_F(CudaKernelsTest, RopeMatchesTheCpuInBothStylesWithFactors) {
  const int head_dim = 64, n_rot = 64, n_heads = 3;
  const std::vector<int32_t> positions = {0, 5, 77, 1000, 8191};
  const std::vector<float> factors = Random(n_rot / 2, rng_, 0.1f);
  std::vector<float> positive_factors(factors.size());
  for (size_t i = 0; i < factors.size(); ++i) positive_factors[i] = 1.0f + std::fabs(factors[i]);
  std::vector<double> inv_freq(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) inv_freq[i] = std::pow(500000.0, -2.0 * i / n_rot);
  DeviceBuffer dpos = ToDevice(positions), dinv = ToDevice(inv_freq),
               dfac = ToDevice(positive_factors);
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeox}) {
    const std::vector<float> x = Random(positions.size() * n_heads * head_dim, rng_);
    std::vector<float> want = x;
    const RopeParams p{style, head_dim, n_rot, 500000.0f, 0.5f, positive_factors};
    ApplyRope(p, positions, n_heads, want.data());
    DeviceBuffer dx = ToDevice(x);
    const DeviceRope rope{style == RopeStyle::kNeox, head_dim, n_rot, 0.5f, dinv.as<double>(),
                          dfac.as<float>()};
    ASSERT_EQ(Rope(rope, dpos.as<int32_t>(), static_cast<int64_t>(positions.size()), n_heads,
                   dx.as<float>(), nullptr),
              cudaSuccess);
    const std::vector<float> got = ToHost<float>(dx, x.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const int32_t position = positions[i / (n_heads * head_dim)];
      ASSERT_NEAR(got[i], want[i], RopeCpuGap(position)) << "rope at position " << position;
    }
  }
}

// YaRN (scale 1/8 past an original context of 32, its ramp and magnitude) and an attention
// factor on cos and sin, on the device as on the CPU.
TEST_F(CudaKernelsTest, RopeMatchesTheCpuWithYarnAndAnAttentionFactor) {
  const int head_dim = 64, n_rot = 64, n_heads = 2;
  const std::vector<int32_t> positions = {0, 5, 33, 200, 4095};
  std::vector<double> inv_freq(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) inv_freq[i] = std::pow(1000000.0, -2.0 * i / n_rot);
  DeviceBuffer dpos = ToDevice(positions), dinv = ToDevice(inv_freq);
  for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kNeox}) {
    const std::vector<float> x = Random(positions.size() * n_heads * head_dim, rng_);
    std::vector<float> want = x;
    RopeParams p{style, head_dim, n_rot, 1000000.0f, 0.125f, {}};
    p.ext_factor = 1.0f;
    p.attn_factor = 0.97f;
    const std::array<float, 2> corr = YarnCorrectionDims(n_rot, 32, p.freq_base, 32.0f, 1.0f);
    p.corr_low = corr[0];
    p.corr_high = corr[1];
    ApplyRope(p, positions, n_heads, want.data());
    DeviceBuffer dx = ToDevice(x);
    const DeviceRope rope{.neox = style == RopeStyle::kNeox,
                          .head_dim = head_dim,
                          .n_rot = n_rot,
                          .position_scale = p.position_scale,
                          .inv_freq = dinv.as<double>(),
                          .ext_factor = p.ext_factor,
                          .corr_low = p.corr_low,
                          .corr_high = p.corr_high,
                          .cos_sin_scale = RopeCosSinScale(p)};
    ASSERT_EQ(Rope(rope, dpos.as<int32_t>(), static_cast<int64_t>(positions.size()), n_heads,
                   dx.as<float>(), nullptr),
              cudaSuccess);
    const std::vector<float> got = ToHost<float>(dx, x.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const int32_t position = positions[i / (n_heads * head_dim)];
      ASSERT_NEAR(got[i], want[i], RopeCpuGap(position)) << "yarn rope at position " << position;
    }
  }
}

TEST_F(CudaKernelsTest, ArgmaxPicksTheFirstLargest) {
  const int64_t rows = 3;
  const int vocab = 49152;
  std::vector<float> logits = Random(rows * vocab, rng_);
  logits[vocab + 100] = 50.0f;
  logits[vocab + 40000] = 50.0f;  // a tie: the first wins
  DeviceBuffer dl = ToDevice(logits), out = Scratch(rows * 4);
  ASSERT_EQ(ArgmaxRows(dl.as<float>(), rows, vocab, out.as<int32_t>(), nullptr), cudaSuccess);
  const std::vector<int32_t> got = ToHost<int32_t>(out, rows);
  for (int64_t r = 0; r < rows; ++r) {
    const auto begin = logits.begin() + r * vocab;
    EXPECT_EQ(got[r], std::max_element(begin, begin + vocab) - begin) << r;
  }
  EXPECT_EQ(got[1], 100);
}

// Three sequences in scattered blocks: a long decode (crosses several splits), a prefill chunk
// of 40 tokens after 300 cached ones, and a short prefill from scratch. GQA 4:1 or 3:1.
struct AttentionCase {
  KvType kv_type;
  int head_dim;
  int n_heads;
  int n_kv_heads;
  // The Gemmas' variants: Q pre-scaled (then q.k scaled by 1), soft-capped scores, a window.
  DeviceAttentionVariant variant = {};
  // Bytes by which the K and V pools start past a 16-byte boundary: > 0 keeps rows that are
  // whole 16-byte pieces off the cp.async path (PlanAttentionTiles).
  int pool_offset = 0;
  int32_t decode_length = 1030;  // the long decode's KV length
};

// n bytes of a KV pool that may start anywhere in its buffer.
std::vector<uint8_t> PoolBytes(const uint8_t* pool, size_t n) {
  std::vector<uint8_t> host(n);
  TM_CHECK(cudaDeviceSynchronize() == cudaSuccess);
  TM_CHECK(cudaMemcpy(host.data(), pool, n, cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

// Sequences of `lengths` tokens of KV in shuffled blocks of block_size, the last new_tokens[s]
// of sequence s this step's: the step's positions and slots, and every position's slot (the
// cached prefix's and the step's), as the paged attention tests lay them out.
struct PagedBatch {
  std::vector<int32_t> kv_indptr{0}, kv_indices, last_len, positions, cu_seqlens{0};
  std::vector<int64_t> slots, all_slots;
  int64_t num_blocks = 0;
};

PagedBatch ShuffledPagedBatch(const std::vector<int32_t>& lengths,
                              const std::vector<int32_t>& new_tokens, int block_size,
                              std::mt19937& rng) {
  PagedBatch b;
  for (int32_t len : lengths) b.num_blocks += (len + block_size - 1) / block_size;
  std::vector<int32_t> order(static_cast<size_t>(b.num_blocks));
  for (int64_t i = 0; i < b.num_blocks; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  size_t next = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int32_t n_blocks = (lengths[s] + block_size - 1) / block_size;
    for (int32_t i = 0; i < n_blocks; ++i) b.kv_indices.push_back(order[next++]);
    b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indices.size()));
    b.last_len.push_back(lengths[s] - (n_blocks - 1) * block_size);
    for (int32_t pos = 0; pos < lengths[s]; ++pos) {
      const int64_t slot =
          int64_t{b.kv_indices[b.kv_indptr[s] + pos / block_size]} * block_size + pos % block_size;
      b.all_slots.push_back(slot);
      if (pos >= lengths[s] - new_tokens[s]) {
        b.positions.push_back(pos);
        b.slots.push_back(slot);
      }
    }
    b.cu_seqlens.push_back(static_cast<int32_t>(b.positions.size()));
  }
  return b;
}

// Token t of a device batch alone: a one-token batch over the same blocks and a tile of one
// (`tile`), to hold it to its result in the whole batch.
std::pair<DeviceBatch, DeviceBlockTable> OneTokenOf(const DeviceBatch& batch,
                                                    const DeviceBlockTable& table, int64_t t,
                                                    int32_t position, const int32_t* tile) {
  DeviceBatch one = batch;
  one.positions += t;
  one.seq_of_token += t;
  one.n_tokens = 1;
  one.max_splits = NumSplits(position + 1);
  one.tiles = tile;
  one.n_tiles = 1;
  DeviceBlockTable one_table = table;
  one_table.slot_mapping += t;
  return {one, one_table};
}

class PagedAttentionTest : public CudaKernelsTest,
                           public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(PagedAttentionTest, MatchesTheCpuReferenceAndEachTokenAlone) {
  const AttentionCase c = GetParam();
  const int block_size = 16;
  const std::vector<int32_t> lengths = {c.decode_length, 340, 9};  // KV length after this step
  const std::vector<int32_t> new_tokens = {1, 40, 9};              // tokens of this step
  const PagedBatch paged = ShuffledPagedBatch(lengths, new_tokens, block_size, rng_);
  const auto& [kv_indptr, kv_indices, last_len, positions, cu_seqlens, slots, all_slots,
               num_blocks] = paged;
  const int64_t n_tokens = static_cast<int64_t>(positions.size());
  const int64_t row = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  const std::vector<float> k = Random(all_slots.size() * row, rng_);
  const std::vector<float> v = Random(all_slots.size() * row, rng_);
  const std::vector<float> q = Random(n_tokens * c.n_heads * c.head_dim, rng_);

  // CPU: store every K/V row, then the reference attention over the stored values. fp8,
  // which the CPU kernels do not write, is quantized row by row with QuantizeKvRow. Each
  // (slot, KV head) row has row_bytes of codes (q4_0 / int4: head_dim / 2) and scale_bytes of
  // scales (int8 / fp8: a float; q4_0 / int4: f16s per block of 32).
  const int64_t row_bytes = KvRowBytes(c.kv_type, c.head_dim);
  const int64_t scale_bytes = KvRowScaleBytes(c.kv_type, c.head_dim);
  const bool quantized = scale_bytes > 0;
  const bool four_bit = c.kv_type == KvType::kQ4_0 || c.kv_type == KvType::kInt4;
  const int64_t n_rows = num_blocks * block_size * c.n_kv_heads;
  std::vector<uint8_t> k_cache(n_rows * row_bytes), v_cache(n_rows * row_bytes);
  std::vector<uint8_t> k_scales(n_rows * scale_bytes), v_scales(n_rows * scale_bytes);
  const KvCacheView cpu_kv{c.kv_type,    k_cache.data(), v_cache.data(),
                           num_blocks,   block_size,     c.n_kv_heads,
                           c.head_dim,   quantized ? k_scales.data() : nullptr,
                           quantized ? v_scales.data() : nullptr};
  if (c.kv_type == KvType::kFp8) {
    auto* k_row_scales = reinterpret_cast<float*>(k_scales.data());
    auto* v_row_scales = reinterpret_cast<float*>(v_scales.data());
    for (size_t t = 0; t < all_slots.size(); ++t) {
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const int64_t dst = all_slots[t] * c.n_kv_heads + h;
        const int64_t src = static_cast<int64_t>(t) * c.n_kv_heads + h;
        k_row_scales[dst] = QuantizeKvRow(k.data() + src * c.head_dim, c.head_dim, true,
                                          k_cache.data() + dst * c.head_dim);
        v_row_scales[dst] = QuantizeKvRow(v.data() + src * c.head_dim, c.head_dim, true,
                                          v_cache.data() + dst * c.head_dim);
      }
    }
  } else {
    tokenmill::StoreKv(cpu_kv, all_slots, k.data(), v.data());
  }
  const KvBlockTable table{slots, kv_indptr, kv_indices, last_len};
  const RaggedBatch batch{positions, cu_seqlens, {&table, 1}};
  ASSERT_TRUE(ValidateRaggedBatch(batch, block_size, num_blocks).ok());
  // With a query scale the CPU's graph multiplies q before the attention and scales q.k by 1.
  const bool prescaled = c.variant.query_scale != 1.0f;
  const float scale = prescaled ? 1.0f : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> q_scaled = q;
  for (float& x : q_scaled) x *= c.variant.query_scale;
  const AttentionVariant cpu_variant{.softcap = c.variant.softcap,
                                     .sliding_window = c.variant.sliding_window,
                                     .sinks = {}};
  std::vector<float> want(q.size());
  PagedAttentionReference(cpu_kv, batch, table, q_scaled.data(), c.n_heads, scale, want.data(),
                          cpu_variant);

  // GPU: store through the device kernel (must give the same bytes), then attend. The pools
  // and scale arrays start zeroed as the CPU's, so the slots past each sequence's last
  // position compare too.
  const int64_t pool_offset = c.pool_offset;
  DeviceBuffer dk_cache = Scratch(static_cast<int64_t>(k_cache.size()) + pool_offset);
  DeviceBuffer dv_cache = Scratch(static_cast<int64_t>(v_cache.size()) + pool_offset);
  DeviceBuffer dk_scales = Scratch(std::max<int64_t>(1, n_rows * scale_bytes));
  DeviceBuffer dv_scales = Scratch(std::max<int64_t>(1, n_rows * scale_bytes));
  ASSERT_TRUE(dk_cache.Zero().ok() && dv_cache.Zero().ok());
  ASSERT_TRUE(dk_scales.Zero().ok() && dv_scales.Zero().ok());
  uint8_t* const k_pool = static_cast<uint8_t*>(dk_cache.data()) + pool_offset;
  uint8_t* const v_pool = static_cast<uint8_t*>(dv_cache.data()) + pool_offset;
  const bool aligned_pools = reinterpret_cast<uintptr_t>(k_pool) % kCopyBytes == 0 &&
                            reinterpret_cast<uintptr_t>(v_pool) % kCopyBytes == 0;
  ASSERT_EQ(aligned_pools, pool_offset % kCopyBytes == 0);  // cudaMalloc's are aligned
  const AttentionTilePlan plan =
      four_bit ? PlanAttentionTileRows(static_cast<int>(row_bytes), static_cast<int>(scale_bytes),
                                       aligned_pools)
               : PlanAttentionTiles(c.head_dim, static_cast<int>(row_bytes / c.head_dim),
                                    aligned_pools);
  std::printf("K/V rows of %d bytes %s, tiles of %d positions, splits of up to %d\n",
              plan.row_bytes, plan.vector_rows ? "in 16-byte pieces" : "element by element",
              plan.positions, SplitPositions(c.decode_length));
  const KvCacheView gpu_kv{c.kv_type,
                           k_pool,
                           v_pool,
                           num_blocks,
                           block_size,
                           c.n_kv_heads,
                           c.head_dim,
                           quantized ? dk_scales.data() : nullptr,
                           quantized ? dv_scales.data() : nullptr};
  DeviceBuffer dall_slots = ToDevice(all_slots), dk = ToDevice(k), dv = ToDevice(v);
  ASSERT_EQ(StoreKv(gpu_kv, dall_slots.as<int64_t>(), static_cast<int64_t>(all_slots.size()),
                    dk.as<float>(), dv.as<float>(), nullptr),
            cudaSuccess);
  EXPECT_EQ(PoolBytes(k_pool, k_cache.size()), k_cache);
  EXPECT_EQ(PoolBytes(v_pool, v_cache.size()), v_cache);
  if (quantized) {  // the whole scale arrays, bit for bit
    EXPECT_EQ(ToHost<uint8_t>(dk_scales, k_scales.size()), k_scales);
    EXPECT_EQ(ToHost<uint8_t>(dv_scales, v_scales.size()), v_scales);
  }

  std::vector<int32_t> seq_of(static_cast<size_t>(n_tokens));
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    for (int32_t t = cu_seqlens[s]; t < cu_seqlens[s + 1]; ++t) seq_of[t] = static_cast<int32_t>(s);
  }
  DeviceBuffer dpos = ToDevice(positions), dseq = ToDevice(seq_of), dslots = ToDevice(slots),
               dindptr = ToDevice(kv_indptr), dindices = ToDevice(kv_indices), dq = ToDevice(q);
  const int max_splits = MaxSplits(positions.data(), n_tokens);
  ASSERT_GT(max_splits, 1);  // the long decode crosses splits
  const std::vector<int32_t> tiles =
      BuildAttentionTiles(positions, cu_seqlens, c.n_heads / c.n_kv_heads);
  if (TileTokens(c.n_heads / c.n_kv_heads) > 1) {
    ASSERT_LT(tiles.size() / 2, static_cast<size_t>(n_tokens));  // the prefill chunk is tiled
  }
  DeviceBuffer dtiles = ToDevice(tiles), done_tile = ToDevice(std::vector<int32_t>{0, 1});
  const DeviceBatch db{dpos.as<int32_t>(), dseq.as<int32_t>(), n_tokens, max_splits,
                       dtiles.as<int32_t>(), static_cast<int64_t>(tiles.size() / 2)};
  const DeviceBlockTable dtable{dslots.as<int64_t>(), dindptr.as<int32_t>(),
                                dindices.as<int32_t>()};
  DeviceBuffer ws =
      Scratch(AttentionWorkspaceFloats(n_tokens, c.n_heads, c.head_dim, max_splits) * 4);
  DeviceBuffer out = Scratch(static_cast<int64_t>(q.size()) * 4);
  if (c.variant.sliding_window > 0) {
    // Blocks wholly before every window are never read: poison them (NaN), so a read shows.
    // Codes and scales: an int8 or 4-bit code of all ones is a number, its scale a NaN.
    const int64_t block_rows = int64_t{block_size} * c.n_kv_heads;
    std::vector<uint8_t> nan_block(static_cast<size_t>(block_rows * row_bytes), 0xff);
    std::vector<uint8_t> nan_scales(static_cast<size_t>(block_rows * scale_bytes), 0xff);
    const auto poison = [](uint8_t* dst, const std::vector<uint8_t>& bytes) {
      return bytes.empty() || cudaMemcpy(dst, bytes.data(), bytes.size(),
                                         cudaMemcpyHostToDevice) == cudaSuccess;
    };
    for (size_t seq = 0; seq < lengths.size(); ++seq) {
      const int32_t first = FirstVisible(c.variant.sliding_window,
                                         lengths[seq] - new_tokens[seq]);
      for (int32_t b = 0; b < first / block_size; ++b) {
        const int64_t block = kv_indices[kv_indptr[seq] + b];
        ASSERT_TRUE(poison(k_pool + block * block_rows * row_bytes, nan_block));
        ASSERT_TRUE(poison(v_pool + block * block_rows * row_bytes, nan_block));
        ASSERT_TRUE(poison(dk_scales.as<uint8_t>() + block * block_rows * scale_bytes, nan_scales));
        ASSERT_TRUE(poison(dv_scales.as<uint8_t>() + block * block_rows * scale_bytes, nan_scales));
      }
    }
  }
  ASSERT_EQ(PagedAttention(gpu_kv, db, dtable, dq.as<float>(), c.n_heads, scale,
                           ws.as<float>(), out.as<float>(), nullptr, c.variant),
            cudaSuccess);
  const std::vector<float> got = ToHost<float>(out, q.size());
  // f16 KV: the CPU rounds the probabilities to f16, the online softmax cannot.
  ExpectNear(got, want, c.kv_type == KvType::kF16 ? 3e-3f : 1e-4f, "attention");
  if (quantized) {
    // Quantized vs unquantized K/V: the GPU's error is the CPU's (its reference over the
    // same codes and scales) up to the comparison above. The fixed bounds this replaces
    // (0.01 int8, 0.04 fp8) were below the CPU's own error on these shapes (0.013-0.032 and
    // 0.09-0.12, measured here): the short prefill's first tokens average a few rows only.
    std::vector<float> k_exact(n_rows * c.head_dim), v_exact(n_rows * c.head_dim);
    for (size_t t = 0; t < all_slots.size(); ++t) {
      std::copy_n(k.data() + t * row, row, k_exact.data() + all_slots[t] * row);
      std::copy_n(v.data() + t * row, row, v_exact.data() + all_slots[t] * row);
    }
    const KvCacheView exact_kv{KvType::kF32, k_exact.data(), v_exact.data(), num_blocks,
                               block_size,   c.n_kv_heads,   c.head_dim};
    std::vector<float> exact(q.size());
    PagedAttentionReference(exact_kv, batch, table, q_scaled.data(), c.n_heads, scale,
                            exact.data(), cpu_variant);
    float max_error = 0.0f, cpu_error = 0.0f, bound = 0.0f;
    for (size_t i = 0; i < exact.size(); ++i) {
      max_error = std::max(max_error, std::fabs(got[i] - exact[i]));
      cpu_error = std::max(cpu_error, std::fabs(want[i] - exact[i]));
      bound = std::max(bound, std::fabs(want[i] - exact[i]) + 1e-4f * (1.0f + std::fabs(want[i])));
    }
    std::printf("max |error| of %s attention vs exact: GPU %.4f, CPU %.4f\n",
                std::string(KvTypeName(c.kv_type)).c_str(), max_error, cpu_error);
    EXPECT_LE(max_error, bound);
  }

  // A token alone (a one-token batch over the same blocks, a tile of one) gives the same bits
  // as in its prefill tile.
  const int64_t per_token = static_cast<int64_t>(c.n_heads) * c.head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto [one, one_table] =
        OneTokenOf(db, dtable, t, positions[t], done_tile.as<int32_t>());
    ASSERT_EQ(PagedAttention(gpu_kv, one, one_table, dq.as<float>() + t * per_token, c.n_heads,
                             scale, ws.as<float>(), out.as<float>(), nullptr, c.variant),
              cudaSuccess);
    const std::vector<float> alone = ToHost<float>(out, static_cast<size_t>(per_token));
    ASSERT_EQ(std::memcmp(alone.data(), got.data() + t * per_token, per_token * 4), 0)
        << "token " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Values(AttentionCase{KvType::kF16, 64, 9, 3},
                                           AttentionCase{KvType::kF16, 128, 32, 8},
                                           AttentionCase{KvType::kF32, 8, 8, 4},
                                           AttentionCase{KvType::kF32, 256, 16, 1},
                                           AttentionCase{KvType::kInt8, 64, 9, 3},
                                           AttentionCase{KvType::kInt8, 128, 32, 8},
                                           AttentionCase{KvType::kFp8, 64, 9, 3},
                                           AttentionCase{KvType::kFp8, 256, 16, 1},
                                           // gemma2's soft-cap and window, a window
                                           // shorter than a block, gemma3's head_dim 256.
                                           AttentionCase{KvType::kF16, 64, 8, 4,
                                                         {0.125f, 2.0f, 100}},
                                           AttentionCase{KvType::kF32, 32, 4, 2,
                                                         {0.25f, 5.0f, 7}},
                                           AttentionCase{KvType::kF16, 256, 8, 4,
                                                         {0.0625f, 0.0f, 300}},
                                           AttentionCase{KvType::kInt8, 128, 16, 8,
                                                         {1.0f, 0.0f, 64}},
                                           // Rows element by element: no whole 16-byte
                                           // pieces (26, 52, 40 and 24 bytes), or pools 2
                                           // and 4 bytes off a 16-byte boundary.
                                           AttentionCase{KvType::kF16, 13, 6, 2},
                                           AttentionCase{KvType::kF32, 13, 4, 4},
                                           AttentionCase{KvType::kInt8, 40, 8, 2},
                                           AttentionCase{KvType::kFp8, 24, 8, 2,
                                                         {1.0f, 0.0f, 50}},
                                           AttentionCase{KvType::kF16, 64, 8, 2, {}, 2},
                                           AttentionCase{KvType::kInt8, 64, 9, 3, {}, 4},
                                           // Many tiles a split, so the two stages take
                                           // turns many times (4500: splits of 128, 8 tiles;
                                           // f32 at 256: 16 of 8), a last split of 20, and
                                           // a window that starts mid-tile (at 3500).
                                           AttentionCase{KvType::kF32, 256, 16, 1, {}, 0, 4500},
                                           AttentionCase{KvType::kInt8, 64, 16, 2, {}, 0, 4500},
                                           AttentionCase{KvType::kFp8, 128, 8, 2,
                                                         {1.0f, 0.0f, 1000}, 0, 4500},
                                           AttentionCase{KvType::kF16, 13, 6, 2, {}, 0, 4500},
                                           // q4_0 and int4 (issue 39): keys rotated in blocks
                                           // of 64, 128, 256 (192: of 64), none for heads of
                                           // 32 and 96 (q4_0's 2 and 6 bytes of scales a row,
                                           // copied f16 by f16); the Gemmas' variants and
                                           // windows; pools 4 and 8 bytes off (codes byte by
                                           // byte); many tiles a split.
                                           AttentionCase{KvType::kQ4_0, 64, 9, 3},
                                           AttentionCase{KvType::kInt4, 64, 9, 3},
                                           AttentionCase{KvType::kQ4_0, 128, 32, 8},
                                           AttentionCase{KvType::kInt4, 128, 16, 8,
                                                         {1.0f, 0.0f, 64}},
                                           AttentionCase{KvType::kQ4_0, 256, 16, 1,
                                                         {0.0625f, 0.0f, 300}},
                                           AttentionCase{KvType::kInt4, 256, 8, 4},
                                           AttentionCase{KvType::kQ4_0, 192, 8, 2},
                                           AttentionCase{KvType::kQ4_0, 32, 4, 2,
                                                         {0.25f, 5.0f, 7}},
                                           AttentionCase{KvType::kInt4, 96, 6, 2},
                                           AttentionCase{KvType::kQ4_0, 96, 8, 2, {}, 4},
                                           AttentionCase{KvType::kInt4, 64, 8, 2, {}, 8},
                                           AttentionCase{KvType::kQ4_0, 64, 16, 2, {}, 0, 4500},
                                           AttentionCase{KvType::kInt4, 128, 8, 2,
                                                         {1.0f, 0.0f, 1000}, 0, 4500}));

// Multi-head latent attention (KvCacheView::v_in_k): one K row a token (deepseek2's latent and
// roped key), V its first value_dim elements, every query head over it. The same three
// sequences (a long decode across splits, a prefill chunk after a cached prefix, a prefill from
// scratch) against PagedAttentionReference over the CPU's latent cache; StoreKv writes K alone,
// the CPU's bytes; every token alone gives its batch's bits.
struct LatentCase {
  KvType kv_type;
  int head_dim;   // kv_lora_rank + n_rot
  int value_dim;  // kv_lora_rank
  int n_heads;
  int pool_offset = 0;
  int32_t decode_length = 1030;
};

class LatentAttentionTest : public CudaKernelsTest,
                            public ::testing::WithParamInterface<LatentCase> {};

TEST_P(LatentAttentionTest, MatchesTheCpuReferenceAndEachTokenAlone) {
  const LatentCase c = GetParam();
  const int block_size = 16;
  const std::vector<int32_t> lengths = {c.decode_length, 340, 9};
  const std::vector<int32_t> new_tokens = {1, 40, 9};
  const PagedBatch paged = ShuffledPagedBatch(lengths, new_tokens, block_size, rng_);
  const auto& [kv_indptr, kv_indices, last_len, positions, cu_seqlens, slots, all_slots,
               num_blocks] = paged;
  const int64_t n_tokens = static_cast<int64_t>(positions.size());
  const int d = c.head_dim;
  const std::vector<float> k = Random(all_slots.size() * d, rng_);
  const std::vector<float> q = Random(n_tokens * c.n_heads * d, rng_, 0.3f);

  // CPU: the latent cache (K alone, V within it), fp8 quantized row by row as the device does.
  const int64_t row_bytes = KvRowBytes(c.kv_type, d);
  const int64_t scale_bytes = KvRowScaleBytes(c.kv_type, d);
  const bool quantized = scale_bytes > 0;
  const int64_t n_rows = num_blocks * block_size;
  std::vector<uint8_t> k_cache(n_rows * row_bytes), k_scales(n_rows * scale_bytes);
  KvCacheView cpu_kv{c.kv_type,  k_cache.data(), k_cache.data(),
                     num_blocks, block_size,     1,
                     d,          quantized ? k_scales.data() : nullptr,
                     quantized ? k_scales.data() : nullptr};
  cpu_kv.v_in_k = true;
  if (c.kv_type == KvType::kFp8) {
    for (size_t t = 0; t < all_slots.size(); ++t) {
      reinterpret_cast<float*>(k_scales.data())[all_slots[t]] =
          QuantizeKvRow(k.data() + t * d, d, true, k_cache.data() + all_slots[t] * d);
    }
  } else {
    tokenmill::StoreKv(cpu_kv, all_slots, k.data(), k.data());
  }
  const KvBlockTable table{slots, kv_indptr, kv_indices, last_len};
  const RaggedBatch batch{positions, cu_seqlens, {&table, 1}};
  ASSERT_TRUE(ValidateRaggedBatch(batch, block_size, num_blocks).ok());
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> cpu_out(q.size());  // a row wide a head: its first value_dim are V's
  PagedAttentionReference(cpu_kv, batch, table, q.data(), c.n_heads, scale, cpu_out.data());
  std::vector<float> want(static_cast<size_t>(n_tokens * c.n_heads * c.value_dim));
  for (int64_t r = 0; r < n_tokens * c.n_heads; ++r) {
    std::copy_n(cpu_out.data() + r * d, c.value_dim, want.data() + r * c.value_dim);
  }

  // GPU: K alone (no V array: v points at K), stored by the device kernel.
  DeviceBuffer dk_cache = Scratch(static_cast<int64_t>(k_cache.size()) + c.pool_offset);
  DeviceBuffer dk_scales = Scratch(std::max<int64_t>(1, n_rows * scale_bytes));
  ASSERT_TRUE(dk_cache.Zero().ok() && dk_scales.Zero().ok());
  uint8_t* const k_pool = static_cast<uint8_t*>(dk_cache.data()) + c.pool_offset;
  const AttentionTilePlan plan =
      PlanAttentionTiles(d, static_cast<int>(row_bytes / d),
                         reinterpret_cast<uintptr_t>(k_pool) % kCopyBytes == 0, true);
  std::printf("latent rows of %d bytes %s, tiles of %d positions, %d KiB of shared memory\n",
              plan.row_bytes, plan.vector_rows ? "in 16-byte pieces" : "element by element",
              plan.positions, static_cast<int>(plan.shared_bytes / 1024));
  KvCacheView gpu_kv{c.kv_type,  k_pool,     k_pool, num_blocks,
                     block_size, 1,          d,      quantized ? dk_scales.data() : nullptr,
                     quantized ? dk_scales.data() : nullptr};
  gpu_kv.v_in_k = true;
  DeviceBuffer dall_slots = ToDevice(all_slots), dk = ToDevice(k);
  ASSERT_EQ(StoreKv(gpu_kv, dall_slots.as<int64_t>(), static_cast<int64_t>(all_slots.size()),
                    dk.as<float>(), nullptr, nullptr),
            cudaSuccess);
  EXPECT_EQ(PoolBytes(k_pool, k_cache.size()), k_cache);
  if (quantized) {
    EXPECT_EQ(ToHost<uint8_t>(dk_scales, k_scales.size()), k_scales);
  }

  std::vector<int32_t> seq_of(static_cast<size_t>(n_tokens));
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    for (int32_t t = cu_seqlens[s]; t < cu_seqlens[s + 1]; ++t) seq_of[t] = static_cast<int32_t>(s);
  }
  DeviceBuffer dpos = ToDevice(positions), dseq = ToDevice(seq_of), dslots = ToDevice(slots),
               dindptr = ToDevice(kv_indptr), dindices = ToDevice(kv_indices), dq = ToDevice(q);
  const int max_splits = MaxSplits(positions.data(), n_tokens);
  ASSERT_GT(max_splits, 1);
  const std::vector<int32_t> tiles = BuildAttentionTiles(positions, cu_seqlens, c.n_heads);
  DeviceBuffer dtiles = ToDevice(tiles), done_tile = ToDevice(std::vector<int32_t>{0, 1});
  const DeviceBatch db{dpos.as<int32_t>(), dseq.as<int32_t>(), n_tokens, max_splits,
                       dtiles.as<int32_t>(), static_cast<int64_t>(tiles.size() / 2)};
  const DeviceBlockTable dtable{dslots.as<int64_t>(), dindptr.as<int32_t>(),
                                dindices.as<int32_t>()};
  DeviceBuffer ws =
      Scratch(AttentionWorkspaceFloats(n_tokens, c.n_heads, c.value_dim, max_splits) * 4);
  DeviceBuffer out = Scratch(static_cast<int64_t>(want.size()) * 4);
  const DeviceAttentionVariant variant{.value_dim = c.value_dim};
  ASSERT_EQ(PagedAttention(gpu_kv, db, dtable, dq.as<float>(), c.n_heads, scale, ws.as<float>(),
                           out.as<float>(), nullptr, variant),
            cudaSuccess);
  const std::vector<float> got = ToHost<float>(out, want.size());
  // f16 KV: the CPU rounds the probabilities to f16, the online softmax cannot.
  ExpectNear(got, want, c.kv_type == KvType::kF16 ? 3e-3f : 1e-4f, "latent attention");

  const int64_t q_per_token = int64_t{c.n_heads} * d;
  const int64_t out_per_token = int64_t{c.n_heads} * c.value_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto [one, one_table] =
        OneTokenOf(db, dtable, t, positions[t], done_tile.as<int32_t>());
    ASSERT_EQ(PagedAttention(gpu_kv, one, one_table, dq.as<float>() + t * q_per_token, c.n_heads,
                             scale, ws.as<float>(), out.as<float>(), nullptr, variant),
              cudaSuccess);
    const std::vector<float> alone = ToHost<float>(out, static_cast<size_t>(out_per_token));
    ASSERT_EQ(std::memcmp(alone.data(), got.data() + t * out_per_token, out_per_token * 4), 0)
        << "token " << t;
  }
}

// A 4-bit latent cache is refused (the pool refuses it by name first: CudaKvCache).
TEST_F(CudaKernelsTest, FourBitLatentRowsAreRefused) {
  DeviceBuffer pool = Scratch(1 << 16), scales = Scratch(1 << 12);
  KvCacheView kv{KvType::kQ4_0, pool.data(), pool.data(), 4, 16, 1, 576, scales.data(),
                 scales.data()};
  kv.v_in_k = true;
  DeviceBuffer positions = ToDevice(std::vector<int32_t>{0});
  DeviceBuffer seqs = ToDevice(std::vector<int32_t>{0});
  DeviceBuffer tiles = ToDevice(std::vector<int32_t>{0, 1});
  DeviceBuffer q = Scratch(16 * 576 * 4), ws = Scratch(1 << 16), out = Scratch(16 * 512 * 4);
  const DeviceBatch b{positions.as<int32_t>(), seqs.as<int32_t>(), 1, 1, tiles.as<int32_t>(), 1};
  EXPECT_EQ(PagedAttention(kv, b, DeviceBlockTable{}, q.as<float>(), 16, 1.0f, ws.as<float>(),
                           out.as<float>(), nullptr, DeviceAttentionVariant{.value_dim = 512}),
            cudaErrorInvalidValue);
}

// DeepSeek-V2-Lite's rows (512 + 64, 16 heads) in every KV type the latent kernel takes, V3's
// 128 heads (8 chunks of 16 a token), Kimi K2's 64; the tiny families' 40 + 16 with 4 heads
// (f16 rows of 7 pieces; int8 rows element by element); a pool 2 bytes off (element by
// element); many tiles a split (4500).
INSTANTIATE_TEST_SUITE_P(Shapes, LatentAttentionTest,
                         ::testing::Values(LatentCase{KvType::kF16, 576, 512, 16},
                                           LatentCase{KvType::kF32, 576, 512, 16},
                                           LatentCase{KvType::kInt8, 576, 512, 16},
                                           LatentCase{KvType::kFp8, 576, 512, 16},
                                           LatentCase{KvType::kF16, 576, 512, 128},
                                           LatentCase{KvType::kInt8, 576, 512, 64},
                                           LatentCase{KvType::kF16, 56, 40, 4},
                                           LatentCase{KvType::kInt8, 56, 40, 4},
                                           LatentCase{KvType::kF16, 576, 512, 16, 2},
                                           LatentCase{KvType::kF16, 576, 512, 16, 0, 4500},
                                           LatentCase{KvType::kInt8, 56, 40, 4, 0, 4500}));

}  // namespace
}  // namespace tokenmill::cuda
