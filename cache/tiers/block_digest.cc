#include "cache/tiers/block_digest.h"

// SHA256_Init and its kin are deprecated in OpenSSL 3 in favour of EVP, whose provider
// machinery would take 4 MB of a static link; these take 35 KB and are the same code.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include "common/check.h"

namespace tokenmill {

static_assert(sizeof(SHA256_CTX) <= Sha256Stream::kStateBytes && alignof(SHA256_CTX) <= 8,
              "Sha256Stream's state holds a SHA256_CTX");

namespace {

// Tokens and counts go in as little-endian bytes, whatever the host's order.
class Sha256Hasher : public Sha256Stream {
 public:
  void UpdateU32(uint32_t value) {
    const uint8_t bytes[4] = {static_cast<uint8_t>(value), static_cast<uint8_t>(value >> 8),
                              static_cast<uint8_t>(value >> 16),
                              static_cast<uint8_t>(value >> 24)};
    Update(bytes, sizeof(bytes));
  }
  void UpdateTokens(std::span<const TokenId> tokens) {
    uint8_t chunk[256];
    size_t used = 0;
    for (const TokenId token : tokens) {
      const auto value = static_cast<uint32_t>(token);
      for (int b = 0; b < 4; ++b) chunk[used++] = static_cast<uint8_t>(value >> (8 * b));
      if (used == sizeof(chunk)) {
        Update(chunk, used);
        used = 0;
      }
    }
    Update(chunk, used);
  }
};

}  // namespace

Sha256Stream::Sha256Stream() {
  TM_CHECK(SHA256_Init(reinterpret_cast<SHA256_CTX*>(state_)) == 1);
}

void Sha256Stream::Update(const void* data, size_t size) {
  if (size > 0) TM_CHECK(SHA256_Update(reinterpret_cast<SHA256_CTX*>(state_), data, size) == 1);
}

BlockDigest Sha256Stream::Finish() {
  BlockDigest digest{};
  TM_CHECK(SHA256_Final(digest.data(), reinterpret_cast<SHA256_CTX*>(state_)) == 1);
  return digest;
}

BlockDigest Sha256(std::string_view bytes) {
  Sha256Hasher hasher;
  hasher.Update(bytes.data(), bytes.size());
  return hasher.Finish();
}

BlockDigest IdentityDigest(std::string_view identity) { return Sha256(identity); }

BlockDigest NextBlockDigest(const BlockDigest& root, const BlockDigest* parent,
                            std::string_view salt, std::span<const TokenId> block_tokens) {
  Sha256Hasher hasher;
  if (parent == nullptr) {
    // The salt enters once, at the head: every later link carries it through its parent.
    hasher.Update(root.data(), root.size());
    hasher.UpdateU32(static_cast<uint32_t>(salt.size()));
    hasher.Update(salt.data(), salt.size());
  } else {
    hasher.Update(parent->data(), parent->size());
  }
  hasher.UpdateTokens(block_tokens);
  return hasher.Finish();
}

std::vector<BlockDigest> ChainBlockDigests(const BlockDigest& root, std::string_view salt,
                                           std::span<const TokenId> tokens, int block_size,
                                           std::vector<BlockDigest> prior) {
  TM_CHECK_GT(block_size, 0);
  const size_t size = static_cast<size_t>(block_size);
  const size_t blocks = tokens.size() / size;
  std::vector<BlockDigest> digests = std::move(prior);
  if (digests.size() > blocks) digests.resize(blocks);
  digests.reserve(blocks);
  for (size_t i = digests.size(); i < blocks; ++i) {
    digests.push_back(NextBlockDigest(root, i == 0 ? nullptr : &digests[i - 1], salt,
                                      tokens.subspan(i * size, size)));
  }
  return digests;
}

std::string DigestHex(const BlockDigest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(digest.size() * 2);
  for (const uint8_t byte : digest) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 15]);
  }
  return hex;
}

}  // namespace tokenmill
