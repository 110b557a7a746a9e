#include "common/byte_size.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

namespace tokenmill {
namespace {

struct Unit {
  std::string_view name;
  double bytes;
};

constexpr std::array<Unit, 9> kUnits = {{
    {"B", 1.0},
    {"KB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
    {"KiB", 1024.0},
    {"MiB", 1024.0 * 1024},
    {"GiB", 1024.0 * 1024 * 1024},
    {"TiB", 1024.0 * 1024 * 1024 * 1024},
}};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// The leading decimal number of `text` and what follows it.
std::optional<std::pair<double, std::string_view>> SplitNumber(std::string_view text) {
  double value = 0.0;
  const auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::fixed);
  if (error != std::errc() || !std::isfinite(value)) return std::nullopt;
  return std::pair(value, text.substr(end - text.data()));
}

Status BadSize(std::string_view text) {
  return InvalidArgumentError("cannot read \"" + std::string(text) +
                              "\" as a size: write a number and a unit such as 2GiB, 512MiB "
                              "or 1.5GB (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
}

}  // namespace

StatusOr<int64_t> ParseByteSize(std::string_view text) {
  const auto split = SplitNumber(Trim(text));
  if (!split.has_value() || split->first < 0) return BadSize(text);
  const std::string_view unit_name = Trim(split->second);
  for (const Unit& unit : kUnits) {
    if (unit.name != unit_name) continue;
    const double bytes = std::round(split->first * unit.bytes);
    if (bytes >= 9.2e18) {
      return InvalidArgumentError("size \"" + std::string(text) + "\" is too large");
    }
    return static_cast<int64_t>(bytes);
  }
  return BadSize(text);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024 && bytes > -1024) return std::to_string(bytes) + " B";
  static constexpr std::array<std::string_view, 4> kNames = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (unit + 1 < kNames.size() && std::abs(value) >= 1024.0) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.2f %s", value, std::string(kNames[unit]).c_str());
  return buffer;
}

int64_t MemoryBudget::Resolve(int64_t free_bytes) const {
  if (!is_fraction()) return bytes_;
  return static_cast<int64_t>(std::floor(static_cast<double>(free_bytes) * fraction_));
}

std::string MemoryBudget::ToString() const {
  if (!is_fraction()) return FormatBytes(bytes_);
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%g%% of free memory", fraction_ * 100.0);
  return buffer;
}

StatusOr<MemoryBudget> ParseMemoryBudget(std::string_view text) {
  const auto split = SplitNumber(Trim(text));
  if (split.has_value() && Trim(split->second).empty()) {
    if (split->first > 0.0 && split->first <= 1.0) {
      return MemoryBudget::FractionOfFree(split->first);
    }
    return InvalidArgumentError("memory budget \"" + std::string(text) +
                                "\" has no unit: give a fraction of free memory in (0, 1] such "
                                "as 0.9, or a size such as 2GiB");
  }
  TM_ASSIGN_OR_RETURN(const int64_t bytes, ParseByteSize(text));
  if (bytes <= 0) {
    return InvalidArgumentError("memory budget \"" + std::string(text) + "\" must be positive");
  }
  return MemoryBudget::Bytes(bytes);
}

}  // namespace tokenmill
