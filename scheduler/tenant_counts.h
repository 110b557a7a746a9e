// Sequences per tenant: what the scheduler shares the batch and the KV pool by (Scheduler,
// WaitingQueue). A tenant with none has no entry, so the map holds the active tenants only.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace tokenmill {

class TenantCounts {
 public:
  int Get(std::string_view tenant) const {
    const auto it = counts_.find(tenant);
    return it == counts_.end() ? 0 : it->second;
  }
  void Add(const std::string& tenant, int delta) {
    const auto it = counts_.try_emplace(tenant, 0).first;
    it->second += delta;
    if (it->second == 0) counts_.erase(it);
  }
  size_t num_tenants() const { return counts_.size(); }

 private:
  std::map<std::string, int, std::less<>> counts_;
};

}  // namespace tokenmill
