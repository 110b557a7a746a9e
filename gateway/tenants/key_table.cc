#include "gateway/tenants/key_table.h"

#include <openssl/sha.h>

#include <fstream>
#include <map>
#include <utility>

#include "common/bearer_token.h"

namespace tokenmill::gateway {

namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// The line's fields, split at blanks, before any '#'.
std::vector<std::string_view> Fields(std::string_view line) {
  line = line.substr(0, line.find('#'));
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && IsBlank(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !IsBlank(line[i])) ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

bool IsTenantName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTenantNameLength) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// "N" of a limit: a decimal integer from 0 to 10^12.
std::optional<int64_t> LimitValue(std::string_view text) {
  if (text.empty() || text.size() > 13) return std::nullopt;
  int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > 1'000'000'000'000) return std::nullopt;
  return value;
}

bool IsPrintableKey(std::string_view key) {
  for (const char c : key) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

KeyTable::Digest KeyTable::DigestOf(std::string_view key) {
  Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest.data());
  return digest;
}

StatusOr<KeyTable> KeyTable::Parse(std::string_view text) {
  KeyTable table;
  std::vector<size_t> line_of_entry;
  // By tenant name: the limits its lines gave.
  std::map<std::string, Tenant, std::less<>> limits_of;
  size_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    const std::vector<std::string_view> fields = Fields(line);
    if (fields.empty()) continue;
    const std::string at = "line " + std::to_string(line_number) + ": ";
    if (fields.size() < 2 || fields.size() > 5) {
      return InvalidArgumentError(at + "expected 'KEY TENANT [priority] [max-concurrent=N] "
                                       "[tokens-per-minute=N]', found " +
                                  std::to_string(fields.size()) + " field(s)");
    }
    const std::string_view key = fields[0];
    if (!IsPrintableKey(key)) {
      return InvalidArgumentError(at + "the key must be printable ASCII without spaces");
    }
    if (key.size() < kMinKeyFileKeyLength) {
      return InvalidArgumentError(at + "the key has " + std::to_string(key.size()) +
                                  " characters; use at least " +
                                  std::to_string(kMinKeyFileKeyLength) +
                                  " (e.g. `openssl rand -hex 24`)");
    }
    if (!IsTenantName(fields[1])) {
      return InvalidArgumentError(at + "the tenant name must be 1-" +
                                  std::to_string(kMaxTenantNameLength) +
                                  " of the characters A-Z a-z 0-9 . _ -");
    }
    Tenant tenant;
    tenant.name = std::string(fields[1]);
    for (size_t i = 2; i < fields.size(); ++i) {
      const std::string_view mark = fields[i];
      const size_t equals = mark.find('=');
      const std::string_view name = mark.substr(0, equals);
      std::optional<int64_t>* limit = name == "max-concurrent"      ? &tenant.max_concurrent
                                      : name == "tokens-per-minute" ? &tenant.tokens_per_minute
                                                                    : nullptr;
      if (mark == "priority" && !tenant.may_prioritize) {
        tenant.may_prioritize = true;
      } else if (limit != nullptr && equals != std::string_view::npos && !limit->has_value()) {
        *limit = LimitValue(mark.substr(equals + 1));
        if (!*limit) {
          return InvalidArgumentError(at + std::string(name) +
                                      " must be an integer from 0 (no limit) to 10^12");
        }
      } else {
        return InvalidArgumentError(at + "'" + std::string(mark) +
                                    "' is not one of priority, max-concurrent=N, "
                                    "tokens-per-minute=N (each once)");
      }
    }
    // The tenant's limits, as its earlier lines gave them: the same, or given here first.
    Tenant& limits = limits_of.try_emplace(tenant.name, tenant).first->second;
    for (const auto& [limit, limit_name] :
         {std::pair{&Tenant::max_concurrent, "max-concurrent"},
          std::pair{&Tenant::tokens_per_minute, "tokens-per-minute"}}) {
      std::optional<int64_t>& known = limits.*limit;
      const std::optional<int64_t>& here = tenant.*limit;
      if (known && here && *known != *here) {
        return InvalidArgumentError(at + "an earlier line gave tenant '" + tenant.name +
                                    "' another " + limit_name +
                                    "; a tenant's limit is the same on each of its lines");
      }
      if (!known) known = here;
    }
    Entry entry{DigestOf(key), std::move(tenant)};
    for (size_t i = 0; i < table.entries_.size(); ++i) {
      if (table.entries_[i].digest == entry.digest) {
        return InvalidArgumentError(at + "the key of line " + std::to_string(line_of_entry[i]) +
                                    " again; each key names one tenant");
      }
    }
    table.entries_.push_back(std::move(entry));
    line_of_entry.push_back(line_number);
  }
  if (table.entries_.empty()) {
    return InvalidArgumentError("no key in the file: add a line 'KEY TENANT'");
  }
  for (Entry& entry : table.entries_) {  // a limit on one line holds for every key of the tenant
    const Tenant& limits = limits_of.at(entry.tenant.name);
    entry.tenant.max_concurrent = limits.max_concurrent;
    entry.tenant.tokens_per_minute = limits.tokens_per_minute;
  }
  return table;
}

KeyTable KeyTable::SingleKey(std::string_view key) {
  KeyTable table;
  Tenant tenant;
  tenant.name = std::string(kDefaultTenant);
  table.entries_.push_back({DigestOf(key), std::move(tenant)});
  return table;
}

std::optional<Tenant> KeyTable::Find(std::string_view key) const {
  const Digest digest = DigestOf(key);
  const std::string_view presented(reinterpret_cast<const char*>(digest.data()), digest.size());
  const Entry* found = nullptr;
  // Every entry is compared, whichever matches: the time depends on the table's size only.
  for (const Entry& entry : entries_) {
    const std::string_view known(reinterpret_cast<const char*>(entry.digest.data()),
                                 entry.digest.size());
    if (ConstantTimeEquals(presented, known)) found = &entry;
  }
  if (found == nullptr) return std::nullopt;
  return found->tenant;
}

StatusOr<KeyTable> ReadKeyFile(const std::string& path) {
  const std::string flag = "--api-key-file " + path + ": ";
  std::ifstream file(path, std::ios::binary);
  if (!file) return InvalidArgumentError(flag + "cannot open the file");
  file.seekg(0, std::ios::end);
  const std::streamoff size = file.tellg();
  if (size < 0 || static_cast<size_t>(size) > kMaxKeyFileBytes) {
    return InvalidArgumentError(flag + "the file is over " + std::to_string(kMaxKeyFileBytes) +
                                " bytes (or not a regular file)");
  }
  file.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  file.read(text.data(), size);
  if (!file) return InvalidArgumentError(flag + "cannot read the file");
  StatusOr<KeyTable> table = KeyTable::Parse(text);
  if (!table.ok()) return InvalidArgumentError(flag + table.status().message());
  return table;
}

}  // namespace tokenmill::gateway
