// Byte sizes as people write them: "2GiB", "512MiB", "1.5GB", and memory budgets that may
// instead be a fraction of free device memory ("0.9"), as --kv-cache-memory takes them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tokenmill {

// "<number><unit>" with unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB
// (powers of 1024); spaces around the unit are allowed, the number may have a fraction.
StatusOr<int64_t> ParseByteSize(std::string_view text);

// "1.50 GiB", "512.00 MiB", "100 B": binary units, two decimals.
std::string FormatBytes(int64_t bytes);

// Either a byte count or a fraction of the device's free memory.
class MemoryBudget {
 public:
  static MemoryBudget Bytes(int64_t bytes) { return MemoryBudget(bytes, 0.0); }
  static MemoryBudget FractionOfFree(double fraction) { return MemoryBudget(0, fraction); }

  bool is_fraction() const { return fraction_ > 0.0; }
  double fraction() const { return fraction_; }
  // The budget in bytes, given the device's free memory.
  int64_t Resolve(int64_t free_bytes) const;
  // "2.00 GiB" or "90% of free memory".
  std::string ToString() const;

 private:
  MemoryBudget(int64_t bytes, double fraction) : bytes_(bytes), fraction_(fraction) {}
  int64_t bytes_;
  double fraction_;
};

// A byte size ("2GiB") or a bare number in (0, 1] as a fraction of free memory ("0.9").
StatusOr<MemoryBudget> ParseMemoryBudget(std::string_view text);

}  // namespace tokenmill
