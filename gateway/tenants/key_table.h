// Which tenant a client's API key names. The gateway's keys come from --api-key-file, one
// "KEY TENANT [priority] [max-concurrent=N] [tokens-per-minute=N]" a line, or from --api-key
// alone (tenant "default"). Keys are held
// only as SHA-256 digests, and a lookup compares the presented key's digest with every
// entry's in constant time: neither memory nor timing gives a key away.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tokenmill::gateway {

struct Tenant {
  std::string name;  // "" : anonymous (the gateway needs no key)
  // The key is marked `priority`: its requests may ask for a priority ahead of the default.
  bool may_prioritize = false;
  // The tenant's own limits, where its lines give them, instead of --tenant-max-concurrent
  // and --tenant-tokens-per-minute (0: none).
  std::optional<int64_t> max_concurrent;
  std::optional<int64_t> tokens_per_minute;
};

// The tenant of a gateway run without keys and of a single --api-key.
inline constexpr std::string_view kDefaultTenant = "default";
// Keys in a file shorter than this are refused (a guessable key names a tenant).
inline constexpr size_t kMinKeyFileKeyLength = 16;
inline constexpr size_t kMaxTenantNameLength = 64;
// A key file larger than this is refused before it is read (16 MiB: about 200 000 keys).
inline constexpr size_t kMaxKeyFileBytes = size_t{16} << 20;

class KeyTable {
 public:
  // The lines of a key file: "KEY TENANT" and then, in any order, the marks "priority",
  // "max-concurrent=N" and "tokens-per-minute=N", separated by spaces or tabs; '#' starts a
  // comment, blank lines are skipped. A key is printable ASCII without spaces, at least
  // kMinKeyFileKeyLength long, and appears once; a tenant name is 1-64 of [A-Za-z0-9._-] (it
  // travels as gRPC metadata) and may have several keys. A limit given on one of a tenant's
  // lines holds for all its keys (two different values are refused). InvalidArgument naming
  // the line otherwise. A file without a key is refused too (it would lock every client out).
  static StatusOr<KeyTable> Parse(std::string_view text);
  // One key, tenant "default", not marked priority (--api-key).
  static KeyTable SingleKey(std::string_view key);

  // The tenant `key` names; none when no entry has it.
  std::optional<Tenant> Find(std::string_view key) const;
  size_t size() const { return entries_.size(); }

 private:
  using Digest = std::array<unsigned char, 32>;
  static Digest DigestOf(std::string_view key);
  struct Entry {
    Digest digest;
    Tenant tenant;
  };
  std::vector<Entry> entries_;
};

// Reads and parses the key file at `path` (InvalidArgument naming the file, or its line).
StatusOr<KeyTable> ReadKeyFile(const std::string& path);

}  // namespace tokenmill::gateway
