// CpuForwardBlocks' multi-head latent attention (cpu_blocks.h, forward_blocks.h), apart from
// the other blocks: the query's and the latent's projections, the per-head matrices into and
// out of the latent space, and multi-query attention over the one K row a token stores.
#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/cpu/paged_attention.h"
#include "model/arch/cpu_blocks.h"

namespace tokenmill {
namespace {

// Copies `width` floats of each of n rows from src (row stride src_stride, from src_offset)
// to dst (dst_stride, dst_offset).
void CopyColumns(const float* src, int64_t src_stride, int64_t src_offset, float* dst,
                 int64_t dst_stride, int64_t dst_offset, int64_t n, int64_t width) {
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(dst + r * dst_stride + dst_offset, src + r * src_stride + src_offset,
                sizeof(float) * static_cast<size_t>(width));
  }
}

}  // namespace

void CpuForwardBlocks::LatentAttention(const LatentAttentionWeights& w) {
  const ModelConfig::LatentAttention& m = c_.mla;
  const int64_t heads = c_.n_heads, rot = c_.n_rot, nope = m.qk_nope, lora = m.kv_lora_rank;
  const int64_t q_head = nope + rot;  // a head of the projected query
  const int64_t row = lora + rot;     // a K row, and a head of the absorbed query
  Grow(mla_q_, n_ * heads * q_head);
  Grow(mla_kv_, n_ * row);
  Grow(mla_pe_, n_ * heads * rot);
  Grow(mla_in_, heads * n_ * std::max(nope, lora));
  Grow(mla_out_, heads * n_ * std::max(lora, int64_t{m.v_head}));
  if (m.q_lora_rank > 0) {
    Grow(mla_q_a_, n_ * m.q_lora_rank);
    MatmulOps({{&w.q_a, mla_q_a_.data()}, {&w.kv_a, mla_kv_.data()}}, h_.data(), n_);
    ForTokens([&](int64_t b, int64_t e) {
      RmsNorm(mla_q_a_.data() + b * m.q_lora_rank, w.q_a_norm, c_.rms_eps, e - b,
              mla_q_a_.data() + b * m.q_lora_rank);
    });
    MatmulOp(w.q_b, mla_q_a_.data(), n_, mla_q_.data());
  } else {
    MatmulOps({{&w.q, mla_q_.data()}, {&w.kv_a, mla_kv_.data()}}, h_.data(), n_);
  }
  Tap("q", layer_, mla_q_, n_, heads * q_head);
  Tap("kv_cmpr_pe", layer_, mla_kv_, n_, row);

  // RoPE on the query's and the key's roped parts, each a head of rot values of its own.
  RopeParams rope = layer_rope_[static_cast<size_t>(layer_)];
  rope.head_dim = static_cast<int>(rot);
  const std::span<const int32_t> positions = in_->batch.positions;
  ForTokens([&](int64_t b, int64_t e) {
    const int64_t n = e - b;
    float* q_pe = mla_pe_.data() + b * heads * rot;
    CopyColumns(mla_q_.data() + b * heads * q_head, q_head, nope, q_pe, rot, 0, n * heads, rot);
    ApplyRope(rope, positions.subspan(b, n), static_cast<int>(heads), q_pe);
    // The K row: the normed latent, then the roped key (of one head).
    float* k = k_.data() + b * row;
    const float* kv = mla_kv_.data() + b * row;
    for (int64_t t = 0; t < n; ++t) {
      RmsNorm(kv + t * row, w.kv_a_norm, c_.rms_eps, 1, k + t * row);
      std::memcpy(k + t * row + lora, kv + t * row + lora, sizeof(float) * rot);
      ApplyRope(rope, positions.subspan(b + t, 1), 1, k + t * row + lora);
    }
  });

  // Each head's q_nope into the latent space (its k_b), all heads in one parallel pass: the
  // absorbed query is [k_b · q_nope, q_pe] a head.
  std::vector<MatmulGroup> groups;
  std::vector<std::array<const WeightMatrix*, 1>> ws(static_cast<size_t>(heads));
  std::vector<std::array<float*, 1>> ys(static_cast<size_t>(heads));
  auto per_head = [&](const std::vector<WeightMatrix>& matrices, int64_t in_width,
                      int64_t out_width) {
    groups.clear();
    for (int64_t h = 0; h < heads; ++h) {
      ws[h] = {&matrices[static_cast<size_t>(h)]};
      ys[h] = {mla_out_.data() + h * n_ * out_width};
      groups.push_back(MatmulGroup{ws[h], mla_in_.data() + h * n_ * in_width, n_, ys[h]});
    }
    MatmulGroupsOp(groups);
  };
  for (int64_t h = 0; h < heads; ++h) {
    CopyColumns(mla_q_.data(), heads * q_head, h * q_head, mla_in_.data() + h * n_ * nope, nope,
                0, n_, nope);
  }
  per_head(w.k_b, nope, lora);
  for (int64_t h = 0; h < heads; ++h) {
    CopyColumns(mla_out_.data() + h * n_ * lora, lora, 0, q_.data(), heads * row, h * row, n_,
                lora);
    CopyColumns(mla_pe_.data(), heads * rot, h * rot, q_.data(), heads * row, h * row + lora, n_,
                rot);
  }
  Tap("Qcur", layer_, q_, n_, heads * row);
  Tap("Kcur", layer_, k_, n_, row);

  // Multi-query attention over the stored rows; each head's output is a row wide, its
  // latent part V's.
  const KvCacheView kv_layer = kv_->Layer(layer_);
  const KvBlockTable& blocks = in_->batch.block_tables[KvGroupOfLayer(c_, layer_)];
  StoreKv(kv_layer, blocks.slot_mapping, k_.data(), k_.data());
  if (mode_ == KernelMode::kReference) {
    PagedAttentionReference(kv_layer, in_->batch, blocks, q_.data(), c_.n_heads, m.score_scale,
                            attn_.data());
  } else {
    PagedAttention(ctx_, kv_layer, in_->batch, blocks, q_.data(), c_.n_heads, m.score_scale,
                   attn_.data());
  }

  // Each head's latent output out of the latent space (its v_b): n_heads x v_head a token.
  for (int64_t h = 0; h < heads; ++h) {
    CopyColumns(attn_.data(), heads * row, h * row, mla_in_.data() + h * n_ * lora, lora, 0, n_,
                lora);
  }
  per_head(w.v_b, lora, m.v_head);
  for (int64_t h = 0; h < heads; ++h) {
    CopyColumns(mla_out_.data() + h * n_ * m.v_head, m.v_head, 0, attn_.data(), heads * m.v_head,
                h * m.v_head, n_, m.v_head);
  }
  Tap("kqv_out", layer_, attn_, n_, heads * m.v_head);
}

}  // namespace tokenmill
