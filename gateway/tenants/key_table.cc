#include "gateway/tenants/key_table.h"

#include <openssl/sha.h>

#include <fstream>
#include <sstream>

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
    if (fields.size() < 2 || fields.size() > 3) {
      return InvalidArgumentError(at + "expected 'KEY TENANT' or 'KEY TENANT priority', found " +
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
    if (fields.size() == 3 && fields[2] != "priority") {
      return InvalidArgumentError(at + "unknown mark '" + std::string(fields[2]) +
                                  "'; the only mark is 'priority'");
    }
    Entry entry{DigestOf(key), Tenant{std::string(fields[1]), fields.size() == 3}};
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
  return table;
}

KeyTable KeyTable::SingleKey(std::string_view key) {
  KeyTable table;
  table.entries_.push_back({DigestOf(key), Tenant{std::string(kDefaultTenant), false}});
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
