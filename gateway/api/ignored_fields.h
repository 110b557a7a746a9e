// Request fields the gateway accepts for compatibility although they change nothing here
// (OpenAI's service_tier, store, ...): each is logged the first time a request sends it, once
// per gateway, so an operator learns what clients ask for without a line per request.
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace tokenmill::gateway {

// A field accepted and without effect, and why it cannot apply (both string literals).
struct IgnoredField {
  std::string_view name;
  std::string_view why;
};

class IgnoredFieldLog {
 public:
  // Logs `field` (at info) unless this log has seen its name on `route` before; true when it
  // logged.
  bool Note(std::string_view route, const IgnoredField& field);

 private:
  std::mutex mutex_;  // handlers run on several I/O threads
  std::set<std::string, std::less<>> seen_;  // "<route> <field>"
};

}  // namespace tokenmill::gateway
