#include "server/grpc/caller_identity.h"

#include <iterator>

#include "common/bearer_token.h"

namespace tokenmill::server {

grpc::Status IdentifyCaller(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                            std::string_view api_key, CallerIdentity& caller) {
  caller = CallerIdentity{};
  if (!api_key.empty()) {
    const auto header = metadata.find("authorization");
    if (header == metadata.end() ||
        !BearerTokenMatches(std::string_view(header->second.data(), header->second.size()),
                            api_key)) {
      return grpc::Status(grpc::UNAUTHENTICATED,
                          "missing or wrong API key: send the metadata 'authorization: Bearer "
                          "<key>' with the server's --api-key");
    }
    caller.authenticated = true;
  }
  caller.may_raise_priority = caller.authenticated || api_key.empty();
  const grpc::string_ref key(kTenantMetadata.data(), kTenantMetadata.size());
  const auto [first, last] = metadata.equal_range(key);
  if (first == last) return grpc::Status::OK;
  if (!caller.authenticated) {
    return grpc::Status(
        grpc::PERMISSION_DENIED,
        std::string(kTenantMetadata) +
            ": only a call with the server's --api-key may name a tenant (the gateway's); " +
            (api_key.empty() ? "this server has no --api-key, so it takes no tenants"
                             : "send 'authorization: Bearer <key>' or drop the metadata"));
  }
  if (std::next(first) != last) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        std::string(kTenantMetadata) + " is sent twice: send it once");
  }
  const grpc::string_ref& tenant = first->second;
  if (tenant.size() > kMaxTenantBytes) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        std::string(kTenantMetadata) + " is " + std::to_string(tenant.size()) +
                            " bytes: send at most " + std::to_string(kMaxTenantBytes));
  }
  caller.tenant.assign(tenant.data(), tenant.size());
  return grpc::Status::OK;
}

grpc::Status CheckPriorityAllowed(int32_t priority, const CallerIdentity& caller) {
  if (priority >= 0 || caller.may_raise_priority) return grpc::Status::OK;
  return grpc::Status(grpc::PERMISSION_DENIED,
                      "priority " + std::to_string(priority) +
                          " would run ahead of the default (0): only a call with the server's "
                          "--api-key may use a negative priority; send 0 or more");
}

}  // namespace tokenmill::server
