// The disk tier's block file, in one place: its bytes (little-endian, versioned) and the
// bounds-checked parse of its header. Nothing read from disk is trusted: every length is
// checked before it is used, so a file claiming gigabytes of salt allocates nothing.
//
//   magic "TMKVBLK\0" | u32 version | u32 flags (bit 0: has a parent hash)
//   identity digest (32) | block digest (32) | u64 pool hash | u64 parent pool hash
//   u32 salt size | salt | u32 token count | tokens (int32 each) | u64 payload size | payload
//   SHA-256 of everything before it (32)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/tiers/block_digest.h"
#include "cache/types.h"

namespace tokenmill {

inline constexpr uint32_t kBlockFileVersion = 1;
inline constexpr size_t kBlockFileMaxSalt = 4096;
inline constexpr size_t kBlockFileMaxTokens = size_t{1} << 16;
inline constexpr size_t kBlockFileChecksumSize = 32;
// Bytes before the salt.
inline constexpr size_t kBlockFileFixedSize = 8 + 4 + 4 + 32 + 32 + 8 + 8 + 4;
// The largest header a parse accepts.
inline constexpr size_t kBlockFileMaxHeader =
    kBlockFileFixedSize + kBlockFileMaxSalt + 4 + 4 * kBlockFileMaxTokens + 8;

struct BlockFileHeader {
  BlockDigest identity{};
  BlockDigest digest{};
  BlockHash hash = 0;
  std::optional<BlockHash> parent_hash;
  std::string salt;
  std::vector<TokenId> tokens;
  uint64_t payload_size = 0;
  size_t header_size = 0;  // bytes before the payload (set by the parse and the encoder)

  // What the whole file must measure.
  uint64_t FileSize() const { return header_size + payload_size + kBlockFileChecksumSize; }
};

// The header's bytes (header.header_size is set to their count).
std::vector<uint8_t> EncodeBlockFileHeader(BlockFileHeader& header);
// The trailer: SHA-256 over the header's bytes and the payload.
BlockDigest BlockFileChecksum(std::span<const uint8_t> header_bytes,
                              std::span<const uint8_t> payload);
// Whether a whole file's trailer matches the bytes before it.
bool BlockFileChecksumMatches(std::span<const uint8_t> file);

struct BlockFileParse {
  enum class Kind { kOk, kNeedMore, kCorrupt };
  Kind kind = Kind::kCorrupt;
  size_t needed = 0;  // kNeedMore: the header's bytes are at least this many
  std::string why;    // kCorrupt
  BlockFileHeader header;  // kOk
};
// Parses a header from the first bytes of a file. kNeedMore asks for more bytes (never more
// than kBlockFileMaxHeader); kCorrupt: not a block file, or lengths past the bounds above.
BlockFileParse ParseBlockFileHeader(std::span<const uint8_t> bytes);

}  // namespace tokenmill
