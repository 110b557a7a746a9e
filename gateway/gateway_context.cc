#include "gateway/gateway_context.h"

#include <openssl/rand.h>

#include <array>
#include <stdexcept>

namespace tokenmill::gateway {

std::string GatewayContext::NewId(std::string_view prefix) {
  std::array<unsigned char, 16> random;
  // OpenSSL's CSPRNG fails only when the system has no entropy source at all.
  if (RAND_bytes(random.data(), static_cast<int>(random.size())) != 1) {
    throw std::runtime_error("RAND_bytes failed: no randomness for an id");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  id += '-';
  for (const unsigned char byte : random) {
    id += kHex[byte >> 4];
    id += kHex[byte & 15];
  }
  return id;
}

std::string_view GatewayContext::TenantForBackend(const Tenant& tenant) const {
  if (options.backend_api_key.empty()) return {};
  return tenant.name;
}

}  // namespace tokenmill::gateway
