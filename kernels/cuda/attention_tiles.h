// Query tiles of paged attention (host side): consecutive tokens of one sequence that one
// thread block serves together, so each K/V tile it loads is used by all of them (prefill
// chunks) instead of once per token. A decode token is a tile of one. Tiles never change a
// token's arithmetic (same split partition, same order per position), so results stay
// bit-identical to running the token alone. Plain C++: the CPU tests check the tiling.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda/kernel_math.h"

namespace tokenmill::cuda {

// (first token, token count) pairs, flattened: every token of every sequence in exactly one
// tile; a tile holds at most TileTokens(group) tokens of one sequence whose lengths
// (position + 1) have the same split size (kernel_math.h SplitPositions).
std::vector<int32_t> BuildAttentionTiles(std::span<const int32_t> positions,
                                         std::span<const int32_t> cu_seqlens, int group);

}  // namespace tokenmill::cuda
