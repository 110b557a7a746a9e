#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dequantize.h"
#include "kernels/half.h"

namespace tokenmill {

void QuantizeActivations(const float* x, int64_t n, Q8ActivationBlock* out) {
  TM_DCHECK(n % 32 == 0);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = static_cast<int>(std::nearbyint(xb[i] * inv));
      out[b].q[i] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = HalfToFloat(FloatToHalf(d));
    out[b].scaled_sum = HalfToFloat(FloatToHalf(d * static_cast<float>(sum)));
    out[b].sum = sum;
  }
}

void GroupActivations(const Q8ActivationBlock* x, int64_t n_tokens, int64_t blocks,
                      Q8TokenGroupBlock* out) {
  const int64_t groups = (n_tokens + kTokenGroup - 1) / kTokenGroup;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      Q8TokenGroupBlock& group = out[g * blocks + b];
      std::memset(&group, 0, sizeof(group));
      for (int i = 0; i < kTokenGroup; ++i) {
        const int64_t t = g * kTokenGroup + i;
        if (t >= n_tokens) break;
        const Q8ActivationBlock& a = x[t * blocks + b];
        std::memcpy(group.q[i], a.q, sizeof(a.q));
        group.d[i] = a.d;
        group.scaled_sum[i] = a.scaled_sum;
        group.sum[i] = a.sum;
      }
    }
  }
}

void QuantizeActivationsQ8K(const float* x, int64_t n, Q8KActivationBlock* out) {
  TM_DCHECK(n % kQ8KBlock == 0);
  for (int64_t b = 0; b < n / kQ8KBlock; ++b) {
    const float* xb = x + b * kQ8KBlock;
    Q8KActivationBlock& block = out[b];
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < kQ8KBlock; ++i) {
      if (std::fabs(xb[i]) > amax) {
        amax = std::fabs(xb[i]);
        max = xb[i];
      }
    }
    // ggml leaves the sums of an all-zero block unset; they multiply d = 0 either way.
    std::memset(&block, 0, sizeof(block));
    if (amax == 0.0f) continue;
    const float iscale = -127.0f / max;
    for (int i = 0; i < kQ8KBlock; ++i) {
      block.q[i] = static_cast<int8_t>(std::min(127, static_cast<int>(std::nearbyint(iscale * xb[i]))));
    }
    for (int j = 0; j < kQ8KBlock / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += block.q[16 * j + i];
      block.bsums[j] = static_cast<int16_t>(sum);
    }
    block.d = 1.0f / iscale;
  }
}

bool UsesQ8KActivations(TensorType type) {
  switch (type) {
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ4_XS: return true;
    default: return false;
  }
}

bool UsesQuantizedActivations(TensorType type) {
  switch (type) {
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ8_0:
    case TensorType::kIQ4_NL:
    case TensorType::kMXFP4: return true;
    default: return UsesQ8KActivations(type);
  }
}

namespace {

// The table's matmul of `type`, or nullptr where it has none.
MatmulRangeFn FindRangeFn(const CpuKernelTable& table, TensorType type) {
  switch (type) {
    case TensorType::kF32: return table.f32;
    case TensorType::kF16: return table.f16;
    case TensorType::kBF16: return table.bf16;
    case TensorType::kQ8_0: return table.q8_0;
    case TensorType::kQ4_0: return table.q4_0;
    case TensorType::kQ4_1: return table.q4_1;
    case TensorType::kQ5_0: return table.q5_0;
    case TensorType::kQ5_1: return table.q5_1;
    case TensorType::kIQ4_NL: return table.iq4_nl;
    case TensorType::kMXFP4: return table.mxfp4;
    case TensorType::kQ2_K: return table.q2_k;
    case TensorType::kQ3_K: return table.q3_k;
    case TensorType::kQ4_K: return table.q4_k;
    case TensorType::kQ5_K: return table.q5_k;
    case TensorType::kQ6_K: return table.q6_k;
    case TensorType::kIQ4_XS: return table.iq4_xs;
    default: return nullptr;
  }
}

MatmulRangeFn RangeFnFor(const CpuKernelTable& table, TensorType type) {
  const MatmulRangeFn fn = FindRangeFn(table, type);
  TM_CHECK(fn != nullptr) << "no matmul kernel for type " << NameOf(type);
  return fn;
}

}  // namespace

