#include "gateway/tenants/key_store.h"

#include "common/bearer_token.h"

namespace tokenmill::gateway {

namespace http = boost::beast::http;

StatusOr<std::unique_ptr<KeyStore>> KeyStore::FromOptions(const GatewayOptions& options) {
  if (!options.api_key_file.empty()) {
    if (!options.api_key.empty()) {
      return InvalidArgumentError("--api-key and --api-key-file exclude each other: put the key "
                                  "in the file as a line 'KEY default'");
    }
    if (options.backend_api_key.empty()) {
      // Without it the servers refuse a call that names a tenant (and calls that name none
      // would share one prefix cache between the tenants).
      return InvalidArgumentError("--api-key-file needs --backend-api-key: the servers believe "
                                  "the tenant a call names only on a call with their --api-key");
    }
    StatusOr<KeyTable> table = ReadKeyFile(options.api_key_file);
    if (!table.ok()) return table.status();
    return std::unique_ptr<KeyStore>(new KeyStore(
        options.api_key_file, std::make_shared<const KeyTable>(std::move(*table))));
  }
  if (!options.api_key.empty()) {
    return std::unique_ptr<KeyStore>(
        new KeyStore("", std::make_shared<const KeyTable>(KeyTable::SingleKey(options.api_key))));
  }
  return std::unique_ptr<KeyStore>(new KeyStore("", nullptr));
}

std::shared_ptr<const KeyTable> KeyStore::table() const {
  std::lock_guard lock(mutex_);
  return table_;
}

std::optional<Tenant> KeyStore::Authenticate(const http::request_header<>& request) const {
  if (!has_keys_) return Tenant{};
  const std::shared_ptr<const KeyTable> keys = table();
  if (const auto api_key = request.find("x-api-key"); api_key != request.end()) {
    return keys->Find(std::string_view(api_key->value().data(), api_key->value().size()));
  }
  const auto header = request.find(http::field::authorization);
  if (header == request.end()) return std::nullopt;
  const std::optional<std::string_view> token =
      BearerToken(std::string_view(header->value().data(), header->value().size()));
  if (!token) return std::nullopt;
  return keys->Find(*token);
}

Status KeyStore::Reload() {
  if (path_.empty()) return OkStatus();
  StatusOr<KeyTable> fresh = ReadKeyFile(path_);
  if (!fresh.ok()) return fresh.status();
  auto table = std::make_shared<const KeyTable>(std::move(*fresh));
  std::lock_guard lock(mutex_);
  table_ = std::move(table);
  return OkStatus();
}

size_t KeyStore::size() const {
  const std::shared_ptr<const KeyTable> keys = table();
  return keys ? keys->size() : 0;
}

}  // namespace tokenmill::gateway
