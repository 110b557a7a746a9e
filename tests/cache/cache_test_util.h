// Helpers shared by the cache tests: a request as the scheduler would hold it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cache/kv_cache_manager.h"

namespace tokenmill::testing {

struct TestRequest {
  TestRequest() = default;
  TestRequest(uint64_t request_id, std::vector<TokenId> verified, std::string cache_salt = "")
      : id(request_id), tokens(std::move(verified)), salt(std::move(cache_salt)) {}

  uint64_t id = 0;
  std::vector<TokenId> tokens;  // verified tokens
  int num_computed_tokens = 0;
  std::string salt;

  KvCacheRequest view() const {
    return KvCacheRequest{.id = id,
                          .verified_tokens = tokens,
                          .num_computed_tokens = num_computed_tokens,
                          .cache_salt = salt};
  }
};

inline KvCacheConfig CacheConfig(int num_blocks, int block_size, int watermark_blocks = 0) {
  KvCacheConfig config;
  config.num_blocks = num_blocks;
  config.block_size = block_size;
  config.watermark_blocks = watermark_blocks;
  return config;
}

// `count` blocks of `block_size` tokens, block i filled with first_value + i.
inline std::vector<TokenId> Blocks(int count, int block_size, TokenId first_value) {
  std::vector<TokenId> tokens;
  for (int i = 0; i < count; ++i) tokens.insert(tokens.end(), block_size, first_value + i);
  return tokens;
}

inline std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace tokenmill::testing
