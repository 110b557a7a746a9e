// Helpers of the disk tier's tests: a fresh directory a test, chains of blocks, loads waited for.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/tiers/block_digest.h"
#include "cache/tiers/kv_disk_tier.h"

namespace tokenmill::testing {

inline constexpr int kBlockSize = 4;
inline constexpr int64_t kPayloadBytes = 256;

// A directory of its own, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kv_tiers_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline KvDiskTierConfig Config(const std::string& dir, const std::string& identity = "model-a") {
  KvDiskTierConfig config;
  config.dir = dir + "/kv";
  config.max_bytes = int64_t{1} << 20;
  config.identity = identity;
  config.payload_bytes = kPayloadBytes;
  config.block_size = kBlockSize;
  return config;
}

// A prompt's full blocks under one tier and salt, with payloads that differ block by block.
struct Chain {
  std::string salt;
  std::vector<TokenId> tokens;
  std::vector<BlockDigest> digests;
  int seed = 0;

  int blocks() const { return static_cast<int>(digests.size()); }
  std::span<const TokenId> BlockTokens(int i) const {
    return std::span<const TokenId>(tokens).subspan(static_cast<size_t>(i) * kBlockSize,
                                                    kBlockSize);
  }
  BlockHash Hash(int i) const { return static_cast<BlockHash>(seed) * 1000 + i + 1; }
  std::vector<uint8_t> Payload(int i) const {
    std::vector<uint8_t> bytes(kPayloadBytes);
    for (size_t b = 0; b < bytes.size(); ++b)
      bytes[b] = static_cast<uint8_t>(b * 7 + i * 13 + seed);
    return bytes;
  }
  std::vector<KvTierBlockRef> Refs() const {
    std::vector<KvTierBlockRef> refs;
    for (int i = 0; i < blocks(); ++i) {
      const auto t = BlockTokens(i);
      refs.push_back(KvTierBlockRef{digests[i], std::vector<TokenId>(t.begin(), t.end())});
    }
    return refs;
  }
};

inline Chain MakeChain(const BlockDigest& root, std::string salt, int blocks, int seed) {
  Chain chain;
  chain.salt = std::move(salt);
  chain.seed = seed;
  for (int t = 0; t < blocks * kBlockSize; ++t) chain.tokens.push_back(seed * 100000 + t);
  chain.digests = ChainBlockDigests(root, chain.salt, chain.tokens, kBlockSize);
  return chain;
}

inline void WriteChain(KvDiskTier& tier, const Chain& chain) {
  for (int i = 0; i < chain.blocks(); ++i) {
    tier.Write(chain.digests[i], chain.Hash(i),
               i == 0 ? std::nullopt : std::optional<BlockHash>(chain.Hash(i - 1)), chain.salt,
               chain.BlockTokens(i), chain.Payload(i));
  }
}

inline void FlushAll(KvDiskTier& tier) {
  tier.Flush(std::chrono::steady_clock::now() + std::chrono::seconds(10));
}

// Loads and waits for the result (the loader is FIFO: nothing else is pending).
inline KvTierLoad LoadNow(KvDiskTier& tier, std::string salt, std::vector<KvTierBlockRef> refs) {
  const uint64_t ticket = tier.Load(std::move(salt), std::move(refs));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    for (KvTierLoad& load : tier.TakeFinishedLoads()) {
      if (load.ticket == ticket) return std::move(load);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << "load " << ticket << " never finished";
  return {};
}

inline std::string BlockPath(const KvDiskTierConfig& config, const BlockDigest& digest) {
  const std::string hex = DigestHex(digest);
  return config.dir + "/" + DigestHex(IdentityDigest(config.identity)).substr(0, 32) + "/" +
         hex.substr(0, 2) + "/" + hex + ".kvb";
}

inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Every regular file under dir (relative names).
inline std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ignored)) {
    if (entry.is_regular_file()) {
      files.push_back(std::filesystem::relative(entry.path(), dir).string());
    }
  }
  return files;
}

}  // namespace tokenmill::testing
