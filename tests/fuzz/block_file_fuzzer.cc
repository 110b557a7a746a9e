// libFuzzer target: the disk tier's block file (cache/tiers/block_file.h), which a server reads
// from a directory anyone with its uid may have written. The first byte picks the mode:
//   odd:  the rest is a file's first bytes: the parse is kOk, kNeedMore or kCorrupt, never a
//         crash; an accepted header lies within the bytes, inside the bounds, and encodes
//         again to a header that parses the same;
//   even: a valid file built from the input's fields, then damaged by it (bytes changed,
//         truncated or grown): the whole file parses back equal, and a damaged one whose
//         checksum still matches is the same file (a changed byte is always seen).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "cache/tiers/block_file.h"

namespace {

using tokenmill::BlockFileHeader;
using tokenmill::BlockFileParse;

void Require(bool condition) {
  if (!condition) std::abort();
}

bool SameFields(const BlockFileHeader& a, const BlockFileHeader& b) {
  return a.identity == b.identity && a.digest == b.digest && a.hash == b.hash &&
         a.parent_hash == b.parent_hash && a.salt == b.salt && a.tokens == b.tokens &&
         a.payload_size == b.payload_size && a.header_size == b.header_size;
}

void ParseAnyBytes(std::span<const uint8_t> bytes) {
  BlockFileParse parse = tokenmill::ParseBlockFileHeader(bytes);
  tokenmill::BlockFileChecksumMatches(bytes);
  switch (parse.kind) {
    case BlockFileParse::Kind::kNeedMore:
      Require(parse.needed > bytes.size() && parse.needed <= tokenmill::kBlockFileMaxHeader);
      return;
    case BlockFileParse::Kind::kCorrupt:
      Require(!parse.why.empty());
      return;
    case BlockFileParse::Kind::kOk: {
      BlockFileHeader& header = parse.header;
      Require(header.header_size <= bytes.size());
      Require(header.header_size <= tokenmill::kBlockFileMaxHeader);
      Require(header.salt.size() <= tokenmill::kBlockFileMaxSalt);
      Require(header.tokens.size() <= tokenmill::kBlockFileMaxTokens);
      BlockFileHeader copy = header;
      const std::vector<uint8_t> again = tokenmill::EncodeBlockFileHeader(copy);
      const BlockFileParse reparsed = tokenmill::ParseBlockFileHeader(again);
      Require(reparsed.kind == BlockFileParse::Kind::kOk && SameFields(reparsed.header, header));
      return;
    }
  }
}

void BuildAndDamage(FuzzedDataProvider& input) {
  BlockFileHeader header;
  for (uint8_t& byte : header.identity) byte = input.ConsumeIntegral<uint8_t>();
  for (uint8_t& byte : header.digest) byte = input.ConsumeIntegral<uint8_t>();
  header.hash = input.ConsumeIntegral<uint64_t>();
  if (input.ConsumeBool()) header.parent_hash = input.ConsumeIntegral<uint64_t>();
  header.salt = input.ConsumeRandomLengthString(64);
  header.tokens.resize(input.ConsumeIntegralInRange<size_t>(0, 64));
  for (tokenmill::TokenId& token : header.tokens) {
    token = input.ConsumeIntegral<tokenmill::TokenId>();
  }
  const std::vector<uint8_t> payload =
      input.ConsumeBytes<uint8_t>(input.ConsumeIntegralInRange<size_t>(0, 256));
  header.payload_size = payload.size();
  std::vector<uint8_t> file = tokenmill::EncodeBlockFileHeader(header);
  const std::vector<uint8_t> header_bytes = file;
  file.insert(file.end(), payload.begin(), payload.end());
  const tokenmill::BlockDigest checksum = tokenmill::BlockFileChecksum(header_bytes, payload);
  file.insert(file.end(), checksum.begin(), checksum.end());
  Require(file.size() == header.FileSize());
  Require(tokenmill::BlockFileChecksumMatches(file));
  const BlockFileParse parse = tokenmill::ParseBlockFileHeader(file);
  Require(parse.kind == BlockFileParse::Kind::kOk && SameFields(parse.header, header));

  std::vector<uint8_t> damaged = file;
  const int changes = input.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < changes; ++i) {
    damaged[input.ConsumeIntegralInRange<size_t>(0, damaged.size() - 1)] ^=
        input.ConsumeIntegralInRange<uint8_t>(1, 255);
  }
  switch (input.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      damaged.resize(input.ConsumeIntegralInRange<size_t>(0, damaged.size()));
      break;
    case 1: {
      const std::vector<uint8_t> more = input.ConsumeBytes<uint8_t>(64);
      damaged.insert(damaged.end(), more.begin(), more.end());
      break;
    }
    default:
      break;
  }
  ParseAnyBytes(damaged);
  if (damaged.size() == file.size() && tokenmill::BlockFileChecksumMatches(damaged)) {
    Require(damaged == file);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) {
    ParseAnyBytes({data + 1, size - 1});
  } else {
    FuzzedDataProvider input(data + 1, size - 1);
    BuildAndDamage(input);
  }
  return 0;
}
