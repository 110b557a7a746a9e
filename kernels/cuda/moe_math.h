// The arithmetic of a mixture-of-experts feed-forward on the device apart from its matmuls
// (moe.cu), written once for the device and the host: routing (RouteToken of model/arch/moe.h:
// which experts a token goes to, with which weights), the grouping of a step's (token, choice)
// pairs by expert (ExpertGroups::Build), and each token's weighted sum of its experts' outputs.
// The CPU tests (tests/model/moe_device_math_test.cc) hold these emulations to RouteToken and
// ExpertGroups; the gpu tests hold the kernels to the emulations bit for bit. Plain C++ when not
// compiled by nvcc.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cuda/kernel_math.h"

namespace tokenmill::cuda {

// ExpertGating of model/config.h, in its order (kernels/ cannot see model/).
enum class RoutingGating : int32_t { kSoftmax = 0, kSigmoid = 1, kSoftmaxSelected = 2 };

// ExpertConfig's routing: n_used of n_expert experts a token, their weights renormalized to sum
// 1 when `normalize`, then times `scale` unless it is 0 or 1. DeepSeek's choice: by the probs
// plus selection_bias (n_expert floats in the kernel's memory, or null: MoeWeights'
// exp_probs_b), among the experts of the n_groups_used best of n_groups groups of consecutive
// experts when n_groups > 1 (at most kMaxRoutingGroups).
struct DeviceRouting {
  int32_t n_expert = 0;
  int32_t n_used = 0;
  RoutingGating gating = RoutingGating::kSoftmax;
  bool normalize = false;
  float scale = 0.0f;
  const float* selection_bias = nullptr;
  int32_t n_groups = 0;
  int32_t n_groups_used = 0;
};

// Groups a token's routing takes (a bit each in RouteTokenOnDevice's mask).
constexpr int kMaxRoutingGroups = 64;

TM_HOST_DEVICE inline uint32_t FloatBits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

// a * b rounded once and never fused into a following add (nvcc contracts a * b + c into an
// fma; the CPU's code that this follows multiplies, then adds).
TM_HOST_DEVICE inline float MulRounded(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// e^x as GgmlVectorExpf (kernels/cpu/elementwise.h: ggml_v_expf's lane, a degree-5 polynomial
// after a 2^n range reduction), operation for operation with explicit fmas, so device and host
// agree bit for bit: what RouteToken's softmax takes for each full 8-float vector.
TM_HOST_DEVICE inline float RoutingExpf(float x) {
  const float shift = 0x1.8p23f;
  const float z = MulAdd(x, 0x1.715476p+0f, shift);
  const float n = z - shift;
  const float b = MulAdd(-n, 0x1.7f7d1cp-20f, MulAdd(-n, 0x1.62e4p-1f, x));
  const uint32_t e = FloatBits(z) << 23;
  const float k = BitsToFloat(e + FloatBits(1.0f));
  const float u = MulRounded(b, b);
  const float j = MulAdd(MulAdd(MulAdd(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                MulAdd(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, MulRounded(0x1.ffffecp-1f, b));
  const float abs_n = n < 0.0f ? -n : n;
  if (!(abs_n > 126.0f)) return MulAdd(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = BitsToFloat(g + 0x7f000000u);
  const float s2 = BitsToFloat(e - g);
  if (abs_n > 192.0f) return MulRounded(s1, s1);
  return MulRounded(MulAdd(s2, j, s2), s1);
}

TM_HOST_DEVICE inline double DoubleMulAdd(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
TM_HOST_DEVICE inline double DoubleMul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);  // never contracted into a following add
#else
  return a * b;
#endif
}

// e^x as glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, written with its FMA build's fmas;
// its plain build gives the same bits on every float here), which RouteToken's std::exp calls
// for a softmax's tail and the sigmoid: 2^(k/32) from a table times a cubic in double, rounded
// once to float. Checked over all 2^32 floats against this machine's std::exp (glibc 2.36):
// equal but at x = 0x1.04845ep+5 and -0x1.f8cbb2p+5, 1 ulp apart (moe_routing_test checks
// every 13th float of [-104, 0) and random ones).
TM_HOST_DEVICE inline float GlibcExpf(float x) {
  const uint32_t bits = FloatBits(x);
  const uint32_t abstop = (bits >> 20) & 0x7ff;
  if (abstop >= (0x42b00000u >> 20)) {  // |x| >= 88, infinities and NaN
    if (bits == 0xff800000u) return 0.0f;
    if (abstop >= 0x7f8) return x + x;
    if (x > 0x1.62e42ep6f) return BitsToFloat(0x7f800000u);
    if (x < -0x1.9fe368p6f) return 0.0f;
  }
  // __exp2f_data.tab: asuint64(2^(i/32)) - (i << 47).
  constexpr uint64_t kTable[32] = {
      0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
      0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
      0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
      0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
      0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
      0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
      0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
      0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull};
  constexpr double kN = 32.0;
  const double z = DoubleMul(0x1.71547652b82fep+0 * kN, static_cast<double>(x));
  const double shift = 0x1.8p+52;
  double kd = z + shift;
  uint64_t ki;
  memcpy(&ki, &kd, sizeof ki);
  kd -= shift;
  const double r = z - kd;
  const uint64_t t = kTable[ki % 32] + (ki << 47);
  double s;
  memcpy(&s, &t, sizeof s);
  const double p = DoubleMulAdd(0x1.c6af84b912394p-5 / kN / kN / kN, r,
                                0x1.ebfce50fac4f3p-3 / kN / kN);
  const double r2 = DoubleMul(r, r);
  double y = DoubleMulAdd(0x1.62e42ff0c52d6p-1 / kN, r, 1.0);
  y = DoubleMulAdd(p, r2, y);
  return static_cast<float>(DoubleMul(y, s));
}

// SoftmaxRowLikeGgml (moe.h) of x[0..n) in place: e^x by RoutingExpf over each full 8-float
// vector, summed in SSE's pairwise order into a double, by GlibcExpf over the tail, added one
// by one.
TM_HOST_DEVICE inline void RoutingSoftmax(float* x, int n) {
  if (n <= 0) return;
  float max = x[0];
  for (int i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  const int full = n - n % 8;
  double sum = 0.0;
  for (int i = 0; i < full; i += 8) {
    float e[8];
    for (int l = 0; l < 8; ++l) x[i + l] = e[l] = RoutingExpf(x[i + l] - max);
    const float h0 = e[0] + e[4], h1 = e[1] + e[5], h2 = e[2] + e[6], h3 = e[3] + e[7];
    sum += static_cast<double>((h0 + h2) + (h1 + h3));
  }
  for (int i = full; i < n; ++i) {
    x[i] = GlibcExpf(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] = MulRounded(x[i], inv);
}

// Expert i's biased prob, what it is chosen by: probs[i] + bias[i] (RouteToken's float add),
// or probs[i] without a bias.
TM_HOST_DEVICE inline float SelectionScore(const float* probs, const float* bias, int i) {
  return bias != nullptr ? probs[i] + bias[i] : probs[i];
}

// Group g's score (RouteToken's MaskAllButBestGroups): the sum of its two best selection
// scores (its one with groups of one expert), added in double from 0 and rounded to float.
// The two best as values, whichever of tied experts holds them.
TM_HOST_DEVICE inline float GroupScore(const float* probs, const float* bias, int per_group,
                                       int g) {
  float best = -INFINITY, second = -INFINITY;
  for (int i = g * per_group; i < (g + 1) * per_group; ++i) {
    const float s = SelectionScore(probs, bias, i);
    if (s > best) {
      second = best;
      best = s;
    } else if (s > second) {
      second = s;
    }
  }
  double sum = 0.0;
  sum += static_cast<double>(best);
  if (per_group > 1) sum += static_cast<double>(second);
  return static_cast<float>(sum);
}

// The groups whose experts take part (bit g), the n_groups_used best by GroupScore, ties to
// the lower group as a stable sort puts them (RouteToken's std::sort of up to 16 groups).
// All groups without groups (n_groups <= 1).
TM_HOST_DEVICE inline uint64_t KeptGroups(const DeviceRouting& r, const float* probs) {
  if (r.n_groups <= 1) return ~uint64_t{0};
  const int per_group = r.n_expert / r.n_groups;
  uint64_t kept = 0;
  for (int g = 0; g < r.n_groups; ++g) {
    const float score = GroupScore(probs, r.selection_bias, per_group, g);
    int place = 0;
    for (int o = 0; o < r.n_groups && place < r.n_groups_used; ++o) {
      const float other = GroupScore(probs, r.selection_bias, per_group, o);
      place += other > score || (other == score && o < g) ? 1 : 0;
    }
    if (place < r.n_groups_used) kept |= uint64_t{1} << g;
  }
  return kept;
}

// One token's routing, RouteToken's steps with its arithmetic (its probs and weights equal
// bit for bit): probs (in place of `logits`), the n_used largest selection scores (the probs,
// plus the bias, among the kept groups' experts: the others -inf) in descending order -- ties
// to the lower index, as a stable sort puts them (RouteToken's std::sort is libstdc++'s
// insertion sort up to 16 elements, stable; past 16 it may order exact ties otherwise) --
// then the weights, from the unbiased probs. Expert i's place is the number of experts ahead
// of it (larger, or equal and of a lower index), so no scratch is needed: O(n_expert^2) a
// token. experts/weights: n_used entries.
TM_HOST_DEVICE inline void RouteTokenOnDevice(const DeviceRouting& r, float* logits,
                                              int32_t* experts, float* weights) {
  const int n = r.n_expert, k = r.n_used;
  if (r.gating == RoutingGating::kSoftmax) {
    RoutingSoftmax(logits, n);
  } else if (r.gating == RoutingGating::kSigmoid) {
    for (int i = 0; i < n; ++i) logits[i] = 1.0f / (1.0f + GlibcExpf(-logits[i]));
  }
  for (int c = 0; c < k; ++c) {  // valid ids even where NaN probs leave places unfilled
    experts[c] = c;
    weights[c] = logits[c];
  }
  const uint64_t kept = KeptGroups(r, logits);
  const int per_group = r.n_groups > 1 ? r.n_expert / r.n_groups : n;
  const auto score = [&](int i) {
    return (kept >> (i / per_group) & 1u) != 0 ? SelectionScore(logits, r.selection_bias, i)
                                              : -INFINITY;
  };
  for (int i = 0; i < n; ++i) {
    const float p = score(i);
    int place = 0;
    for (int j = 0; j < n && place < k; ++j) {
      const float s = score(j);
      place += s > p || (s == p && j < i) ? 1 : 0;
    }
    if (place < k) {
      experts[place] = i;
      weights[place] = logits[i];
    }
  }
  if (r.gating == RoutingGating::kSoftmaxSelected) RoutingSoftmax(weights, k);
  if (r.normalize) {
    double sum = 0.0;
    for (int c = 0; c < k; ++c) sum += static_cast<double>(weights[c]);
    const float total = static_cast<float>(sum);
    const float divisor = total > 6.103515625e-5f ? total : 6.103515625e-5f;
    for (int c = 0; c < k; ++c) weights[c] = weights[c] / divisor;
  }
  if (r.scale != 0.0f && r.scale != 1.0f) {
    for (int c = 0; c < k; ++c) weights[c] = MulRounded(weights[c], r.scale);
  }
}

// ---- grouping by expert --------------------------------------------------------------------
// A step's n_pairs = n_tokens * n_used chosen experts (pair p = token * n_used + choice) in
// slots grouped by expert: expert e's pairs are slots begin[e]..begin[e + 1], in pair (token)
// order, as ExpertGroups::Build. The kernel runs these per expert, one thread an expert, with
// the scan between them by one thread.

// The pairs that chose expert e.
TM_HOST_DEVICE inline int32_t CountExpertPairs(const int32_t* experts, int64_t n_pairs,
                                               int32_t e) {
  int32_t count = 0;
  for (int64_t p = 0; p < n_pairs; ++p) count += experts[p] == e ? 1 : 0;
  return count;
}

// begin[0] = 0 and begin[e + 1] += begin[e]: the counts that begin[1..n_expert] held become
// each group's end.
TM_HOST_DEVICE inline void ScanExpertCounts(int32_t* begin, int32_t n_expert) {
  begin[0] = 0;
  for (int32_t e = 0; e < n_expert; ++e) begin[e + 1] += begin[e];
}

// Expert e's pairs into slots begin_e.. in pair order: order[slot] = pair and
// slot_of_pair[pair] = slot.
TM_HOST_DEVICE inline void PlaceExpertPairs(const int32_t* experts, int64_t n_pairs, int32_t e,
                                            int32_t begin_e, int32_t* order,
                                            int32_t* slot_of_pair) {
  int32_t slot = begin_e;
  for (int64_t p = 0; p < n_pairs; ++p) {
    if (experts[p] != e) continue;
    order[slot] = static_cast<int32_t>(p);
    slot_of_pair[p] = slot;
    ++slot;
  }
}

// ---- the weighted sum ----------------------------------------------------------------------

// Element j of token t's output: its choices' expert outputs (slot rows of d floats) times
// their weights, added in choice order as llama.cpp adds its ffn_moe_weighted views
// ((e0 w0 + e1 w1) + e2 w2) ..., each product rounded before its add, as the CPU's loop.
TM_HOST_DEVICE inline float CombineExperts(const float* expert_out, const float* weights,
                                           const int32_t* slot_of_pair, int64_t t, int n_used,
                                           int64_t d, int64_t j) {
  float out = 0.0f;
  for (int c = 0; c < n_used; ++c) {
    const int64_t pair = t * n_used + c;
    const float weighted =
        MulRounded(expert_out[static_cast<int64_t>(slot_of_pair[pair]) * d + j], weights[pair]);
    out = c == 0 ? weighted : out + weighted;
  }
  return out;
}

// qwen2moe's shared-expert factor from its gate logit g: ggml_div(ggml_silu(g), g), as the
// CPU's g / (1 + e^-g) / g. (deepseek2's shared experts have no gate: added as they are.)
TM_HOST_DEVICE inline float SharedExpertGate(float g) {
  return g / (1.0f + GlibcExpf(-g)) / g;
}

}  // namespace tokenmill::cuda