bool CpuComputesWith(TensorType type) {
  // The scalar table runs on every CPU and the SIMD tables have the same entries.
  return HasReferenceDequantization(type) &&
         FindRangeFn(internal::ScalarKernelTable(), type) != nullptr;
}

std::string CpuTensorTypeNames() {
  std::string names;
  for (TensorType type : AllTensorTypes()) {
    if (!CpuComputesWith(type)) continue;
    if (!names.empty()) names += ", ";
    names += NameOf(type);
  }
  return names;
}

void Matmul(const CpuContext& ctx, const WeightMatrix& w, const float* x, int64_t n_tokens,
            float* y) {
  const WeightMatrix* ws[] = {&w};
  float* ys[] = {y};
  MatmulMany(ctx, ws, x, n_tokens, ys);
}

void MatmulMany(const CpuContext& ctx, std::span<const WeightMatrix* const> ws, const float* x,
                int64_t n_tokens, std::span<float* const> ys) {
  const MatmulGroup group{ws, x, n_tokens, ys};
  MatmulGroups(ctx, std::span<const MatmulGroup>(&group, 1));
}

namespace {

// A group's activations in the formats its matrices take.
struct GroupActivationsOf {
  std::vector<Q8TokenGroupBlock> grouped;
  std::vector<Q8KActivationBlock> q8k;
};

// Quantizes every group's activations (one parallel pass over all groups' token groups, so a
// many-token step quantizes on all threads).
std::vector<GroupActivationsOf> QuantizeGroups(const CpuContext& ctx,
                                               std::span<const MatmulGroup> groups) {
  std::vector<GroupActivationsOf> out(groups.size());
  // Unit u of group i covers its token group u - first_unit[i].
  std::vector<int64_t> first_unit(groups.size() + 1, 0);
  std::vector<uint8_t> wants(groups.size(), 0);  // bit 0: Q8 blocks, bit 1: Q8_K blocks
  for (size_t i = 0; i < groups.size(); ++i) {
    const MatmulGroup& g = groups[i];
    TM_CHECK_EQ(g.ws.size(), g.ys.size());
    const int64_t cols = g.ws.empty() ? 0 : g.ws[0]->cols;
    for (const WeightMatrix* w : g.ws) {
      TM_CHECK_EQ(w->cols, cols);
      if (UsesQ8KActivations(w->type)) {
        wants[i] |= 2;
      } else if (UsesQuantizedActivations(w->type)) {
        wants[i] |= 1;
      }
    }
    const int64_t token_groups = (g.n_tokens + kTokenGroup - 1) / kTokenGroup;
    if (wants[i] & 1) {
      TM_CHECK_EQ(cols % 32, 0);
      out[i].grouped.resize(static_cast<size_t>(token_groups * (cols / 32)));
    }
    if (wants[i] & 2) {
      TM_CHECK_EQ(cols % kQ8KBlock, 0);
      out[i].q8k.resize(static_cast<size_t>(g.n_tokens * (cols / kQ8KBlock)));
    }
    first_unit[i + 1] = first_unit[i] + (wants[i] != 0 ? token_groups : 0);
  }
  ParallelFor(ctx.pool, first_unit.back(), 1, [&](int64_t begin, int64_t end) {
    std::vector<Q8ActivationBlock> quantized;
    for (size_t i = 0; i < groups.size(); ++i) {
      const int64_t lo = std::max(begin, first_unit[i]) - first_unit[i];
      const int64_t hi = std::min(end, first_unit[i + 1]) - first_unit[i];
      if (lo >= hi) continue;
      const MatmulGroup& g = groups[i];
      const int64_t cols = g.ws[0]->cols;
      const int64_t t_begin = lo * kTokenGroup;
      const int64_t t_end = std::min(g.n_tokens, hi * kTokenGroup);
      if (wants[i] & 1) {
        const int64_t blocks = cols / 32;
        quantized.resize(static_cast<size_t>((t_end - t_begin) * blocks));
        for (int64_t t = t_begin; t < t_end; ++t) {
          ctx.kernels->quantize(g.x + t * cols, cols,
                                quantized.data() + (t - t_begin) * blocks);
        }
        GroupActivations(quantized.data(), t_end - t_begin, blocks,
                         out[i].grouped.data() + lo * blocks);
      }
      // Q8_K blocks stay token-major (a token's blocks side by side): the kernels read
      // x[t * cols / 256 + b].
      if (wants[i] & 2) {
        const int64_t blocks = cols / kQ8KBlock;
        for (int64_t t = t_begin; t < t_end; ++t) {
          ctx.kernels->quantize_q8k(g.x + t * cols, cols, out[i].q8k.data() + t * blocks);
        }
      }
    }
  });
  return out;
}

}  // namespace

