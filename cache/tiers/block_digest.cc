#include "cache/tiers/block_digest.h"

#include <openssl/evp.h>

#include <memory>

#include "common/check.h"

namespace tokenmill {

namespace {

// One SHA-256 in progress (OpenSSL's EVP, the one interface not deprecated in 3.x).
class Sha256Hasher {
 public:
  Sha256Hasher() : ctx_(EVP_MD_CTX_new()) {
    TM_CHECK(ctx_ != nullptr && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1)
        << "OpenSSL has no SHA-256";
  }
  void Update(const void* data, size_t size) {
    if (size > 0) TM_CHECK(EVP_DigestUpdate(ctx_.get(), data, size) == 1);
  }
  void UpdateU32(uint32_t value) {
    const uint8_t bytes[4] = {static_cast<uint8_t>(value), static_cast<uint8_t>(value >> 8),
                              static_cast<uint8_t>(value >> 16),
                              static_cast<uint8_t>(value >> 24)};
    Update(bytes, sizeof(bytes));
  }
  // Tokens as little-endian int32, whatever the host's order.
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
  BlockDigest Finish() {
    BlockDigest digest{};
    unsigned int size = 0;
    TM_CHECK(EVP_DigestFinal_ex(ctx_.get(), digest.data(), &size) == 1 && size == digest.size());
    return digest;
  }

 private:
  struct Free {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

}  // namespace

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
