#include "kernels/cuda/attention_tiles.h"

#include "kernels/cuda/kernel_math.h"

namespace tokenmill::cuda {

std::vector<int32_t> BuildAttentionTiles(std::span<const int32_t> positions,
                                         std::span<const int32_t> cu_seqlens, int group) {
  const int cap = TileTokens(group);
  std::vector<int32_t> tiles;
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    int32_t first = cu_seqlens[s];
    for (int32_t t = cu_seqlens[s]; t < cu_seqlens[s + 1]; ++t) {
      const bool full = t - first == cap;
      const bool other_split = SplitPositions(positions[static_cast<size_t>(t)] + 1) !=
                               SplitPositions(positions[static_cast<size_t>(first)] + 1);
      if (t > first && (full || other_split)) {
        tiles.push_back(first);
        tiles.push_back(t - first);
        first = t;
      }
    }
    if (cu_seqlens[s + 1] > first) {
      tiles.push_back(first);
      tiles.push_back(cu_seqlens[s + 1] - first);
    }
  }
  return tiles;
}

}  // namespace tokenmill::cuda