void MatmulGroups(const CpuContext& ctx, std::span<const MatmulGroup> groups) {
  const std::vector<GroupActivationsOf> activations = QuantizeGroups(ctx, groups);
  // Threads take units of 16 rows counted matrix by matrix (a matrix's last unit may be
  // shorter), so that every range starts on a row group: the kRowGroups16 kernels read whole
  // groups.
  struct Job {
    const WeightMatrix* w;
    const void* x;
    int64_t n_tokens;
    float* y;
    int64_t first_unit;
  };
  auto units_of = [](const WeightMatrix& w) { return (w.rows + kRowGroup - 1) / kRowGroup; };
  std::vector<Job> jobs;
  int64_t total_units = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const MatmulGroup& g = groups[i];
    if (g.n_tokens == 0) continue;
    for (size_t m = 0; m < g.ws.size(); ++m) {
      const WeightMatrix& w = *g.ws[m];
      const void* x = UsesQ8KActivations(w.type)
                          ? static_cast<const void*>(activations[i].q8k.data())
                      : UsesQuantizedActivations(w.type)
                          ? static_cast<const void*>(activations[i].grouped.data())
                          : static_cast<const void*>(g.x);
      jobs.push_back(Job{&w, x, g.n_tokens, g.ys[m], total_units});
      total_units += units_of(w);
    }
  }
  ParallelFor(ctx.pool, total_units, 1, [&](int64_t begin, int64_t end) {
    // The first job whose units reach past `begin`.
    auto it = std::upper_bound(jobs.begin(), jobs.end(), begin,
                               [](int64_t unit, const Job& j) { return unit < j.first_unit; });
    for (--it; it != jobs.end() && it->first_unit < end; ++it) {
      const WeightMatrix& w = *it->w;
      const int64_t lo = std::max(begin, it->first_unit) - it->first_unit;
      const int64_t hi = std::min(end, it->first_unit + units_of(w)) - it->first_unit;
      if (lo >= hi) continue;
      RangeFnFor(*ctx.kernels, w.type)(MatmulRange{&w, it->x, it->n_tokens, it->y, w.rows,
                                                   lo * kRowGroup,
                                                   std::min(w.rows, hi * kRowGroup)});
    }
  });
}

void MatmulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  TM_CHECK(w.layout == WeightLayout::kRows) << "the reference reads rows as in the GGUF file";
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeReference(w.type, w.data + r * w.row_bytes, row);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * w.cols;
      float sum = 0.0f;
      for (int64_t c = 0; c < w.cols; ++c) sum += row[static_cast<size_t>(c)] * xt[c];
      y[t * w.rows + r] = sum;
    }
  }
}

}  // namespace tokenmill
