// Who a gRPC call comes from, as far as the server can tell, and what that allows. The
// gateway maps its clients' keys to tenants and calls with the server's --api-key and the
// metadata "x-tokenmill-tenant: <tenant>"; the server believes that metadata only on a call
// that carried its key, so a client reaching the gRPC port directly cannot claim a tenant.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace tokenmill::server {

inline constexpr std::string_view kTenantMetadata = "x-tokenmill-tenant";
inline constexpr size_t kMaxTenantBytes = 256;

struct CallerIdentity {
  std::string tenant;  // "" for an anonymous caller
  // The call carried the server's --api-key (a trusted gateway or operator).
  bool authenticated = false;
  // A priority ahead of the default (< 0) is allowed: on an authenticated call, or on any call
  // to a server without --api-key (single-tenant: whoever reaches it is the operator).
  bool may_raise_priority = false;
};

// The caller of a call with `metadata`, on a server whose --api-key is `api_key` (empty:
// none). UNAUTHENTICATED for a missing or wrong key; PERMISSION_DENIED for a tenant named
// without the key; INVALID_ARGUMENT for a tenant longer than kMaxTenantBytes or sent twice.
// An empty tenant is the anonymous one, as is a call without the metadata.
grpc::Status IdentifyCaller(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                            std::string_view api_key, CallerIdentity& caller);

// OK, or PERMISSION_DENIED naming why, for a request's `priority` from `caller`.
grpc::Status CheckPriorityAllowed(int32_t priority, const CallerIdentity& caller);

}  // namespace tokenmill::server
