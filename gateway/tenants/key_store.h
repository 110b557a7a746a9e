// The gateway's current key table and who a request's headers say it is. The table comes from
// --api-key-file (re-read on SIGHUP: Reload), from --api-key alone (one tenant, "default"),
// or from neither (no key needed: every request is the anonymous tenant ""). Thread-safe:
// connections on every I/O thread authenticate while a reload swaps the table.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/beast/http.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/status.h"
#include "gateway/gateway_options.h"
#include "gateway/tenants/key_table.h"

namespace tokenmill::gateway {

class KeyStore {
 public:
  // From the flags; InvalidArgument naming the flag or the file's line when they are wrong.
  static StatusOr<std::unique_ptr<KeyStore>> FromOptions(const GatewayOptions& options);

  // True when requests need no key.
  bool open() const { return !has_keys_; }

  // The tenant the request's key names: `x-api-key: KEY` (Anthropic's clients), else
  // `Authorization: Bearer KEY`. None when a key is needed and none given matches.
  std::optional<Tenant> Authenticate(
      const boost::beast::http::request_header<>& request) const;

  // Re-reads --api-key-file; on an error the table stays as it was and the error says why
  // (OK without a file: nothing to re-read).
  Status Reload();

  // Keys in the current table (0 when open).
  size_t size() const;

 private:
  KeyStore(std::string path, std::shared_ptr<const KeyTable> table)
      : path_(std::move(path)), has_keys_(table != nullptr), table_(std::move(table)) {}

  std::shared_ptr<const KeyTable> table() const;

  const std::string path_;  // --api-key-file, or empty
  const bool has_keys_;
  mutable std::mutex mutex_;
  std::shared_ptr<const KeyTable> table_;  // by mutex_; null when open
};

}  // namespace tokenmill::gateway
