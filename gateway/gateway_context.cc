#include "gateway/gateway_context.h"

#include <cstdio>

namespace tokenmill::gateway {

std::string GatewayContext::NewId(std::string_view prefix) {
  char counter[32];
  std::snprintf(counter, sizeof(counter), "%012llx",
                static_cast<unsigned long long>(next_id.fetch_add(1, std::memory_order_relaxed)));
  return std::string(prefix) + "-" + id_prefix + counter;
}

}  // namespace tokenmill::gateway
