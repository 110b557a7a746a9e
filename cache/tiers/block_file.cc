#include "cache/tiers/block_file.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"

namespace tokenmill {

namespace {

constexpr uint8_t kMagic[8] = {'T', 'M', 'K', 'V', 'B', 'L', 'K', 0};
constexpr uint32_t kFlagHasParent = 1;

void PutU32(std::vector<uint8_t>& out, uint32_t value) {
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<uint8_t>(value >> (8 * b)));
}
void PutU64(std::vector<uint8_t>& out, uint64_t value) {
  for (int b = 0; b < 8; ++b) out.push_back(static_cast<uint8_t>(value >> (8 * b)));
}

// Reads fields off the front of the bytes; every read is checked against their end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t offset() const { return offset_; }
  bool Has(size_t count) const { return bytes_.size() - offset_ >= count; }
  uint32_t U32() {
    uint32_t value = 0;
    for (int b = 0; b < 4; ++b) value |= uint32_t{bytes_[offset_ + b]} << (8 * b);
    offset_ += 4;
    return value;
  }
  uint64_t U64() {
    uint64_t value = 0;
    for (int b = 0; b < 8; ++b) value |= uint64_t{bytes_[offset_ + b]} << (8 * b);
    offset_ += 8;
    return value;
  }
  void Bytes(void* out, size_t count) {
    std::memcpy(out, bytes_.data() + offset_, count);
    offset_ += count;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t offset_ = 0;
};

BlockFileParse NeedMore(size_t needed) {
  BlockFileParse parse;
  parse.kind = BlockFileParse::Kind::kNeedMore;
  parse.needed = needed;
  return parse;
}

BlockFileParse Corrupt(std::string why) {
  BlockFileParse parse;
  parse.kind = BlockFileParse::Kind::kCorrupt;
  parse.why = std::move(why);
  return parse;
}

}  // namespace

std::vector<uint8_t> EncodeBlockFileHeader(BlockFileHeader& header) {
  TM_CHECK_LE(header.salt.size(), kBlockFileMaxSalt);
  TM_CHECK_LE(header.tokens.size(), kBlockFileMaxTokens);
  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  out.reserve(kBlockFileFixedSize + header.salt.size() + 4 * header.tokens.size() + 12);
  PutU32(out, kBlockFileVersion);
  PutU32(out, header.parent_hash ? kFlagHasParent : 0);
  out.insert(out.end(), header.identity.begin(), header.identity.end());
  out.insert(out.end(), header.digest.begin(), header.digest.end());
  PutU64(out, header.hash);
  PutU64(out, header.parent_hash.value_or(0));
  PutU32(out, static_cast<uint32_t>(header.salt.size()));
  out.insert(out.end(), header.salt.begin(), header.salt.end());
  PutU32(out, static_cast<uint32_t>(header.tokens.size()));
  for (const TokenId token : header.tokens) PutU32(out, static_cast<uint32_t>(token));
  PutU64(out, header.payload_size);
  header.header_size = out.size();
  return out;
}

BlockDigest BlockFileChecksum(std::span<const uint8_t> header_bytes,
                              std::span<const uint8_t> payload) {
  Sha256Stream hasher;
  hasher.Update(header_bytes.data(), header_bytes.size());
  hasher.Update(payload.data(), payload.size());
  return hasher.Finish();
}

bool BlockFileChecksumMatches(std::span<const uint8_t> file) {
  if (file.size() < kBlockFileChecksumSize) return false;
  const size_t body = file.size() - kBlockFileChecksumSize;
  const BlockDigest expected = BlockFileChecksum(file.first(body), {});
  return std::equal(expected.begin(), expected.end(), file.begin() + body);
}

BlockFileParse ParseBlockFileHeader(std::span<const uint8_t> bytes) {
  Reader in(bytes);
  if (!in.Has(kBlockFileFixedSize)) {
    // A prefix that already differs from the magic is no block file, however short.
    const size_t n = std::min(bytes.size(), sizeof(kMagic));
    if (!std::equal(bytes.begin(), bytes.begin() + n, kMagic)) return Corrupt("bad magic");
    return NeedMore(kBlockFileFixedSize);
  }
  uint8_t magic[sizeof(kMagic)];
  in.Bytes(magic, sizeof(magic));
  if (!std::equal(magic, magic + sizeof(magic), kMagic)) return Corrupt("bad magic");
  const uint32_t version = in.U32();
  if (version != kBlockFileVersion) return Corrupt("format version " + std::to_string(version));
  const uint32_t flags = in.U32();
  if ((flags & ~kFlagHasParent) != 0) return Corrupt("unknown flags");
  BlockFileParse parse;
  BlockFileHeader& header = parse.header;
  in.Bytes(header.identity.data(), header.identity.size());
  in.Bytes(header.digest.data(), header.digest.size());
  header.hash = in.U64();
  const uint64_t parent = in.U64();
  if (flags & kFlagHasParent) header.parent_hash = parent;
  const uint32_t salt_size = in.U32();
  if (salt_size > kBlockFileMaxSalt) return Corrupt("salt of " + std::to_string(salt_size));
  if (!in.Has(size_t{salt_size} + 4)) return NeedMore(in.offset() + salt_size + 4);
  header.salt.resize(salt_size);
  in.Bytes(header.salt.data(), salt_size);
  const uint32_t token_count = in.U32();
  if (token_count > kBlockFileMaxTokens) {
    return Corrupt("token count " + std::to_string(token_count));
  }
  if (!in.Has(4 * size_t{token_count} + 8)) return NeedMore(in.offset() + 4 * token_count + 8);
  header.tokens.resize(token_count);
  for (TokenId& token : header.tokens) token = static_cast<TokenId>(in.U32());
  header.payload_size = in.U64();
  // A size no file could have (it would overflow FileSize) is corrupt, not merely short.
  if (header.payload_size > (uint64_t{1} << 48)) return Corrupt("payload size");
  header.header_size = in.offset();
  parse.kind = BlockFileParse::Kind::kOk;
  return parse;
}

}  // namespace tokenmill
